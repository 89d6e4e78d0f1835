"""Side-by-side benchmark of deformable convolution on CPU.

One harness serves ``benchmarks/run.py`` and ``deform-onnx bench``. For each
shape it builds one ``torchvision.ops.deform_conv2d`` layer (seeded weights
and inputs), prepares every contender, checks its output against torchvision,
then times all contenders in ONE loop: each round runs every contender once,
in an order rotated by one each round (so no contender always runs first
after another), and the reported time is the median over the rounds after
warm-up. Ratios are taken to ONNX Runtime's native ``DeformConv`` kernel.

Contenders (:data:`CONTENDERS`): torchvision eager (PyTorch CPU); ONNX Runtime
with the native ``DeformConv`` (opset 19), the grid_sample lowering (opset
17), the gather lowering (opset 11) and the graph of the older pip exporter
``deform-conv2d-onnx-exporter`` 1.2.0 (opset 12; benchmark-only, used when
installed, never a dependency); OpenVINO CPU at f32 reading the native file
with :func:`deform_onnx.openvino.extension`, and reading the file after
:func:`deform_onnx.lower`. A contender that cannot run here (package missing)
is reported as ``n/a`` with the reason.

Per model it also records node count, file size, largest constant that is
not the layer's weight or bias, export time and the peak memory of one
inference (:func:`peak_memory`: resident-set high-water mark in a fresh
process, minus the resident set just before the inference).
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

#: Offsets are drawn as ``randn * OFFSET_SCALE`` pixels (many samples near or past borders).
OFFSET_SCALE = 2.0
#: Old pip exporter benchmarked against (never a dependency of deform-onnx).
OLD_EXPORTER = "deform-conv2d-onnx-exporter"
OLD_EXPORTER_VERSION = "1.2.0"
OP_NAME = "torchvision::deform_conv2d"
#: Contender all ratios are taken to.
REFERENCE = "ort-native"


# -- shapes -------------------------------------------------------------------
@dataclass(frozen=True)
class BenchShape:
    """One benchmarked layer: ``DeformConv2d(C, C, 3, padding=1)`` on an ``[N, C, H, H]`` input.

    Attributes:
        batch: N.
        channels: C (in = out channels).
        size: H = W, pixels.
        offset_groups: offset groups G (offset has ``2*G*9`` channels).
        stride: stride (both axes).
        mask: DCNv2 modulation mask present.
    """

    batch: int
    channels: int
    size: int
    offset_groups: int = 1
    stride: int = 1
    mask: bool = True

    @property
    def label(self) -> str:
        """``"1x64x64"`` (N x C x H=W) plus ``og8`` / ``s2`` / ``no mask``."""
        parts = [f"{self.batch}x{self.channels}x{self.size}"]
        if self.offset_groups != 1:
            parts.append(f"og{self.offset_groups}")
        if self.stride != 1:
            parts.append(f"s{self.stride}")
        if not self.mask:
            parts.append("no mask")
        return " ".join(parts)

    @property
    def out_size(self) -> int:
        return (self.size + 2 - 3) // self.stride + 1

    @classmethod
    def parse(cls, text: str) -> "BenchShape":
        """Parse ``"N,C,H[,og=G][,stride=S][,mask=0]"`` (``x`` also separates N, C, H).

        Raises:
            ValueError: malformed text or non-positive numbers (message shows the format).
        """
        usage = "expected N,C,H[,og=G][,stride=S][,mask=0|1], e.g. 1,64,64 or 1,64,64,og=8"
        parts = [p.strip() for p in text.replace("x", ",").split(",") if p.strip()]
        dims = [p for p in parts if "=" not in p]
        opts = dict(p.split("=", 1) for p in parts if "=" in p)
        try:
            n, c, h = (int(d) for d in dims)
            og = int(opts.pop("og", 1))
            stride = int(opts.pop("stride", 1))
            mask = opts.pop("mask", "1").lower() not in ("0", "false", "no", "off")
        except ValueError:
            raise ValueError(f"bad shape {text!r}: {usage}") from None
        if opts or min(n, c, h, og, stride) < 1:
            raise ValueError(f"bad shape {text!r}: {usage}")
        if c % og:
            raise ValueError(f"bad shape {text!r}: channels ({c}) must be divisible by og ({og})")
        return cls(n, c, h, og, stride, mask)


#: The shapes of issue 5 (N, C_in = C_out, H = W; kernel 3, padding 1).
FULL_SHAPES: tuple[BenchShape, ...] = (
    BenchShape(1, 64, 64),
    BenchShape(1, 256, 32),
    BenchShape(1, 128, 128),
    BenchShape(4, 64, 32),
    BenchShape(1, 64, 64, offset_groups=8),
    BenchShape(1, 128, 64, stride=2),
    BenchShape(1, 64, 64, mask=False),
)
QUICK_SHAPES: tuple[BenchShape, ...] = (BenchShape(1, 64, 64), BenchShape(1, 64, 64, mask=False))


# -- contenders -------------------------------------------------------------
class Unavailable(Exception):
    """The contender cannot run in this environment; the message says why."""


@dataclass
class ModelStats:
    """What a contender's model file costs. Sizes in bytes, times in seconds."""

    nodes: int | None = None
    file_bytes: int | None = None
    largest_constant_bytes: int | None = None
    export_s: float | None = None
    peak_bytes: int | None = None
    max_abs_err: float | None = None


