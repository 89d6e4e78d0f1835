"""Cached virtual environments holding one runtime build each (tests and scripts/runtime_matrix.py).

Each build lives in its own venv under ``$DEFORM_ONNX_VENVS`` (default
``~/.cache/deform-onnx/venvs``), created with ``python -m venv`` and ``pip
install`` from the package registry, so that old runtime builds never mix with
the project's own packages. A ``.complete`` marker (holding the requirement
list) is written last: a venv cut short by a timeout, or asked for with other
requirements, is rebuilt.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["venv_root", "cached_venv"]


def venv_root() -> Path:
    """The folder holding the cached venvs (``$DEFORM_ONNX_VENVS`` or ``~/.cache/deform-onnx/venvs``)."""
    return Path(os.environ.get("DEFORM_ONNX_VENVS", Path.home() / ".cache" / "deform-onnx" / "venvs"))


def cached_venv(
    name: str,
    requirements: Sequence[str],
    timeout: float = 150,
    options: Sequence[str] = (),
    inherit: bool = False,
    log: Callable[[str], None] | None = None,
) -> Path:
    """The interpreter of the cached venv ``name`` holding ``requirements``; created if missing.

    Args:
        name: folder name under :func:`venv_root` (e.g. ``"ort-1.16.3"``).
        requirements: pip requirement strings, installed by name from the registry.
        timeout: seconds allowed for each step (venv creation, pip install).
        options: extra ``pip install`` options (e.g. ``["--no-deps"]``); part of what the marker records.
        inherit: also see this interpreter's site-packages (a ``.pth`` file): onnx2torch runs on the project's
            own torch instead of a second 4 GB copy of it.
        log: called with a first line saying the venv is being created, then with each line pip prints
            (its progress); ``None``: pip runs quietly.

    Returns:
        Path of the venv's ``bin/python``.

    Raises:
        RuntimeError: the venv could not be created (one line: the step and pip's last line, or the timeout).
    """
    root = venv_root() / name
    python = root / "bin" / "python"
    wanted = "\n".join([*options, *requirements, *(["+host site-packages"] if inherit else [])])
    marker = root / ".complete"
    if marker.is_file() and python.exists() and marker.read_text() in (wanted, requirements[0].split("==")[-1]):
        return python  # the second form: markers written by the first version of this code (the version only)
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    if log is not None:
        log(f"creating the {name} venv in {root} (once): pip install {' '.join(requirements)}")
    steps = [
        [sys.executable, "-m", "venv", str(root)],
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", *([] if log else ["-q"]), *options,
         *requirements],
    ]  # fmt: skip
    for i, step in enumerate(steps):
        returncode, output = _run_step(step, timeout, log if i else None, root)
        if returncode != 0:
            last = (output.strip() or "no output").splitlines()[-1]
            raise RuntimeError(f"could not create {root}: {' '.join(step[2:6])} failed: {last}")
        if i == 0 and inherit:  # before pip: its dependency check sees the host's packages too
            _inherit(root)
    marker.write_text(wanted)
    return python


def _run_step(step: list[str], timeout: float, log: Callable[[str], None] | None, root: Path) -> tuple[int, str]:
    """Run one creation step: ``(return code, its output)``; each output line goes to ``log`` as it comes."""
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    with subprocess.Popen(step, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if log is not None and line.strip():
                log(line.strip())
            if time.monotonic() > deadline:
                proc.kill()
                break
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            proc.kill()
        if time.monotonic() > deadline:
            raise RuntimeError(f"creating {root} took over {timeout:g} s ({' '.join(step[2:6])})")
        return proc.returncode, "".join(lines)


def _inherit(root: Path) -> None:
    """Let the venv at ``root`` import this interpreter's packages (after its own)."""
    paths = dict.fromkeys(site.getsitepackages() + [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    purelib = Path(subprocess.run([str(root / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())  # fmt: skip
    (purelib / "_deform_onnx_host.pth").write_text("\n".join(paths) + "\n")
