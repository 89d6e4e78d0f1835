"""Start-up of the CLI: ``--help``, ``--version`` and argument errors load no heavy package.

Timing a subprocess is noisy on a shared machine, so the test counts what the
command imported instead: torch alone brings ~2,000 modules and ~3 s; the
CLI's own parsing (typer, pydantic, rich) stays under :data:`MAX_MODULES`.
"""

from __future__ import annotations

import pytest

from util import probe, probe_many

#: typer (with the pydantic it parses values with), rich's help renderer and the CLI itself:
#: ~520 modules measured; importing torch alone adds ~2,000.
MAX_MODULES = 700


CASES = [
    (["--help"], 0),
    (["--version"], 0),
    (["export", "--help"], 0),
    (["lower", "--help"], 0),
    (["check", "--help"], 0),
    (["bench", "--help"], 0),
    (["quantize", "--help"], 0),
    (["runtimes", "--help"], 0),
    (["runtimes", "remove", "--help"], 0),
    (["export", "--no-such-option"], 2),
    (["lower"], 2),  # missing argument
    (["export", "--method", "bilinear"], 2),
    (["export", "--input-shape", "1,a,3"], 2),
    (["export", "--dtype", "int8"], 2),
    (["export", "--exporter", "onnxscript"], 2),
]


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """Every case of :data:`CASES` run in one interpreter, in order (``util.probe_many``)."""
    return probe_many([args for args, _ in CASES], tmp_path_factory.mktemp("startup"))


@pytest.mark.parametrize("index", range(len(CASES)), ids=[" ".join(a) for a, _ in CASES])
def test_fast_paths_import_nothing_heavy(probed, index):
    args, code = CASES[index]
    result, output = probed[index]
    assert result["code"] == code, output
    assert result["heavy"] == [], (result, output)
    assert result["modules"] < MAX_MODULES, (result, output)
    if args == ["--version"]:
        from deform_onnx import __version__

        assert f"deform-onnx {__version__}" in output


def test_python_dash_m_runs_the_cli(tmp_path):
    """``python -m deform_onnx`` is the console script (it said "'deform_onnx' is a package and cannot be
    directly executed")."""
    import os
    import subprocess
    import sys

    from util import SRC

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "deform_onnx", "--version"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)  # fmt: skip
    from deform_onnx import __version__

    assert done.returncode == 0 and f"deform-onnx {__version__}" in done.stdout, done.stdout + done.stderr


def test_probe_sees_torch_when_a_command_runs(tmp_path):
    """The probe itself can fail: a command that reads a model does import onnx."""
    (tmp_path / "empty.onnx").write_bytes(b"")
    result, output = probe(["check", "empty.onnx"], tmp_path)  # reads the file: loads onnx and onnx-ir
    assert result["code"] == 2 and "empty.onnx" in output, output
    assert {"onnx", "onnx_ir"} <= set(result["heavy"]), (result, output)


def test_cli_method_names_are_the_lowerings():
    """The CLI reads the method names from the registry, a module light enough for parse time (no numpy)."""
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