@dataclass
class Cell:
    """One contender on one shape: status (``ok``, ``n/a (...)``, ``error: ...``), times, stats."""

    status: str = "ok"
    times: list[float] = field(default_factory=list)
    stats: ModelStats = field(default_factory=ModelStats)
    memory_job: dict | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.times)

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.ok else None


@dataclass
class Prepared:
    run: Callable[[], Any]
    output: Callable[[], np.ndarray]
    memory_job: dict | None
    stats: ModelStats


@dataclass(frozen=True)
class Contender:
    """A way to run the layer: ``key`` (CLI name), ``label`` (table row)."""

    key: str
    label: str
    prepare: Callable[["_Case"], Prepared]


# -- the layer and its inputs -------------------------------------------------
class _Case:
    """Model, inputs and reference output of one shape; files go to ``workdir``."""

    def __init__(self, shape: BenchShape, workdir: Path, threads: int):
        import torch

        self.shape, self.workdir, self.threads = shape, workdir, threads
        workdir.mkdir(parents=True, exist_ok=True)
        s = shape
        g = torch.Generator().manual_seed(0)
        k = 9 * s.channels
        self.weight = torch.randn(s.channels, s.channels, 3, 3, generator=g) / math.sqrt(k)
        self.bias = torch.randn(s.channels, generator=g) * 0.1
        ho = s.out_size
        self.inputs = {
            "input": torch.randn(s.batch, s.channels, s.size, s.size, generator=g),
            "offset": torch.randn(s.batch, 2 * s.offset_groups * 9, ho, ho, generator=g) * OFFSET_SCALE,
        }
        if s.mask:
            self.inputs["mask"] = torch.sigmoid(torch.randn(s.batch, s.offset_groups * 9, ho, ho, generator=g))
        self.module = _DeformLayer(self.weight, self.bias, s.stride).eval()
        self.args = tuple(self.inputs.values())
        self.feeds = {k: v.numpy() for k, v in self.inputs.items()}
        with torch.inference_mode():
            self.reference = self.module(*self.args).numpy()
        self.inputs_path = workdir / "inputs.npz"
        np.savez(self.inputs_path, **self.feeds, weight=self.weight.numpy(), bias=self.bias.numpy(),
                 stride=np.array(s.stride))
        self.native_path: Path | None = None
        w = self.weight.numel()
        #: Element counts of the weight, of one kernel row or tap of it, and of the bias:
        #: constants of these sizes are the layer's own weights, re-laid out by the exporter.
        self.weight_sizes = {w, w // 3, w // 9, self.bias.numel()}

    def path(self, name: str) -> Path:
        return self.workdir / f"{name}.onnx"

    def export(self, method: str, opset: int) -> tuple[Path, ModelStats]:
        """Export with :func:`deform_onnx.export` (TorchScript exporter, no verification)."""
        from .api import export

        path = self.path(f"{method}_opset{opset}")
        report = export(self.module, self.args, str(path), opset_version=opset, method=method, dynamo=False,
                        input_names=list(self.inputs), output_names=["output"], verify=False)
        return path, self.file_stats(path, report.export_seconds)

    def file_stats(self, path: Path, export_s: float | None) -> ModelStats:
        import onnx

        proto = onnx.load(str(path))
        return ModelStats(
            nodes=len(proto.graph.node),
            file_bytes=path.stat().st_size,
            largest_constant_bytes=largest_constant(proto, self.weight_sizes),
            export_s=export_s,
        )


def _DeformLayer(weight, bias, stride: int):
    """``deform_conv2d(input, offset, weight, bias, stride, padding=1, mask)`` with fixed weights."""
    import torch
    from torchvision.ops import deform_conv2d

    class DeformLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(weight, requires_grad=False)
            self.bias = torch.nn.Parameter(bias, requires_grad=False)

        def forward(self, input, offset, mask=None):
            return deform_conv2d(input, offset, self.weight, self.bias, stride=stride, padding=1, mask=mask)

    return DeformLayer()


def largest_constant(proto, weight_sizes: set[int]) -> int:
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


# -- ONNX Runtime -------------------------------------------------------------
#: ONNX Runtime session config used by the benchmark. Idle intra-op threads do
#: not spin: each session has its own pool, and a pool still spinning after its
#: call takes a core from the next contender (and from other processes on a
#: shared machine); with spinning, ORT's times on a loaded 2-core machine were
#: 4x longer and their ratios depended on the neighbours.
ORT_CONFIG = {"session.intra_op.allow_spinning": "0"}


def ort_session(path: Path, threads: int):
    """A CPU session with ``threads`` intra-op threads, one inter-op thread and :data:`ORT_CONFIG`."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    for key, value in ORT_CONFIG.items():
        so.add_session_config_entry(key, value)
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _ort_prepared(case: _Case, path: Path, stats: ModelStats) -> Prepared:
    sess = ort_session(path, case.threads)
    names = {i.name for i in sess.get_inputs()}
    feeds = {k: v for k, v in case.feeds.items() if k in names}
    return Prepared(
        run=lambda: sess.run(None, feeds),
        output=lambda: sess.run(None, feeds)[0],
        memory_job={"kind": "ort", "model": str(path)},
        stats=stats,
    )


def _ort_lowering(method: str, opset: int) -> Callable[[_Case], Prepared]:
    def prepare(case: _Case) -> Prepared:
        path, stats = case.export(method, opset)
        if method == "native":
            case.native_path = path
        return _ort_prepared(case, path, stats)

    return prepare


def old_exporter_module():
    """Import the old pip exporter (benchmark only), aliasing the torch module it expects.

    Raises:
        Unavailable: not installed.
    """
    if importlib.util.find_spec("deform_conv2d_onnx_exporter") is None:
        raise Unavailable(f"not installed: pip install {OLD_EXPORTER}=={OLD_EXPORTER_VERSION}")
    if "torch.onnx._type_utils" not in sys.modules:
        try:
            import torch.onnx._type_utils  # noqa: F401  (torch < 2.9)
        except ImportError:  # torch >= 2.9 moved it
            from torch.onnx._internal.torchscript_exporter import _type_utils

            sys.modules["torch.onnx._type_utils"] = _type_utils
    import deform_conv2d_onnx_exporter

    return deform_conv2d_onnx_exporter


def _prepare_old(case: _Case) -> Prepared:
    import torch

    from .exporters import torchscript as ts

    old = old_exporter_module()
    path = case.path("old_exporter_opset12")
    old.register_deform_conv2d_onnx_op()  # registers at opset 12 only
    try:
        start = time.perf_counter()
        torch.onnx.export(case.module, case.args, str(path), dynamo=False, opset_version=12,
                          input_names=list(case.inputs), output_names=["output"])
        seconds = time.perf_counter() - start
    finally:
        with warnings.catch_warnings():  # it registered opset 12 only: quiet "nothing at opset N"
            warnings.simplefilter("ignore", UserWarning)
            ts._uninstall()  # drop its symbolic; restore the user's registration, if any
        if ts._registered_method is not None:
            ts._install(ts._registered_method)
    return _ort_prepared(case, path, case.file_stats(path, seconds))


# -- torchvision --------------------------------------------------------------
def _prepare_torch(case: _Case) -> Prepared:
    import torch

    def run():
        with torch.inference_mode():
            return case.module(*case.args)

    return Prepared(run=run, output=lambda: run().numpy(), memory_job={"kind": "torch"}, stats=ModelStats())


# -- OpenVINO -----------------------------------------------------------------
def _openvino_api():
    if importlib.util.find_spec("openvino") is None:
        raise Unavailable("openvino not installed (pip install openvino)")
    try:
        from . import openvino as dov
    except ImportError as e:
        raise Unavailable(f"not yet available ({e})") from None
    if not hasattr(dov, "extension") or not hasattr(dov, "read_model"):
        raise Unavailable("not yet available (deform_onnx.openvino.extension)")
    reason = dov.available() if hasattr(dov, "available") else None
    if reason:
        raise Unavailable(reason)
    return dov


def openvino_config(threads: int) -> dict:
    """CPU plugin settings: f32, ``threads`` inference threads, one stream, latency mode."""
    return {
        "INFERENCE_PRECISION_HINT": "f32",
        "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY",
    }


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
        from . import openvino as dov

        for ext in dov.extension():
            core.add_extension(ext)
    return core.compile_model(core.read_model(str(path)), "CPU", openvino_config(threads))


def _ov_prepared(case: _Case, path: Path, stats: ModelStats, with_extension: bool) -> Prepared:
    compiled = openvino_compile(path, case.threads, with_extension)
    request = compiled.create_infer_request()
    feeds = openvino_feeds(compiled, case.feeds)

    def output():
        request.infer(feeds)
        return np.array(request.get_output_tensor(0).data)

    return Prepared(
        run=lambda: request.infer(feeds),
        output=output,
        memory_job={"kind": "ov", "model": str(path), "extension": with_extension},
        stats=stats,
    )


def _native_file(case: _Case) -> tuple[Path, ModelStats]:
    if case.native_path is None:
        case.native_path, stats = case.export("native", 19)
        return case.native_path, stats
    return case.native_path, case.file_stats(case.native_path, None)


def _prepare_ov_extension(case: _Case) -> Prepared:
    _openvino_api()
    path, stats = _native_file(case)
    stats.export_s = None  # reads the native file as exported
    return _ov_prepared(case, path, stats, with_extension=True)


def _prepare_ov_lowered(case: _Case) -> Prepared:
    _openvino_api()
    import onnx

    from . import lower

    native, _ = _native_file(case)
    start = time.perf_counter()
    proto = lower(str(native))  # "auto" at the file's opset 19: the grid_sample lowering
    seconds = time.perf_counter() - start
    path = case.path("lowered_auto")
    onnx.save(proto, str(path))
    return _ov_prepared(case, path, case.file_stats(path, seconds), with_extension=False)


CONTENDERS: tuple[Contender, ...] = (
    Contender("torch", "torchvision eager", _prepare_torch),
    Contender("ort-native", "ORT native (opset 19)", _ort_lowering("native", 19)),
    Contender("ort-grid_sample", "ORT grid_sample (opset 17)", _ort_lowering("grid_sample", 17)),
    Contender("ort-gather", "ORT gather (opset 11)", _ort_lowering("gather", 11)),
    Contender("ort-old", "ORT old exporter (opset 12)", _prepare_old),
    Contender("ov-extension", "OpenVINO + extension", _prepare_ov_extension),
    Contender("ov-lowered", "OpenVINO after lower()", _prepare_ov_lowered),
)
#: What each row is (for the report).
LEGEND = {
    "torch": "torchvision.ops.deform_conv2d, PyTorch CPU eager, torch.inference_mode()",
    "ort-native": "ONNX Runtime CPU, deform_onnx.export(method='native', opset 19): one DeformConv node",
    "ort-grid_sample": "ONNX Runtime CPU, deform_onnx.export(method='grid_sample', opset 17)",
    "ort-gather": "ONNX Runtime CPU, deform_onnx.export(method='gather', opset 11)",
    "ort-old": f"ONNX Runtime CPU, graph of pip {OLD_EXPORTER}=={OLD_EXPORTER_VERSION} "
    "(register_deform_conv2d_onnx_op(), torch.onnx.export(dynamo=False, opset 12))",
    "ov-extension": "OpenVINO CPU f32, the native file read with deform_onnx.openvino.extension() "
    "(DeformableConvolution-8)",
    "ov-lowered": "OpenVINO CPU f32, the native file after deform_onnx.lower() (auto at opset 19: grid_sample)",
}
CONTENDER_KEYS = tuple(c.key for c in CONTENDERS)


def select_contenders(keys: Sequence[str] | None) -> tuple[Contender, ...]:
    """Contenders by key, in the canonical order; ``None`` or empty means all.

    Raises:
        ValueError: an unknown key (the message lists the known ones).
    """
    if not keys:
        return CONTENDERS
    unknown = [k for k in keys if k not in CONTENDER_KEYS]
    if unknown:
        raise ValueError(f"unknown contender(s) {', '.join(unknown)}; choose from {', '.join(CONTENDER_KEYS)}")
    return tuple(c for c in CONTENDERS if c.key in keys)


# -- ONNX Runtime's profiler ---------------------------------------------------
@dataclass
class NodeTime:
    """One node in ORT's profile: median kernel time per run (ms) and output size (bytes)."""

    name: str
    op_type: str
    ms: float
    output_bytes: int


def ort_profile(path: str | os.PathLike, feeds: dict, threads: int = 2, runs: int = 20,
                warmup: int = 3) -> list[NodeTime]:
    """Per-node kernel times of ``path`` from ``SessionOptions.enable_profiling``, slowest first.

    The first ``warmup`` runs are left out; each node's time is its median
    over the remaining ``runs``. Nodes are named as ORT names them after its
    graph optimisations (fused nodes, layout transforms such as
    ``ReorderInput``, appear as ORT runs them).
    """
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="deform-onnx-profile-") as tmp:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        for key, value in ORT_CONFIG.items():
            so.add_session_config_entry(key, value)
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


