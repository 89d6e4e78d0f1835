"""A model undefined at its example (PyTorch NaN, in float64 too) is refused, not reported as matching with error 0.

RAFT's correlation lookup (``tests/real_code/raft_style.py``: ``bilinear_sampler`` normalises by ``W - 1``) on a
2x2 feature map: the second pyramid level is 1x1, PyTorch divides by 0 and returns NaN for that level's taps,
in float32, float64 and float16 alike, while the file returns numbers. The float64 rule (and the float32 copy of
a float16 model) compared only the reference's finite elements, so such a file passed with ``max_error`` 0 over
nothing: RAFT exported with ``torch.export.Dim`` bounds whose lower bound was 16x16 (a 1x1 level) was written.
The same lookup on 4x4 maps, where every level is defined, exports and matches.
"""

from __future__ import annotations

import io

import pytest
import torch

import deform_onnx
from deform_onnx.core.errors import ExportError, UndefinedReferenceError
from real_code.raft_style import CorrBlock, bilinear_sampler, coords_grid

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::UserWarning")


class Lookup(torch.nn.Module):
    """RAFT's two-level, radius-1 correlation lookup at the identity flow plus ``flow``."""

    def forward(self, fmap1, fmap2, flow):
        n, _, h, w = fmap1.shape
        return CorrBlock(fmap1, fmap2, num_levels=2, radius=1)(coords_grid(n, h, w, fmap1.device) + flow)


def _args(size: int, dtype=torch.float32):
    torch.manual_seed(0)
    return tuple(torch.randn(shape, dtype=dtype) for shape in [(1, 4, size, size)] * 2 + [(1, 2, size, size)])


def _export(args, **kwargs):
    return deform_onnx.export(Lookup(), args, io.BytesIO(), dynamo=False, opset_version=16, **kwargs)


def test_nan_in_pytorch_where_the_file_has_numbers_is_refused():
    args = _args(2)
    with torch.no_grad():
        want, want64 = Lookup()(*args), Lookup().double()(*[a.double() for a in args])
    assert want[:, 9:].isnan().all() and want64[:, 9:].isnan().all() and not want[:, :9].isnan().any()
    with pytest.raises(
        UndefinedReferenceError, match=r"in float64 too, at 36 of 72 elements where the file gives other"
    ):
        _export(args)


class Sampler(torch.nn.Module):
    def forward(self, img, coords):
        return bilinear_sampler(img, coords)


def test_a_float16_model_nan_in_its_float32_copy_is_refused():
    """The float32 copy is the float16 file's reference: its NaN elements were not compared either."""
    torch.manual_seed(0)
    args = (torch.randn(1, 2, 3, 1).half(), (torch.rand(1, 2, 2, 2) * 2).half())  # an image of width 1
    with pytest.raises(UndefinedReferenceError, match=r"float32 model gives NaN/Inf at 8 of 8 elements"):
        deform_onnx.export(Sampler(), args, io.BytesIO(), dynamo=False, opset_version=16)


def test_defined_sizes_export_and_match():
    report = _export(_args(4))
    assert report.max_error <= 1e-4 and next(iter(report.checks.values())).reference == "pytorch"


def test_a_dynamic_bound_where_the_model_is_undefined_says_so():
    """Not 'frozen sizes' advice: the file is fine, the size (an image of width 1) is outside the model's domain."""
    torch.manual_seed(0)
    args = (torch.randn(1, 2, 3, 4), torch.rand(1, 2, 2, 2) * 2)
    with pytest.raises(ExportError) as info:
        deform_onnx.export(Sampler(), args, io.BytesIO(), dynamo=False, opset_version=16, input_names=["img", "coords"],
                           dynamic_axes={"img": {3: "W"}}, verify_shapes=[[(1, 2, 3, 1), (1, 2, 2, 2)]])  # fmt: skip
    text = str(info.value)
    assert "cannot be checked at the second size 1,2,3,1" in text and "Dim(min=" in text
    assert "frozen" not in text
