"""The deployed runtime families' own paths: the CLI, export(verify_runtimes=...), failures in one line.

Each family converting and running a healthy file and refusing planted faults, every output compared, is
tests/proof/test_planted_faults.py; the file each family's target gets is exported once per test run
(conftest's ``family_files``), and this file reads that export's report and kept files. It keeps what only
the families' plumbing shows, with as few conversions as that takes: the venvs are created on first use from the
package registry (:func:`deform_onnx.runtimes.venvs.cached_venv`; ``$DEFORM_ONNX_VENVS``); times from an
empty cache are in README.md. Set ``DEFORM_ONNX_NO_DEPLOYED_RUNTIMES=1`` to skip the tests that need the
registry on a machine without it.

The planted fault: GridSample ``reflection`` on MNN 3.6.1 (2.1 off, measured here; the ``mnn`` target refuses
it, so the file is written for the generic target) must fail ``deform-onnx check --runtime mnn`` with exit
code 1 and say by how much; as the second output of a model exported with ``verify_runtimes=["mnn"]`` (the
case issue 35 found written and reported fine), nothing is written and the message names that output.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision
from typer.testing import CliRunner

import deform_onnx
from deform_onnx.cli import app
from deform_onnx.runtimes import deployed
from deform_onnx.runtimes.deployed import Family, family, interpreter, register_family, runners
from deform_onnx.runtimes.sealed import run_env

needs_registry = pytest.mark.skipif(
    os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES") == "1", reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES=1"
)


class TinyDCN(torch.nn.Module):
    """DCNv2: offsets and mask from 3x3 convolutions of the input."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.off = torch.nn.Conv2d(4, 18, 3, padding=1)
        self.msk = torch.nn.Conv2d(4, 9, 3, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(4, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dcn(x, self.off(x), torch.sigmoid(self.msk(x)))


class Reflect(torch.nn.Module):
    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)


def _tiny(tmp_path: Path, target: str | None, **kw) -> tuple[Path, torch.nn.Module, torch.Tensor]:
    """TinyDCN's file for ``target``; ``kw`` goes to export (default ``verify_runtimes=()``: the target's runtime
    does not run it during export unless a test asks)."""
    model, x = TinyDCN().eval(), torch.randn(1, 4, 16, 16, generator=torch.Generator().manual_seed(1))
    path = tmp_path / f"dcn_{target or 'generic'}.onnx"
    kw.setdefault("verify_runtimes", ())
    deform_onnx.export(model, (x,), path, input_names=["x"], output_names=["y"], target=target, **kw)
    return path, model, x


@needs_registry
@pytest.mark.slow
@pytest.mark.parametrize("name", ["mnn", "ncnn", "tflite", "tvm", "onnx2torch", "openvino"])
def test_family_runs_its_target_file(family_files, name: str) -> None:
    """export(target=name) runs the file in that family before writing it (issue 35 item 6; the report says where
    and the converter's files are kept). The file is conftest's ``family_files`` one, shared with
    tests/proof/test_planted_faults.py, which converts it (planted) once more, runs it and compares every output
    with PyTorch's."""
    files = family_files.get(name)
    report = files.report
    assert report.runtimes and report.runtimes[0].startswith(f"{name} "), report.runtimes
    assert any(n.startswith(f"the file ran in {name} ") for n in report.notes), report.notes
    wanted = {
        "mnn": {".mnn"},
        "ncnn": {".ncnn.param", ".ncnn.bin"},
        "tflite": {".tflite"},
        "openvino": {".xml", ".bin"},
    }
    assert {p.name.removeprefix(files.healthy.stem) for p in files.kept.iterdir()} == wanted.get(name, set())
    assert all(p.stat().st_size > 0 for p in files.kept.iterdir())
    if name == "tvm":  # built for this CPU (not plain "llvm"), every kernel scheduled (issue 38)
        version = report.runtimes[0]
        assert f"llvm -mcpu={_tvm_host_cpu()}, " in version, version
        scheduled, kernels = re.search(r"(\d+)/(\d+) kernels scheduled", version).groups()  # type: ignore[union-attr]
        assert scheduled == kernels != "0", version


def _tvm_host_cpu() -> str:
    """The CPU LLVM names for this machine, as TVM reads it (in the tvm venv)."""
    python = interpreter(family("tvm"))
    code = "import tvm; print(tvm.target.Target.from_device(tvm.cpu()).attrs['mcpu'])"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=run_env(python), check=True)
    return done.stdout.strip().splitlines()[-1]