# -- timing -------------------------------------------------------------------
#: Untimed pause between two calls (seconds): lets the previous runtime's worker
#: threads stop spinning before the next runtime starts on the same cores.
PAUSE_S = 0.005


def time_round_robin(runners: dict[str, Callable[[], Any]], runs: int, warmup: int,
                     on_round: Callable[[int], None] | None = None, pause: float = PAUSE_S) -> dict[str, list[float]]:
    """Seconds per call of each runner, interleaved.

    Every round calls each runner once; the starting runner rotates by one
    each round. The first ``warmup`` rounds are not recorded. ``pause``
    seconds pass (untimed) between calls.
    """
    keys = list(runners)
    times: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(warmup + runs):
        shift = r % len(keys) if keys else 0
        for key in keys[shift:] + keys[:shift]:
            if pause:
                time.sleep(pause)
            start = time.perf_counter()
            runners[key]()
            elapsed = time.perf_counter() - start
            if r >= warmup:
                times[key].append(elapsed)
        if on_round is not None:
            on_round(r)
    return times


# -- peak memory in a fresh process -------------------------------------------
_CHILD = textwrap.dedent(
    r'''
    import gc, json, resource, sys
    import numpy as np

    job = json.loads(sys.argv[1])
    data = dict(np.load(job["inputs"]))
    feeds = {k: data[k] for k in ("input", "offset", "mask") if k in data}
    threads = job["threads"]

    if job["kind"] == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        for key, value in job["ort_config"].items():
            so.add_session_config_entry(key, value)
        sess = ort.InferenceSession(job["model"], so, providers=["CPUExecutionProvider"])
        names = {i.name for i in sess.get_inputs()}
        feeds = {k: v for k, v in feeds.items() if k in names}
        run = lambda: sess.run(None, feeds)
    elif job["kind"] == "ov":
        import openvino as ov
        core = ov.Core()
        if job["extension"]:
            from deform_onnx import openvino as dov
            for ext in dov.extension():
                core.add_extension(ext)
        compiled = core.compile_model(core.read_model(job["model"]), "CPU", job["ov_config"])
        request = compiled.create_infer_request()
        feeds = {i: next(v for k, v in feeds.items() if k in port.get_names())
                 for i, port in enumerate(compiled.inputs)}
        run = lambda: request.infer(feeds)
    else:
        import torch
        from torchvision.ops import deform_conv2d
        torch.set_num_threads(threads)
        t = {k: torch.from_numpy(v) for k, v in feeds.items()}
        w, b = torch.from_numpy(data["weight"]), torch.from_numpy(data["bias"])
        s = int(data["stride"])
        def run():
            with torch.inference_mode():
                return deform_conv2d(t["input"], t["offset"], w, b, stride=s, padding=1, mask=t.get("mask"))

    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise OSError(key)

    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the RSS high-water mark (Linux >= 4.0)
        before = status("VmRSS")
        run()
        peak = status("VmHWM") - before
        method = "VmHWM after clear_refs"
    except OSError:
        before = status("VmRSS") if sys.platform.startswith("linux") else 0
        run()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
        method = "ru_maxrss"
    print(json.dumps({"peak_bytes": max(peak, 0), "method": method}))
    '''
)

