"""Bad input to the API and the CLI: one specific line, no traceback, no file left behind.

API (``deform_onnx.export``, ``register``, ``translation_table``, ``DeformConvSpec``):
wrong-rank tensors, mismatched channels, non-integer / zero / negative stride,
dilation and padding, opsets out of range, unknown methods, a missing output
folder. Each is a ``ValueError`` (``FileNotFoundError`` for the folder) whose
message is one line naming the problem, raised on both exporters, with the
output folder left empty.

CLI (``deform-onnx export``): a model factory that fails to import, input shapes
that do not parse, a missing output folder, an unknown method, an opset out of
range, a model with a bad DeformConv2d: exit code 2, one ``error:`` line on
stderr, no traceback, no file. One case also runs the installed console script
in a subprocess (what a user's shell sees).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torchvision
from typer.testing import CliRunner

import deform_onnx
from deform_onnx.cli import app

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")


class Net(torch.nn.Module):
    """One ``DeformConv2d`` (module name ``dcn``) taking ``(x, offset[, mask])``."""

    def __init__(self, in_channels: int = 4, **kwargs):
        super().__init__()
        kwargs.setdefault("padding", 1)
        self.dcn = torchvision.ops.DeformConv2d(in_channels, 4, 3, **kwargs)

    def forward(self, x, offset, mask=None):
        return self.dcn(x, offset, mask)


X = torch.randn(1, 4, 6, 6)
OFFSET = torch.zeros(1, 18, 6, 6)
MASK = torch.ones(1, 9, 6, 6)


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text.strip(), f"not one line: {text!r}"
    return text


# -- API: tensors ------------------------------------------------------------------------------------

TENSOR_CASES = {
    "input 3-D": ((X[0], OFFSET), r"dcn \(DeformConv2d\): input must be 4-D \[N, C, H, W\], got shape \(4, 6, 6\)"),
    "offset 3-D": ((X, OFFSET[0]), r"dcn \(DeformConv2d\): offset must be 4-D"),
    "mask 5-D": ((X, OFFSET, MASK[None]), r"dcn \(DeformConv2d\): mask must be 4-D"),
    "input channels": (
        (torch.randn(1, 3, 6, 6), OFFSET),
        r"input has 3 channels but weight expects 4 per group x 1 groups",
    ),
    "offset channels": (
        (X, torch.zeros(1, 17, 6, 6)),
        r"offset has 17 channels, which is not a positive multiple of 2\*kh\*kw = 18",
    ),
    "mask channels": (
        (X, OFFSET, torch.ones(1, 8, 6, 6)),
        r"mask has 8 channels, expected offset_groups \* kh \* kw = 9",
    ),
    "offset size": (
        (X, torch.zeros(1, 18, 5, 6)),
        r"offset height 5 does not match the output height 6 of the convolution",
    ),
}


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("case", list(TENSOR_CASES))
def test_export_bad_tensors(tmp_path, case, dynamo):
    args, match = TENSOR_CASES[case]
    with pytest.raises(ValueError, match=match) as info:
        deform_onnx.export(Net(), args, tmp_path / "m.onnx", dynamo=dynamo, opset_version=17)
    _one_line(info.value)
    assert type(info.value) is ValueError  # not a private subclass
    assert list(tmp_path.iterdir()) == []


# -- API: static arguments -----------------------------------------------------------------------------

ARG_CASES = {
    "stride 1.5": ({"stride": 1.5}, r"dcn \(DeformConv2d\): stride must be an int or a pair of ints, got \(1.5, 1.5\)"),
    "stride (1, 2.0)": ({"stride": (1, 2.0)}, r"stride must be an int or a pair of ints, got \(1, 2.0\)"),
    "stride 0": ({"stride": 0}, r"stride must be >= 1, got \(0, 0\)"),
    "stride -1": ({"stride": -1}, r"stride must be >= 1, got \(-1, -1\)"),
    "dilation 0": ({"dilation": 0}, r"dilation must be >= 1, got \(0, 0\)"),
    "dilation -2": ({"dilation": (1, -2)}, r"dilation must be >= 1, got \(1, -2\)"),
    "dilation 1.5": ({"dilation": 1.5}, r"dilation must be an int or a pair of ints"),
    "padding -1": ({"padding": -1}, r"padding must be >= 0, got \(-1, -1\)"),
    "stride 3 values": ({"stride": (1, 2, 3)}, r"stride must be an int or a pair of ints, got \(1, 2, 3\)"),
}


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("case", list(ARG_CASES))
def test_export_bad_arguments(tmp_path, case, dynamo):
    """Checked before anything runs (stride 0 would crash torchvision's kernel in the TorchScript trace)."""
    kwargs, match = ARG_CASES[case]
    with pytest.raises(ValueError, match=match) as info:
        deform_onnx.export(Net(**kwargs), (X, OFFSET), tmp_path / "m.onnx", dynamo=dynamo, opset_version=17)
    _one_line(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"stride": 0}, r"stride must be >= 1, got \(0, 0\)"),
        ({"stride": (1, 1.5)}, r"stride must be an int or a pair of ints"),
        ({"dilation": -1}, r"dilation must be >= 1"),
        ({"padding": (0, -3)}, r"padding must be >= 0"),
        ({"groups": 3}, r"input channels \(4\) must be divisible by groups \(3\)"),
        ({"offset_groups": 3}, r"input channels \(4\) must be divisible by offset groups \(3\)"),
        ({"kernel": (0, 3)}, r"kernel must be >= 1 on each side"),
    ],
)
def test_spec_rejects_bad_arguments(kwargs, match):
    """The one place every entry point (symbolic, dynamo translation, lower()) takes its checks from."""
    base = dict(in_channels=4, out_channels=4, kernel=(3, 3))
    with pytest.raises(ValueError, match=match) as info:
        deform_onnx.DeformConvSpec(**{**base, **kwargs})
    _one_line(info.value)


