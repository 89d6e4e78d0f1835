"""``deform-onnx export``: the main job, a user's model factory, and user errors.

The main job runs once (conftest's session fixture ``main_job``, shared with test_example.py). Numbers the command prints are checked
against an independent run of the written files in ONNX Runtime vs PyTorch.
"""

from __future__ import annotations

import re
import textwrap

import onnxruntime as ort
import pytest
import torch
from typer.testing import CliRunner

from deform_onnx.cli import app
from deform_onnx.cli._common import load_factory
from deform_onnx.cli.example import example_model, load_photo
from deform_onnx.cli.export_cmd import DEFAULT_PLAN
from util import ATOL, assert_close, run_ort

runner = CliRunner()

#: A user's model file: a deformable convolution whose offsets come from the input.
USER_MODULE = textwrap.dedent(
    """
    import torch, torchvision

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            gen = torch.Generator().manual_seed(0)
            self.predict = torch.nn.Conv2d(3, 27, 3, padding=1)
            self.dcn = torchvision.ops.DeformConv2d(3, 8, 3, padding=1)
            with torch.no_grad():
                self.predict.weight.copy_(torch.randn(self.predict.weight.shape, generator=gen))
                self.predict.bias.copy_(torch.randn(self.predict.bias.shape, generator=gen))
                self.dcn.weight.copy_(torch.randn(self.dcn.weight.shape, generator=gen) / 5)
                self.dcn.bias.copy_(torch.randn(self.dcn.bias.shape, generator=gen))

        def forward(self, x):
            p = self.predict(x)
            return self.dcn(x, p[:, :18], torch.sigmoid(p[:, 18:]))

    class Warp(torch.nn.Module):
        # A flow warp whose base grid is built from sizes read as Python ints (a common real-code pattern).

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.flow = torch.nn.Conv2d(3, 2, 3, padding=1)

        def forward(self, x):
            h, w = int(x.shape[2]), int(x.shape[3])
            gy, gx = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
            grid = torch.stack((gx, gy), -1).unsqueeze(0).expand(x.shape[0], -1, -1, -1)
            return torch.nn.functional.grid_sample(x, grid + 0.05 * self.flow(x).permute(0, 2, 3, 1))

    def build():
        return Net()

    def warp():
        return Warp()

    def broken():
        raise RuntimeError("weights not found")
    """
)


def invoke(*args: str):
    return runner.invoke(app, ["export", *args])


def _rows(stdout: str) -> dict[str, list[str]]:
    """Table rows by method: the cells between the box-drawing separators."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]
        if cells and cells[0] in ("grid_sample", "gather", "native"):
            rows[cells[0]] = cells
    return rows


def test_main_job_exits_0_and_prints_the_table(main_job):
    result, out = main_job
    assert result.exit_code == 0, result.stdout + result.stderr
    rows = _rows(result.stdout)
    assert set(rows) == {m for m, _ in DEFAULT_PLAN}
    header = next(line for line in result.stdout.splitlines() if "method" in line)
    for column in ("opset", "exporter", "nodes", "file size", "max abs error", "ORT ms", "PyTorch ms"):
        assert column in header
    for method, opset in DEFAULT_PLAN:
        method_cell, opset_cell, exporter, nodes, size, error, ort_ms, torch_ms, ok = rows[method]
        assert int(opset_cell) == opset
        assert exporter == ("dynamo" if opset >= 14 else "torchscript")
        assert int(nodes) > 0 and size.endswith("KiB")
        assert float(error) <= ATOL
        assert float(ort_ms) > 0 and float(torch_ms) > 0
        assert ok == "yes"
    assert "mean |offset|" in result.stdout


def test_readme_shows_the_main_job_as_it_prints(main_job):
    """README's expected output (issue 21: it said 229 / 1386 nodes): the same rows, exporters and node counts."""
    from pathlib import Path

    result, _ = main_job
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    shown = readme[readme.index("What the main job prints") :]
    shown = shown[shown.index("```") + 3 :].split("```", 1)[0]
    want, got = _rows(shown), _rows(result.stdout)
    assert set(want) == set(got), (want, got)
    for method, cells in got.items():
        assert want[method][:4] == cells[:4], (method, want[method], cells)  # method, opset, exporter, nodes
        assert want[method][-1] == cells[-1]  # ok
    assert "checked in ONNX Runtime:" in shown