#: How :func:`peak_memory` measures (for reports).
PEAK_MEMORY_METHOD = (
    "peak memory = resident-set high-water mark during the first inference in a fresh process "
    "(session/compiled model and inputs already in memory; Linux VmHWM, reset with /proc/self/clear_refs) "
    "minus the resident set just before it"
)


def peak_memory(job: dict, inputs: Path, threads: int, timeout: float = 600) -> int:
    """Peak extra resident memory (bytes) of one inference of ``job``, in a fresh Python process.

    ``job``: ``{"kind": "ort" | "ov" | "torch", "model": path, "extension": bool}``.

    Raises:
        RuntimeError: the child process failed (its last stderr line is in the message).
    """
    job = dict(job, inputs=str(inputs), threads=threads, ov_config=openvino_config(threads), ort_config=ORT_CONFIG)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(job)], capture_output=True, text=True,
                          timeout=timeout, env=env)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"peak-memory process failed: {last}")
    return int(json.loads(proc.stdout.strip().splitlines()[-1])["peak_bytes"])


# -- the whole run ------------------------------------------------------------
@dataclass
class BenchResult:
    """Everything one run measured, plus its settings."""

    shapes: list[BenchShape]
    contenders: list[Contender]
    cells: dict[tuple[str, str], Cell]
    runs: int
    warmup: int
    threads: int
    memory: bool
    seconds: float = 0.0
    command: str = ""
    machine: dict = field(default_factory=dict)

    def cell(self, shape: BenchShape, key: str) -> Cell:
        """The cell of one contender on one shape (``n/a`` if it was not selected)."""
        return self.cells.get((shape.label, key)) or Cell("n/a (not selected)")

    def ratio(self, shape: BenchShape, key: str, to: str = REFERENCE) -> float | None:
        """Median time of ``key`` / median time of ``to`` on one shape."""
        a, b = self.cell(shape, key).median, self.cell(shape, to).median
        return a / b if a is not None and b else None

    def geomean_ratio(self, key: str, to: str = REFERENCE) -> float | None:
        """Geometric mean over shapes of :meth:`ratio`; ``None`` unless every shape has both."""
        ratios = [self.ratio(s, key, to) for s in self.shapes]
        if not ratios or any(r is None for r in ratios):
            return None
        return math.exp(sum(math.log(r) for r in ratios) / len(ratios))

    def memory_ratio(self, shape: BenchShape, key: str, to: str = REFERENCE) -> float | None:
        a = self.cell(shape, key).stats.peak_bytes
        b = self.cell(shape, to).stats.peak_bytes
        return a / b if a is not None and b else None


