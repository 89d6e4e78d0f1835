"""Sampling code of keypoint matchers and BEV detectors, written as their repositories write it, exports dynamic.

- SuperPoint's descriptor sampling (tests/real_code/lightglue_superpoint_style.py, SuperGlue / LightGlue
  ``sample_descriptors``): ``torch.tensor([(w * s - s / 2 - 0.5), (h * s - s / 2 - 0.5)])`` from the descriptor
  map's shape, ``F.grid_sample(descriptors, keypoints.view(b, 1, -1, 2), align_corners=True)``; the image size and
  the keypoint count ``K`` dynamic, as LightGlue-ONNX deploys it. Default arguments (dynamo, opset 17).
- A BEVFormer encoder layer (tests/real_code/bevformer_style.py): 3-D pillars projected into each camera by
  ``lidar2img``, ``bev_mask``, MSDA over cameras (the ``nonzero``-free deploy form) and temporal self-attention over
  ``[prev_bev, bev]``; the camera image size dynamic. TorchScript at opset 11 (the gather form).

Each written file runs at another size (and another K) in ONNX Runtime against PyTorch eager there (1e-4).
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnxruntime as ort
import torch

import deform_onnx
from real_code.bevformer_style import TinyBEVFormerLayer, lidar2img_example
from real_code.lightglue_superpoint_style import SuperPointDescriptors
from util import ATOL


def _export(model, args, names, dynamic, **kwargs) -> bytes:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        deform_onnx.export(model, args, f, input_names=names, dynamic_axes=dynamic, **kwargs)
    return f.getvalue()


def _check(data: bytes, model, args) -> None:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})[0]
    with torch.no_grad():
        want = model(*args).numpy()
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=ATOL)


def test_superpoint_descriptors_at_another_size_and_keypoint_count():
    torch.manual_seed(0)
    model = SuperPointDescriptors().eval()
    args = (torch.randn(1, 1, 64, 80), torch.rand(1, 50, 2) * torch.tensor([80.0, 64.0]))
    dynamic = {"image": {2: "H", 3: "W"}, "keypoints": {1: "K"}}
    data = _export(model, args, ["image", "keypoints"], dynamic)
    _check(data, model, (torch.randn(1, 1, 48, 104), torch.rand(1, 37, 2) * torch.tensor([104.0, 48.0])))


def test_bevformer_layer_at_another_camera_size():
    torch.manual_seed(0)
    model = TinyBEVFormerLayer().eval()
    args = (torch.randn(1, 2, 3, 64, 96), lidar2img_example(), torch.randn(1, 30, 32))
    data = _export(model, args, ["img", "lidar2img", "prev_bev"], {"img": {3: "H", 4: "W"}}, dynamo=False,
                   opset_version=11)  # fmt: skip
    _check(data, model, (torch.randn(1, 2, 3, 48, 112), lidar2img_example(seed=3), torch.randn(1, 30, 32)))
