"""``F.pad`` in the TorchScript exporter (``deform_onnx.exporters.aten_pad``): pads written as a constant.

torch's own symbolic builds the pads in the graph (``ConstantOfShape`` and more, never folded), so its shape
inference lost the padded map's sizes and the deformable layer after an ``F.pad`` took the dynamic-map
sampler: here both layers, after a reflect and a constant pad, take GridSample, the file has no
``ConstantOfShape`` and it matches PyTorch at a second batch. ``circular`` stays torch's.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from torchvision.ops import DeformConv2d

import deform_onnx
from deform_onnx.exporters.aten_pad import onnx_pads
from util import run_ort


class _PaddedDcn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.off1, self.dcn1 = torch.nn.Conv2d(3, 18, 3), DeformConv2d(3, 4, 3)
        self.off2, self.dcn2 = torch.nn.Conv2d(4, 18, 3), DeformConv2d(4, 4, 3)

    def forward(self, x):
        x = F.pad(x, (1, 1, 1, 1), mode="reflect")
        x = torch.relu(self.dcn1(x, self.off1(x)))
        x = F.pad(x, (1, 2, 1, 0), value=0.5)
        return self.dcn2(x, self.off2(x))


@pytest.fixture(scope="module")
def padded():
    torch.manual_seed(0)
    module, buf = _PaddedDcn().eval(), io.BytesIO()
    report = deform_onnx.export(module, (torch.randn(1, 3, 7, 6),), buf, input_names=["x"], dynamo=False,
                                dynamic_axes={"x": {0: "n"}})  # fmt: skip
    return module, buf.getvalue(), report


def test_deform_conv_after_f_pad_sees_the_map_size(padded):
    module, data, report = padded
    assert report.forms == {"deform_conv2d": "grid_sample"}  # was gather: a map of unknown size
    ops = [n.op_type for n in onnx.load_from_string(data).graph.node]
    assert ops.count("Pad") >= 2 and "ConstantOfShape" not in ops
    x2 = torch.randn(2, 3, 7, 6)
    np.testing.assert_allclose(run_ort(data, {"x": x2}), module(x2).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_onnx_pads_order_and_refusal():
    assert onnx_pads([1, 2, 3, 4], 4) == [0, 0, 3, 1, 0, 0, 4, 2]  # last axis first in PyTorch's list
    with pytest.raises(ValueError, match="at most 2 axes"):
        onnx_pads([1, 1, 1, 1, 1, 1], 2)


def test_circular_pad_is_torchs_and_matches():
    class Circular(torch.nn.Module):
        def forward(self, x):
            return F.pad(x, (1, 2, 2, 1), mode="circular") * 2

    x, buf = torch.randn(1, 2, 4, 5), io.BytesIO()
    deform_onnx.export(Circular(), (x,), buf, input_names=["x"], dynamo=False)
    np.testing.assert_allclose(run_ort(buf.getvalue(), {"x": x}), Circular()(x).numpy(), rtol=0, atol=1e-6)


def test_computed_padding_stays_torchs_and_follows_the_size():
    """Padding to a multiple of 4 computed from a dynamic width (as restoration models pad to a window size):
    the list is not constant, so torch's symbolic writes it, and the file pads right at another width."""

    class ToMultiple(torch.nn.Module):
        def forward(self, x):
            return F.pad(x, (0, (4 - x.shape[3] % 4) % 4, 0, 0), mode="reflect")

    buf = io.BytesIO()
    deform_onnx.export(ToMultiple(), (torch.randn(1, 2, 3, 5),), buf, input_names=["x"], dynamo=False,
                       dynamic_axes={"x": {3: "w"}})  # fmt: skip
    x2 = torch.randn(1, 2, 3, 6)
    np.testing.assert_allclose(run_ort(buf.getvalue(), {"x": x2}), ToMultiple()(x2).numpy(), rtol=0, atol=1e-6)
