"""With no opset given, a dynamic export gets the opset the model's calls need (``targets/needs.py``).

RF-DETR resizes its position embedding with an antialiased bicubic ``F.interpolate`` to a size read from the
image: ``Resize`` has ``antialias`` from opset 18, and the default (17) was refused ("antialiased bicubic with a
dynamic size below opset 18") though opset 18 through dynamo exports and verifies it. Files are compared here
with PyTorch at a second size.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import deform_onnx
from deform_onnx.core.errors import ExportError
from deform_onnx.targets.base import Choice
from deform_onnx.targets.needs import for_defaults
from util import ATOL


class HalfSizeAA(torch.nn.Module):
    """A 3x3 conv, then an antialiased bicubic resize to half the input's size (RF-DETR's position-embedding
    resize reads its size from the image the same way)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return F.interpolate(y, size=(x.shape[2] // 2, x.shape[3] // 2), mode="bicubic", antialias=True)


DYNAMIC = {"x": {2: "H", 3: "W"}}


def _pick(model, x, opset=None, dynamic=True, dynamo=True) -> Choice:
    choice = Choice(None, "auto", opset, dynamo)
    for_defaults(choice, model, (x,), opset, dynamic, dynamo)
    return choice


def test_the_default_opset_is_raised_only_for_a_dynamic_dynamo_export_without_an_opset():
    model, x = HalfSizeAA().eval(), torch.randn(1, 3, 16, 16)
    picked = _pick(model, x)
    assert picked.opset == 18 and "antialiased resize" in picked.notes[0]
    assert _pick(model, x, dynamic=False).opset is None  # static: the TorchScript form serves at 17
    assert _pick(model, x, opset=17).opset == 17  # the user's opset wins (the refusal names 18)
    assert _pick(model, x, dynamo=False).opset is None  # TorchScript: no dynamic antialiased resize at any opset
    assert _pick(torch.nn.Conv2d(3, 4, 3), x).opset is None  # no such call: unchanged


def _export(model, x, **kwargs):
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(model, (x,), f, input_names=["x"], dynamic_axes=DYNAMIC, **kwargs)
    return f.getvalue(), report


def _matches(data, model, sizes):
    import onnxruntime as ort

    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for size in sizes:
        x = torch.randn(size, generator=torch.Generator().manual_seed(size[-1]))
        with torch.no_grad():
            want = [t.numpy() for t in torch.utils._pytree.tree_leaves(model(x))]
        for g, w in zip(session.run(None, {"x": x.numpy()}), want):
            np.testing.assert_allclose(g, w, rtol=ATOL, atol=ATOL, err_msg=str(size))


def test_a_dynamic_antialiased_resize_exports_by_default_at_18():
    model = HalfSizeAA().eval()
    data, report = _export(model, torch.randn(1, 3, 16, 16))
    assert (report.opset, report.exporter) == (18, "dynamo"), report.fallback_reason
    assert any("opset 18" in note for note in report.notes)
    _matches(data, model, [(1, 3, 16, 16), (1, 3, 24, 20)])
    with pytest.raises(ExportError, match="opset_version=18"):  # an explicit lower opset: still refused, naming 18
        _export(model, torch.randn(1, 3, 16, 16), opset_version=17)


@pytest.mark.slow
def test_rf_detr_exports_dynamic_with_default_arguments():
    """RF-DETR (tiny config from tests/tiny_detectors.py, random weights): at 112x112 with dynamic H/W, checked here
    at 168x224 (its code takes multiples of 28). Two backbone layers (one windowed, one global) and one decoder
    layer: the antialiased position-embedding resize that needs opset 18 is the same at any depth."""
    transformers = pytest.importorskip("transformers")
    from tiny_detectors import rf_detr_config

    class Detections(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            out = self.model(pixel_values=x)
            return out.logits, out.pred_boxes

    torch.manual_seed(0)
    model = Detections(
        transformers.RfDetrForObjectDetection(rf_detr_config(backbone_layers=2, decoder_layers=1))
    ).eval()
    data, report = _export(model, torch.randn(1, 3, 112, 112))
    assert (report.opset, report.exporter) == (18, "dynamo"), report.fallback_reason
    _matches(data, model, [(1, 3, 112, 112), (1, 3, 168, 224)])