def run_benchmark(
    shapes: Sequence[BenchShape] = FULL_SHAPES,
    contenders: Sequence[Contender] = CONTENDERS,
    *,
    runs: int = 20,
    warmup: int = 3,
    threads: int = 2,
    memory: bool = True,
    workdir: str | os.PathLike | None = None,
    log: Callable[[str], None] = lambda msg: None,
) -> BenchResult:
    """Prepare, check and time every contender on every shape.

    Args:
        shapes: layers to benchmark.
        contenders: what to compare (:data:`CONTENDERS` or a subset).
        runs: timed rounds per shape (median over them).
        warmup: untimed rounds first.
        threads: intra-op threads of every runtime (``torch.set_num_threads``,
            ORT ``intra_op_num_threads`` with one inter-op thread, OpenVINO
            ``INFERENCE_NUM_THREADS`` with one stream).
        memory: also measure :func:`peak_memory` (a fresh process per model).
        workdir: folder for the model files (kept); default a temporary folder.
        log: receives one-line progress messages.

    Returns:
        :class:`BenchResult`. A contender that cannot run here gets status
        ``n/a (reason)``; one that fails, ``error: message``; neither stops the run.
    """
    import torch

    if runs < 1 or warmup < 0 or threads < 1:
        raise ValueError("runs and threads must be >= 1 and warmup >= 0")
    started = time.perf_counter()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="deform-onnx-bench-")
        workdir = tmp.name
    result = BenchResult(list(shapes), list(contenders), {}, runs, warmup, threads, memory,
                         machine=machine_info(threads))
    result.machine["load_before"] = _loadavg()
    try:
        for shape in shapes:
            case = _Case(shape, Path(workdir) / shape.label.replace(" ", "_"), threads)
            runners = {}
            for contender in contenders:
                cell = result.cells[(shape.label, contender.key)] = Cell()
                try:
                    prepared = contender.prepare(case)
                    out = prepared.output()
                    cell.stats = prepared.stats
                    cell.stats.max_abs_err = float(np.max(np.abs(np.asarray(out) - case.reference)))
                    runners[contender.key] = prepared.run
                    cell.memory_job = prepared.memory_job
                except Unavailable as e:
                    cell.status = f"n/a ({e})"
                except Exception as e:  # noqa: BLE001 - report and go on with the others
                    cell.status = f"error: {type(e).__name__}: {_first_line(e)}"
                log(f"{shape.label}: {contender.key}: {cell.status}")
            log(f"{shape.label}: timing {len(runners)} contenders, {warmup} warm-up + {runs} rounds")
            for key, times in time_round_robin(runners, runs, warmup).items():
                result.cells[(shape.label, key)].times = times
            if memory:
                for key in runners:
                    cell = result.cells[(shape.label, key)]
                    try:
                        cell.stats.peak_bytes = peak_memory(cell.memory_job, case.inputs_path, threads)
                    except Exception as e:  # noqa: BLE001
                        log(f"{shape.label}: {key}: peak memory failed: {_first_line(e)}")
            del case, runners
    finally:
        torch.set_num_threads(previous_threads)
        if tmp is not None:
            tmp.cleanup()
    result.seconds = time.perf_counter() - started
    result.machine["load_after"] = _loadavg()
    return result


