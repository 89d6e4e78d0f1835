"""Runtimes run sealed from the user's environment (issue 36, item 1).

The user's shell here is the worst case seen: an activated venv whose ``pip``/``pip3``/``pip3.X`` record
every call (MNN 3.6.1's ``mnnconvert`` ran ``pip install -U aliyun-log-python-sdk`` through the first
``pip`` on ``PATH``, which downgraded the user's protobuf), ``PYTHONPATH`` holding a ``sitecustomize``
that records every interpreter that imports it, ``PYTHONHOME`` pointing nowhere (an interpreter that
inherits it cannot start) and ``PIP_*`` settings that would install elsewhere (``tests/runtime_files.py``'s
:func:`user_shell`). Every deployed family in a cached venv converts and runs its planted file through
``deform_onnx.check_runtimes`` in that shell: the runs tests/proof/test_planted_faults.py judges (conftest's
``family_files``, one conversion per family and test run); afterwards no recording ``pip`` ran, no runtime
imported the user's ``PYTHONPATH``, and the user's venv and each runtime's venv hold the same files as before.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from deform_onnx.runtimes import sealed
from deform_onnx.runtimes.deployed import FAMILIES
from runtime_files import TARGETS, poison, tree, user_shell

needs_registry = pytest.mark.skipif(
    os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES") == "1", reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES=1"
)
#: The families that run in a cached venv of their own.
VENV_FAMILIES = [f.name for f in FAMILIES.values() if f.venv is not None]


def test_run_env_drops_the_users_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment itself: the runtime's venv first after the refusing pip, nothing of the user's."""
    monkeypatch.setenv("DEFORM_ONNX_VENVS", str(tmp_path / "venvs"))
    shell = user_shell(tmp_path)
    poison(shell, monkeypatch)
    user, record = shell.user, shell.record
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
def test_no_runtime_touches_the_users_environment(family_files) -> None:
    """Every venv family converts and runs its file; no user pip ran, no user package was imported or changed."""
    assert set(VENV_FAMILIES) <= set(TARGETS), "a new venv family needs a target file in tests/runtime_files.py"
    rows = [family_files.checked(n)[0] for n in VENV_FAMILIES]  # the planted file: ran, and refused its faults
    assert [r.runtime for r in rows if r.error is not None or r.comparison is None] == [], [r.error for r in rows]
    shell = family_files.shell
    assert shell is not None
    assert not shell.record.exists(), shell.record.read_text()
    assert not shell.imported.exists(), shell.imported.read_text()
    assert tree(shell.user) == shell.user_before
    assert {n: tree(lib) for n, (lib, _) in family_files.venv_files.items()} == {
        n: before for n, (_, before) in family_files.venv_files.items()
    }
    assert set(family_files.venv_files) >= set(VENV_FAMILIES)
