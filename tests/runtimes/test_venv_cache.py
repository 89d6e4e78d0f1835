"""The cached runtime venvs are safe to share (issue 36, item 2), on a private ``$DEFORM_ONNX_VENVS``.

A three-line package is written as a wheel here (a zip: no build backend, no registry) and installed
offline (``--no-index --find-links``). Two processes ask for the same missing venv, the second once the
first holds the venv's lock: both get it, it is created once, and the second said it waited. A pip step
that prints nothing and moves no bytes fails on the stall limit with one line; a silent one that works goes on.
``deform-onnx runtimes list/install/remove`` read, create and remove the cache.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deform_onnx.cli import app
from deform_onnx.runtimes import venvs
from deform_onnx.runtimes.deployed import FAMILIES, Family, register_family

NAME = "sealtiny"
CHILD = """
import json, sys
from deform_onnx.runtimes.venvs import cached_venv
lines = []
python = cached_venv("tiny", ["sealtiny==0.1"], options=["--no-index", "--find-links", sys.argv[1]], log=lines.append)
print(json.dumps({"python": str(python), "log": lines}))
"""


def _wheel(folder: Path) -> Path:
    """A pure-Python wheel of ``sealtiny 0.1`` (``import sealtiny; sealtiny.VALUE == 42``)."""
    path = folder / f"{NAME}-0.1-py3-none-any.whl"
    files = {
        f"{NAME}/__init__.py": "VALUE = 42\n",
        f"{NAME}-0.1.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {NAME}\nVersion: 0.1\n",
        f"{NAME}-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{n},,\n" for n in files) + f"{NAME}-0.1.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, text in {**files, f"{NAME}-0.1.dist-info/RECORD": record}.items():
            z.writestr(n, text)
    return path


def _held(lock: Path) -> bool:
    """Whether another process holds the flock on ``lock``."""
    if not lock.exists():
        return False
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, list[subprocess.CompletedProcess]]:
    """Two first uses of the venv ``tiny``, the second started while the first holds its lock."""
    root = tmp_path_factory.mktemp("venvs")
    wheels = tmp_path_factory.mktemp("wheels")
    _wheel(wheels)
    env = dict(os.environ, DEFORM_ONNX_VENVS=str(root))
    cmd = [sys.executable, "-c", CHILD, str(wheels)]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _held(root / ".tiny.lock") and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    second = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = []
    for proc in (first, second):
        out, err = proc.communicate(timeout=600)
        done.append(subprocess.CompletedProcess(cmd, proc.returncode, out, err))
    return root, done


def test_two_first_uses_at_once_both_succeed_and_build_once(built) -> None:
    root, (first, second) = built
    assert first.returncode == 0 and second.returncode == 0, (first.stderr[-2000:], second.stderr[-2000:])
    a, b = json.loads(first.stdout.splitlines()[-1]), json.loads(second.stdout.splitlines()[-1])
    assert a["python"] == b["python"] == str(root / "tiny" / "bin" / "python")
    created = [x for x in (a, b) if any(line.startswith("creating the tiny venv") for line in x["log"])]
    assert created == [a], (a["log"], b["log"])  # the first built it, once
    assert any(line.startswith("waiting for another process") for line in b["log"]), b["log"]
    value = subprocess.run([a["python"], "-c", f"import {NAME}; print({NAME}.VALUE)"], capture_output=True, text=True)
    assert value.stdout.strip() == "42", value.stderr
    assert (root / "tiny" / ".complete").read_text() == f"--no-index\n--find-links\n{first.args[-1]}\n{NAME}==0.1"


def test_a_stalled_step_fails_in_one_line_a_silent_working_one_does_not(tmp_path: Path) -> None:
    """The stall rule on two silent steps: one writing a byte every 0.2 s for 4 s passes a 1.5 s stall limit,
    one asleep after its first line is killed after it, with one line naming the step and its last line.

    (pip against a local index that accepts and never answers fails the same way through ``cached_venv``:
    measured here, 19 s with the venv's creation, so the suite runs the two steps instead.)
    """
    lines: list[str] = []
    busy = "import time\nf = open({!r}, 'w')\nfor _ in range(20):\n    f.write('x'); f.flush(); time.sleep(0.2)"
    step = [sys.executable, "-c", busy.format(str(tmp_path / "out.txt")), "busy", "step"]
    start = time.monotonic()
    assert venvs._run_step(step, 1.5, lines.append, tmp_path / "v")[0] == 0
    assert time.monotonic() - start > 3.5
    asleep = [sys.executable, "-c", "import time; print('Collecting sealtiny', flush=True); time.sleep(60)", "pip",
              "install"]  # fmt: skip
    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        venvs._run_step(asleep, 1.5, lines.append, tmp_path / "v")
    assert time.monotonic() - start < 30
    message = str(info.value)
    assert "\n" not in message and "pip install stalled" in message and "1.5 s" in message, message
    assert "last line: Collecting sealtiny" in message and lines == ["Collecting sealtiny"]


def test_a_cache_that_cannot_be_written_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("DEFORM_ONNX_VENVS", str(tmp_path / "a-file" / "venvs"))
    with pytest.raises(RuntimeError, match=r"^cannot create the tiny venv in .*a-file/venvs: ") as info:
        venvs.cached_venv("tiny", [f"{NAME}==0.1"])
    assert "\n" not in str(info.value)


def test_runtimes_list_install_remove(built, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI on the private cache: a family backed by the ``tiny`` venv, then the others; one-line errors."""
    root, (first, _) = built
    monkeypatch.setenv("DEFORM_ONNX_VENVS", str(root))
    options = ("--no-index", "--find-links", first.args[-1])
    register_family(Family(NAME, "a test runtime", "", "tiny", (f"{NAME}==0.1",), options=options))
    runner = CliRunner()
    try:
        listed = runner.invoke(app, ["runtimes", "list"], env={"COLUMNS": "250"})
        assert listed.exit_code == 0, listed.output
        rows = {line.split("│")[1].strip(): line for line in listed.output.splitlines() if line.count("│") > 3}
        assert "installed" in rows[NAME] and f"{NAME} 0.1" in rows[NAME] and str(root / "tiny") in rows[NAME]
        assert "missing" in rows["mnn"] and "missing" in rows["tvm"]
        installed = runner.invoke(app, ["runtimes", "install", NAME])  # complete: nothing to build
        assert installed.exit_code == 0 and "installed" in installed.output, installed.output
        for bad in (["install", "nosuch"], ["remove", "nosuch"], ["install"], ["remove", "mnn", "--all"]):
            result = runner.invoke(app, ["runtimes", *bad])
            assert result.exit_code == 2 and result.output.count("\n") == 1, (bad, result.output)
        assert "unknown runtime 'nosuch'" in runner.invoke(app, ["runtimes", "remove", "nosuch"]).output
        removed = runner.invoke(app, ["runtimes", "remove", NAME, "mnn"])
        assert (
            removed.exit_code == 0 and f"{NAME}: removed" in removed.output and "mnn: not installed" in removed.output
        )
        assert not (root / "tiny").exists()
        assert "missing" in runner.invoke(app, ["runtimes", "list"], env={"COLUMNS": "250"}).output
    finally:
        FAMILIES.pop(NAME)
