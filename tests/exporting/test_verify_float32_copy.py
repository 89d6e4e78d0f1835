"""Verification of a low-precision model PyTorch runs only as its float32 copy, with an output that is not
float16/bfloat16 (an integer index): its shape and values come from the float32 copy.

Found by mypy (issue 20): the shape was read from the low-precision reference, which is ``None`` for such an
output, so verification failed with ``AttributeError: 'NoneType' object has no attribute 'shape'``.
"""

from __future__ import annotations

import onnx
import onnx.helper as oh
import pytest
import torch

from deform_onnx.core.errors import VerificationError
from deform_onnx.exporting.verification import verify


class NoBfloat16Kernel(torch.nn.Module):
    """An argmax behind an op without a bfloat16 CPU kernel (as torchvision's deform_conv2d)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(1))

    def forward(self, x):
        if self.scale.dtype == torch.bfloat16:
            raise RuntimeError("no bfloat16 kernel")
        return (x * self.scale).argmax(1)


def _argmax_file(axis: int) -> bytes:
    graph = oh.make_graph(
        [oh.make_node("ArgMax", ["x"], ["y"], axis=axis, keepdims=0)],
        "argmax",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 5])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.INT64, None)],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_integer_output_checked_against_the_float32_copy():
    model = NoBfloat16Kernel().to(torch.bfloat16).eval()
    x = torch.randn(2, 5)
    verified = verify(model, (x,), _argmax_file(axis=1))
    assert verified.max_error == 0.0
    assert verified.checks["y"].reference == "pytorch"


def test_integer_output_of_wrong_shape_is_refused():
    model = NoBfloat16Kernel().to(torch.bfloat16).eval()
    with pytest.raises(VerificationError, match="shape"):
        verify(model, (torch.randn(2, 5),), _argmax_file(axis=0))  # 5 indices where PyTorch gives 2
