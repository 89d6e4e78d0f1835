"""The runtime settings every benchmark row runs under (ONNX Runtime, OpenVINO): plain values, no runtime imported.

Kept apart from :mod:`.runtimes` so that :mod:`.harness` and :mod:`.memory`
read them without importing the module that builds on the harness.
"""

from __future__ import annotations

#: ONNX Runtime session config used by the benchmark. Idle intra-op threads do
#: not spin: each session has its own pool, and a pool still spinning after its
#: call takes a core from the next contender (and from other processes on a
#: shared machine); with spinning, ORT's times on a loaded 2-core machine were
#: 4x longer and their ratios depended on the neighbours.
ORT_CONFIG = {"session.intra_op.allow_spinning": "0"}

#: ``--ort-opt-level`` names -> ``onnxruntime.GraphOptimizationLevel`` members. Spelled out here
#: (not read from onnxruntime) so the CLI can check a name without importing the runtime.
ORT_OPT_LEVELS = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",
    "all": "ORT_ENABLE_ALL",
}


def check_opt_level(level: str) -> str:
    """``level`` if it is a key of :data:`ORT_OPT_LEVELS`.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if level not in ORT_OPT_LEVELS:
        raise ValueError(f"unknown ONNX Runtime optimisation level {level!r}; choose from {', '.join(ORT_OPT_LEVELS)}")
    return level


def openvino_config(threads: int) -> dict:
    """CPU plugin settings: f32, ``threads`` inference threads, one stream, latency mode."""
    return {
        "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY",
    }
