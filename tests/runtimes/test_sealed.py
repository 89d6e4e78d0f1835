"""Runtimes run sealed from the user's environment (issue 36, item 1).

The user's shell here is the worst case seen: an activated venv whose ``pip``/``pip3``/``pip3.X`` record
every call (MNN 3.6.1's ``mnnconvert`` ran ``pip install -U aliyun-log-python-sdk`` through the first
``pip`` on ``PATH``, which downgraded the user's protobuf), ``PYTHONPATH`` holding a ``sitecustomize``
that records every interpreter that imports it, ``PYTHONHOME`` pointing nowhere (an interpreter that
inherits it cannot start) and ``PIP_*`` settings that would install elsewhere. Every deployed family in
a cached venv converts and runs one tiny file (exported once for the module) through
``deform_onnx.check_runtimes``; afterwards no recording ``pip`` ran, no runtime imported the user's
``PYTHONPATH``, and the user's venv and each runtime's venv hold the same files as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import deform_onnx
from deform_onnx.runtimes import sealed
from deform_onnx.runtimes.deployed import FAMILIES, interpreter

needs_registry = pytest.mark.skipif(
    os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES") == "1", reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES=1"
)
#: The families that run in a cached venv of their own.
VENV_FAMILIES = [f.name for f in FAMILIES.values() if f.venv is not None]
RECORDER = """#!/bin/sh
echo "$0 $*" >> {record}
exit 0
"""


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, torch.nn.Module, torch.Tensor]:
    """One small ONNX file shared by the module (a 2 -> 3 channel 3x3 convolution, 6x6)."""
    model, x = Tiny().eval(), torch.randn(1, 2, 6, 6, generator=torch.Generator().manual_seed(1))
    path = tmp_path_factory.mktemp("sealed") / "tiny.onnx"
    deform_onnx.export(model, (x,), path, input_names=["x"], output_names=["y"], verify=False)
    return path, model, x


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts}


def _user_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """An activated user venv with recording pips, a recording PYTHONPATH, poison PYTHON*/PIP_* settings."""
    user = tmp_path / "user-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(user)], check=True)
    record = tmp_path / "pip-calls.txt"
    for name in ("pip", "pip3", f"pip{sys.version_info[0]}.{sys.version_info[1]}"):
        (user / "bin" / name).write_text(RECORDER.format(record=record))
        (user / "bin" / name).chmod(0o755)
    poison = tmp_path / "user-pythonpath"
    poison.mkdir()
    imported = tmp_path / "pythonpath-imports.txt"
    (poison / "sitecustomize.py").write_text(
        f"import sys\nopen({str(imported)!r}, 'a').write(sys.executable + '\\n')\n"
    )
    monkeypatch.setenv("VIRTUAL_ENV", str(user))
    monkeypatch.setenv("PATH", f"{user / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(poison))
    monkeypatch.setenv("PYTHONHOME", str(tmp_path / "no-python-home"))
    monkeypatch.setenv("PYTHONSTARTUP", str(poison / "sitecustomize.py"))
    monkeypatch.setenv("PIP_TARGET", str(tmp_path / "pip-target"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/poison")
    monkeypatch.setenv("PIP_REQUIRE_VIRTUALENV", "1")
    return user, record, imported


def test_run_env_drops_the_users_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment itself: the runtime's venv first after the refusing pip, nothing of the user's."""
    monkeypatch.setenv("DEFORM_ONNX_VENVS", str(tmp_path / "venvs"))
    user, record, _ = _user_shell(tmp_path, monkeypatch)
    runtime = tmp_path / "rt"
    (runtime / "bin").mkdir(parents=True)
    (runtime / "pyvenv.cfg").write_text("home = /usr/bin\n")
    env = sealed.run_env(runtime / "bin" / "python")
    path = env["PATH"].split(os.pathsep)
    assert path[:2] == [str(sealed.blocked_pip()), str(runtime / "bin")]
    assert str(user / "bin") not in path
    assert env["VIRTUAL_ENV"] == str(runtime)
    assert not [k for k in env if k.startswith("PYTHON")]
    assert {k: v for k, v in env.items() if k.startswith("PIP_")} == {
        "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"
    }  # fmt: skip
    refused = subprocess.run(["pip", "install", "x"], env=env, capture_output=True, text=True)
    assert refused.returncode == 1 and "blocked" in refused.stderr and not record.exists()
    (tmp_path / "a-file").write_text("")  # a cache that cannot be written: the refusing pips go elsewhere
    monkeypatch.setenv("DEFORM_ONNX_VENVS", str(tmp_path / "a-file" / "venvs"))
    env = sealed.run_env(runtime / "bin" / "python")
    refused = subprocess.run(["pip3", "install", "x"], env=env, capture_output=True, text=True)
    assert refused.returncode == 1 and "blocked" in refused.stderr and not record.exists()
    # the install step keeps what reaches the index, drops what would change what or where pip installs
    monkeypatch.setenv("PIP_FIND_LINKS", "/somewhere/wheels")
    install = sealed.install_env(runtime / "bin" / "python")
    assert install["PIP_FIND_LINKS"] == "/somewhere/wheels" and install["PIP_INDEX_URL"].endswith("/poison")
    assert "PIP_TARGET" not in install and "PIP_REQUIRE_VIRTUALENV" not in install
    assert not [k for k in install if k.startswith("PYTHON")] and str(user / "bin") not in install["PATH"]


@needs_registry
@pytest.mark.slow
def test_no_runtime_touches_the_users_environment(tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every venv family converts and runs the file; no user pip ran, no user package was imported or changed."""
    path, model, x = tiny
    fams = [FAMILIES[n] for n in VENV_FAMILIES]
    pythons = {f.name: interpreter(f) for f in fams}  # created (if missing) before the user's shell is poisoned
    before = {n: _files(p.parent.parent / "lib") for n, p in pythons.items()}
    user, record, imported = _user_shell(tmp_path, monkeypatch)
    user_before = _files(user)
    rows = deform_onnx.check_runtimes(path, VENV_FAMILIES, model=model, args=(x,), repeats=1)
    assert [r.runtime for r in rows if not r.ok] == [], [(r.runtime, r.error, r.max_error) for r in rows]
    assert not record.exists(), record.read_text()
    assert not imported.exists(), imported.read_text()
    assert _files(user) == user_before
    assert {n: _files(p.parent.parent / "lib") for n, p in pythons.items()} == before
