"""Dynamic sizes that the model's code fixes (``deform_onnx.exporters.guards``).

torch's dynamo exporter keeps such a size symbolic in the file but drops the
guard ``torch.export`` recorded, so the file is wrong at other sizes;
``deform_onnx.export`` must not write it: it falls back to TorchScript (or
raises with ``fallback=False``). RT-DETR, the real case, is in
``test_msda_models_real.py``.
"""

from __future__ import annotations

import io

import pytest
import torch
import torchvision

import deform_onnx
from deform_onnx.core.errors import ExportError

DYNAMIC = {"x": {2: "H", 3: "W"}}


class FixesWidth(torch.nn.Module):
    """A deformable layer, then a weight per 8 columns built from a Python number, as transformers builds
    anchors: ``int(W // 8)`` makes torch.export record ``W // 8 == 4`` for a 32-wide example."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.dcn = torchvision.ops.DeformConv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.dcn(x, torch.zeros(x.shape[0], 18, x.shape[2], x.shape[3]))
        groups = int(y.shape[-1] // 8)
        return y * torch.arange(groups).repeat_interleave(8)[: y.shape[-1]].to(y.dtype)


class KeepsWidth(FixesWidth):
    """The same layer without the Python number: every guard holds at other sizes."""

    def forward(self, x):
        return self.dcn(x, torch.zeros(x.shape[0], 18, x.shape[2], x.shape[3]))


def test_fixed_size_falls_back_to_torchscript_and_is_refused_there(tmp_path):
    """The warning quotes torch's guard; the TorchScript file freezes the same size, so the second-size
    check refuses it too: the error names both, and no file is written."""
    path = tmp_path / "m.onnx"
    with (
        pytest.warns(UserWarning, match=r"fixes a dynamic size.*size\(\)\[3\] // 8\) == 4"),
        pytest.raises(
            ExportError,
            match=r"dynamo exporter was abandoned first \(the model's code fixes a dynamic size.*then the TorchScript "
            r"exporter failed: the file does not hold at a second size .*broadcast",
        ),
    ):
        deform_onnx.export(
            FixesWidth(), (torch.randn(1, 3, 16, 32),), path, opset_version=17, input_names=["x"], dynamic_axes=DYNAMIC
        )
    assert list(tmp_path.iterdir()) == []


def test_fixed_size_without_fallback_raises():
    with pytest.raises(ExportError, match="fixes a dynamic size.*fallback=True or dynamo=False"):
        deform_onnx.export(
            FixesWidth(),
            (torch.randn(1, 3, 16, 32),),
            io.BytesIO(),
            opset_version=17,
            input_names=["x"],
            dynamic_axes=DYNAMIC,
            fallback=False,
        )


@pytest.mark.parametrize("dynamic", ["axes", "shapes"])
def test_dynamic_model_stays_on_dynamo(dynamic):
    """No false alarm: size ranges and the like hold at larger sizes, so the dynamo file is written."""
    from torch.export import Dim

    kwargs = (
        {"dynamic_axes": DYNAMIC}
        if dynamic == "axes"
        else {"dynamic_shapes": ({2: Dim("H", min=4), 3: Dim("W", min=4)},)}
    )
    report = deform_onnx.export(
        KeepsWidth(),
        (torch.randn(1, 3, 16, 32),),
        io.BytesIO(),
        opset_version=17,
        input_names=["x"],
        fallback=False,
        **kwargs,
    )
    assert report.exporter == "dynamo"
