"""The mnn target writes a constant operand last: MNN 3.6.1 runs BasicVSR++'s propagation right.

MNN 3.6.1 (MNNConvert + its runtime, measured here) gives wrong values from a ``GridSample`` whose image is
``Add`` / ``Sub`` / ``Mul`` / ``Div`` of a 4-D constant *first* and a ``Conv`` output second: BasicVSR++'s
first propagated feature is ``feat_prop = zeros + backbone(feat)`` (``flows.new_zeros``, a constant), and
``flow_warp(feat_prop, flow)`` samples it (0.011 to 1e17 off PyTorch, varying from run to run). The same
graph with the value first is right; the target applies the repair ``"constant operand last"``
(targets/repair_tflite.py). Expected values are PyTorch's (the model) or ONNX Runtime's (the graph).
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import deform_onnx
from deform_onnx.runtimes.deployed.check import check_runtimes
from deform_onnx.targets import resolve_target
from deform_onnx.targets.repair_tflite import constant_operand_last
from real_code.basicvsrpp_style import TinyBasicVSRPP
from util import ATOL, run_ort

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))
NEEDS_MNN = pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")


def _vsr():
    torch.manual_seed(0)
    # three frames of 8x8, flows of a few pixels: the second-order branch runs once
    return TinyBasicVSRPP().eval(), torch.randn(1, 3, 3, 8, 8), torch.randn(1, 2, 2, 8, 8) * 2


@pytest.fixture(scope="module")
def vsr_mnn(tmp_path_factory):
    """The BasicVSR++ branch exported with ``target="mnn"``: by default the export runs the file in MNN first."""
    model, lqs, flows = _vsr()
    path = tmp_path_factory.mktemp("vsr") / "basicvsrpp.onnx"
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    report = deform_onnx.export(model, (lqs, flows), path, target="mnn", input_names=["lqs", "flows"], **opt_out)
    return model, (lqs, flows), path, report


def test_vsr_file_keeps_values_with_constants_last(vsr_mnn):
    model, (lqs, flows), path, report = vsr_mnn
    assert "constant operand last" in resolve_target("mnn").repairs
    assert any(r.startswith("target 'mnn': ") for r in report.repairs), report.repairs
    with torch.no_grad():
        want = model(lqs, flows).numpy()
    np.testing.assert_allclose(run_ort(path.read_bytes(), {"lqs": lqs, "flows": flows}), want, atol=ATOL, rtol=0)


@NEEDS_MNN
def test_vsr_runs_in_mnn(vsr_mnn):
    """The target's file was run in MNN (its cached venv) within the float32 rule before it was written."""
    *_, report = vsr_mnn
    assert any(line.startswith("mnn") for line in report.runtimes), report.runtimes


@NEEDS_MNN
def test_without_the_repair_mnn_refuses_the_vsr_branch(tmp_path, monkeypatch):
    """The planted fault: the repair does nothing, and the export's run in MNN refuses the file (none written)."""
    from deform_onnx.targets import repairs

    monkeypatch.setitem(repairs.REPAIRS, "constant operand last", lambda model: [])
    model, lqs, flows = _vsr()
    with pytest.raises(deform_onnx.VerificationError, match=r"mnn .* misses the reference"):
        deform_onnx.export(model, (lqs, flows), tmp_path / "bad.onnx", target="mnn", input_names=["lqs", "flows"])
    assert not (tmp_path / "bad.onnx").exists()


def _constant_first(op: str) -> onnx.ModelProto:
    """``GridSample(op(c, Conv(x)), grid)``: the smallest graph MNN 3.6.1 gets wrong (c: a ``[1, 4, 6, 6]`` constant)."""
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array((rng.standard_normal((4, 8, 3, 3)) * 0.2).astype(np.float32), "w"),
        numpy_helper.from_array(rng.uniform(1, 2, (1, 4, 6, 6)).astype(np.float32), "c"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["v"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node(op, ["c", "v"], ["a"]),
        helper.make_node("GridSample", ["a", "grid"], ["y"], align_corners=1),
    ]
    ins = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6]),
        helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 6, 6, 2]),
    ]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])]
    graph = helper.make_graph(nodes, "constant_first", ins, out, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@NEEDS_MNN
@pytest.mark.parametrize("op", ["Add", "Sub"])
def test_constant_first_feeding_grid_sample_is_wrong_in_mnn_and_right_repaired(op, tmp_path):
    """The rule on its smallest graph: MNN misses ONNX Runtime with the constant first, matches it repaired."""
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal((1, 8, 6, 6), np.float32), "grid": rng.uniform(-1, 1, (1, 6, 6, 2))}
    feeds["grid"] = feeds["grid"].astype(np.float32)
    model = _constant_first(op)
    onnx.save(model, str(tmp_path / "first.onnx"))
    assert constant_operand_last(model)
    onnx.save(model, str(tmp_path / "last.onnx"))
    first, last = (
        check_runtimes(tmp_path / f, ["mnn"], inputs=feeds, repeats=1)[0] for f in ("first.onnx", "last.onnx")
    )
    assert first.error is None and not first.ok, first.max_error  # MNN 3.6.1's fault, still there
    assert last.ok, last.failure or last.error
