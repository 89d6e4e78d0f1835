"""The measuring part of the benchmark, shared by every op: round-robin timing, peak memory, machine info.

A :class:`Suite` says what one op's benchmark is (its shapes, its contenders,
the contender ratios are taken to); :func:`run_suite` builds one case per
shape, prepares every contender, checks its output against PyTorch on the
same tensors, then times all contenders in ONE loop (:func:`time_round_robin`:
each round runs every contender once, in an order rotated by one each round,
and the reported time is the median over the rounds after warm-up). The
machine's load average is recorded before and after the run.
"""

from __future__ import annotations

import functools
import math
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from .config import check_opt_level
from .memory import peak_memory


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
        """Whether the contender ran and was timed."""
        return self.status == "ok" and bool(self.times)

    @property
    def median(self) -> float | None:
        """The median time in seconds (``None`` unless :attr:`ok`)."""
        return statistics.median(self.times) if self.ok else None


@dataclass
class Prepared:
    """A contender ready to time: ``run`` (timed), ``output`` (checked), the job for :func:`peak_memory`.

    ``reference`` replaces the case's reference output for a contender that
    computes something else on purpose (the dense ``Conv`` limit).
    """

    run: Callable[[], Any]
    output: Callable[[], np.ndarray]
    memory_job: dict | None
    stats: ModelStats
    reference: np.ndarray | None = None


@dataclass(frozen=True)
class Contender:
    """A way to run the op: ``key`` (CLI name), ``label`` (table row), ``prepare(case) -> Prepared``.

    ``ort``: it runs in ONNX Runtime, and ``prepare`` takes ``opt_level=`` (see :meth:`at_level`).
    """

    key: str
    label: str
    prepare: Callable[..., Prepared]  # (case) -> Prepared; ONNX Runtime ones also take opt_level=
    ort: bool = False

    def at_level(self, level: str) -> Contender:
        """This ONNX Runtime contender with ``graph_optimization_level`` = ``level``: key ``KEY@level``.

        Raises:
            ValueError: not an ONNX Runtime contender, or an unknown level.
        """
        if not self.ort:
            raise ValueError(f"{self.key} does not run in ONNX Runtime: it has no optimisation level")
        check_opt_level(level)
        return Contender(
            f"{self.key}@{level}", f"{self.label} @{level}", functools.partial(self.prepare, opt_level=level), ort=False
        )


class Case(Protocol):
    """One shape of a suite: its inputs, PyTorch's output on them, a folder for files."""

    reference: np.ndarray  # PyTorch's output on the case's tensors
    inputs_path: Path  # .npz of the feeds (for the fresh process of peak_memory)
    threads: int


@dataclass(frozen=True)
class Goal:
    """A speed or size goal from an issue, evaluated on one run (``met=None``: not measurable here)."""

    name: str
    measured: str
    met: bool | None


@dataclass(frozen=True)
class Suite:
    """What one op's benchmark measures.

    Attributes:
        op: ``--op`` name.
        title: one line for tables.
        contenders: every contender, in table order.
        legend: contender key -> what that row runs (report).
        reference: key of the contender ratios are taken to.
        ref_name: short name of the reference in column headers (``native``).
        make_case: ``(shape, workdir, threads) -> Case``.
        parse_shape: ``str -> shape`` (raises ``ValueError`` naming the format).
        full_shapes, quick_shapes: default shape sets.
        markers: begin/end lines of the generated block in BENCHMARKS.md.
        heading: markdown heading written inside the block (``None``: none).
        shape_note: how to read a shape label (report).
        inputs_note: how the inputs are drawn (report).
        oracle: what outputs are checked against (``torchvision``, ``PyTorch``).
        limit: key of a contender that is a lower bound for the op (a second ratio table), or ``None``.
        goals: ``BenchResult -> [Goal]`` from the issues.
    """

    op: str
    title: str
    contenders: tuple[Contender, ...]
    legend: dict[str, str]
    reference: str
    ref_name: str
    make_case: Callable[[Any, Path, int], Case]
    parse_shape: Callable[[str], Any]
    full_shapes: tuple
    quick_shapes: tuple
    markers: tuple[str, str]
    heading: str | None
    shape_note: str
    inputs_note: str
    oracle: str = "PyTorch"
    limit: str | None = None
    goals: Callable[[BenchResult], list[Goal]] = lambda result: []

    def select(self, keys: Sequence[str] | None, opt_levels: Sequence[str] = ()) -> tuple[Contender, ...]:
        """Contenders by key, in the suite's order (``None`` or empty: all), then each ONNX Runtime one
        again at every level of ``opt_levels`` (``KEY@level`` rows). A key may name a level itself
        (``ort-gather@basic``).

        Raises:
            ValueError: an unknown key or level (the message lists the known ones).
        """
        known = {c.key: c for c in self.contenders}
        keys = list(keys or known)
        unknown = [k for k in keys if k.split("@", 1)[0] not in known]
        if unknown:
            raise ValueError(
                f"unknown contender(s) for --op {self.op}: {', '.join(unknown)}; "
                f"choose from {', '.join(known)} (ONNX Runtime ones also as KEY@LEVEL)"
            )
        chosen = [c for c in self.contenders if c.key in keys]
        leveled = [known[k.split("@")[0]].at_level(k.split("@", 1)[1]) for k in keys if "@" in k]
        leveled += [c.at_level(level) for level in opt_levels for c in chosen if c.ort]
        unique: dict[str, Contender] = {}
        for c in chosen + leveled:
            unique.setdefault(c.key, c)  # the first contender of each key, in order
        return tuple(unique.values())


