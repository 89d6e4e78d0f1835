"""Runtime adapters: ONNX Runtime and OpenVINO (with a DeformConv conversion extension).

:func:`run_paths` runs one model every way this package knows (as it is, and
after :func:`deform_onnx.lower`, on each runtime) and :func:`reference`
computes the outputs to compare them with. Submodules import their runtime
lazily, so ``import deform_onnx`` works without OpenVINO installed.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .deadline import Deadline, DeadlineExceeded, one_line, ort_run, ov_infer
from .references import reference

#: Accepted runtime names -> canonical name.
RUNTIME_NAMES = {"ort": "onnxruntime", "onnxruntime": "onnxruntime", "openvino": "openvino", "ov": "openvino"}


@dataclass
class PathResult:
    """One runtime/path: its outputs, or why it could not run; median latency in ms.

    ``installed``: ``False`` when the runtime is not installed (``reason`` says how to install it);
    ``deform-onnx check`` may then skip the path when the user did not name the runtime.
    ``defaults``: OpenVINO compiled with no config (its defaults on this CPU: bf16 where the CPU has AMX);
    ``precision`` is the one it used.
    """

    runtime: str
    path: str
    outputs: list[np.ndarray] | None = None
    reason: str | None = None
    latency_ms: float | None = None
    precision: str | None = None
    installed: bool = True
    defaults: bool = False

    @property
    def ran(self) -> bool:
        """Whether the path produced outputs."""
        return self.outputs is not None


def _timed(
    fn: Callable[[Deadline], list[np.ndarray]], repeat: int, deadline: Deadline
) -> tuple[list[np.ndarray], float]:
    """The outputs of a first run, and the median ms of up to ``repeat`` more (fewer when time runs out)."""
    t0 = time.perf_counter()
    outputs = fn(deadline)  # warm-up (and the outputs compared)
    times = [(time.perf_counter() - t0) * 1e3]
    timed: list[float] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        try:
            fn(deadline)
        except DeadlineExceeded:
            break  # the outputs are in: fewer timed runs, not a failed path
        timed.append((time.perf_counter() - t0) * 1e3)
    times = timed or times  # the first run counts only when no timed run finished
    return outputs, statistics.median(times)


def _ort_runner(model, feeds: dict[str, np.ndarray]):
    from .onnxruntime import session

    sess = session(model)
    names = [o.name for o in sess.get_outputs()]

    def run(deadline: Deadline) -> list[np.ndarray]:
        return [np.asarray(a) for a in ort_run(sess, names, feeds, deadline)]

    return run, _dtypes(feeds)


def _ov_runner(model, feeds: dict[str, np.ndarray], precision: str | None):
    from . import openvino as dov

    compiled = dov.compile(model, precision=precision)
    request = compiled.create_infer_request()
    # A port may carry several names (OpenVINO merges names of folded values).
    args = [_ov_input(feeds[next(n for n in port.get_names() if n in feeds)]) for port in compiled.inputs]

    def run(deadline: Deadline) -> list[np.ndarray]:
        ov_infer(request, args, deadline)
        return [_ov_output(request.get_tensor(port)) for port in compiled.outputs]

    return run, dov.inference_precision(compiled)


def _ov_input(a: np.ndarray):
    """``a`` as OpenVINO takes it: a bfloat16 array (ml_dtypes) as a bf16 tensor of its bits, else as is."""
    if a.dtype.name != "bfloat16":
        return a
    import openvino as ov

    tensor = ov.Tensor(ov.Type.bf16, list(a.shape))
    tensor.data.view(np.uint16)[...] = np.ascontiguousarray(a).view(np.uint16)
    return tensor


def _ov_output(tensor) -> np.ndarray:
    """An output tensor as numpy; bf16 ones as ml_dtypes bfloat16 (OpenVINO shows their bits as a 16-bit array)."""
    import openvino as ov

    if tensor.element_type == ov.Type.bf16:
        import ml_dtypes

        return np.array(tensor.data).view(np.uint16).view(ml_dtypes.bfloat16)
    return np.array(tensor.data)


def _dtypes(feeds) -> str:
    """The floating dtypes of the inputs (ONNX Runtime computes in the model's own types)."""
    return ",".join(sorted({str(a.dtype) for a in feeds.values() if a.dtype.kind == "f"})) or "model"


def run_paths(
    model: str | os.PathLike,
    feeds: dict[str, np.ndarray],
    *,
    runtimes: Sequence[str] = ("onnxruntime", "openvino"),
    method: str | None = "auto",
    target: str | None = None,
    force: bool = False,
    precision: str | None = "f32",
    defaults: bool = False,
    repeat: int = 5,
    timeout: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[PathResult]:
    """Run ``model`` on every runtime, as it is and after :func:`deform_onnx.lower`.

    Paths: ONNX Runtime as is; ONNX Runtime after ``lower(method=...)``;
    OpenVINO with :func:`deform_onnx.openvino.extension` ("extension"); OpenVINO
    after ``lower()``. A model without deformable nodes gets no ``lower()``
    paths (they would run the same file; :func:`lowered_here` decides, as ``lower()`` does) and
    its OpenVINO path is "as is". A
    path that cannot run gets ``reason`` (one line) instead of outputs.

    Args:
        method: ``lower()``'s method; ``None`` with a ``target``: the target's own choice, its per-class forms
            included (:attr:`deform_onnx.targets.base.Target.class_methods`), as ``deform-onnx lower --target``
            without ``--method``; ``None`` without one: ``auto``.
        target: runtime target for ``lower()`` (its graph forms and rules, as
            ``deform-onnx lower --target``); ``force`` writes past its rules.
        precision: OpenVINO's inference precision hint.
        defaults: also run the OpenVINO "as is"/"extension" path as a user who passes no config does (a plain
            ``compile_model(model, "CPU")``): a path ``"<as is>, defaults"`` whose ``precision`` is the one OpenVINO
            picked (bf16 on CPUs with AMX); only when OpenVINO is installed.
        repeat: timed runs after the first (the median is reported).
        timeout: seconds each path may spend running (session building not
            counted); a path past it stops with a "timed out" reason, or with
            fewer timed runs when its first run finished in time.
        progress: called with a description as each path starts.

    Raises:
        ValueError: an unknown runtime name.
    """
    from ..ops.deform_conv.sources import find_nodes
    from ..rewrite import read_model

    wanted = []
    for name in runtimes:
        if name not in RUNTIME_NAMES:
            raise ValueError(f"unknown runtime {name!r}; choose from {', '.join(sorted(RUNTIME_NAMES))}")
        if RUNTIME_NAMES[name] not in wanted:
            wanted.append(RUNTIME_NAMES[name])
    parsed = read_model(model)
    if method is None and target is None:
        method = "auto"
    deformable = bool(find_nodes(parsed))  # OpenVINO then runs with the extension
    to_lower = bool(lowered_here(parsed, method, target, force))  # the same decision as lower()'s
    lowered, lower_reason = None, None
    if to_lower:
        label = f"lower({method or _target_method(parsed, target, force)})"
        try:
            lowered, label = _lowered(model, method, target, force, label)
        except Exception as e:  # noqa: BLE001 - reported in the table
            lower_reason = f"lower() failed: {one_line(e)}"
    results = []
    for runtime in wanted:
        from . import onnxruntime as ort_mod
        from . import openvino as ov_mod

        missing = (ort_mod if runtime == "onnxruntime" else ov_mod).available()
        as_is = "extension" if runtime == "openvino" and deformable else "as is"
        paths: list[tuple[str, Any, str | None]] = [(as_is, model, precision)]
        if runtime == "openvino" and defaults and not missing:
            paths.append((f"{as_is}, defaults", model, None))  # OpenVINO's own choice on this CPU
        paths += [(label, lowered, precision)] if to_lower else []
        for path, source, hint in paths:
            result = PathResult(runtime, path, defaults=hint is None and runtime == "openvino")
            results.append(result)
            if missing:
                result.reason, result.installed = missing, False
                continue
            if source is None:
                result.reason = lower_reason
                continue
            if progress is not None:
                progress(f"{runtime} {path}")
            try:
                if runtime == "onnxruntime":
                    fn, result.precision = _ort_runner(source, feeds)
                else:
                    fn, result.precision = _ov_runner(source, feeds, hint)
                result.outputs, result.latency_ms = _timed(fn, repeat, Deadline(timeout))
            except Exception as e:  # noqa: BLE001 - reported in the table
                result.reason = runtime_reason(e)
    return results


def _lowered(model, method: str | None, target: str | None, force: bool, label: str) -> tuple[Any, str]:
    """``lower(model, ...)`` as a proto, and its path's label: with a target's per-class forms in force (no
    ``method``), the forms the lowering wrote (another form than the target's method for some nodes or all:
    ``lower(gather)``, ``lower(gather+grid_sample)``), read from the same lowering's report.
    """
    import onnx_ir as ir

    from ..rewrite import lower_model, read_model

    lowered, report = lower_model(read_model(model), method=method, target=target, force=force)
    ir.external_data.load_to_model(lowered)  # as lower(): the proto holds its data
    forms = list(dict.fromkeys(r.lowering for r in report.replaced))
    return ir.to_proto(lowered), (f"lower({'+'.join(forms)})" if forms and method is None else label)


def _target_method(model, target: str | None, force: bool) -> str:
    """The method ``lower(model, target=target)`` picks for the file (the label of its path)."""
    from ..rewrite.model_io import default_opset
    from ..targets.hooks import for_lower

    try:
        return for_lower(target, None, None, default_opset(model), force).method
    except ValueError:
        return f"target {target}"


def lowered_here(model, method: str | None, target: str | None = None, force: bool = False) -> list:
    """The nodes ``lower(model, method=..., target=...)`` replaces (:func:`deform_onnx.rewrite.lowerable.nodes_lowered`
    at the opset the target keeps or picks); a method or target that fails here leaves the decision to ``lower()``.
    """
    from ..rewrite.lowerable import nodes_lowered
    from ..rewrite.model_io import default_opset

    opset = None
    if target is not None:
        from ..targets.hooks import for_lower

        try:
            choice = for_lower(target, method, None, default_opset(model), force)
            method, opset = choice.method, choice.opset
        except ValueError:
            pass
    try:
        return nodes_lowered(model, method or "auto", opset)
    except ValueError:
        return [None]  # lower() will say why (its row shows the reason)


#: Longest reason a table row shows; the rest of a runtime's message is cut.
MAX_REASON = 160


def runtime_reason(e: BaseException) -> str:
    """Why a path did not run, in one short line.

    ONNX Runtime's load errors repeat the whole node signature; the op and
    opset it lacks are what matters (``DeformConv`` exists from opset 19).
    """
    text = str(e)
    found = re.search(r"No Op registered for (\S+) with domain_version of (\d+)", text)
    if found:
        op, version = found.groups()
        hint = "; DeformConv exists from opset 19: lower the file or export at 19+" if op == "DeformConv" else ""
        return f"onnxruntime has no {op} at opset {version}{hint}"
    found = re.search(r"Could not find an implementation for (\S+)\((\d+)\)", text)
    if found:
        op, version = found.groups()
        return f"onnxruntime has no CPU kernel for {op}({version}) with these input types (NOT_IMPLEMENTED)"
    line = one_line(e)
    return line if len(line) <= MAX_REASON else line[: MAX_REASON - 3] + "..."


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
