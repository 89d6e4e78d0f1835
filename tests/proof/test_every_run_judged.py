"""Every run a deployed runner makes is judged, not only the first.

MNN 3.6.1 ran ``GridSample(Add(constant, Conv(x)))`` (BasicVSR++'s propagation, before target ``mnn``'s repair
``constant operand last``) with other values on later runs of the same inputs in one process: the first run
could match and the user's next one not. A runner keeps the first later run whose bits differ from the first
run's (``runtimes/deployed/runners.py``: ``timed``), and ``check_runtimes`` judges it too. Planted faults on the
``onnxruntime`` family (its runner runs in this interpreter): a later run 1e-3 off is refused; one a float32 ulp
off (other bits, within the tolerance) passes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deform_onnx.proof.runners import FamilyRunner
from deform_onnx.runtimes.deployed import families
from deform_onnx.runtimes.deployed.check import check_runtimes

_LATER_RUN = "again = fn()"


def _file(tmp_path):
    """``y = Relu(x) + c`` on ``[1, 4, 6, 6]``."""
    c = numpy_helper.from_array(np.linspace(0.5, 1.5, 144, dtype=np.float32).reshape(1, 4, 6, 6), "c")
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "c"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [c]), opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "relu_add.onnx"
    onnx.save(model, path)
    return path, {"x": np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)}


def _plant(monkeypatch, later: str) -> None:
    """The ``onnxruntime`` family's later runs return ``later`` (an expression of ``o``, each output)."""
    fam = families.FAMILIES["onnxruntime"]
    assert fam.runner.count(_LATER_RUN) == 1
    code = fam.runner.replace(_LATER_RUN, f"again = [(lambda o: {later})(np.asarray(o)) for o in fn()]")
    monkeypatch.setitem(families.FAMILIES, "onnxruntime", dataclasses.replace(fam, runner=code))


@pytest.mark.parametrize("repeats", [1, 3])
def test_a_later_run_off_the_reference_is_refused(tmp_path, monkeypatch, repeats):
    _plant(monkeypatch, "o + np.float32(1e-3)")
    path, feeds = _file(tmp_path)
    (row,) = check_runtimes(path, ["onnxruntime"], inputs=feeds, repeats=repeats)
    assert row.error is None and not row.ok
    assert row.failure is not None and "a later run of the same inputs did not" in row.failure, row.failure
    assert row.max_error == pytest.approx(1e-3, rel=0.01)


def test_a_later_run_with_other_bits_within_the_tolerance_passes(tmp_path, monkeypatch):
    _plant(monkeypatch, "np.nextafter(o, np.float32(np.inf))")
    path, feeds = _file(tmp_path)
    (row,) = check_runtimes(path, ["onnxruntime"], inputs=feeds, repeats=1)
    assert row.ok, row.failure
    runner = FamilyRunner("onnxruntime")  # the later run was kept (its bits differ) and judged
    runner.load(path)
    first = runner.run(feeds)
    assert [n for n, _ in runner.again] == [n for n, _ in first] == ["y"]
    assert np.array_equal(runner.again[0][1], np.nextafter(first[0][1], np.float32(np.inf)))


# The in-process checks (an ONNX file in ONNX Runtime at export, and every ``.pte`` / ``.tflite`` / ``.xml``
# session that ``deform_onnx.exporting.verification.verify`` runs) judge a later run of the same inputs too.


class _LaterRunsOff:
    """A session whose runs after the first return ``later(output)`` (a runtime that computes other values later)."""

    def __init__(self, session, later):
        self.session, self.later, self.calls = session, later, 0
        self.get_inputs, self.get_outputs = session.get_inputs, session.get_outputs

    def run(self, names, feeds):
        out = self.session.run(names, feeds)
        self.calls += 1
        return out if self.calls == 1 else [self.later(np.asarray(o)) for o in out]


def _model_and_session():
    import torch

    from deform_onnx.exporting.verification import make_session

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU()).eval()
    args = (torch.randn(1, 3, 8, 8),)
    import io

    buf = io.BytesIO()
    torch.onnx.export(model, args, buf, dynamo=False, input_names=["x"], output_names=["y"])
    return model, args, buf.getvalue(), make_session(buf.getvalue())


def test_in_process_check_refuses_a_later_run_off_pytorch():
    from deform_onnx.core.errors import VerificationError
    from deform_onnx.exporting.verification import verify

    model, args, data, session = _model_and_session()
    flaky = _LaterRunsOff(session, lambda o: o + np.float32(1e-2))
    with pytest.raises(VerificationError, match="the first run matched, a later run of the same inputs did not"):
        verify(model, args, data, session=flaky)
    assert flaky.calls == 2


def test_in_process_check_passes_a_later_run_within_the_tolerance():
    from deform_onnx.exporting.verification import verify

    model, args, data, session = _model_and_session()
    nudged = _LaterRunsOff(session, lambda o: np.nextafter(o, np.float32(np.inf)))
    assert verify(model, args, data, session=nudged).max_error < 1e-5
    assert nudged.calls == 2


def test_export_writes_no_file_when_a_later_run_is_off(tmp_path, monkeypatch):
    """``deform_onnx.export`` to ``.onnx``: the check's session computes other values on its later run; refused."""
    import torch
    import torchvision

    import deform_onnx
    from deform_onnx.core.errors import VerificationError
    from deform_onnx.exporting import dynamic_check, verification

    real = verification.make_session
    for module in (dynamic_check, verification):  # export's check makes its sessions in dynamic_check
        monkeypatch.setattr(module, "make_session", lambda *a, **k: _LaterRunsOff(real(*a, **k), lambda o: o * 1.01))
    torch.manual_seed(0)
    layer = torchvision.ops.DeformConv2d(4, 4, 3, padding=1).eval()
    x, offset = torch.randn(1, 4, 6, 6), torch.randn(1, 18, 6, 6)
    out = tmp_path / "m.onnx"
    with pytest.raises(VerificationError, match="a later run of the same inputs did not"):
        deform_onnx.export(layer, (x, offset), str(out))
    assert not out.exists()
