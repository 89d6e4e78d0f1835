"""Runtime sessions as the benchmark configures them: ONNX Runtime and OpenVINO CPU, plus model-file stats.

Every suite (:mod:`.deform_conv`, :mod:`.sampling`) opens its models through
these helpers, so all rows of all tables run under the same settings.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from collections.abc import Set
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .config import ORT_CONFIG, ORT_OPT_LEVELS, check_opt_level, openvino_config
from .harness import ModelStats, Prepared


def ort_session_options(threads: int, opt_level: str | None = None, config: dict | None = None):
    """``SessionOptions``: ``threads`` intra-op threads, one inter-op thread, sequential, :data:`ORT_CONFIG`.

    ``opt_level`` (a key of :data:`ORT_OPT_LEVELS`) sets ``graph_optimization_level``;
    ``None`` keeps ONNX Runtime's default (``all``).
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    for key, value in (config or ORT_CONFIG).items():
        so.add_session_config_entry(key, value)
    if opt_level is not None:
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, ORT_OPT_LEVELS[check_opt_level(opt_level)])
    return so


def ort_session(path: str | os.PathLike, threads: int, opt_level: str | None = None):
    """A CPU session on ``path`` with :func:`ort_session_options`."""
    import onnxruntime as ort

    return ort.InferenceSession(str(path), ort_session_options(threads, opt_level), providers=["CPUExecutionProvider"])


def ort_prepared(
    path: Path,
    feeds: dict[str, np.ndarray],
    threads: int,
    stats: ModelStats,
    opt_level: str | None = None,
    reference: np.ndarray | None = None,
) -> Prepared:
    """A contender running ``path`` in ONNX Runtime on the ``feeds`` its inputs name (others are dropped)."""
    sess = ort_session(path, threads, opt_level)
    names = {i.name for i in sess.get_inputs()}
    feeds = {k: v for k, v in feeds.items() if k in names}
    return Prepared(
        run=lambda: sess.run(None, feeds),
        output=lambda: sess.run(None, feeds)[0],
        memory_job={"kind": "ort", "model": str(path), "opt_level": opt_level},
        stats=stats,
        reference=reference,
    )


# -- ONNX Runtime's profiler ---------------------------------------------------
@dataclass
class NodeTime:
    """One node in ORT's profile: median kernel time per run (ms) and output size (bytes)."""

    name: str
    op_type: str
    ms: float
    output_bytes: int


def ort_profile(
    path: str | os.PathLike,
    feeds: dict,
    threads: int = 2,
    runs: int = 20,
    warmup: int = 3,
    opt_level: str | None = None,
) -> list[NodeTime]:
    """Per-node kernel times of ``path`` from ``SessionOptions.enable_profiling``, slowest first.

    The first ``warmup`` runs are left out; each node's time is its median
    over the remaining ``runs``. Nodes are named as ORT names them after its
    graph optimisations (fused nodes, layout transforms such as
    ``ReorderInput``, appear as ORT runs them).
    """
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="deform-onnx-profile-") as tmp:
        so = ort_session_options(threads, opt_level)
        so.enable_profiling = True
        so.profile_file_prefix = str(Path(tmp) / "ort")
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        names = {i.name for i in sess.get_inputs()}
        feeds = {k: v for k, v in feeds.items() if k in names}
        for _ in range(warmup + runs):
            sess.run(None, feeds)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    per_node: dict[str, list[float]] = {}
    info: dict[str, tuple[str, int]] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            name = e["name"][: -len("_kernel_time")]
            per_node.setdefault(name, []).append(e["dur"] / 1e3)
            args = e.get("args", {})
            info[name] = (args.get("op_name", "?"), int(args.get("output_size", 0) or 0))
    out = [NodeTime(n, info[n][0], statistics.median(d[warmup:] or d), info[n][1]) for n, d in per_node.items()]
    return sorted(out, key=lambda t: -t.ms)


# -- OpenVINO -----------------------------------------------------------------
def openvino_feeds(compiled, arrays: dict) -> dict:
    """Inputs keyed by port index. A port can carry several tensor names (OpenVINO
    merges a graph input with the output of a following Reshape), so match on
    all of them; an input left unfed would run on uninitialised memory.

    Raises:
        KeyError: a model input none of ``arrays`` names.
    """
    feeds = {}
    for index, port in enumerate(compiled.inputs):
        names = port.get_names()
        match = [k for k in arrays if k in names]
        if not match:
            raise KeyError(f"no array for OpenVINO input {sorted(names)}")
        feeds[index] = arrays[match[0]]
    return feeds


def openvino_compile(path: Path, threads: int, with_extension: bool):
    """Compile an ONNX file for OpenVINO CPU at f32 (with deform-onnx's extension if asked)."""
    import openvino as ov

    core = ov.Core()
    if with_extension:
        from .. import openvino as dov

        for ext in dov.extension():
            core.add_extension(ext)
    return core.compile_model(core.read_model(str(path)), "CPU", openvino_config(threads))


# -- model files ----------------------------------------------------------------
def largest_constant(proto, weight_sizes: Set[int]) -> int:
    """Bytes of the largest initializer or ``Constant`` that is not the layer's own weights.

    A tensor whose element count is in ``weight_sizes`` (the weight, a kernel
    row or tap of it, the bias) is taken for the exporter's folded copy of
    the weights and skipped.
    """
    from onnx import numpy_helper

    sizes = []
    tensors = list(proto.graph.initializer)
    for node in proto.graph.node:
        if node.op_type == "Constant":
            tensors += [a.t for a in node.attribute if a.name == "value"]
    for t in tensors:
        arr = numpy_helper.to_array(t)
        if arr.size not in weight_sizes:
            sizes.append(arr.nbytes)
    return max(sizes, default=0)


def file_stats(path: Path, export_s: float | None, weight_sizes: Set[int] = frozenset()) -> ModelStats:
    """Node count, file size and :func:`largest_constant` of an ONNX file."""
    import onnx

    proto = onnx.load(str(path))
    return ModelStats(
        nodes=len(proto.graph.node),
        file_bytes=path.stat().st_size,
        largest_constant_bytes=largest_constant(proto, set(weight_sizes)),
        export_s=export_s,
    )
