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
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["venv_root", "cached_venv"]


def venv_root() -> Path:
    """The folder holding the cached venvs (``$DEFORM_ONNX_VENVS`` or ``~/.cache/deform-onnx/venvs``)."""
    return Path(os.environ.get("DEFORM_ONNX_VENVS", Path.home() / ".cache" / "deform-onnx" / "venvs"))


def cached_venv(name: str, requirements: Sequence[str], timeout: float = 150, options: Sequence[str] = ()) -> Path:
    """The interpreter of the cached venv ``name`` holding ``requirements``; created if missing.

    Args:
        name: folder name under :func:`venv_root` (e.g. ``"ort-1.16.3"``).
        requirements: pip requirement strings, installed by name from the registry.
        timeout: seconds allowed for each step (venv creation, pip install).
        options: extra ``pip install`` options (e.g. ``["--no-deps"]``); part of what the marker records.

    Returns:
        Path of the venv's ``bin/python``.

    Raises:
        RuntimeError: the venv could not be created (one line: the step and pip's last line, or the timeout).
    """
    root = venv_root() / name
    python = root / "bin" / "python"
    wanted = "\n".join([*options, *requirements])
    marker = root / ".complete"
    if marker.is_file() and python.exists() and marker.read_text() in (wanted, requirements[0].split("==")[-1]):
        return python  # the second form: markers written by the first version of this code (the version only)
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    steps = [
        [sys.executable, "-m", "venv", str(root)],
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *options, *requirements],
    ]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"creating {root} took over {timeout:g} s ({' '.join(step[2:6])})") from None
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            raise RuntimeError(f"could not create {root}: {' '.join(step[2:6])} failed: {last}")
    marker.write_text(wanted)
    return python
