"""Target mnn rewrites ``x[:, i] = y`` (``ScatterElements``) as Slice + Concat: MNN 3.6.1 runs it wrong.

PWC-Net's warp (tests/real_code/pwcnet_style.py) normalises its sampling grid in place,
``vgrid[:, 1, :, :] = 2.0 * vgrid[:, 1, :, :].clone() / max(H - 1, 1) - 1.0``; dynamo writes two
``ScatterElements``, which MNN 3.6.1 loads but ran with the y channel left unnormalised (22 off, measured here;
BEVFormer's ``point_sampling``, tests/real_code/bevformer_style.py, 0.39 off the same way). With the repair the
file holds no ``ScatterElements`` and runs in MNN within the float32 rule. Expected values are PyTorch's.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import deform_onnx
from real_code.pwcnet_style import TinyPWC
from util import ATOL, op_types

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))


@pytest.fixture(scope="module")
def pwc_mnn(tmp_path_factory):
    torch.manual_seed(0)
    model = TinyPWC().eval()
    args = (torch.randn(1, 3, 24, 32), torch.randn(1, 3, 24, 32))
    path = tmp_path_factory.mktemp("pwc") / "pwc.onnx"
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    return model, args, path, deform_onnx.export(model, args, path, target="mnn", **opt_out)


def test_pwc_mnn_file_has_no_scatter(pwc_mnn):
    model, args, path, _ = pwc_mnn
    assert "ScatterElements" not in op_types(onnx.load(str(path)))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        want = model(*args).numpy()
    feeds = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    np.testing.assert_allclose(session.run(None, feeds)[0], want, atol=ATOL, rtol=0)


@pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")
def test_pwc_runs_in_mnn(pwc_mnn):
    """The target's file ran in MNN (MNNConvert + runtime, its cached venv) within the float32 rule before it was
    written (without the repair: refused, 2.7 off)."""
    *_, report = pwc_mnn
    assert any(line.startswith("mnn") for line in report.runtimes), report.runtimes
