"""Hugging Face transformers' Deformable DETR (small config, random weights, no download) through ``deform_onnx.export``.

Its ``MultiScaleDeformableAttention`` is the pure-PyTorch core (one
``grid_sample`` per level). Needs ``transformers`` (not a dependency of this
project; the ``test`` extra installs it; checked with transformers 5.24).
"""

from __future__ import annotations

import io

import pytest
import torch

import deform_onnx

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore")]
import transformers  # noqa: E402  (the test extra has it: this test runs in CI)

from tiny_detectors import deformable_detr_config  # noqa: E402


class LastHidden(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).last_hidden_state


@pytest.fixture(scope="module")
def detr():
    config = deformable_detr_config(
        d_model=64,
        decoder_layers=1,
        num_queries=20,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        attn_implementation="eager",  # scaled_dot_product_attention has no symbolic below opset 14
    )
    torch.manual_seed(0)
    return LastHidden(transformers.DeformableDetrModel(config).eval()), torch.randn(1, 3, 128, 128)


@pytest.mark.parametrize("opset, dynamo", [(11, False), (17, False), (17, True)], ids=["ts-11", "ts-17", "dynamo-17"])
def test_deformable_detr_exports_and_matches(detr, opset, dynamo):
    """export verifies against PyTorch on ONNX Runtime (float32: 1e-4) or raises."""
    import numpy as np
    import onnxruntime as ort

    model, x = detr
    buf = io.BytesIO()
    report = deform_onnx.export(model, (x,), buf, opset_version=opset, dynamo=dynamo, input_names=["x"])
    assert report.exporter == ("dynamo" if dynamo else "torchscript") and report.opset == opset
    (got,) = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # the file, here (the float32 rule)


def test_deformable_detr_on_openvino(detr, tmp_path):
    """OpenVINO (CPU, f32) runs the opset-11 file (per-level gather samplers) within 1e-4 of PyTorch."""
    pytest.importorskip("openvino", reason="OpenVINO tests need `pip install openvino`")
    import numpy as np

    import deform_onnx.openvino as dov

    model, x = detr
    path = tmp_path / "detr.onnx"
    deform_onnx.export(model, (x,), path, opset_version=11, dynamo=False, input_names=["x"])
    got = np.asarray(next(iter(dov.compile(str(path), device="CPU", precision="f32")([x.numpy()]).values())))
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
