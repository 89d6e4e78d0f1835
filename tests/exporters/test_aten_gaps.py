"""ATen ops that torch's TorchScript exporter has only from a later opset (``deform_onnx.exporters.aten_gaps``).

``aten::outer`` and ``aten::einsum`` (torch: opset 12+) at opset 11, as
transformers' RT-DETR position embedding and Mask2Former's mask head call
them; expected values are PyTorch's, compared by ``deform_onnx.export``'s own
verification and again here.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
import torch

import deform_onnx
from util import run_ort


class Outer(torch.nn.Module):
    def forward(self, a, b):
        return torch.outer(a, b).sin()  # a float op after it, as in the position embedding


def _inputs(dtype_a, dtype_b):
    a = torch.arange(5).to(dtype_a) - 2
    b = torch.linspace(-1.5, 2.0, 3).to(dtype_b)
    return a, b


@pytest.mark.parametrize(
    "dtype_a, dtype_b",
    [
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
        (torch.int64, torch.float32),
        (torch.float32, torch.float64),
    ],
    ids=["f32", "f64", "i64xf32", "f32xf64"],
)
def test_outer_exports_at_opset_11(dtype_a, dtype_b):
    """Default arguments at opset 11 (the TorchScript fallback): one Mul, PyTorch's promoted dtype, its values."""
    a, b = _inputs(dtype_a, dtype_b)
    buf = io.BytesIO()
    with pytest.warns(UserWarning, match="reaches opset 14"):  # the dynamo path's floor: falls back by itself
        report = deform_onnx.export(Outer(), (a, b), buf, opset_version=11, input_names=["a", "b"])
    proto = onnx.load_from_string(buf.getvalue())
    assert report.exporter == "torchscript" and report.opset == 11
    assert "Mul" in report.op_types and "Einsum" not in report.op_types
    want = Outer()(a, b)
    got = run_ort(buf.getvalue(), {"a": a, "b": b})
    assert (
        got.dtype
        == want.numpy().dtype
        == onnx.helper.tensor_dtype_to_np_dtype(proto.graph.output[0].type.tensor_type.elem_type)
    )
    np.testing.assert_allclose(got, want.numpy(), rtol=0, atol=1e-6)


def test_outer_symbolic_only_below_torch_own(register):
    """Registered at 11 only: torch's own Einsum symbolic still serves 12+, and unregister() restores 11's error."""
    a, b = _inputs(torch.float32, torch.float32)

    def plain(opset):
        buf = io.BytesIO()
        torch.onnx.export(Outer(), (a, b), buf, dynamo=False, opset_version=opset)
        return {n.op_type for n in onnx.load_from_string(buf.getvalue()).graph.node}

    register("auto")
    assert "Mul" in plain(11) and "Einsum" in plain(12)
    deform_onnx.unregister()
    assert "Einsum" in plain(12)
    with pytest.raises(torch.onnx.errors.UnsupportedOperatorError, match="outer"):
        plain(11)


class Einsum(torch.nn.Module):
    def __init__(self, equation):
        super().__init__()
        self.equation = equation

    def forward(self, a, b):
        return torch.einsum(self.equation, a, b)


EINSUMS = {
    # equation: operand shapes (distinct sizes, so a wrong axis order cannot pass)
    "bqc, bchw -> bqhw": ((2, 3, 4), (2, 4, 5, 6)),  # Mask2Former's mask head
    "ij,jk->ik": ((3, 4), (4, 5)),
    "bhqd,bhkd->bhqk": ((2, 3, 4, 5), (2, 3, 6, 5)),
    "i,j->ij": ((3,), (4,)),
    "bij,bjk->kbi": ((2, 3, 4), (2, 4, 5)),  # output axes reordered
    "bij,jk": ((2, 3, 4), (4, 5)),  # implicit output: "bik"; b in one operand only
    "bn,bn->b": ((3, 7), (3, 7)),  # everything contracted but the batch
}


@pytest.mark.parametrize("equation", list(EINSUMS), ids=list(range(len(EINSUMS))))
def test_einsum_exports_at_opset_11(equation):
    """Two-operand einsums at opset 11 as MatMul (no Einsum node), matching torch.einsum."""
    torch.manual_seed(0)
    a, b = (torch.randn(shape) for shape in EINSUMS[equation])
    buf = io.BytesIO()
    report = deform_onnx.export(Einsum(equation), (a, b), buf, opset_version=11, dynamo=False, input_names=["a", "b"])
    assert report.opset == 11 and "MatMul" in report.op_types and "Einsum" not in report.op_types
    want = torch.einsum(equation, a, b).numpy()
    np.testing.assert_allclose(run_ort(buf.getvalue(), {"a": a, "b": b}), want, rtol=1e-5, atol=1e-5)


def test_einsum_dynamic_axes_at_opset_11():
    """Sizes of dynamic axes are read at run time: the file runs at other batch and spatial sizes."""
    equation = "bqc, bchw -> bqhw"
    torch.manual_seed(0)
    a, b = torch.randn(1, 3, 4), torch.randn(1, 4, 5, 6)
    buf = io.BytesIO()
    deform_onnx.export(
        Einsum(equation),
        (a, b),
        buf,
        opset_version=11,
        dynamo=False,
        input_names=["a", "b"],
        dynamic_axes={"a": {0: "N"}, "b": {0: "N", 2: "H", 3: "W"}},
    )
    a, b = torch.randn(2, 3, 4), torch.randn(2, 4, 7, 3)
    want = torch.einsum(equation, a, b).numpy()
    np.testing.assert_allclose(run_ort(buf.getvalue(), {"a": a, "b": b}), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "equation, shapes", [("ii,i->i", ((3, 3), (3,))), ("ij,k->ik", ((3, 4), (5,)))], ids=["diagonal", "one-sided-sum"]
)
def test_einsum_refuses_what_matmul_cannot_say(equation, shapes):
    """A diagonal or a sum over one operand's index: one line naming the way out (opset 12+), no file."""
    a, b = (torch.randn(shape) for shape in shapes)
    with pytest.raises(ValueError, match="export at opset 12 or higher"):
        deform_onnx.export(Einsum(equation), (a, b), io.BytesIO(), opset_version=11, dynamo=False)
