"""Hugging Face detectors with their default arguments (``attn_implementation="sdpa"``), tiny configs,
random weights, no download, through ``deform_onnx.export`` (its own verification against PyTorch,
float32 1e-4, and again here):

- RT-DETR at opsets 11 and 12 (TorchScript: SDPA below 14 from ``aten_detectors``); at 17 (dynamo) the
  same model is exported with dynamic H/W in ``test_dynamic_transformers.py`` (which asserts opset 17 and SDPA);
- RT-DETRv2 at 17 on the dynamo path without a fallback (``aten._is_all_true``);
- RF-DETR at 11 (its DINOv2 backbone's position embedding: antialiased bicubic resize);
- Grounding DINO at 11 (``isin``, ``cummax``/``cummin``, ``eye(dtype=bool)``; the BERT text
  backbone is built from a tiny config, ``input_ids`` given directly: no tokenizer needed).
  Measured by hand too: 12 (TorchScript) and 17 (dynamo, 36 s: too slow for the suite) pass.

The top-k query selection is made unambiguous as in ``test_msda_models_real.py`` (``unit_scale``).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import deform_onnx
from deform_onnx.cli.example import load_photo

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore")]
import transformers  # noqa: E402  (after pytestmark, as in test_msda_models_real.py)

from models import unit_scale  # noqa: E402

TOL = 1e-4  # the float32 rule, as rtol and atol
from tiny_detectors import grounding_dino_config, rf_detr_config, rt_detr_config  # noqa: E402


class Detections(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values, *ids):
        out = self.model(pixel_values=pixel_values, input_ids=ids[0]) if ids else self.model(pixel_values=pixel_values)
        return out.logits, out.pred_boxes


def _rtdetr(config_cls, model_cls, decoder_layers):
    config = rt_detr_config(config_cls, decoder_layers=decoder_layers)
    assert config._attn_implementation in (None, "sdpa")  # the default: what users get
    return model_cls(config)


@pytest.fixture(scope="module")
def photo():
    return load_photo((128, 128))


@pytest.fixture(scope="module")
def rtdetr(photo):
    torch.manual_seed(0)
    model = _rtdetr(transformers.RTDetrConfig, transformers.RTDetrForObjectDetection, 1)
    return Detections(unit_scale(model, photo, seed=3)).eval()


def _check(model, args, opset, exporter, names):
    buf = io.BytesIO()
    report = deform_onnx.export(model, args, buf, opset_version=opset, input_names=names)
    assert report.exporter == exporter and report.opset == opset and report.max_error <= TOL
    import onnxruntime as ort

    got = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"]).run(
        None, {n: a.numpy() for n, a in zip(names, args)}
    )
    with torch.no_grad():
        want = model(*args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w.numpy(), rtol=TOL, atol=TOL)
    return report


# 17 (dynamo): the same tiny RT-DETR, exported dynamic there (test_dynamic_transformers.py), not again here
@pytest.mark.parametrize("opset, exporter", [(11, "torchscript"), (12, "torchscript")])
def test_rtdetr_default_sdpa(rtdetr, photo, opset, exporter):
    """Default attention (SDPA) at 11/12: export falls back to TorchScript by itself."""
    assert rtdetr.model.config._attn_implementation == "sdpa"
    _check(rtdetr, (photo,), opset, exporter, ["x"])


def test_rtdetr_v2_dynamo_without_fallback(photo):
    """RT-DETRv2's decoder asserts (``aten._is_all_true``) no longer send it to TorchScript."""
    torch.manual_seed(0)
    model = _rtdetr(transformers.RTDetrV2Config, transformers.RTDetrV2ForObjectDetection, 2)
    report = _check(Detections(unit_scale(model, photo, seed=3)).eval(), (photo,), 17, "dynamo", ["x"])
    assert report.fallback_reason is None


def test_grounding_dino_at_opset_11(photo):
    """Grounding DINO (text masks: isin, cummax/cummin, a bool eye) at 11, default arguments."""
    config = grounding_dino_config()
    torch.manual_seed(0)
    model = Detections(transformers.GroundingDinoForObjectDetection(config)).eval()
    ids = torch.tensor([[1, 5, 7, 3, 9, 3, 2]])  # ids 1, 2, 3 stand for [CLS], [SEP], "."
    _check(model, (photo, ids), 11, "torchscript", ["x", "ids"])


def test_rf_detr_at_opset_11():
    """RF-DETR (tiny windowed DINOv2 backbone, 112x112: the position embedding is resized, bicubic antialiased)."""
    config = rf_detr_config()
    photo = load_photo((112, 112))
    torch.manual_seed(0)
    model = Detections(unit_scale(transformers.RfDetrForObjectDetection(config), photo, seed=3)).eval()
    _check(model, (photo,), 11, "torchscript", ["x"])
