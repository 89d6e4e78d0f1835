"""What a TorchScript refusal at a second size tells the user: where the size froze, and whether ``dynamo=True``
writes a correct dynamic file instead.

- ultralytics' RT-DETR decoder (``tests/real_code/ultralytics_rtdetr.py``): ``bs = len(feats)`` is a Python
  number in the trace, so a dynamic-batch TorchScript file fails at batch 2; the refusal says that the dynamo
  exporter writes a correct file (checked by exporting it), and the default export writes that file.
- A size frozen in a submodule: the message names the module's class and source file (the node's scope).
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch

import deform_onnx
from deform_onnx.core.errors import ExportError
from real_code.ultralytics_rtdetr import Head
from util import ATOL

BATCH = {"x": {0: "N"}}


def _export(model, x, **kwargs):
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(model, (x,), f, input_names=["x"], **kwargs)
    return f.getvalue(), report


@pytest.mark.slow
def test_rtdetr_decoder_refusal_names_dynamo_and_dynamo_writes_the_file():
    import onnxruntime as ort

    torch.manual_seed(0)
    model = Head().eval()
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with pytest.raises(ExportError) as err:
        _export(model, x, dynamic_axes=BATCH, dynamo=False)
    message = str(err.value)
    assert "does not hold at a second size" in message
    assert "the dynamo exporter writes a correct dynamic file for this model: export with dynamo=True at " in message
    data, report = _export(model, x, dynamic_axes=BATCH)  # the default: dynamo
    assert report.exporter == "dynamo", report.fallback_reason
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for n in (1, 3):
        xn = torch.randn(n, 3, 64, 64, generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            want = model(xn).numpy()
        np.testing.assert_allclose(session.run(None, {"x": xn.numpy()})[0], want, rtol=ATOL, atol=ATOL)


class _Flatten(torch.nn.Module):
    def forward(self, x):
        height = int(x.shape[2])  # a Python number: the trace records the example's H
        return x.reshape(x.shape[0], x.shape[1], height, -1).transpose(2, 3)


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 2, 1)
        self.flatten = _Flatten()

    def forward(self, x):
        return self.flatten(self.conv(x))


def test_a_frozen_size_names_the_module_and_source_it_froze_in():
    with pytest.raises(ExportError) as err:
        _export(_Net(), torch.randn(1, 2, 12, 8), dynamic_axes={"x": {2: "H", 3: "W"}}, dynamo=False)
    message = str(err.value)
    assert (
        "value 12 (H)" in message and "in _Flatten.forward, " in message and "test_torchscript_refusals.py:" in message
    )
    # the dynamo exporter keeps the size symbolic: the refusal says so
    assert "export with dynamo=True at opset_version=17" in message