def test_main_job_files_match_pytorch(main_job):
    result, out = main_job
    assert result.exit_code == 0
    model, photo = example_model(), load_photo()
    with torch.no_grad():
        want = model(photo).numpy()
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"example_{m}_op{o}.onnx" for m, o in DEFAULT_PLAN)
    for method, opset in DEFAULT_PLAN:
        data = (out / f"example_{method}_op{opset}.onnx").read_bytes()
        assert_close(run_ort(data, {"input": photo}), want, what=f"cli {method}@{opset}")


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "user_models.py").write_text(USER_MODULE)
    return tmp_path


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_user_factory_dynamic(user_module, exporter):
    """MODULE:FACTORY with --input-shape and --dynamic: one file, dynamic N/H/W, matching at a new size."""
    path = user_module / "net.onnx"
    result = invoke(
        "user_models.py:build", "--input-shape", "1,3,12,10", "--method", "gather", "--opset", "16",
        "--exporter", exporter, "--dynamic", "-o", str(path), "--repeat", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.stdout + result.stderr
    assert _rows(result.stdout)["gather"][2] == exporter
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    dims = session.get_inputs()[0].shape
    assert isinstance(dims[0], str) and isinstance(dims[2], str) and isinstance(dims[3], str), dims
    net = load_factory("user_models.py:build")().eval()
    x = torch.randn(3, 3, 17, 9, generator=torch.Generator().manual_seed(1)) * 2
    with torch.no_grad():
        want = net(x).numpy()
    assert_close(run_ort(path.read_bytes(), {"input": x}), want, what=f"user model via {exporter}")


def test_dynamic_flag_exports_what_the_api_exports(user_module):
    """--dynamic on the dynamo path gives export() the same dynamic axes as a Python user's ``dynamic_axes``:
    a warp whose sizes pass through ``int()`` into ``linspace`` (kept symbolic by export's rewrites) is
    written and right at a new size (strict ``Dim``s refused it, with a hint to use dynamo, which it was)."""
    path = user_module / "warp.onnx"
    result = invoke("user_models.py:warp", "-s", "1,3,16,20", "-m", "grid_sample", "--dynamic", "-o", str(path))
    assert result.exit_code == 0, result.stdout + result.stderr
    assert _rows(result.stdout)["grid_sample"][2] == "dynamo"
    net = load_factory("user_models.py:warp")().eval()
    x = torch.randn(2, 3, 24, 12, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = net(x).numpy()
    assert_close(run_ort(path.read_bytes(), {"input": x}), want, what="dynamic warp at 2x3x24x12")


@pytest.mark.parametrize(
    "args, message",
    [
        (["no_such_module:build", "-s", "1,3,8,8"], "cannot import 'no_such_module'"),
        (["user_models.py:nope", "-s", "1,3,8,8"], "has no attribute 'nope'"),
        (["user_models.py:broken", "-s", "1,3,8,8"], "weights not found"),
        (["user_models.py:build", "-s", "1,3,eight,8"], "bad input shape"),
        (["user_models.py:build"], "--input-shape"),
        (["user_models.py:build", "-s", "1,5,8,8"], "fails on an input of shape 1,5,8,8"),
        (["user_models.py:build", "-s", "1,3,8,8", "--method", "bilinear"], "unknown method 'bilinear'"),
        (["user_models.py:build", "-s", "1,3,8,8", "--opset", "9"], "opset 9"),
        (["user_models.py:build", "-s", "1,3,8,8", "--opset", "99"], "opset 99"),
        (["user_models.py:build", "-s", "1,3,8,8", "--method", "native", "--opset", "17"], "needs opset >= 19"),
        (["user_models.py:build", "-s", "1,3,8,8", "--opset", "12", "--exporter", "dynamo"], "dynamo exporter's range"),
        (["user_models.py:build", "-s", "1,3,8,8", "--exporter", "onnxscript"], "unknown exporter"),
        (
            ["user_models.py:build", "-s", "1,3,8,8", "--opset", "13", "--exporter", "dynamo", "--dynamic"],
            "range 14..23 with --dynamic",
        ),
        (["user_models.py:build", "-s", "1,3,8,8", "--method", "gather", "-o", "missing/m.onnx"], "does not exist"),
        (["user_models.py:build", "-s", "1,3,8,8", "-o", "three.onnx"], "3 exports are planned"),
        (["-s", "1,1,64,64"], "the example takes one image input N,3,H,W"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_user_errors_exit_2_with_one_line_and_no_file(user_module, args, message):
    before = sorted(p.name for p in user_module.rglob("*") if "__pycache__" not in p.parts)
    result = invoke(*args, *([] if "-o" in args else ["-o", "out"]))
    assert result.exit_code == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.stdout + result.stderr
    after = sorted(p.name for p in user_module.rglob("*") if "__pycache__" not in p.parts)
    assert after == before  # no output folder, no file


def test_error_above_tolerance_exits_1_and_writes_nothing(user_module, monkeypatch):
    """A check that fails (here: export()'s rules made exact, which float32 rounding exceeds) gives exit code 1,
    row NO, no file: the CLI checks with export()'s rules, so tightening them there fails the row."""
    from deform_onnx.exporting import verification
    from deform_onnx.proof import compare

    monkeypatch.setitem(compare.DEFAULT_TOLERANCES, "float32", (0.0, 0.0))
    monkeypatch.setattr(verification, "FLOAT64_FACTOR", 0.0)
    path = user_module / "net.onnx"
    result = invoke("user_models.py:build", "-s", "1,3,12,10", "--method", "gather", "--opset", "11", "-o", str(path))
    assert result.exit_code == 1, result.stdout + result.stderr
    assert _rows(result.stdout)["gather"][-1] == "NO"
    assert "differs from PyTorch" in result.stderr
    assert not path.exists()


def test_cli_checks_with_exports_rules(tmp_path):
    """The CLI writes what deform_onnx.export writes: ASTER's TPS rectifier (tests/real_code/aster_tps_style.py) is
    ill-conditioned in float32 (PyTorch float32 itself is off its float64 run by more than 1e-4 on this photo), and
    export()'s float64 rule passes the file; the CLI once held it to its own flat 1e-4 and refused it."""
    from pathlib import Path

    model = Path(__file__).resolve().parents[1] / "real_code" / "aster_tps_style.py"
    out = tmp_path / "aster.onnx"
    result = invoke(f"{model}:Rectifier", "-s", "1,3,64,256", "-m", "grid_sample", "--opset", "17", "--repeat", "1",
                    "-o", str(out))  # fmt: skip
    assert result.exit_code == 0, result.stdout + result.stderr
    assert _rows(result.stdout)["grid_sample"][-1] == "yes"
    assert "float64" in result.stdout and out.exists()


def test_dynamo_failure_retries_with_torchscript_unless_exporter_given(user_module, monkeypatch):
    """Without --exporter a row whose dynamo export fails (e.g. a down-conversion onnx lacks) uses TorchScript."""
    from deform_onnx.exporting import api

    real_export = api.export

    def dynamo_fails(*args, dynamo=True, **kwargs):
        if dynamo:
            raise api.ExportError("the exporter produced opset 18, not the requested 16")
        return real_export(*args, dynamo=dynamo, **kwargs)

    monkeypatch.setattr(api, "export", dynamo_fails)
    args = ["user_models.py:build", "-s", "1,3,12,10", "--method", "gather", "--opset", "16", "--repeat", "1"]
    result = invoke(*args, "-o", "auto")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert _rows(result.stdout)["gather"][2] == "torchscript (fallback)"
    assert "the dynamo exporter failed" in result.stderr
    result = invoke(*args, "--exporter", "dynamo", "-o", "forced")
    assert result.exit_code == 1
    assert "produced opset 18" in result.stderr
    assert list((user_module / "forced").iterdir()) == []