def _loadavg() -> str:
    try:
        return " / ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else ""


# -- environment --------------------------------------------------------------
def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_info(threads: int) -> dict:
    """CPU model, usable cores, OS, and package versions."""
    cpu = platform.processor() or platform.machine()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                cpu = line.split(":", 1)[1].strip()
                break
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 0
    versions = {d: _version(d) for d in ("torch", "torchvision", "onnx", "onnxruntime", "openvino", "deform-onnx",
                                          OLD_EXPORTER)}
    versions["python"] = platform.python_version()
    return {"cpu": cpu, "cores": cores, "os": f"{platform.system()} {platform.release()}", "threads": threads,
            "versions": versions}


# -- targets (issue 5) --------------------------------------------------------
@dataclass
class Target:
    name: str
    measured: str
    met: bool | None  # None: not measurable in this run


def evaluate_targets(result: BenchResult) -> list[Target]:
    """The targets of issue 5, from this run's numbers."""
    out = []

    def ratio_target(name, key, limit):
        g = result.geomean_ratio(key)
        out.append(Target(name, _fmt_x(g), None if g is None else g <= limit))

    def speed_target(name, slow, fast, limit):
        s = result.geomean_ratio(slow, fast)  # geomean of time(slow) / time(fast)
        out.append(Target(name, "n/a" if s is None else f"{s:.2f}x faster", None if s is None else s >= limit))

    ratio_target("grid_sample lowering <= 1.2x ORT native (geomean)", "ort-grid_sample", 1.2)
    ratio_target("stretch: grid_sample lowering <= 1.0x ORT native", "ort-grid_sample", 1.0)
    speed_target("gather lowering >= 3x faster than the old exporter", "ort-old", "ort-gather", 3.0)
    speed_target("grid_sample lowering >= 5x faster than torchvision eager", "torch", "ort-grid_sample", 5.0)
    speed_target("gather lowering >= 3x faster than torchvision eager", "torch", "ort-gather", 3.0)
    ratio_target("OpenVINO + extension <= 1.1x ORT native", "ov-extension", 1.1)
    lowered = [k for k in ("ort-grid_sample", "ort-gather") if k in {c.key for c in result.contenders}]
    consts = [result.cell(s, k).stats.largest_constant_bytes for s in result.shapes for k in lowered]
    consts = [c for c in consts if c is not None]
    extra = [_extra_bytes(result, s, k) for s in result.shapes for k in lowered]
    extra = [e for e in extra if e is not None]
    out.append(Target("no lowered node adds > 64 KB to the file beyond the weights",
                      (f"largest constant {max(consts) / 1024:.1f} KB; whole lowering adds at most "
                       f"{max(extra) / 1024:.1f} KB over the native file") if consts and extra else "n/a",
                      (max(consts) <= 64 * 1024) if consts else None))
    for key in lowered:
        ratios = [result.memory_ratio(s, key) for s in result.shapes]
        ratios = [r for r in ratios if r is not None]
        out.append(Target(f"peak memory of {key.removeprefix('ort-')} lowering <= 1.5x native (every shape)",
                          f"worst {max(ratios):.2f}x" if ratios else "n/a",
                          (max(ratios) <= 1.5) if ratios else None))
    return out