# -- API: opset, method, output --------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"opset_version": 10, "dynamo": False},
            r"opset 10 is not supported: deformable convolution lowers at opset >= 11",
        ),
        ({"opset_version": 21, "dynamo": False}, r"opset 21 is out of the TorchScript exporter's range 11\.\.20"),
        ({"opset_version": 24, "dynamo": True}, r"opset 24 is out of range 11\.\.23 \(dynamo exporter: 14\.\.23"),
        (
            {"opset_version": 17, "method": "bilinear"},
            r"unknown method 'bilinear'; choose one of auto, native, grid_sample, gather",
        ),
        ({"opset_version": 17, "method": "native"}, r"method 'native' needs opset >= 19 but opset 17 was requested"),
        ({"opset_version": 15, "method": "grid_sample", "dynamo": False}, r"method 'grid_sample' needs opset >= 16"),
    ],
)
def test_export_bad_opset_or_method(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match) as info:
        deform_onnx.export(Net(), (X, OFFSET), tmp_path / "m.onnx", **kwargs)
    _one_line(info.value)
    assert list(tmp_path.iterdir()) == []


def test_register_and_table_reject_unknown_method():
    with pytest.raises(ValueError, match="unknown method 'fast'") as info:
        deform_onnx.register("fast")
    _one_line(info.value)
    with pytest.raises(ValueError, match="unknown method 'fast'"):
        deform_onnx.translation_table("fast")
    with pytest.raises(ValueError, match="opset 12 is below 14"):
        deform_onnx.translation_table("gather", opset=12)


def test_registered_method_too_new_for_the_opset(register, tmp_path):
    """register('native') then a TorchScript export at 17: the lowering's error, nothing written."""
    import io

    register("native")
    buf = io.BytesIO()
    with pytest.raises(Exception, match=r"method 'native' needs opset >= 19 but opset 17 was requested"):
        torch.onnx.export(Net(), (X, OFFSET), buf, dynamo=False, opset_version=17)
    assert buf.getvalue() == b""


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_export_into_missing_folder(tmp_path, dynamo):
    target = tmp_path / "no" / "such" / "m.onnx"
    with pytest.raises(FileNotFoundError, match=r"output folder .*no/such does not exist; create it first") as info:
        deform_onnx.export(Net(), (X, OFFSET), target, dynamo=dynamo, opset_version=17)
    _one_line(info.value)
    assert list(tmp_path.iterdir()) == []


# -- CLI ------------------------------------------------------------------------------------------------

runner = CliRunner()

