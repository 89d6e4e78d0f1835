"""``export(target=...)`` means proven there (issue 35 item 6).

A target that names a deployed runtime (``mnn``, ``ncnn``, ``tflite``, ``tvm``, ``onnx2torch``, ``openvino``;
``openvino-extension`` runs in ``openvino``) runs the file there against PyTorch before it is written, unless
the user opts out (``verify_runtimes=()``, CLI ``--no-verify-runtime``; ``verify=False``). Here the family's
converter-and-run step is replaced by a stand-in that returns a chosen output (no venv, no conversion): what
is tested is that the export calls it, refuses a wrong result (nothing written), and says where the file ran.
Each real runtime runs its target's file in tests/runtimes/test_deployed.py (test_family_runs_its_target_file).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import deform_onnx
from deform_onnx.cli import app
from deform_onnx.exporting.api import target_runtimes
from deform_onnx.runtimes import deployed
from deform_onnx.runtimes.deployed.families import Run


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


X = torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(1))


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A stand-in for each family's convert-and-run: returns PyTorch's output plus ``state["off"]``; records
    which families ran."""
    state: dict = {"off": 0.0, "ran": []}

    def run_file(fam, python, path, feeds, shape, work, **kw):
        state["ran"].append(fam.name)
        with torch.no_grad():
            want = Small().eval()(*(torch.from_numpy(a) for a in feeds.values())).numpy()
        return Run("9.9", None, 1.0, outputs=[("output", want + np.float32(state["off"]))])

    # FamilyRunner (deform_onnx.proof.runners) reads both from the package when it loads and runs
    monkeypatch.setattr(deployed, "interpreter", lambda fam, timeout=0, log=None: Path(sys.executable))
    monkeypatch.setattr(deployed, "run_file", run_file)
    return state


def test_which_runtime_a_target_runs_in() -> None:
    assert target_runtimes("mnn", None) == ["mnn"] and target_runtimes("openvino-extension", None) == ["openvino"]
    assert target_runtimes("litert", None) == ["tflite"]  # the family's alias
    assert target_runtimes("onnx2torch-native", None) == ["onnx2torch"]
    assert target_runtimes("tensorrt", None) == [] and target_runtimes("onnxruntime", None) == []
    assert target_runtimes(None, None) == [] and target_runtimes("mnn", ()) == []  # () opts out
    assert target_runtimes("mnn", None, verify=False) == [] and target_runtimes(None, ["tvm"]) == ["tvm"]


@pytest.mark.parametrize(("target", "name"), [("mnn", "mnn"), ("openvino-extension", "openvino")])
def test_target_runs_the_file_there_before_writing(tmp_path: Path, runs: dict, target: str, name: str) -> None:
    path = tmp_path / "m.onnx"
    report = deform_onnx.export(Small().eval(), (X,), path, target=target)
    assert runs["ran"] == [name] and path.is_file()
    assert report.runtimes == [f"{name} 9.9: max abs error 0"], report.runtimes
    assert report.ran_in[1:] == [f"{name} 9.9"] and report.ran_in[0].startswith("onnxruntime"), report.ran_in
    assert any(n.startswith(f"the file ran in {name} ") for n in report.notes), report.notes


def test_a_wrong_result_there_writes_nothing(tmp_path: Path, runs: dict) -> None:
    runs["off"] = 0.5
    with pytest.raises(
        deform_onnx.VerificationError, match=r"mnn \(9\.9\): output 'conv2d' misses .*\(max abs error 0\.5"
    ):
        deform_onnx.export(Small().eval(), (X,), tmp_path / "m.onnx", target="mnn")
    assert list(tmp_path.iterdir()) == []


def test_opting_out(tmp_path: Path, runs: dict) -> None:
    report = deform_onnx.export(Small().eval(), (X,), tmp_path / "a.onnx", target="mnn", verify_runtimes=())
    assert report.runtimes == [] and runs["ran"] == []
    report = deform_onnx.export(Small().eval(), (X,), tmp_path / "b.onnx", target="mnn", verify=False)
    assert report.runtimes == [] and runs["ran"] == []


