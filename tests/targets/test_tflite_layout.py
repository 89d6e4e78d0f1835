"""The tflite runner reads each input's and output's layout from onnx2tf, not from shapes alone.

onnx2tf makes every 3-D to 5-D input channels-last and leaves each output as its graph left it. A value whose
channel and spatial sizes are equal (a Conv2d's ``[1, 8, 8, 8]``, a Conv1d's ``[1, 8, 8]``) has the same shape
either way: the runner used to pick a layout by shape, fed such an input channels-first and read such an
output as the file's layout, so a right file came out 2.4 off PyTorch in LiteRT (measured here; a
``[1, 8, 8, 9]`` input ran right). The runner now feeds every 3-D to 5-D input channels-last (onnx2tf 1.29's
ops/Input.py) and reads an output channels-last where onnx2tf recorded it so (its ``onnx_output_layouts``); an
output whose shape reads both ways and that onnx2tf recorded no layout for is refused as ambiguous, never
guessed by which reading matches. One onnx2tf conversion per file; expected values are PyTorch's.
"""

from __future__ import annotations

import os

import onnx
import pytest
import torch
from onnx import helper

from deform_onnx.runtimes.deployed.check import check_runtimes

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))
NEEDS_TFLITE = pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")


class SquareConvs(torch.nn.Module):
    """A Conv2d on ``[1, 8, 8, 8]`` and a Conv1d on ``[1, 8, 8]``: C == H == W, C == L."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.conv1 = torch.nn.Conv1d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.conv2(x), self.conv1(s)


def _args() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(1, 8, 8, 8, generator=g), torch.randn(1, 8, 8, generator=g)


@pytest.fixture(scope="module")
def square_file(tmp_path_factory):
    model, args = SquareConvs().eval(), _args()
    path = tmp_path_factory.mktemp("layout") / "square.onnx"
    torch.onnx.export(model, args, path, input_names=["x", "s"], output_names=["y", "z"], dynamo=False,
                      opset_version=17)  # fmt: skip
    return path, model, args


@NEEDS_TFLITE
def test_square_inputs_and_outputs_run_right(square_file) -> None:
    path, model, args = square_file
    row = check_runtimes(path, ["tflite"], model=model, args=args, repeats=1)[0]
    assert row.error is None, row.error
    assert row.ok, row.failure
    assert [n for n, _ in row.outputs] == ["y", "z"]


@NEEDS_TFLITE
def test_a_really_transposed_output_is_refused(square_file, tmp_path) -> None:
    """Planted: the file's ``y`` is the Conv's output moved channels-last (the same shape); PyTorch's is not.
    Reading it either way until one matches would pass it."""
    path, model, args = square_file
    m = onnx.load(path)
    g = m.graph
    conv_out = "y_nchw"
    for node in g.node:
        node.output[:] = [conv_out if o == "y" else o for o in node.output]
    g.node.append(helper.make_node("Transpose", [conv_out], ["y"], perm=[0, 2, 3, 1]))
    planted = tmp_path / "transposed.onnx"
    onnx.save(m, planted)
    row = check_runtimes(planted, ["tflite"], model=model, args=args, repeats=1)[0]
    assert not row.ok
    # refused as ambiguous (onnx2tf recorded no layout for a Transpose's output) or by the comparison of 'y'
    assert (row.error and "'y'" in row.error and "channels-first and channels-last" in row.error) or (
        row.failure and "'y'" in row.failure
    ), (row.error, row.failure)