# -- rendering ------------------------------------------------------------------
def write_marked_section(path: Path, text: str, begin: str, end: str) -> None:
    """Put ``text`` (which starts with ``begin`` and ends with ``end``) into ``path`` in place of the
    block between those markers, or append it; the rest of the file is left as it is."""
    old = path.read_text()
    if begin in old:
        new = re.sub(re.escape(begin) + ".*?" + re.escape(end) + "\n?", lambda _: text, old, flags=re.S)
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.write_text(new)


def _fmt_ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.2f}"


def _fmt_x(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}x"


def _fmt_kb(nbytes: int | None) -> str:
    return "—" if nbytes is None else f"{nbytes / 1024:.1f}"


def _fmt_mb(nbytes: int | None) -> str:
    return "—" if nbytes is None else f"{nbytes / 2**20:.1f}"


def _status_note(cell: Cell) -> str:
    return cell.status if not cell.ok else ""


def time_rows(result: BenchResult) -> list[list[str]]:
    """Rows ``[contender, cell per shape..., geomean ratio]``; a cell is ``ms (ratio)``."""
    rows = []
    for c in result.contenders:
        row = [c.label]
        for s in result.shapes:
            cell = result.cell(s, c.key)
            row.append(f"{_fmt_ms(cell.median)} ({_fmt_x(result.ratio(s, c.key))})" if cell.ok
                       else _short_status(cell.status))
        row.append(_fmt_x(result.geomean_ratio(c.key)))
        rows.append(row)
    return rows


def _short_status(status: str) -> str:
    return "n/a" if status.startswith("n/a") else "error"


def model_rows(result: BenchResult) -> list[list[str]]:
    """Rows ``[shape, contender, nodes, file KB, largest constant KB, export s, peak MB, peak/native, max err]``."""
    rows = []
    for s in result.shapes:
        for c in result.contenders:
            cell = result.cell(s, c.key)
            if not cell.ok:
                continue
            st = cell.stats
            rows.append([
                s.label, c.label,
                "—" if st.nodes is None else str(st.nodes),
                _fmt_kb(st.file_bytes),
                _fmt_kb(_extra_bytes(result, s, c.key)),
                _fmt_kb(st.largest_constant_bytes),
                "—" if st.export_s is None else f"{st.export_s:.2f}",
                _fmt_mb(st.peak_bytes),
                _fmt_x(result.memory_ratio(s, c.key)),
                "—" if st.max_abs_err is None else f"{st.max_abs_err:.1e}",
            ])
    return rows


MODEL_HEADER = ["shape", "contender", "nodes", "file KB", "file KB beyond native", "largest non-weight constant KB",
                "export s",
                "peak inference MB", "peak / native", "max abs err vs torchvision"]


def notes(result: BenchResult) -> list[str]:
    """One line per contender that did not run everywhere."""
    seen, out = set(), []
    for c in result.contenders:
        for s in result.shapes:
            status = result.cell(s, c.key).status
            if status != "ok" and (c.key, status) not in seen:
                seen.add((c.key, status))
                out.append(f"{c.label} ({s.label}): {status}")
    return out


