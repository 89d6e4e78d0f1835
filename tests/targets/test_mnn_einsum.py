"""The mnn target writes a batched-matmul ``Einsum`` as ``MatMul``: MNN 3.6.1 runs DAT's deformable attention right.

MNN 3.6.1 returns ``Einsum("bmn,bcn->bcm")`` with its output axes swapped (shape ``(4, 80, 4)`` for ONNX's
``(4, 4, 80)``, measured here); DAT (``tests/real_code/dat_style.py``) gathers its sampled values with exactly
that einsum, and ``deform_onnx.export(dat, ..., target="mnn")`` was refused (0.26 off in MNN). The repair
``"Einsum as MatMul"`` (targets/repair_einsum.py) keeps every value: checked in ONNX Runtime on each equation
form, and the DAT block in MNN. Expected values are PyTorch's (``torch.einsum``, the model).
"""

from __future__ import annotations

import io
import os

import numpy as np
import onnx
import pytest
import torch

import deform_onnx
from deform_onnx.targets import resolve_target
from deform_onnx.targets.repair_einsum import einsum_as_matmul
from real_code.dat_style import build as build_dat
from util import ATOL, run_ort

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))
NEEDS_MNN = pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")

#: equation -> operand shapes; the last two are no batched matmul and stay Einsum.
EQUATIONS = {
    "bcm,bcn->bmn": ((2, 3, 5), (2, 3, 4)),  # DAT's attention logits
    "bmn,bcn->bcm": ((2, 5, 4), (2, 3, 4)),  # DAT's gather of the values (MNN's fault)
    "bhqd,bhkd->bhqk": ((1, 2, 5, 3), (1, 2, 4, 3)),
    "ik,jk->ji": ((5, 3), (4, 3)),
    "bij,bjk->bik": ((2, 3, 4), (2, 4, 5)),
    "bi,bi->b": ((2, 3), (2, 3)),
    "ij,kl->ijkl": ((2, 3), (4, 5)),
}


class _Einsum(torch.nn.Module):
    def __init__(self, equation):
        super().__init__()
        self.equation = equation

    def forward(self, a, b):
        return torch.einsum(self.equation, a, b)


@pytest.mark.parametrize("equation", list(EQUATIONS))
def test_einsum_as_matmul_keeps_the_values(equation):
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(shape, generator=gen) for shape in EQUATIONS[equation])
    f = io.BytesIO()
    torch.onnx.export(_Einsum(equation), (a, b), f, dynamo=False, opset_version=17, input_names=["a", "b"])
    model = onnx.load_from_string(f.getvalue())
    changed = einsum_as_matmul(model)
    left = [n.op_type for n in model.graph.node if n.op_type == "Einsum"]
    assert bool(changed) == (equation not in ("bi,bi->b", "ij,kl->ijkl")) and bool(left) != bool(changed)
    onnx.checker.check_model(model, full_check=True)
    got = run_ort(model.SerializeToString(), {"a": a, "b": b})
    np.testing.assert_allclose(got, torch.einsum(equation, a, b).numpy(), atol=ATOL, rtol=ATOL)


@pytest.fixture(scope="module")
def dat_mnn():
    """DAT's block exported with ``target="mnn"``: by default the export runs the file in MNN before writing it."""
    model, x = build_dat(), torch.randn(1, 3, 32, 40, generator=torch.Generator().manual_seed(1))
    f = io.BytesIO()
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    report = deform_onnx.export(model, (x,), f, target="mnn", input_names=["x"], **opt_out)
    return model, x, f.getvalue(), report


def test_dat_file_keeps_values_with_einsum_as_matmul(dat_mnn):
    model, x, data, report = dat_mnn
    assert "Einsum as MatMul" in resolve_target("mnn").repairs
    assert any("Einsum written as MatMul on 2" in r for r in report.repairs), report.repairs
    assert "Einsum" not in {n.op_type for n in onnx.load_from_string(data).graph.node}
    import onnxruntime as ort

    with torch.no_grad():
        want = [t.numpy() for t in model(x)]
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=ATOL)


@NEEDS_MNN
def test_dat_runs_in_mnn(dat_mnn):
    """The target's file was run in MNN (its cached venv) on all three outputs before it was written."""
    *_, report = dat_mnn
    assert any(line.startswith("mnn") for line in report.runtimes), report.runtimes


@NEEDS_MNN
def test_without_the_repair_mnn_refuses_dat(monkeypatch):
    """The planted fault: the repair does nothing, and the export's run in MNN refuses the file."""
    from deform_onnx.targets import repairs

    monkeypatch.setitem(repairs.REPAIRS, "Einsum as MatMul", lambda model: [])
    x = torch.randn(1, 3, 32, 40, generator=torch.Generator().manual_seed(1))
    with pytest.raises(deform_onnx.VerificationError, match=r"mnn .* (misses the reference|has shape)"):
        deform_onnx.export(build_dat(), (x,), io.BytesIO(), target="mnn", input_names=["x"])