def test_cli_says_where_the_file_ran(tmp_path: Path, runs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "small.py").write_text("from exporting.test_target_runs_there import Small\n")
    monkeypatch.chdir(tmp_path)
    common = ["export", "small.py:Small", "-s", "1,2,6,6", "--target", "mnn"]
    result = CliRunner().invoke(app, [*common, "-o", "m.onnx"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "m.onnx also ran on: mnn 9.9: max abs error 0" in " ".join(result.output.split())
    result = CliRunner().invoke(app, [*common, "--no-verify-runtime", "-o", "n.onnx"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "also ran on" not in result.output and runs["ran"] == ["mnn"]


@pytest.fixture
def rectifier_runs(monkeypatch: pytest.MonkeyPatch) -> dict:
    """A stand-in runtime for ASTER's TPS rectifier (tests/real_code/aster_tps_style.py): its float32 output is the
    model run in float64 (another float32 implementation, as close to float64 as can be) plus ``state["off"]``."""
    from real_code.aster_tps_style import Rectifier

    torch.manual_seed(0)
    state: dict = {"off": 0.0, "model": Rectifier().eval()}

    def run_file(fam, python, path, feeds, shape, work, **kw):
        import copy

        with torch.no_grad():
            outs = copy.deepcopy(state["model"]).double()(*(torch.from_numpy(a).double() for a in feeds.values()))
        arrays = [o.float().numpy() + np.float32(state["off"]) for o in outs]
        converted = Path(work) / "converted.mnn"  # the stand-in converter's file, for keep_artifacts
        converted.write_bytes(b"mnn")
        outputs = [("grid_sampler", arrays[0]), ("view", arrays[1])]
        return Run("9.9", None, 1.0, outputs=outputs, artifacts=[(converted, ".mnn")])

    monkeypatch.setattr(deployed, "interpreter", lambda fam, timeout=0, log=None: Path(sys.executable))
    monkeypatch.setattr(deployed, "run_file", run_file)
    return state


def test_a_runtime_is_held_to_exports_rules(tmp_path: Path, rectifier_runs: dict) -> None:
    """ASTER's TPS rectifier is ill-conditioned in float32 (PyTorch float32 ~4e-4 off its float64 run): ONNX
    Runtime's file passes by the float64 rule, and so must a runtime whose outputs are as close (OpenVINO, MNN,
    ncnn, TVM and LiteRT were refused by the plain 1e-4 before); a runtime off by 2e-3 is still refused."""
    model, x = rectifier_runs["model"], torch.randn(1, 3, 32, 100, generator=torch.Generator().manual_seed(2))
    kw = {"target": "mnn", "dynamo": False, "opset_version": 16}
    kept = tmp_path / "kept"
    kept.mkdir()
    report = deform_onnx.export(model, (x,), tmp_path / "r.onnx", keep_artifacts=kept, **kw)
    assert [p.name for p in kept.iterdir()] == ["r.mnn"]  # the runtime passed by the rule keeps its file too
    with torch.no_grad():
        plain = float((model(x)[0] - model.double()(x.double())[0].float()).abs().max())
    model.float()
    assert plain > 1e-4, plain  # the runtime's output misses the plain tolerance: the rule is what passed it
    assert len(report.runtimes) == 1 and "against float64" in report.runtimes[0], report.runtimes
    rectifier_runs["off"] = 2e-3
    with pytest.raises(deform_onnx.VerificationError, match=r"mnn \(9\.9\): output '\w+' misses"):
        deform_onnx.export(model, (x,), tmp_path / "wrong.onnx", keep_artifacts=kept, **kw)
    assert not (tmp_path / "wrong.onnx").exists() and [p.name for p in kept.iterdir()] == ["r.mnn"]


def test_openvino_ir_is_held_to_exports_rules(tmp_path: Path) -> None:
    """The .xml writer judges OpenVINO's run of the IR by the same rules: ASTER's rectifier, 3.4e-4 off PyTorch
    float32 in OpenVINO as PyTorch float32 is off float64, is written (it was refused by the plain 1e-4). On a CPU
    where OpenVINO's default is bf16 (AVX-512 BF16 or AMX) its Linear runs as a bf16 FullyConnected OpenVINO makes
    while compiling, far off float64 too: refused, naming that layer, and nothing written (the rule, on any CPU)."""
    pytest.importorskip("openvino")
    from real_code.aster_tps_style import Rectifier

    torch.manual_seed(0)
    model, x = Rectifier().eval(), torch.randn(1, 3, 32, 100, generator=torch.Generator().manual_seed(2))
    try:
        report = deform_onnx.export(model, (x,), tmp_path / "r.xml")
    except deform_onnx.VerificationError as exc:
        text = str(exc)
        assert "whose default on this CPU is bf16" in text and "FullyConnected" in text, text
        assert list(tmp_path.iterdir()) == []
        return
    assert (tmp_path / "r.xml").is_file() and report.runtimes[-1].startswith("openvino"), report.runtimes
    assert any("float64 rule" in c.rule for c in report.checks.values()), report.checks
