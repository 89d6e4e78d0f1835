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


@pytest.mark.skipif(importlib.util.find_spec("coremltools") is None, reason="coremltools is not installed")
def test_mlpackage_precision_reaches_export_and_is_said(tmp_path, monkeypatch):
    """The CLI's --precision is export()'s precision=, and the report's precision note is printed
    (the conversion itself: tests/formats/test_edge_formats.py::test_mlpackage_precision)."""
    import deform_onnx
    from deform_onnx.exporting.api import ExportReport

    seen = {}

    def fake(model, args, path, **options):
        seen.update(options)
        return ExportReport(path=path, opset=0, method="grid_sample", exporter="torch.export", node_count=1,
                            file_size=1, export_seconds=0.0, op_types=[], format="coreml",
                            notes=[f"Core ML: computes in {options['precision']}"])  # fmt: skip

    monkeypatch.setattr(deform_onnx, "export", fake)
    (tmp_path / "warp.py").write_text(WARP)
    out = tmp_path / "warp.mlpackage"
    args = ["export", f"{tmp_path / 'warp.py'}:Warp", "-s", "x=1,2,4,5,6", "-s", "g=1,3,4,5,3", "-o", str(out)]
    result = runner.invoke(app, [*args, "--precision", "float16"])
    assert result.exit_code == 0, result.output
    assert seen["precision"] == "float16" and "computes in float16" in result.output


@pytest.mark.parametrize("output", ["m.pte", "m.onnx"])
def test_precision_is_a_core_ml_option(tmp_path, output):
    result = runner.invoke(app, ["export", "-o", str(tmp_path / output), "--precision", "float16"])
    assert result.exit_code == 2 and "--precision is a Core ML option" in result.output
    assert list(tmp_path.iterdir()) == []