@needs_registry
@pytest.mark.slow
def test_planted_fault_reflection_on_mnn_fails_check(tmp_path: Path) -> None:
    """GridSample reflection forced onto MNN: its row names the output and says by how much, exit code 1, nothing
    kept; TVM's matches."""
    x = torch.randn(1, 2, 8, 8, generator=torch.Generator().manual_seed(0))
    grid = torch.rand(1, 6, 6, 2, generator=torch.Generator().manual_seed(1)) * 3 - 1.5
    path = tmp_path / "reflect.onnx"
    deform_onnx.export(Reflect(), (x, grid), path, input_names=["x", "grid"], output_names=["y"])
    kept = tmp_path / "kept"
    kept.mkdir()
    result = CliRunner().invoke(app, ["check", str(path), "--runtime", "mnn,tvm", "--keep-artifacts", str(kept)])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "check failed: 1 of 2 runtimes: mnn (3.6.1): output 'y' misses the reference at" in text, text
    err = float(text.split("(max abs error ")[1].split(";")[0])
    assert err > 1.0  # measured 2.1
    assert list(kept.iterdir()) == []  # MNN's .mnn is not kept: it did not match


@needs_registry
@pytest.mark.slow
def test_load_failure_is_one_line_and_keeps_nothing(tmp_path: Path) -> None:
    """The generic file on ncnn: pnnx leaves a torch.eq layer ncnn cannot load; one line, exit 1, no artifact."""
    path, _, _ = _tiny(tmp_path, None)
    kept = tmp_path / "kept"
    kept.mkdir()
    result = CliRunner().invoke(app, ["check", str(path), "--runtime", "ncnn", "--keep-artifacts", str(kept)])
    assert result.exit_code == 1, result.output
    assert "ncnn could not load the pnnx output" in " ".join(result.output.split())
    assert list(kept.iterdir()) == []


