"""Verification of a low-precision model PyTorch runs only as its float32 copy, with an output that is not
float16/bfloat16 (an integer index): its shape and values come from the float32 copy.

Found by mypy (issue 20): the shape was read from the low-precision reference, which is ``None`` for such an
output, so verification failed with ``AttributeError: 'NoneType' object has no attribute 'shape'``.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnxruntime as ort
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


def _argmax_file(axis: int, plant: bool = False) -> bytes:
    """``ArgMax(x, axis)``; ``plant``: one index off by one (an integer output just outside exactness)."""
    nodes = [oh.make_node("ArgMax", ["x"], ["y" if not plant else "i"], axis=axis, keepdims=0)]
    inits = []
    if plant:
        nodes.append(oh.make_node("Add", ["i", "one"], ["y"]))
        inits.append(onnx.numpy_helper.from_array(np.array([0, 1], np.int64), "one"))
    graph = oh.make_graph(
        nodes,
        "argmax",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 5])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.INT64, None)],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_integer_output_checked_against_the_float32_copy():
    """PyTorch cannot run the model (bfloat16 buffer, no kernel): the float32 copy is the reference, and says so."""
    model = NoBfloat16Kernel().to(torch.bfloat16).eval()
    x = torch.randn(2, 5)
    data = _argmax_file(axis=1)
    verified = verify(model, (x,), data)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": x.numpy()})
    want = (x * model.scale.float()).argmax(1).numpy()  # the float32 copy, computed here
    assert np.array_equal(got, want) and verified.max_error == 0.0
    check = verified.checks["y"]
    assert check.reference == "float32 copy" and "float32 model" in check.rule, check


def test_an_index_off_by_one_is_refused():
    """Integers match exactly: one index one off (the smallest integer fault) is refused."""
    model = NoBfloat16Kernel().to(torch.bfloat16).eval()
    with pytest.raises(VerificationError, match=r"output 'y' differs from the float32 model: max abs error 1 "):
        verify(model, (torch.randn(2, 5),), _argmax_file(axis=1, plant=True))


def test_integer_output_of_wrong_shape_is_refused():
    model = NoBfloat16Kernel().to(torch.bfloat16).eval()
    with pytest.raises(VerificationError, match="shape"):
        verify(model, (torch.randn(2, 5),), _argmax_file(axis=0))  # 5 indices where PyTorch gives 2