# -- timing -------------------------------------------------------------------
#: Untimed pause between two calls (seconds): lets the previous runtime's worker
#: threads stop spinning before the next runtime starts on the same cores.
PAUSE_S = 0.005


def time_round_robin(
    runners: dict[str, Callable[[], Any]],
    runs: int,
    warmup: int,
    on_round: Callable[[int], None] | None = None,
    pause: float = PAUSE_S,
) -> dict[str, list[float]]:
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


# -- the whole run ------------------------------------------------------------
@dataclass
class BenchResult:
    """Everything one run measured, plus its settings."""

    shapes: list
    contenders: list[Contender]
    cells: dict[tuple[str, str], Cell]
    runs: int
    warmup: int
    threads: int
    memory: bool
    seconds: float = 0.0
    command: str = ""
    machine: dict = field(default_factory=dict)
    suite: Suite | None = None

    @property
    def reference(self) -> str:
        """Key of the contender ratios are taken to."""
        return self.suite.reference if self.suite else "ort-native"

    def cell(self, shape, key: str) -> Cell:
        """The cell of one contender on one shape (``n/a`` if it was not selected)."""
        return self.cells.get((shape.label, key)) or Cell("n/a (not selected)")

    def ratio(self, shape, key: str, to: str | None = None) -> float | None:
        """Median time of ``key`` / median time of ``to`` (default: the reference) on one shape."""
        a, b = self.cell(shape, key).median, self.cell(shape, to or self.reference).median
        return a / b if a is not None and b else None

    def geomean_ratio(self, key: str, to: str | None = None) -> float | None:
        """Geometric mean over shapes of :meth:`ratio`; ``None`` unless every shape has both."""
        ratios = [self.ratio(s, key, to) for s in self.shapes]
        measured = [r for r in ratios if r is not None]
        if not ratios or len(measured) < len(ratios):
            return None
        return math.exp(sum(math.log(r) for r in measured) / len(measured))

    def worst_ratio(self, key: str, to: str | None = None) -> float | None:
        """Largest :meth:`ratio` over shapes; ``None`` unless every shape has both."""
        ratios = [self.ratio(s, key, to) for s in self.shapes]
        measured = [r for r in ratios if r is not None]
        return None if not ratios or len(measured) < len(ratios) else max(measured)

    def memory_ratio(self, shape, key: str, to: str | None = None) -> float | None:
        """Peak memory of ``key`` / peak memory of ``to`` (default: the reference) on one shape."""
        a = self.cell(shape, key).stats.peak_bytes
        b = self.cell(shape, to or self.reference).stats.peak_bytes
        return a / b if a is not None and b else None