def test_unknown_runtime_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    path.write_bytes(b"")
    result = CliRunner().invoke(app, ["check", str(path), "--runtime", "coreml"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "unknown runtime 'coreml'; choose from" in lines[0], result.output
    assert "mnn" in lines[0] and "tflite" in lines[0] and "onnx2torch" in lines[0]
    with pytest.raises(ValueError, match="unknown runtime 'coreml'; choose from"):
        deform_onnx.check_runtimes(path, ["coreml"])


def test_aliases() -> None:
    assert family("ORT").name == "onnxruntime"
    assert family("litert").name == "tflite" and family("pnnx").name == "ncnn" and family("ov").name == "openvino"


def test_no_registry_is_one_line(family_files, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A venv pip cannot fill (no index: as without registry access) is one line in the row, not a traceback."""
    path = family_files.get("onnxruntime").healthy  # any file: the row ends before its conversion
    monkeypatch.setenv("DEFORM_ONNX_VENVS", str(tmp_path / "venvs"))
    fam = register_family(Family("offline-test", "offline", runners.MNN, "offline", ("MNN==3.6.1",),
                                 options=("--no-index", "--find-links", str(tmp_path))))  # fmt: skip
    lines: list[str] = []
    try:
        rows = deform_onnx.check_runtimes(path, ["offline-test"], log=lines.append)
    finally:
        deployed.FAMILIES.pop(fam.name)
    assert rows[0].error is not None and "\n" not in rows[0].error and "could not create" in rows[0].error
    assert lines[0].startswith("creating the offline venv")


class ConvReflect(torch.nn.Module):
    """Two outputs: a convolution (MNN right) and GridSample reflection (MNN 2.1 off)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x: torch.Tensor, grid: torch.Tensor):
        return self.conv(x), Reflect()(x, grid)


@needs_registry
@pytest.mark.slow
def test_export_verify_runtimes(tmp_path: Path) -> None:
    """export(verify_runtimes=["mnn"]) of (conv, reflection): refused naming the second output; nothing written."""
    x = torch.randn(1, 2, 8, 8, generator=torch.Generator().manual_seed(0))
    grid = torch.rand(1, 6, 6, 2, generator=torch.Generator().manual_seed(1)) * 3 - 1.5
    kept = tmp_path / "kept"
    kept.mkdir()
    bad = tmp_path / "reflect.onnx"
    with pytest.raises(deform_onnx.VerificationError) as refused:
        deform_onnx.export(ConvReflect(), (x, grid), bad, output_names=["conv", "reflect"], verify_runtimes=["mnn"],
                           keep_artifacts=kept)  # fmt: skip
    message = str(refused.value)
    assert "mnn (3.6.1): output 'reflect' misses the reference" in message, message
    assert "output 'conv'" not in message  # the first output matched
    assert not bad.exists() and list(kept.iterdir()) == []


@needs_registry
@pytest.mark.slow
def test_export_cli_verify_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """export --target mnn --verify-runtime mnn --keep-artifacts DIR: the row says where it also ran; .mnn kept."""
    (tmp_path / "tiny_dcn.py").write_text("from runtimes.test_deployed import TinyDCN\n")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kept").mkdir()
    result = CliRunner().invoke(app, ["export", "tiny_dcn.py:TinyDCN", "-s", "1,4,16,16", "--target", "mnn",
                                      "--verify-runtime", "mnn", "--keep-artifacts", "kept", "-o", "m.onnx"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "m.onnx also ran on: mnn 3.6.1: max abs error" in " ".join(result.output.split())
    assert (tmp_path / "m.onnx").is_file() and (tmp_path / "kept" / "m.mnn").is_file()


class Unexportable(torch.nn.Module):
    """A model whose forward fails: an error from it means the export started."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the export ran the model")


def test_verify_runtimes_arguments_refused_before_export(tmp_path: Path) -> None:
    """A missing keep_artifacts folder or an unknown runtime is refused before any export or conversion work."""
    out = tmp_path / "m.onnx"
    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError, match="keep_artifacts .*missing: no such folder; create it first"):
        deform_onnx.export(Unexportable(), (torch.zeros(1, 2, 4, 4),), out, verify_runtimes=["mnn"],
                           keep_artifacts=missing)  # fmt: skip
    with pytest.raises(ValueError, match="unknown runtime 'coreml'; choose from"):
        deform_onnx.export(Unexportable(), (torch.zeros(1, 2, 4, 4),), out, verify_runtimes=["coreml"])
    assert not out.exists() and not missing.exists()


class _HalfDCN(torch.nn.Module):
    """mmcv's modulated block: offsets and mask from one conv, split with torch.chunk."""

    def __init__(self):
        super().__init__()
        self.conv_offset = torch.nn.Conv2d(8, 27, 3, padding=1)
        self.weight = torch.nn.Parameter(torch.randn(8, 8, 3, 3) * 0.3)

    def forward(self, x):
        o1, o2, m = torch.chunk(self.conv_offset(x), 3, dim=1)
        return torchvision.ops.deform_conv2d(x, torch.cat((o1, o2), 1), self.weight, padding=(1, 1), mask=m.sigmoid())


def test_a_float16_models_reference_is_its_float32_copy(tmp_path):
    """A deployed runtime's file of a float16 model is compared with the model's float32 copy rounded to float16, as
    export's own check does (docs/verification.md), not with PyTorch's own float16 output, which is further off:
    TVM's float16 file of such a block was refused against it (2e-2 off PyTorch float16, 1e-3 off float32)."""
    import onnx
    from onnx import TensorProto, helper

    from deform_onnx.runtimes.deployed.check import reference_outputs

    torch.manual_seed(0)
    model, x = _HalfDCN().eval().half(), torch.randn(1, 8, 16, 16).half()
    path = tmp_path / "names.onnx"  # only the output names are read
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 8, 16, 16])])  # fmt: skip
    onnx.save(helper.make_model(graph), str(path))
    [(name, ref)] = reference_outputs(path, {"x": x.numpy()}, model, (x,))
    with torch.no_grad():
        own, copy32 = model(x), copy.deepcopy(model).float()(x.float())
    assert name == "y" and ref.dtype == np.float16
    np.testing.assert_array_equal(ref, copy32.half().numpy())
    assert not np.array_equal(ref, own.numpy())  # the model's own float16 output is not what is compared with


@needs_registry
@pytest.mark.slow
def test_tvm_runner_grid_sample_matches_pytorch(tmp_path: Path) -> None:
    """TVM's runner samples GridSample bilinear with zeros padding with its own kernel
    (``tvm_build.grid_sample_legalize``: corners once per output pixel, then every channel), align_corners 0 and
    1, a batch of 2 and a quarter of the points off the map; border padding keeps TOPI's kernel. Every output
    matches PyTorch's ``F.grid_sample`` on the same tensors."""
    import onnx
    from onnx import TensorProto, helper

    gen = torch.Generator().manual_seed(0)
    x, grid = torch.randn(2, 3, 5, 7, generator=gen), torch.rand(2, 4, 6, 2, generator=gen) * 2.6 - 1.3
    cases = {"zeros": (0, "zeros"), "zeros_corners": (1, "zeros"), "border": (0, "border")}
    nodes = [helper.make_node("GridSample", ["x", "grid"], [name], mode="bilinear", padding_mode=padding,
                              align_corners=corners) for name, (corners, padding) in cases.items()]  # fmt: skip
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
         helper.make_tensor_value_info("grid", TensorProto.FLOAT, list(grid.shape))],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2, 3, 4, 6]) for name in cases],
    )  # fmt: skip
    path = tmp_path / "grid_sample.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    fam = family("tvm")
    run = deployed.run_file(fam, interpreter(fam), path, {"x": x.numpy(), "grid": grid.numpy()},
                            [[2, 3, 4, 6]] * 3, tmp_path, repeats=1)  # fmt: skip
    assert run.error is None, run.error
    assert [name for name, _ in run.outputs] == list(cases)
    for name, got in run.outputs:
        corners, padding = cases[name]
        want = F.grid_sample(x, grid, padding_mode=padding, align_corners=bool(corners)).numpy()
        assert np.abs(got - want).max() <= 1e-5, name


