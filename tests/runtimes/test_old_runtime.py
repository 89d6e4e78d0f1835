"""One cheap row of the runtime matrix in the normal suite: the oldest ONNX Runtime build, in its own venv.

ONNX Runtime 1.16.3 knows IR versions up to 9 (case c25): the opset-17
grid_sample file and the opset-11 gather file that ``deform_onnx.export``
writes must load and match torchvision there. The runtime lives in a cached
virtual environment (:func:`deform_onnx.runtimes.venvs.cached_venv`, shared
with scripts/runtime_matrix.py) so that it never mixes with the project's own
packages; the test creates it on first use (``python -m venv`` + ``pip install
onnxruntime==1.16.3 'numpy<2'``, bounded by :data:`CREATE_TIMEOUT`) and reuses it
afterwards.

When the venv cannot be created (no package registry), the test fails and says
so; set ``DEFORM_ONNX_NO_OLD_RUNTIMES=1`` to skip it on such a machine.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

import deform_onnx
from deform_onnx.runtimes.venvs import cached_venv
from util import DeformLayer, assert_close, case_config, make_inputs, reference

ORT_VERSION = "1.16.3"
#: Seconds allowed to create the venv (download + install, ~15 MB); measured here: ~20 s.
CREATE_TIMEOUT = 150
SKIP_ENV = "DEFORM_ONNX_NO_OLD_RUNTIMES"

_RUN = """
import json, sys
import numpy as np, onnxruntime as ort
path, feeds, out = sys.argv[1], sys.argv[2], sys.argv[3]
options = ort.SessionOptions()
options.log_severity_level = 3
try:
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
except Exception as exc:
    print(json.dumps({"version": ort.__version__, "error": str(exc).strip().splitlines()[0]}))
    sys.exit(0)
with np.load(feeds) as data:
    result = session.run(None, {i.name: data[i.name] for i in session.get_inputs()})
np.save(out, result[0])
print(json.dumps({"version": ort.__version__, "error": None}))
"""


def old_runtime_python(version: str = ORT_VERSION) -> Path:
    """The interpreter of the cached venv with ``onnxruntime==version`` (created if missing; RuntimeError if not)."""
    return cached_venv(f"ort-{version}", [f"onnxruntime=={version}", "numpy<2"], timeout=CREATE_TIMEOUT)


@pytest.fixture(scope="module")
def old_python() -> Path:
    if os.environ.get(SKIP_ENV):
        pytest.skip(f"{SKIP_ENV} is set: the onnxruntime {ORT_VERSION} row is not run")
    try:
        return old_runtime_python()
    except RuntimeError as exc:
        pytest.fail(f"{exc}; this row needs the package registry (set {SKIP_ENV}=1 to skip it)")


def run_old(python: Path, model: bytes, inputs: dict, tmp_path: Path) -> tuple[dict, np.ndarray | None]:
    path, feeds, out = tmp_path / "m.onnx", tmp_path / "feeds.npz", tmp_path / "out.npy"
    path.write_bytes(model)
    np.savez(feeds, **{k: v.numpy() for k, v in inputs.items()})
    done = subprocess.run([str(python), "-c", _RUN, str(path), str(feeds), str(out)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    status = json.loads(done.stdout.strip().splitlines()[-1])
    return status, (np.load(out) if status["error"] is None else None)


CFG = case_config("c25")


@pytest.mark.parametrize("method,opset,dynamo", [("grid_sample", 17, True), ("gather", 11, False)])
def test_export_runs_on_the_oldest_onnxruntime(old_python, tmp_path, method, opset, dynamo):
    layer = DeformLayer(CFG).eval()
    inputs = make_inputs(CFG)
    buf = io.BytesIO()
    deform_onnx.export(layer, tuple(inputs.values()), buf, opset_version=opset, method=method, dynamo=dynamo,
                       input_names=list(inputs))  # fmt: skip
    status, got = run_old(old_python, buf.getvalue(), inputs, tmp_path)
    assert status["version"] == ORT_VERSION
    assert status["error"] is None, f"onnxruntime {ORT_VERSION}: {status['error']}"
    assert_close(got, reference(layer, inputs), what=f"{method}@{opset} on onnxruntime {ORT_VERSION}")

    if dynamo:  # the control: the same file stamped IR 10 (as torch writes it) is refused there
        proto = onnx.load_from_string(buf.getvalue())
        proto.ir_version = 10
        status, _ = run_old(old_python, proto.SerializeToString(), inputs, tmp_path)
        assert status["error"] is not None and "IR version" in status["error"]