def run_suite(
    suite: Suite,
    shapes: Sequence | None = None,
    contenders: Sequence[Contender] | None = None,
    *,
    runs: int = 20,
    warmup: int = 3,
    threads: int = 2,
    memory: bool = True,
    workdir: str | os.PathLike | None = None,
    log: Callable[[str], None] = lambda msg: None,
) -> BenchResult:
    """Prepare, check and time every contender on every shape of ``suite``.

    Args:
        suite: the op's benchmark.
        shapes: shapes of the suite (default: its full set).
        contenders: what to compare (default: all of the suite's).
        runs: timed rounds per shape (median over them).
        warmup: untimed rounds first.
        threads: intra-op threads of every runtime (``torch.set_num_threads``,
            ORT ``intra_op_num_threads`` with one inter-op thread, OpenVINO
            ``INFERENCE_NUM_THREADS`` with one stream).
        memory: also measure :func:`peak_memory` (a fresh process per model).
        workdir: folder for the model files (kept); default a temporary folder.
        log: receives one-line progress messages.

    Returns:
        :class:`BenchResult`; each cell's ``stats.max_abs_err`` is the largest
        difference from PyTorch's output on the same tensors. A contender that
        cannot run here gets status ``n/a (reason)``; one that fails,
        ``error: message``; neither stops the run.

    Raises:
        ValueError: ``runs`` or ``threads`` < 1, or ``warmup`` < 0.
    """
    import torch

    if runs < 1 or warmup < 0 or threads < 1:
        raise ValueError("runs and threads must be >= 1 and warmup >= 0")
    shapes = list(suite.full_shapes if shapes is None else shapes)
    contenders = list(suite.contenders if contenders is None else contenders)
    started = time.perf_counter()
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="deform-onnx-bench-")
        workdir = tmp.name
    result = BenchResult(
        shapes, contenders, {}, runs, warmup, threads, memory, machine=machine_info(threads), suite=suite
    )
    result.machine["load_before"] = loadavg()
    try:
        for shape in shapes:
            case = suite.make_case(shape, Path(workdir) / shape.label.replace(" ", "_"), threads)
            runners = {}
            for contender in contenders:
                cell = result.cells[(shape.label, contender.key)] = Cell()
                try:
                    prepared = contender.prepare(case)
                    out = prepared.output()
                    want = case.reference if prepared.reference is None else prepared.reference
                    cell.stats = replace(prepared.stats)
                    cell.stats.max_abs_err = float(np.max(np.abs(np.asarray(out) - want)))
                    runners[contender.key] = prepared.run
                    cell.memory_job = prepared.memory_job
                except Unavailable as e:
                    cell.status = f"n/a ({e})"
                except Exception as e:  # noqa: BLE001 - report and go on with the others
                    cell.status = f"error: {type(e).__name__}: {first_line(e)}"
                log(f"{shape.label}: {contender.key}: {cell.status}")
            log(f"{shape.label}: timing {len(runners)} contenders, {warmup} warm-up + {runs} rounds")
            for key, times in time_round_robin(runners, runs, warmup).items():
                result.cells[(shape.label, key)].times = times
            if memory:
                for key in runners:
                    cell = result.cells[(shape.label, key)]
                    if cell.memory_job is None:
                        continue
                    try:
                        cell.stats.peak_bytes = peak_memory(cell.memory_job, case.inputs_path, threads)
                    except Exception as e:  # noqa: BLE001
                        log(f"{shape.label}: {key}: peak memory failed: {first_line(e)}")
            del case, runners
    finally:
        torch.set_num_threads(previous_threads)
        if tmp is not None:
            tmp.cleanup()
    result.seconds = time.perf_counter() - started
    result.machine["load_after"] = loadavg()
    return result


def loadavg() -> str:
    """The 1/5/15-minute load average as ``"a / b / c"`` (``n/a`` where the OS has none)."""
    try:
        return " / ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def first_line(e: BaseException) -> str:
    """The first line of an exception's message, at most 200 characters."""
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else ""


# -- environment --------------------------------------------------------------
def _version(dist: str) -> str:
    from importlib import metadata

    if (
        dist == "onnxruntime"
    ):  # any distribution of the module (onnxruntime-gpu, -openvino, ...), named when not the CPU one
        from ..runtimes.ort_distribution import find

        found = find()
        if found is None:
            return "not installed"
        return found.version if found.names == ("onnxruntime",) else f"{found.version} ({', '.join(found.names)})"
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


#: Distributions whose versions go into every report.
VERSIONED = ("torch", "torchvision", "onnx", "onnxruntime", "openvino", "deform-onnx", "deform-conv2d-onnx-exporter")


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
    versions = {d: _version(d) for d in VERSIONED}
    versions["python"] = platform.python_version()
    return {
        "cpu": cpu,
        "cores": cores,
        "os": f"{platform.system()} {platform.release()}",
        "threads": threads,
        "versions": versions,
    }
