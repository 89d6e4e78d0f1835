"""The ATen gap fillers of ``deform_onnx.exporters.aten_detectors`` against PyTorch alone (small tensors).

``scaled_dot_product_attention`` at opsets 11-13 (torch's symbolic starts at 14), ``isin``,
``cummax``/``cummin`` and ``eye(dtype=bool)`` (both exporters), antialiased bicubic and
bilinear ``F.interpolate`` (TorchScript, every opset) and ``aten._is_all_true`` (dynamo
table). Expected values are PyTorch's on the same tensors.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import deform_onnx
from deform_onnx.core.errors import ExportError
from deform_onnx.exporters.aten_detectors import aa_weights
from util import run_ort

pytestmark = pytest.mark.filterwarnings("ignore")


def _export(model, args, opset, names, dynamo=False, **kw):
    buf = io.BytesIO()
    report = deform_onnx.export(
        model, args, buf, opset_version=opset, dynamo=dynamo, fallback=False, input_names=names, **kw
    )
    return buf.getvalue(), report


class Attention(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, q, k, v, *mask):
        return F.scaled_dot_product_attention(q, k, v, *mask, **self.kw)


def _qkv(heads_kv=4, length=5, source=6):
    torch.manual_seed(0)
    return torch.randn(2, 4, length, 8), torch.randn(2, heads_kv, source, 8), torch.randn(2, heads_kv, source, 3)


def _bool_mask():
    torch.manual_seed(1)
    mask = torch.rand(2, 1, 5, 6) > 0.3
    mask[0, 0, 1] = False  # a fully masked row: ATen's safe softmax gives zeros there
    return mask


SDPA = {
    "default": ({}, lambda: _qkv()),
    "scale": ({"scale": 0.3}, lambda: _qkv()),
    "bool-mask": ({}, lambda: (*_qkv(), _bool_mask())),
    "float-mask": ({}, lambda: (*_qkv(), torch.randn(5, 6))),
    "causal": ({"is_causal": True}, lambda: _qkv(source=5)),
    "causal-rect": ({"is_causal": True}, lambda: _qkv(length=3, source=6)),
    "gqa": ({"enable_gqa": True}, lambda: _qkv(heads_kv=2)),
}


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("case", list(SDPA))
def test_sdpa_below_opset_14(case, opset):
    """MatMul/Softmax/MatMul at 11 and 13 (no symbolic in torch there), within 1e-5 of PyTorch."""
    kw, make = SDPA[case]
    args = make()
    names = ["q", "k", "v", "m"][: len(args)]
    data, report = _export(Attention(**kw), args, opset, names)
    assert report.opset == opset and "Softmax" in report.op_types
    want = Attention(**kw)(*args).numpy()
    got = run_ort(data, dict(zip(names, args)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if case == "bool-mask":
        assert not np.isnan(got).any() and np.all(got[0, :, 1] == 0)  # not NaN: zeros, as PyTorch


def test_sdpa_dynamic_lengths_at_opset_11():
    """Causal attention with dynamic sequence lengths: the mask is built at run time (Range)."""
    q, k, v = _qkv(source=5)
    names = ["q", "k", "v"]
    axes = {n: {2: "L"} for n in names}
    data, _ = _export(Attention(is_causal=True), (q, k, v), 11, names, dynamic_axes=axes)
    q, k, v = (torch.randn(2, t.shape[1], 9, t.shape[3]) for t in (q, k, v))
    want = Attention(is_causal=True)(q, k, v).numpy()
    np.testing.assert_allclose(run_ort(data, {"q": q, "k": k, "v": v}), want, rtol=1e-5, atol=1e-5)


def test_sdpa_dropout_refused():
    """dropout_p > 0 is random at run time: one line naming the way out, no file."""
    with pytest.raises(ValueError, match="dropout_p=0.1.*eval mode"):
        _export(Attention(dropout_p=0.1), _qkv(), 11, ["q", "k", "v"])


class TextMasks(torch.nn.Module):
    """Grounding DINO's text-mask pattern: isin over special tokens, cummax/cummin, a bool eye."""

    def forward(self, ids, f):
        special = torch.isin(ids, torch.tensor([1, 3]))
        n = ids.shape[1]
        idx = torch.arange(n).unsqueeze(0).expand(ids.shape[0], -1)
        prev = torch.cummax(torch.where(special, idx, torch.full((), -1)), dim=1)
        nxt = torch.cummin(torch.flip(torch.where(special, idx, torch.tensor(n)), dims=[1]), dim=1)
        eye = torch.eye(n, dtype=torch.bool).unsqueeze(0) | (special.unsqueeze(1) & special.unsqueeze(2))
        fmax = torch.cummax(f, dim=0)
        return (
            special,
            torch.isin(ids, torch.tensor([2]), invert=True),
            prev.values,
            prev.indices,
            nxt.values,
            nxt.indices,
            eye,
            fmax.values,
            fmax.indices,
        )


@pytest.mark.parametrize("opset, dynamo", [(11, False), (17, False), (17, True)], ids=["ts11", "ts17", "dynamo17"])
def test_isin_cummax_cummin_eye(opset, dynamo):
    """Exact (integer and boolean outputs; ties take the later index as ATen's cummax does)."""
    torch.manual_seed(0)
    ids = torch.randint(0, 5, (2, 9))
    f = torch.randn(6, 3).round()  # ties in float values too
    data, report = _export(TextMasks(), (ids, f), opset, ["ids", "f"], dynamo=dynamo)
    assert report.exporter == ("dynamo" if dynamo else "torchscript")
    import onnxruntime as ort

    session_out = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(
        None, {"ids": ids.numpy(), "f": f.numpy()}
    )
    for got, want in zip(session_out, TextMasks()(ids, f), strict=True):
        np.testing.assert_array_equal(got, want.numpy())