def _extra_bytes(result: BenchResult, shape: BenchShape, key: str) -> int | None:
    """File bytes beyond the native file of the same layer (which is the weights plus one node)."""
    a = result.cell(shape, key).stats.file_bytes
    b = result.cell(shape, REFERENCE).stats.file_bytes
    return None if a is None or b is None else a - b


MARK_BEGIN = "<!-- deform-onnx bench: begin (generated; edit outside these markers) -->"
MARK_END = "<!-- deform-onnx bench: end -->"


def _md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(result: BenchResult) -> str:
    """The generated part of BENCHMARKS.md (between :data:`MARK_BEGIN` and :data:`MARK_END`)."""
    m = result.machine
    v = m.get("versions", {})
    shapes = ", ".join(s.label for s in result.shapes)
    parts = [
        MARK_BEGIN,
        "",
        "### Setup",
        "",
        f"- Command: `{result.command}`" if result.command else "- Command: (library call)",
        f"- Machine: {m.get('cpu')}, {m.get('cores')} usable cores, {m.get('os')}; load average (1/5/15 min) "
        f"{m.get('load_before', 'n/a')} before the run, {m.get('load_after', 'n/a')} after",
        "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        f"- Threads: {result.threads} intra-op threads per runtime (torch.set_num_threads({result.threads}); "
        f"ORT intra_op_num_threads={result.threads}, inter_op_num_threads=1, sequential, "
        f"session.intra_op.allow_spinning=0; "
        f"OpenVINO INFERENCE_NUM_THREADS={result.threads}, NUM_STREAMS=1, LATENCY, f32)",
        f"- Timing: one process, contenders interleaved round-robin (start rotated each round), "
        f"{result.warmup} warm-up rounds, then the median of {result.runs} rounds; wall time of one call "
        f"(an untimed {PAUSE_S * 1e3:.0f} ms pause between calls lets the previous runtime's threads go idle)",
        f"- Shapes: N x C x H (C_in = C_out, H = W, kernel 3x3, padding 1, mask on unless `no mask`; "
        f"`og8` = 8 offset groups, `s2` = stride 2): {shapes}",
        f"- Memory: {PEAK_MEMORY_METHOD}" if result.memory else "- Memory: not measured (--no-memory)",
        "- Contenders: " + "; ".join(f"**{c.label}**: {LEGEND[c.key]}" for c in result.contenders),
        "- Offsets are randn * 2 pixels, mask sigmoid(randn), input randn; weights randn / sqrt(9 C); seed 0",
        f"- Total run time: {result.seconds / 60:.1f} min",
        "",
        "### Median time per call, ms (ratio to ORT native DeformConv; lower is faster)",
        "",
        _md_table(["contender", *[s.label for s in result.shapes], "geomean ratio"], time_rows(result)),
        "",
        "### Models",
        "",
        _md_table(MODEL_HEADER, model_rows(result)),
        "",
        "### Targets",
        "",
        _md_table(["target", "measured", "met"],
                  [[t.name, t.measured, "n/a" if t.met is None else ("yes" if t.met else "**no**")]
                   for t in evaluate_targets(result)]),
    ]
    extra = notes(result)
    if extra:
        parts += ["", "Not run:", ""] + [f"- {line}" for line in extra]
    parts += ["", MARK_END]
    return "\n".join(parts) + "\n"


def write_markdown(result: BenchResult, path: str | os.PathLike, title: str = "# Benchmarks") -> Path:
    """Write :func:`render_markdown` to ``path`` atomically.

    If the file exists and holds the markers, only the text between them is
    replaced (hand-written analysis around it is kept); otherwise the file
    is ``title`` plus the generated block.
    """
    path = Path(path)
    block = render_markdown(result)
    text = f"{title}\n\n{block}"
    if path.exists():
        old = path.read_text()
        if MARK_BEGIN in old and MARK_END in old:
            head, rest = old.split(MARK_BEGIN, 1)
            tail = rest.split(MARK_END, 1)[1]
            text = head + block.rstrip("\n") + tail
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def rich_tables(result: BenchResult) -> list:
    """The time table and the model table as ``rich.table.Table`` objects."""
    from rich.table import Table

    times = Table(title=f"Median ms per call (ratio to ORT native), {result.threads} threads, "
                        f"median of {result.runs} after {result.warmup} warm-up")
    times.add_column("contender")
    for s in result.shapes:
        times.add_column(s.label, justify="right")
    times.add_column("geomean", justify="right")
    for row in time_rows(result):
        times.add_row(*row)
    models = Table(title="Models")
    for h in MODEL_HEADER:
        models.add_column(h, justify="left" if h in ("shape", "contender") else "right")
    for row in model_rows(result):
        models.add_row(*row)
    targets = Table(title="Targets")
    for h in ("target", "measured", "met"):
        targets.add_column(h)
    for t in evaluate_targets(result):
        targets.add_row(t.name, t.measured, "n/a" if t.met is None else ("yes" if t.met else "no"))
    return [times, models, targets]