USER_MODELS = textwrap.dedent(
    """
    import torch, torchvision

    class Net(torch.nn.Module):
        def __init__(self, stride=1):
            super().__init__()
            self.predict = torch.nn.Conv2d(3, 18, 3, padding=1, stride=max(1, abs(stride)))
            self.dcn = torchvision.ops.DeformConv2d(3, 4, 3, padding=1, stride=stride)

        def forward(self, x):
            return self.dcn(x, self.predict(x))

    def good():
        return Net()

    def stride0():
        return Net(stride=0)

    def dilation_float():
        net = Net()
        net.dcn.dilation = (1.5, 1.5)
        return net
    """
)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "user_models.py").write_text(USER_MODELS)
    (tmp_path / "broken_import.py").write_text(
        "import no_such_package_for_deform_onnx_tests\n\ndef build():\n    pass\n"
    )
    (tmp_path / "broken_syntax.py").write_text("def build(:\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('config file models.yaml not found')\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts)


CLI_CASES = {
    "import error": (["broken_import.py:build", "-s", "1,3,8,8"],
                     "cannot import 'broken_import.py': ModuleNotFoundError: No module named 'no_such_package_for_deform_onnx_tests'"),
    "syntax error": (["broken_syntax.py:build", "-s", "1,3,8,8"], "cannot import 'broken_syntax.py': SyntaxError"),
    "raises at import": (["raises.py:build", "-s", "1,3,8,8"], "cannot import 'raises.py': RuntimeError: config file models.yaml not found"),
    "dotted module missing": (["no.such.module:build", "-s", "1,3,8,8"], "cannot import 'no.such.module'"),
    "no factory name": (["user_models.py", "-s", "1,3,8,8"], "bad model 'user_models.py': give MODULE:FACTORY"),
    "shape letters": (["user_models.py:good", "-s", "1,3,a,8"], "bad input shape '1,3,a,8'"),
    "shape empty dim": (["user_models.py:good", "-s", "1,,3,8"], "bad input shape '1,,3,8'"),
    "shape negative": (["user_models.py:good", "-s", "1,3,-8,8"], "bad input shape '1,3,-8,8': every dimension must be a positive integer"),
    "shape zero": (["user_models.py:good", "-s", "0,3,8,8"], "every dimension must be a positive integer"),
    "shape float": (["user_models.py:good", "-s", "1,3,8.5,8"], "bad input shape '1,3,8.5,8'"),
    "wrong rank": (["user_models.py:good", "-s", "3,8,8"], "an input of shape 3,8,8 is rank 3, but the model's first convolution"),
    "wrong channels": (["user_models.py:good", "-s", "1,4,8,8"], "the model fails on an input of shape 1,4,8,8"),
    "stride 0": (["user_models.py:stride0", "-s", "1,3,8,8"], "dcn (DeformConv2d): stride must be >= 1, got (0, 0)"),
    "dilation 1.5": (["user_models.py:dilation_float", "-s", "1,3,8,8"], "dcn (DeformConv2d): dilation must be an int or a pair of ints"),
    "unknown method": (["user_models.py:good", "-s", "1,3,8,8", "--method", "nearest"], "unknown method 'nearest'"),
    "opset too low": (["user_models.py:good", "-s", "1,3,8,8", "--opset", "10"], "opset 10"),
    "opset too high": (["user_models.py:good", "-s", "1,3,8,8", "--opset", "30"], "opset 30"),
    "opset not a number": (["user_models.py:good", "-s", "1,3,8,8", "--opset", "seventeen"], "Invalid value for '--opset'"),
    "missing folder": (["user_models.py:good", "-s", "1,3,8,8", "--method", "gather", "-o", "no/such/m.onnx"],
                       "output folder no/such does not exist"),
    "folder under a file": (["user_models.py:good", "-s", "1,3,8,8", "-o", "user_models.py/out"],
                            "cannot create the output folder user_models.py/out"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_user_errors(user_dir, case):
    args, message = CLI_CASES[case]
    before = _files(user_dir)
    if "-o" not in args:
        args = [*args, "-o", "out"]
    result = runner.invoke(app, ["export", *args, "--repeat", "1"])
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 or case == "opset not a number", result.stderr  # click's usage error is a short block
    assert message in " ".join(result.stderr.split()), result.stderr
    assert _files(user_dir) == before, "a file or folder was left behind"


def test_console_script_error_has_no_traceback(user_dir):
    """The installed ``deform-onnx`` script, as a shell runs it: exit 2, one line, nothing written."""
    script = Path(sys.executable).with_name("deform-onnx")
    assert script.exists(), script
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.run(
        [str(script), "export", "user_models.py:stride0", "-s", "1,3,8,8", "-o", "out"],
        capture_output=True, text=True, env=env, timeout=300, cwd=user_dir,
    )  # fmt: skip
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr.strip() == "error: dcn (DeformConv2d): stride must be >= 1, got (0, 0)", proc.stderr
    assert "Traceback" not in proc.stdout
    assert not (user_dir / "out").exists()


class _MixedDtypes(torch.nn.Module):
    """TOOD's ``deform_sampling`` after ``.float()`` (mmdet's ``reg_dist ... .float()``): cast to float16 the
    module feeds ``deform_conv2d`` a float32 map and float16 offsets, which PyTorch itself refuses."""

    def __init__(self):
        super().__init__()
        self.offset = torch.nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x):
        feat = x.float()
        return torchvision.ops.deform_conv2d(feat, self.offset(x), feat.new_ones(4, 1, 1, 1))


def test_a_model_that_fails_in_pytorch_itself_is_named_so(tmp_path):
    """Both exporters fail on a model that does not run eagerly: the one-line error says the model fails first."""
    model, x = _MixedDtypes().half().eval(), torch.randn(1, 4, 6, 6).half()
    with pytest.raises(deform_onnx.ExportError, match=r"^the model fails in PyTorch itself on these inputs \("):
        deform_onnx.export(model, (x,), tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()