@needs_registry
def test_mnn_runs_a_float16_file(tmp_path):
    """MNN's ``const`` takes no float16 array: it printed "numpy type does not match" without a newline onto the
    runner's status line, and every float16 file's row read "runner exited 0: no output". MNN takes the float16
    file's input as float32 now (as ncnn does) and its output is held to the float16 rule."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array((np.arange(32, dtype=np.float32).reshape(4, 8, 1, 1) / 32).astype(np.float16), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 8, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 4, 4, 4])], [w])  # fmt: skip
    path = tmp_path / "half.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    (row,) = deform_onnx.check_runtimes(path, ["mnn"], repeats=1)
    assert row.error is None, row.error
    assert row.ok, row.failure


def test_a_status_line_a_runtime_printed_onto_is_still_read(tmp_path):
    """A runtime that prints without a newline (MNN's "numpy type does not match") shares the runner's status line;
    the row said "runner exited 0: no output" instead of the runner's error."""
    import sys

    from deform_onnx.runtimes.deployed.families import run_meta

    script = ("import json, sys; sys.stdout.write('a runtime says this without a newline'); "
              "print(json.dumps({'version': '1', 'error': 'the runner caught it', 'ms': None, 'outputs': []}))")  # fmt: skip
    fam = Family("status-test", "status", script)
    run = run_meta(fam, Path(sys.executable), {}, tmp_path / "out", timeout=60)
    assert (run.version, run.error) == ("1", "the runner caught it")


def test_a_crashed_runner_says_it_crashed_where_and_what_to_try(tmp_path):
    """A runtime that crashes the runner (ncnn's SIGSEGV on a first in-place op over the fed input) left the row
    "runner exited -11: no output": no signal, no step, no fix. The row names the signal, the runner's last stage
    and what to try, for every family (one place builds it: ``families.crash_line``)."""
    import sys

    from deform_onnx.runtimes.deployed.families import run_meta

    script = ("import os, signal, sys; print('deform-onnx stage: running the converted model', file=sys.stderr, "
              "flush=True); os.kill(os.getpid(), signal.SIGSEGV)")  # fmt: skip
    run = run_meta(Family("crash-test", "crash", script), Path(sys.executable), {}, tmp_path / "out", timeout=60)
    assert run.version is None and run.error is not None
    assert "crashed (SIGSEGV, signal 11) while running the converted model" in run.error, run.error
    assert "not a difference in values" in run.error and "another method=" in run.error, run.error
    exited = run_meta(Family("exit-test", "exit", "import sys; sys.exit(3)"), Path(sys.executable), {},
                      tmp_path / "out2", timeout=60)  # fmt: skip
    assert exited.error is not None and exited.error.startswith("the runner exited 3 without"), exited.error


def test_failed_runtime_names_the_target_rule_and_lower(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``check --runtime onnx2torch`` on a default export said only '"allowzero=1" is not implemented' (new-user
    trial, a Deformable-DETR decoder layer); a failed runtime that is a target whose rules the file breaks gets a
    line naming the rule and the ``lower --target`` that rewrites the file (the runtime's own run is planted here)."""
    import onnx
    from onnx import TensorProto, helper

    from deform_onnx.runtimes.deployed import check as deployed_check
    from deform_onnx.runtimes.deployed.check import RuntimeRow

    graph = helper.make_graph(
        [helper.make_node("GridSample", ["x", "g"], ["y"])],
        "warp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4]),
         helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 3, 3, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 3, 3])],
    )  # fmt: skip
    path = tmp_path / "warp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)]), str(path))
    row = RuntimeRow(runtime="onnx2torch", title="onnx2torch", error='"allowzero=1" is not implemented')
    monkeypatch.setattr(deployed_check, "check_runtimes", lambda *a, **k: [row])
    result = CliRunner().invoke(app, ["check", str(path), "--runtime", "onnx2torch"])
    text = " ".join(result.output.split())
    assert result.exit_code == 1, text
    assert "the file breaks 2 rule(s) of target onnx2torch, the first: no GridSample" in text, text
    assert "deform-onnx lower warp.onnx --target onnx2torch -o OUT.onnx" in text, text
