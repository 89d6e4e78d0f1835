"""quantize's ONNX Runtime sessions: how fast the INT8 file runs against its float file, and its fused kernels."""

from __future__ import annotations

import os
import time

import numpy as np
import onnx

#: A quantized file slower than the float one by more than this factor gets a note in the report.
SLOWER = 1.05
#: Seconds of timed calls per file at most (after one warm-up call), and the most calls.
BUDGET_S, MAX_CALLS = 2.0, 7
#: ONNX Runtime's integer kernels, counted in the optimized graph (the fusion the placement aims at).
INTEGER_KERNELS = (
    "QLinearConv",
    "QLinearMatMul",
    "MatMulIntegerToFloat",
    "MatMulInteger",
    "QGemm",
    "QLinearAdd",
    "QLinearMul",
    "QLinearConcat",
    "QLinearSigmoid",
    "QLinearAveragePool",
    "QLinearGlobalAveragePool",
    "DynamicQuantizeMatMul",
)


def ort_session(model: onnx.ModelProto | str, **options):
    """A quiet ONNX Runtime CPU session of ``model`` (a ModelProto or a path); ``options``: ``SessionOptions`` fields."""
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.log_severity_level = 3
    for k, v in options.items():
        setattr(o, k, v)
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return ort.InferenceSession(data, o, providers=["CPUExecutionProvider"])


def median_ms(model: onnx.ModelProto | str, feed: dict) -> float | None:
    """Median milliseconds per call of ``model`` on ``feed`` (default session options); ``None``: ORT cannot run it."""
    try:
        session = ort_session(model)
        session.run(None, feed)
    except Exception:  # noqa: BLE001 - no kernel for a node (mmcv, plugins): nothing to time
        return None
    calls: list[float] = []
    start = time.perf_counter()
    while len(calls) < MAX_CALLS and (len(calls) < 3 or time.perf_counter() - start < BUDGET_S):
        t = time.perf_counter()
        session.run(None, feed)
        calls.append(time.perf_counter() - t)
    return float(np.median(calls)) * 1e3


def slower_note(float_ms: float, int8_ms: float) -> str | None:
    """The report's note when the INT8 file ran slower than the float file here, else ``None``."""
    ratio = int8_ms / float_ms
    if ratio <= SLOWER:
        return None
    return (
        f"on this machine the INT8 file ran {ratio:.2f}x the float file's time (ONNX Runtime CPU, "
        f"{float_ms:.3g} ms -> {int8_ms:.3g} ms; one-off timing): small layers gain less from integer "
        "kernels than the extra nodes cost, so keep the float file where speed matters"
    )


def fused_kernels(path: str, tmp: str) -> dict[str, int]:
    """Integer kernels in ONNX Runtime's optimized graph of ``path`` (extended level: the QDQ fusions, no NCHWc)."""
    import onnxruntime as ort

    out = os.path.join(tmp, "ort_optimized.onnx")
    ort_session(
        path, graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, optimized_model_filepath=out
    )
    counts: dict[str, int] = {}
    for node in onnx.load(out).graph.node:
        if node.op_type in INTEGER_KERNELS:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts
