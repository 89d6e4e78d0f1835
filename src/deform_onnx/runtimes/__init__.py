"""Runtime adapters: ONNX Runtime and OpenVINO (with a DeformConv conversion extension).

:func:`run_paths` runs one model every way this package knows (as it is, and
after :func:`deform_onnx.lower`, on each runtime) and :func:`reference`
computes the outputs to compare them with. Submodules import their runtime
lazily, so ``import deform_onnx`` works without OpenVINO installed.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

#: Accepted runtime names -> canonical name.
RUNTIME_NAMES = {"ort": "onnxruntime", "onnxruntime": "onnxruntime", "openvino": "openvino", "ov": "openvino"}

#: Above this many input elements the ONNX reference implementation (pure numpy loops) is too slow.
REFERENCE_MAX_ELEMENTS = 200_000


@dataclass
class PathResult:
    """One runtime/path: its outputs, or why it could not run; median latency in ms."""

    runtime: str
    path: str
    outputs: list[np.ndarray] | None = None
    reason: str | None = None
    latency_ms: float | None = None
    precision: str | None = None

    @property
    def ran(self) -> bool:
        return self.outputs is not None


def _one_line(e: BaseException) -> str:
    for line in str(e).strip().splitlines():
        line = line.strip()
        if line:
            return f"{type(e).__name__}: {line}" if len(line) < 20 else line
    return type(e).__name__


def _timed(fn: Callable[[], list[np.ndarray]], repeat: int) -> tuple[list[np.ndarray], float]:
    outputs = fn()  # warm-up (and the outputs compared)
    times = []
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return outputs, statistics.median(times)


def _ort_runner(model, feeds: dict[str, np.ndarray]):
    from .onnxruntime import session

    sess = session(model)
    names = [o.name for o in sess.get_outputs()]
    return lambda: [np.asarray(a) for a in sess.run(names, feeds)], "float32" if _all_f32(feeds) else "model"


def _ov_runner(model, feeds: dict[str, np.ndarray], precision: str | None):
    from . import openvino as dov

    compiled = dov.compile(model, precision=precision)
    request = compiled.create_infer_request()
    # A port may carry several names (OpenVINO merges names of folded values).
    args = [feeds[next(n for n in port.get_names() if n in feeds)] for port in compiled.inputs]

    def run():
        result = request.infer(args)
        return [np.array(result[port]) for port in compiled.outputs]

    return run, dov.inference_precision(compiled)


def _all_f32(feeds) -> bool:
    return all(a.dtype == np.float32 for a in feeds.values() if a.dtype.kind == "f")


def run_paths(
    model: str | os.PathLike,
    feeds: dict[str, np.ndarray],
    *,
    runtimes: Sequence[str] = ("onnxruntime", "openvino"),
    method: str = "auto",
    precision: str | None = "f32",
    repeat: int = 5,
) -> list[PathResult]:
    """Run ``model`` on every runtime, as it is and after :func:`deform_onnx.lower`.

    Paths: ONNX Runtime as is; ONNX Runtime after ``lower(method=...)``;
    OpenVINO with :func:`deform_onnx.openvino.extension`; OpenVINO after
    ``lower()``. A path that cannot run gets ``reason`` (one line) instead
    of outputs. ``precision`` is OpenVINO's inference precision hint.

    Raises:
        ValueError: an unknown runtime name.
    """
    from ..rewrite import lower

    wanted = []
    for name in runtimes:
        if name not in RUNTIME_NAMES:
            raise ValueError(f"unknown runtime {name!r}; choose from {', '.join(sorted(RUNTIME_NAMES))}")
        if RUNTIME_NAMES[name] not in wanted:
            wanted.append(RUNTIME_NAMES[name])
    lowered, lower_reason = None, None
    try:
        lowered = lower(model, method=method)
    except Exception as e:  # noqa: BLE001 - reported in the table
        lower_reason = f"lower() failed: {_one_line(e)}"
    results = []
    for runtime in wanted:
        from . import onnxruntime as ort_mod
        from . import openvino as ov_mod

        missing = (ort_mod if runtime == "onnxruntime" else ov_mod).available()
        for path, source in (("as is" if runtime == "onnxruntime" else "extension", model), (f"lower({method})", lowered)):
            result = PathResult(runtime, path)
            results.append(result)
            if missing:
                result.reason = missing
                continue
            if source is None:
                result.reason = lower_reason
                continue
            try:
                if runtime == "onnxruntime":
                    fn, result.precision = _ort_runner(source, feeds)
                else:
                    fn, result.precision = _ov_runner(source, feeds, precision)
                result.outputs, result.latency_ms = _timed(fn, repeat)
            except Exception as e:  # noqa: BLE001 - reported in the table
                result.reason = _one_line(e)
    return results


def reference(
    model: str | os.PathLike, feeds: dict[str, np.ndarray], results: Sequence[PathResult]
) -> tuple[list[np.ndarray] | None, str]:
    """Outputs to compare every path with, and where they come from.

    ONNX Runtime on the model as it is when that ran; else the ONNX reference
    implementation (``onnx.reference.ReferenceEvaluator``, pure numpy) on the
    model with its deformable nodes rewritten as the standard ``DeformConv``
    (``lower(method="native")``, opset >= 19), for inputs up to
    :data:`REFERENCE_MAX_ELEMENTS` elements. Returns ``(None, reason)`` when
    there is no reference.
    """
    for r in results:
        if r.runtime == "onnxruntime" and r.path == "as is" and r.ran:
            return r.outputs, "onnxruntime as is"
    size = sum(int(a.size) for a in feeds.values())
    if size > REFERENCE_MAX_ELEMENTS:
        return None, (
            f"no reference: onnxruntime did not run the model as is and the inputs ({size} elements) are too "
            f"large for the ONNX reference implementation (<= {REFERENCE_MAX_ELEMENTS}); pass smaller --input-shape"
        )
    try:
        from onnx.reference import ReferenceEvaluator

        from ..rewrite import lower, read_model
        from ..rewrite import default_opset as _opset

        current = _opset(read_model(model)) or 19
        native = lower(model, method="native", opset=max(current, 19))
        evaluator = ReferenceEvaluator(native)
        outputs = evaluator.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        return None, f"no reference: the ONNX reference implementation failed: {_one_line(e)}"
    return [np.asarray(o) for o in outputs], "onnx.reference (DeformConv)"


def max_abs_error(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    """Largest absolute difference over all outputs; ``inf`` on a shape mismatch or NaN."""
    if len(got) != len(want):
        return float("inf")
    err = 0.0
    for g, w in zip(got, want):
        if g.shape != w.shape:
            return float("inf")
        if g.size == 0:
            continue
        d = np.abs(g.astype(np.float64) - w.astype(np.float64))
        if not np.isfinite(d).all():
            return float("inf")
        err = max(err, float(d.max()))
    return err


__all__ = ["PathResult", "run_paths", "reference", "max_abs_error", "RUNTIME_NAMES"]
