"""EDVR (BasicSR's ``EDVR`` without TSA, ``tests/real_code/edvr_style.py``) with default arguments.

BasicSR's ``DCNv2Pack`` logs a warning when ``torch.mean(torch.abs(offset)) > 50``: an ``if`` on a tensor,
which ``torch.export`` cannot capture (a data-dependent guard). ``deform_onnx.export`` then falls back to the
TorchScript exporter (the branch only logs: the trace keeps the path PyTorch ran) and says why, naming the
model's line. The file (three pyramid levels, offsets upsampled bilinearly ``* 2``, the cascading DCN, every
frame aligned to the centre one) is run here on new frames against PyTorch. (Dynamic N/H/W also holds at a
second size; measured 186 s on a loaded machine, too slow for the suite: BasicVSR++'s test covers the
``[n, t, c, h, w]`` views dynamic.)
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch

import deform_onnx
from real_code.edvr_style import build
from util import ATOL


@pytest.fixture(scope="module")
def edvr():
    model = build(num_feat=4)
    x = torch.randn(1, 3, 3, 8, 12, generator=torch.Generator().manual_seed(1))
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(model, (x,), f, input_names=["x"])
    return model, f.getvalue(), report


def test_the_offset_warning_branch_falls_back_and_says_where(edvr):
    _, _, report = edvr
    assert report.exporter == "torchscript"
    assert "edvr_style.py" in report.fallback_reason and "offset_absmean > 50" in report.fallback_reason


def test_edvr_runs_on_new_frames(edvr):
    model, data, _ = edvr
    x = torch.randn(1, 3, 3, 8, 12, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = model(x).numpy()
    (got,) = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    assert got.shape == want.shape == (1, 3, 32, 48)
    assert np.allclose(got, want, rtol=ATOL, atol=ATOL), f"max error {np.abs(got - want).max():.3g}"
