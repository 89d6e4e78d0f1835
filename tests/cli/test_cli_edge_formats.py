"""``deform-onnx export -o model.pte / .tflite / .mlpackage``: one export to that format, run in its runtime."""

from __future__ import annotations

import importlib.util
import textwrap

import pytest
from typer.testing import CliRunner

from deform_onnx.cli import app

runner = CliRunner()
WARP = textwrap.dedent(
    """
    import torch, torch.nn.functional as F

    class Warp(torch.nn.Module):
        def forward(self, x, g):
            return F.grid_sample(x, g, align_corners=False, padding_mode="border")
    """
)


@pytest.mark.skipif(importlib.util.find_spec("litert_torch") is None, reason="litert-torch is not installed")
def test_tflite_row_for_a_5d_warp(tmp_path):
    (tmp_path / "warp.py").write_text(WARP)
    out = tmp_path / "warp.tflite"
    args = ["export", f"{tmp_path / 'warp.py'}:Warp", "-s", "x=1,2,4,5,6", "-s", "g=1,3,4,5,3", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert out.is_file() and "LiteRT" in result.output and "cpuinfo" not in result.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--opset", "17"], "--opset is an ONNX option"),
        (["--target", "ort"], "--target is an ONNX option"),
        (["--method", "native"], "--method native keeps torchvision::deform_conv2d"),
    ],
)
def test_onnx_options_are_user_errors(tmp_path, extra, message):
    result = runner.invoke(app, ["export", "-o", str(tmp_path / "m.pte"), *extra])
    assert result.exit_code == 2 and message in result.output
    assert list(tmp_path.iterdir()) == []


def test_dynamic_tflite_is_a_user_error(tmp_path):
    result = runner.invoke(app, ["export", "-o", str(tmp_path / "m.tflite"), "--dynamic"])
    assert result.exit_code == 2 and "written at the example's size" in result.output
