"""``deform-onnx export -o model.pte / .tflite / .mlpackage``: one export to that format, run in its runtime.

The dynamic ``.pte`` (``--dynamic``: H and W each from half to twice the example's) is a one-tap DCN layer (1x1
kernel: the lowering's reshapes are per tap, and a ninth of the graph lowers faster) whose plain 3x3 offset
convolution's input crosses PyTorch's fake-convolution kernel test (``N*C*H*W > 20480``,
:mod:`deform_onnx.formats.plan_bounds`) between the example (1x16x32x32) and the upper bound (1x16x64x64): before
the memory plan was sized from the declared range, it held H up to 40 and the CLI's ``--dynamic`` (then H only)
refused its own upper bound. H and W both dynamic were refused by XNNPACK before the lowerings reshaped with one
dynamic dimension (executorch 1.5.1: "XNNPACK reshape only supports 1 dynamic dimension").
"""

from __future__ import annotations

import importlib.util
import textwrap

import numpy as np
import pytest
import torch
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

DCN = textwrap.dedent(
    """
    import torch, torchvision

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.offsets = torch.nn.Conv2d(16, 2, 3, padding=1)
            self.dcn = torchvision.ops.DeformConv2d(16, 4, 1)

        def forward(self, x):
            return self.dcn(x, self.offsets(x) * 4)
    """
)
needs_executorch = pytest.mark.skipif(
    importlib.util.find_spec("executorch") is None, reason="executorch is not installed"
)


@pytest.fixture(scope="module")
def dynamic_pte(tmp_path_factory):
    """``export dcn.py:Net -s 1,16,32,32 --dynamic -o m.pte`` (H, W 16..64): the CLI's result, the file, the model."""
    import importlib.machinery

    root = tmp_path_factory.mktemp("dynamic_pte")
    (root / "dcn.py").write_text(DCN)
    out = root / "m.pte"
    result = runner.invoke(app, ["export", f"{root / 'dcn.py'}:Net", "-s", "1,16,32,32", "--dynamic", "-o", str(out)])
    module = importlib.machinery.SourceFileLoader("dynamic_pte_dcn", str(root / "dcn.py")).load_module()
    return result, out, module.Net().eval()


@needs_executorch
def test_dynamic_pte_is_written_and_checked_at_both_bounds(dynamic_pte):
    result, out, _ = dynamic_pte
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the note as one line (the console wraps it)
    assert out.is_file() and "ExecuTorch" in text
    # checked at a non-square second size inside the range (the full step, 96x0, is outside it) and at both
    # bounds (half and twice the example's H and W) before it was written
    checked = text.split("checked in ExecuTorch (XNNPACK) at the example's size and at:")[1].split("note:")[0]
    assert "second size 1,16,64,16" in checked, checked
    assert "lower bound 1,16,16,16" in checked and "upper bound 1,16,64,64" in checked, checked


@needs_executorch
@pytest.mark.parametrize(("H", "W"), [(16, 64), (64, 16)])
def test_dynamic_pte_runs_at_its_bounds_in_executorch(dynamic_pte, H, W):
    """The written file, loaded again in ExecuTorch's runtime: its plan holds the bound and it matches PyTorch."""
    from executorch.runtime import Runtime

    _, out, model = dynamic_pte
    program = Runtime.get().load_program(out.read_bytes())
    method = program.load_method("forward")
    assert list(method.metadata.input_tensor_meta(0).sizes()) == [1, 16, 64, 64]
    x = torch.randn(1, 16, H, W, generator=torch.Generator().manual_seed(H))
    with torch.no_grad():
        want = model(x).numpy()
    (got,) = method.execute([x])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


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


NHWC = textwrap.dedent(
    """
    import torch

    class Tokens(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)

        def forward(self, x):
            return self.proj(x)
    """
)


@needs_executorch
def test_dynamic_pte_of_a_channels_last_input_names_the_layout(tmp_path):
    """``--dynamic`` makes the last two dimensions dynamic; on a channels-last input (InternImage's DCNv3 layer,
    ``[N, H, W, C]``) that is C, and the model fails at the lower bound in PyTorch before any export: the error
    says which dimensions --dynamic took and what to do instead. Nothing is written."""
    (tmp_path / "nhwc.py").write_text(NHWC)
    out = tmp_path / "m.pte"
    result = runner.invoke(
        app, ["export", f"{tmp_path / 'nhwc.py'}:Tokens", "-s", "1,4,6,4", "--dynamic", "-o", str(out)]
    )
    assert result.exit_code == 1, result.output
    assert "at its declared lower bound" in result.output and "channels-last" in result.output, result.output
    assert not out.exists()


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


@pytest.mark.parametrize("output", ["m.pte", "m.xml"])
def test_dtype_casts_the_model_too(tmp_path, monkeypatch, output):
    """``--dtype float16 -o m.pte`` cast the inputs but not the model: "the model fails on an input of shape ...:
    Input type (torch.HalfTensor) and weight type (torch.FloatTensor) should be the same" (exit 2; PP-OCR's
    DCN backbone in the new-user trial). export() gets a float16 model and float16 inputs, as for ``-o m.onnx``."""
    import deform_onnx
    from deform_onnx.exporting.api import ExportReport

    if output.endswith(".xml"):
        pytest.importorskip("openvino")
    seen = {}

    def fake(model, args, path, **options):
        seen["model"] = {p.dtype for p in model.parameters()}
        seen["inputs"] = {a.dtype for a in args}
        return ExportReport(path=path, opset=0, method="gather", exporter="torch.export", node_count=1,
                            file_size=1, export_seconds=0.0, op_types=[], format="executorch")  # fmt: skip

    monkeypatch.setattr(deform_onnx, "export", fake)
    (tmp_path / "dcn.py").write_text(DCN)
    model = f"{tmp_path / 'dcn.py'}:Net"
    result = runner.invoke(app, ["export", model, "-s", "1,16,8,8", "--dtype", "float16", "-o", str(tmp_path / output)])
    assert result.exit_code == 0, result.output
    assert seen == {"model": {torch.float16}, "inputs": {torch.float16}}
