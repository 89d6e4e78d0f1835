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


@pytest.fixture(scope="module")
def ts11_file(detr):
    """The opset-11 TorchScript file: ``(bytes, report)``, one export for ONNX Runtime and OpenVINO."""
    model, x = detr
    buf = io.BytesIO()
    report = deform_onnx.export(model, (x,), buf, opset_version=11, dynamo=False, input_names=["x"])
    return buf.getvalue(), report


# On the dynamo path (17) transformers' Deformable DETR is exported with dynamic H/W and checked at two sizes in
# tests/exporters/test_dynamic_transformers.py; a static dynamo export of this config repeated that path.
@pytest.mark.parametrize("opset", [11, 17], ids=["ts-11", "ts-17"])
def test_deformable_detr_exports_and_matches(detr, ts11_file, opset):
    """export verifies against PyTorch on ONNX Runtime (float32: 1e-4) or raises."""
    import numpy as np
    import onnxruntime as ort

    model, x = detr
    if opset == 11:
        data, report = ts11_file
    else:
        buf = io.BytesIO()
        report = deform_onnx.export(model, (x,), buf, opset_version=opset, dynamo=False, input_names=["x"])
        data = buf.getvalue()
    assert report.exporter == "torchscript" and report.opset == opset
    (got,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)  # the file, here (the float32 rule)


def test_deformable_detr_on_openvino(detr, ts11_file):
    """OpenVINO (CPU, f32) runs the opset-11 file (per-level gather samplers) within 1e-4 of PyTorch."""
    pytest.importorskip("openvino", reason="OpenVINO tests need `pip install openvino`")
    import numpy as np
    import onnx

    import deform_onnx.openvino as dov

    model, x = detr
    compiled = dov.compile(onnx.load_from_string(ts11_file[0]), device="CPU", precision="f32")
    got = np.asarray(next(iter(compiled([x.numpy()]).values())))
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
