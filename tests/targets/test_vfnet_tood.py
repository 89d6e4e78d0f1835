"""VFNet's star-shaped DCN and TOOD's ``deform_sampling`` (``tests/real_code/vfnet_tood_style.py``).

- Both heads at opset 11 (the TorchScript exporter), dynamic N/H/W: verified at export and run here at a new
  non-square size against PyTorch (TOOD's 1x1 kernel with ``groups`` and offset groups both the channel count;
  VFNet's float64 numpy ``dcn_base_offset`` and its offsets written channel by channel into ``new_zeros``).
- Target ``mnn``: VFNet's ``star_dcn_offset`` assigns twelve channels in place (``offset[:, 0, :, :] = -1.0 *
  y1``), which the dynamo exporter writes as ``ScatterElements``; MNN 3.6.1 ran them wrong (13.6 off), so the
  target applies the repair ``"scatter as Concat"`` (``targets/repair_index.py``, ncnn's too). Planted fault:
  without it the export's run in MNN refuses the file. ``new_zeros`` is a ``ConstantOfShape`` without ``value``,
  which MNNConvert folded into uninitialised memory in one CI run: the target writes the value
  (``tests/targets/test_mnn_constant_of_shape.py``).
"""

from __future__ import annotations

import io
import os
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import deform_onnx
from deform_onnx.targets import resolve_target
from real_code.vfnet_tood_style import build
from util import ATOL

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))
NEEDS_MNN = pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")


def _close(got, want, what):
    assert got.shape == want.shape and np.allclose(got, want, rtol=ATOL, atol=ATOL), (
        f"{what}: max error {np.abs(got - want).max():.3g}"
    )


def test_both_heads_at_opset_11_run_at_a_new_size():
    model = build()
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(
            model,
            (torch.randn(1, 3, 64, 80, generator=torch.Generator().manual_seed(1)),),
            f,
            dynamo=False,
            opset_version=11,
            input_names=["x"],
            dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}},
        )
    assert report.opset == 11 and len(report.checked_shapes) == 2
    x = torch.randn(2, 3, 96, 48, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = [t.numpy() for t in model(x)]
    got = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    for g, w, what in zip(got, want, ("cls_score", "bbox_pred", "bbox_pred_refine", "tood bbox"), strict=True):
        _close(g, w, what)


class _StarOffset(torch.nn.Module):
    """VFNet's initial boxes and ``star_dcn_offset`` (the offsets its two DCNs sample at)."""

    def __init__(self):
        super().__init__()
        model = build()
        self.stem, self.head = model.stem, model.vfnet

    def forward(self, x):
        head = self.head
        reg_feat = head.reg_convs(self.stem(x))
        bbox_pred = head.scale(head.vfnet_reg(head.vfnet_reg_conv(reg_feat))).float().exp() * head.stride
        return head.star_dcn_offset(bbox_pred, head.gradient_mul, head.stride)


def _x():
    return torch.randn(1, 3, 64, 80, generator=torch.Generator().manual_seed(1))


def test_star_offsets_for_mnn_are_written_without_scatter():
    model, x = _StarOffset().eval(), _x()
    f = io.BytesIO()
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    report = deform_onnx.export(model, (x,), f, target="mnn", input_names=["x"], **opt_out)
    assert "scatter as Concat" in resolve_target("mnn").repairs
    nodes = onnx.load_from_string(f.getvalue()).graph.node
    assert "ScatterElements" not in {n.op_type for n in nodes}
    # new_zeros' ConstantOfShape carries its value: MNNConvert folds it into uninitialised memory otherwise
    assert all(any(a.name == "value" for a in n.attribute) for n in nodes if n.op_type == "ConstantOfShape")
    if not NO_RUNTIMES:
        assert any(line.startswith("mnn") for line in report.runtimes), report.runtimes
    (got,) = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    with torch.no_grad():
        _close(got, model(x).numpy(), "star offsets")


@NEEDS_MNN
def test_without_the_repair_mnn_refuses_the_star_offsets(monkeypatch):
    from deform_onnx.targets import repairs

    monkeypatch.setitem(repairs.REPAIRS, "scatter as Concat", lambda model: [])
    with pytest.raises(deform_onnx.VerificationError, match=r"mnn .* misses the reference"):
        deform_onnx.export(_StarOffset().eval(), (_x(),), io.BytesIO(), target="mnn", input_names=["x"])
