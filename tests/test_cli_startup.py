"""Start-up of the CLI: ``--help``, ``--version`` and argument errors load no heavy package.

Timing a subprocess is noisy on a shared machine, so the test counts what the
command imported instead: torch alone brings ~2,000 modules and ~3 s; the
CLI's own parsing (typer, pydantic, rich) stays under :data:`MAX_MODULES`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
#: Packages that take seconds to import; none may load before a command does real work.
HEAVY = ("torch", "torchvision", "onnx", "onnxruntime", "onnx_ir", "onnxscript", "openvino", "skimage", "scipy")
#: typer (with the pydantic it parses values with), rich's help renderer and the CLI itself:
#: ~520 modules measured; importing torch alone adds ~2,000.
MAX_MODULES = 700

#: Runs the console script's entry point in-process, then reports what got imported.
PROBE = """
import json, sys
args, watched = json.loads(sys.argv[1]), set(json.loads(sys.argv[2]))
from deform_onnx.cli import main
sys.argv = ["deform-onnx", *args]
try:
    main()
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
else:
    code = 0
sys.stdout.flush()
heavy = sorted({m.split(".")[0] for m in sys.modules} & watched)
print("\\nPROBE " + json.dumps({"code": code, "modules": len(sys.modules), "heavy": heavy}))
"""

CASES = [
    (["--help"], 0),
    (["--version"], 0),
    (["export", "--help"], 0),
    (["lower", "--help"], 0),
    (["check", "--help"], 0),
    (["bench", "--help"], 0),
    (["quantize", "--help"], 0),
    (["export", "--no-such-option"], 2),
    (["lower"], 2),  # missing argument
    (["export", "--method", "bilinear"], 2),
    (["export", "--input-shape", "1,a,3"], 2),
    (["export", "--dtype", "int8"], 2),
    (["export", "--exporter", "onnxscript"], 2),
]


def probe(args: list[str], cwd: Path) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    line = [s for s in proc.stdout.splitlines() if s.startswith("PROBE ")]
    assert line, proc.stdout + proc.stderr
    return json.loads(line[-1][6:]), proc.stdout + proc.stderr


@pytest.mark.parametrize("args,code", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_fast_paths_import_nothing_heavy(args, code, tmp_path):
    result, output = probe(args, tmp_path)
    assert result["code"] == code, output
    assert result["heavy"] == [], (result, output)
    assert result["modules"] < MAX_MODULES, (result, output)
    if args == ["--version"]:
        from deform_onnx import __version__

        assert f"deform-onnx {__version__}" in output


def test_probe_sees_torch_when_a_command_runs(tmp_path):
    """The probe itself can fail: a command that reads a model does import onnx."""
    (tmp_path / "empty.onnx").write_bytes(b"")
    result, output = probe(["check", "empty.onnx"], tmp_path)  # reads the file: loads onnx and onnx-ir
    assert result["code"] == 2 and "empty.onnx" in output, output
    assert {"onnx", "onnx_ir"} <= set(result["heavy"]), (result, output)


def test_cli_method_names_are_the_lowerings():
    """The CLI spells the method names out (no numpy at parse time); they must stay the registry's."""
    from deform_onnx.cli._inputs import METHODS
    from deform_onnx.ops.registry import METHODS as REGISTRY

    assert METHODS == REGISTRY


@pytest.mark.parametrize("command", [[], ["export"], ["lower"], ["check"], ["bench"], ["quantize"]])
def test_help_shows_flags_as_plain_switches(command):
    """typer 0.29's rich help prints ``<bool>`` after every flag; the CLI shows plain switches."""
    from typer.testing import CliRunner

    from deform_onnx.cli import app

    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "--help" in result.output and "<bool>" not in result.output, result.output
    flag = {
        (): "--version",
        ("export",): "--dynamic",
        ("lower",): "--in-place",
        ("check",): "--timeout",
        ("bench",): "--quick",
        ("quantize",): "--table",
    }[tuple(command)]
    assert flag in result.output
