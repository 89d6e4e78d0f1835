"""ATen ops that torch's TorchScript exporter has only from a later opset (``deform_onnx.exporters.aten_gaps``).

``aten::outer`` (torch: opset 12+) at opset 11, as transformers' RT-DETR
position embedding calls it; expected values are PyTorch's, compared by
``deform_onnx.export``'s own verification and again here.
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
    [(torch.float32, torch.float32), (torch.float64, torch.float64), (torch.int64, torch.float32),
     (torch.float32, torch.float64)],
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
    assert got.dtype == want.numpy().dtype == onnx.helper.tensor_dtype_to_np_dtype(
        proto.graph.output[0].type.tensor_type.elem_type
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