class Resize(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, x):
        return F.interpolate(x, antialias=True, **self.kw)


RESIZES = [
    {"size": (7, 9), "mode": "bicubic"},
    {"size": (40, 31), "mode": "bicubic"},  # upscaling: the plain kernel's support
    {"scale_factor": 0.37, "mode": "bicubic"},  # the .vec overload: scale factors given to the kernel
    {"size": (8, 8), "mode": "bicubic", "align_corners": True},
    {"size": (5, 30), "mode": "bilinear"},
    {"scale_factor": (0.5, 1.5), "mode": "bilinear", "align_corners": True},
]


@pytest.mark.parametrize("opset", [11, 17])
@pytest.mark.parametrize("kw", RESIZES, ids=[str(i) for i in range(len(RESIZES))])
def test_antialiased_resize(kw, opset):
    """Two MatMul by ATen's weights, within float32 rounding of F.interpolate(antialias=True)."""
    torch.manual_seed(0)
    x = torch.randn(1, 2, 17, 23)
    data, report = _export(Resize(**kw), (x,), opset, ["x"])
    assert set(report.op_types) <= {"MatMul", "Constant"}
    np.testing.assert_allclose(run_ort(data, {"x": x}), Resize(**kw)(x).numpy(), rtol=1e-5, atol=1e-5)


class ResizeToInput(torch.nn.Module):
    """RF-DETR's pattern: a parameter resized to a size computed from the image's shape."""

    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Parameter(torch.randn(1, 4, 9, 9))

    def forward(self, x):
        size = (x.shape[2] // 14, x.shape[3] // 14)
        return x.mean() + F.interpolate(self.pos, size=size, mode="bicubic", antialias=True, align_corners=False)


def test_antialiased_resize_to_a_traced_size():
    """Static graph: the traced size serves; with a dynamic axis the file would be wrong elsewhere: refused."""
    x = torch.randn(1, 3, 112, 84)
    model = ResizeToInput()
    data, _ = _export(model, (x,), 11, ["x"])
    np.testing.assert_allclose(run_ort(data, {"x": x}), model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(
        ExportError, match=r"_upsample_bicubic2d_aa .*output size depends on a dynamic input size.*size="
    ):
        _export(model, (x,), 11, ["x"], dynamic_axes={"x": {2: "H"}})


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_antialiased_resize_with_dynamic_hw_is_one_line_export_error(mode, tmp_path):
    """Dynamic H/W at an explicit opset 17 (dynamo at 18 cannot go down to 17, TorchScript's form is static): the
    project's one-line ExportError naming the op, why, and the fixes; nothing written. Without an opset the export
    picks 18 (targets/needs.py ``for_defaults``), and that file holds."""
    x = torch.randn(1, 3, 16, 16)
    model = Resize(scale_factor=0.5, mode=mode)
    dims = {"x": {2: torch.export.Dim("H", min=4), 3: torch.export.Dim("W", min=4)}}
    path = tmp_path / "aa.onnx"
    with pytest.raises(ExportError) as info:
        deform_onnx.export(model, (x,), path, dynamic_shapes=dims, opset_version=17)
    text = str(info.value)
    assert "\n" not in text and not path.exists() and not list(tmp_path.iterdir())
    assert f"aten::_upsample_{mode}2d_aa" in text and "output size depends on a dynamic input size" in text
    assert "export with static H/W" in text and "opset_version=18" in text
    assert "size=" not in text  # a fixed output size would not help: the input's H/W are dynamic
    if mode == "bilinear":
        report = deform_onnx.export(model, (x,), path, dynamic_shapes=dims)
        assert report.opset == 18 and report.exporter == "dynamo" and path.is_file()
        assert report.checked_shapes[1:] == [report.checked_shapes[1], [(1, 3, 4, 4)]]  # a second size, the min


def test_aa_weights_rows_are_a_partition_of_unity():
    """Each output's weights sum to 1 (normalised as ATen does); a plant: bicubic's a=-0.5 has negative lobes."""
    w = aa_weights("bicubic", 23, 7, False, None, np.float64)
    np.testing.assert_allclose(w.sum(1), 1.0, rtol=0, atol=1e-12)
    assert (w < 0).any()


class AllTrue(torch.nn.Module):
    def forward(self, x):
        # transformers' torch_compilable_check (RT-DETRv2's deformable attention): torch.export records
        # aten._is_all_true + aten._assert_async
        torch._check_tensor_all(x > -10)
        return x * 2


def test_is_all_true_on_the_dynamo_path():
    """Without the translation torch's dynamo exporter fails ("No ONNX function found for aten._is_all_true")."""
    x = torch.randn(3, 4)
    data, report = _export(AllTrue(), (x,), 17, ["x"], dynamo=True)
    assert report.exporter == "dynamo" and report.fallback_reason is None
    np.testing.assert_allclose(run_ort(data, {"x": x}), (x * 2).numpy())


def test_only_our_value_errors_pass_through_the_dynamo_path():
    """A lowering's ValueError (raised in deform_onnx) is the user's error; one raised by torch's own
    translations (OneFormer's Swin view at 17) lets export fall back to TorchScript instead."""
    from deform_onnx.exporters.aten_detectors import emit_sdpa
    from deform_onnx.exporters.calls import _raised_here

    with pytest.raises(ValueError) as ours:
        emit_sdpa(None, None, None, None, None, False, 0.5, False, None, False)
    with pytest.raises(ValueError) as theirs:
        int("not a number")
    assert _raised_here(ours.value) and not _raised_here(theirs.value)
