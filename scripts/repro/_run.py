"""Run a repro's ONNX file in a runtime-matrix build's cached venv and print the runner's JSON line.

Shared by the scripts of this folder: ``run(build_key, model, feeds, output_shape)`` writes the feeds
next to the model and runs :mod:`matrix_runners`' code for that build (its venv is created on first
use, as scripts/runtime_matrix.py does), then prints and returns the result.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "scripts")]

from matrix_runners import BUILDS  # noqa: E402

from deform_onnx.runtimes.sealed import run_env  # noqa: E402
from deform_onnx.runtimes.venvs import cached_venv  # noqa: E402


def run(
    build_key: str,
    model: Path,
    feeds: dict[str, np.ndarray],
    output_shape: list[int],
    timeout: float = 900,
    args: list[str] | None = None,
) -> dict:
    """Run ``model`` with ``feeds`` in the build keyed ``build_key`` (e.g. ``"pnnx"``, ``"onnx2tf"``).

    ``args``: extra command-line arguments of the converter (read by the onnx2tf runner).
    """
    build = next(b for b in BUILDS if b.key == build_key)
    python = cached_venv(build.name, build.requirements, timeout=timeout)
    feeds_path = model.with_suffix(".feeds.npz")
    np.savez(feeds_path, **feeds)
    meta = {"model": str(model), "feeds": str(feeds_path), "out": str(model.with_suffix(".out.npy")),
            "inputs": list(feeds), "output": "y", "output_shape": output_shape, "repeats": 1, "src": str(ROOT / "src"),
            "tool": str(python.parent), "extension": False, "args": list(args or [])}  # fmt: skip
    meta_path = model.with_suffix(".meta.json")
    meta_path.write_text(json.dumps(meta))
    done = subprocess.run([str(python), "-c", build.runner, str(meta_path)], capture_output=True, text=True,
                          timeout=timeout, env=run_env(python))  # fmt: skip
    lines = done.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"error": f"runner exited {done.returncode}: {done.stderr[-300:]}"}
    print(json.dumps(result))
    return result
