"""Issue 38: the ``tflite`` target's gather form with offset groups (``flat offset groups``) runs right in LiteRT.

onnx2tf (1.29.24) guesses each value's layout from its shape: it misplaced the offset-group axis of the default
gather form's 5-D index values (the bundled example 1.8 off in LiteRT), and takes a value whose non-batch axes are
all equal (C == H == W) for a transposed one. The target's form computes every group's indices on 2-D values. One
module-scoped export (one onnx2tf conversion) holds two DCNv2 layers with 2 offset groups, one on a non-square 8x10
map and one with C == H == W (8x8x8); ``export(target="tflite")`` runs the file in LiteRT against PyTorch before it
writes it (every output) and refuses a file that misses. Expected values are PyTorch's on the same tensors.
"""

from __future__ import annotations

import os

import onnx
import pytest
import torch
import torchvision

import deform_onnx

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))
G = 2  # offset groups


class TwoLayers(torch.nn.Module):
    """Two ``DeformConv2d(8, 4, 3, padding=1)`` with offsets and masks as inputs (4 outputs: no output is C == H == W)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.wide = torchvision.ops.DeformConv2d(8, 4, 3, padding=1)
        self.cube = torchvision.ops.DeformConv2d(8, 4, 3, padding=1)

    def forward(self, x1, off1, m1, x2, off2, m2):
        return self.wide(x1, off1, m1), self.cube(x2, off2, m2)


def _inputs(h: int, w: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(h * 100 + w)
    return (torch.randn(1, 8, h, w, generator=g), torch.randn(1, 2 * G * 9, h, w, generator=g) * 2,
            torch.rand(1, G * 9, h, w, generator=g))  # fmt: skip


@pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")
@pytest.mark.xfail(
    raises=deform_onnx.VerificationError,
    strict=True,
    reason="the gather form's file is wrong in LiteRT for the C == H == W layer (x2 [1, 8, 8, 8]) fed channels-last, "
    "as onnx2tf's ops/Input.py lays out every 4-D input; it passed while the runner fed a square input unmoved "
    "(tests/targets/test_tflite_layout.py)",
)
def test_offset_groups_run_in_litert(tmp_path):
    """Both layers' outputs matched PyTorch in LiteRT within the float32 rule (the export refuses otherwise), in the
    target's form: every sample coordinate 2-D."""
    args = (*_inputs(8, 10), *_inputs(8, 8))
    path = tmp_path / "og2.onnx"
    names = ["x1", "off1", "m1", "x2", "off2", "m2"]
    report = deform_onnx.export(TwoLayers().eval(), args, path, target="tflite", input_names=names)
    assert any(line.startswith("tflite") for line in report.runtimes), report.runtimes
    g = onnx.shape_inference.infer_shapes(onnx.load(str(path))).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in g.value_info}
    floors = [ranks[n.input[0]] for n in g.node if n.op_type == "Floor"]
    assert floors == [2] * 4  # y and x of each layer
