"""Target ``mnn`` writes ``ConstantOfShape``'s default value: MNNConvert 3.6.1 folds it into uninitialised memory.

Without the ``value`` attribute (the ONNX default: float32 0), MNNConvert's folded constant holds whatever its
memory held, different from one conversion of the same file to the next (VFNet's star offsets were refused by
one CI run: 6 zero channels up to 5.4e5 off). The repair ``ConstantOfShape value written`` adds the attribute.
The MNN runner converts every file twice and refuses two models that compute different values. Whether an
unrepaired conversion goes wrong depends on the host's memory, so no test asserts that it does
(``scripts/repro/mnn_constant_of_shape.py`` counts it); what is asserted: the repair keeps the values, the
repaired file matches ONNX Runtime in MNN on every one of several conversions, and (planted fault) a second
conversion that computes other values is refused.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from deform_onnx.runtimes.deployed.check import check_runtimes
from deform_onnx.targets import resolve_target
from deform_onnx.targets.repairs import constant_of_shape_value_written
from util import run_ort

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))
_REPRO = Path(__file__).resolve().parents[2] / "scripts" / "repro" / "mnn_constant_of_shape.py"


@functools.cache
def _repro():
    """``scripts/repro/mnn_constant_of_shape.py`` as a module (its ``model(with_value)`` builds the graph)."""
    spec = importlib.util.spec_from_file_location("mnn_constant_of_shape", _REPRO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model(with_value: bool) -> onnx.ModelProto:
    return _repro().model(with_value)


def test_the_repair_writes_the_default_and_keeps_the_values():
    plain = _model(False)
    repaired = onnx.ModelProto()
    repaired.CopyFrom(plain)
    assert constant_of_shape_value_written(repaired) == ["ConstantOfShape value 0.0 written on 1 node(s)"]
    (node,) = [n for n in repaired.graph.node if n.op_type == "ConstantOfShape"]
    value = onnx.numpy_helper.to_array(next(a.t for a in node.attribute if a.name == "value"))
    assert value.dtype == np.float32 and value.tolist() == [0.0]
    assert constant_of_shape_value_written(repaired) == []  # a second run finds nothing to do
    onnx.checker.check_model(repaired, full_check=True)
    x = {"x": torch.randn(1, 4, 6, 6, generator=torch.Generator().manual_seed(0))}
    np.testing.assert_array_equal(run_ort(repaired.SerializeToString(), x), run_ort(plain.SerializeToString(), x))
    assert "ConstantOfShape value written" in resolve_target("mnn").repairs


@pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")
def test_every_conversion_of_the_repaired_file_matches_in_mnn(tmp_path):
    path = tmp_path / "zeros.onnx"
    onnx.save(_model(True), path)
    x = {"x": np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)}
    for _ in range(4):  # each run converts twice and refuses two models that compute different values
        (row,) = check_runtimes(path, ["mnn"], inputs=x, repeats=1)
        assert row.error is None and row.failure is None, (row.error, row.failure)


@pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")
def test_a_second_conversion_computing_other_values_is_refused(tmp_path, monkeypatch):
    """Planted fault: the runner's second model returns its outputs plus 1e-6, as a converter's garbage would."""
    from deform_onnx.runtimes.deployed import families

    code = families.FAMILIES["mnn"].runner
    planted = code.replace("same = model_bytes(target) == model_bytes(again)", "same = False")
    planted = planted.replace("other = runner(again)()", "other = [o + 1e-6 for o in runner(again)()]")
    assert planted.count("1e-6") == 1 and "same = False" in planted
    monkeypatch.setitem(families.FAMILIES, "mnn", dataclasses.replace(families.FAMILIES["mnn"], runner=planted))
    path = tmp_path / "zeros.onnx"
    onnx.save(_model(True), path)
    x = {"x": np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)}
    (row,) = check_runtimes(path, ["mnn"], inputs=x, repeats=1)
    assert row.error is not None and "twice into models that compute different values" in row.error, row.error
