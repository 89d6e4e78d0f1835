"""Side-by-side benchmarks on CPU: ``deform-onnx bench`` and ``benchmarks/*.py`` share this package.

- :mod:`.harness`: round-robin timing, peak memory in a fresh process, machine
  info and load average, :class:`Suite` / :func:`run_suite` (one op's benchmark).
- :mod:`.runtimes`: ONNX Runtime / OpenVINO sessions as the benchmark sets them
  up (threads, no spinning, ``--ort-opt-level``), ORT's profiler, file stats.
- :mod:`.deform_conv`: the deformable-convolution suite (the default ``--op``),
  its contenders (the dense ``Conv`` limit included) and goals.
- :mod:`.sampling`: the ``grid_sample`` and ``msda`` suites.
- :mod:`.scaling`: ms per megapixel against size and batch (``benchmarks/scaling.py``).
- :mod:`.report`: tables, the generated markdown block, rich tables.
"""

from .deform_conv import (
    CONTENDER_KEYS,
    CONTENDERS,
    FULL_SHAPES,
    LEGEND,
    LIMIT,
    MARK_BEGIN,
    MARK_END,
    OFFSET_SCALE,
    OLD_EXPORTER,
    OLD_EXPORTER_VERSION,
    QUICK_SHAPES,
    REFERENCE,
    SUITE,
    BenchShape,
    DeformConvCase,
    evaluate_goals,
    old_exporter_module,
    run_benchmark,
    select_contenders,
)
from .grid_sample_forms import GRID_SAMPLE_5D, GRID_SAMPLE_BICUBIC
from .harness import (
    PAUSE_S,
    BenchResult,
    Case,
    Cell,
    Contender,
    Goal,
    ModelStats,
    Prepared,
    Suite,
    Unavailable,
    loadavg,
    machine_info,
    run_suite,
    time_round_robin,
)
from .memory import PEAK_MEMORY_METHOD, peak_memory
from .report import model_rows, notes, render_markdown, rich_tables, time_rows, write_markdown, write_marked_section
from .runtimes import (
    ORT_CONFIG,
    ORT_OPT_LEVELS,
    NodeTime,
    largest_constant,
    openvino_compile,
    openvino_config,
    openvino_feeds,
    ort_profile,
    ort_session,
)
from .sampling import GRID_SAMPLE, MSDA, GridSampleShape, MSDAShape

#: ``--op`` name -> suite.
SUITES: dict[str, Suite] = {s.op: s for s in (SUITE, GRID_SAMPLE, MSDA, GRID_SAMPLE_5D, GRID_SAMPLE_BICUBIC)}


def suite(op: str) -> Suite:
    """The suite of ``--op`` ``op``.

    Raises:
        ValueError: an unknown op (the message lists the known ones).
    """
    if op not in SUITES:
        raise ValueError(f"unknown --op {op!r}; choose from {', '.join(SUITES)}")
    return SUITES[op]


__all__ = [
    "BenchResult",
    "BenchShape",
    "Case",
    "Cell",
    "Contender",
    "CONTENDER_KEYS",
    "CONTENDERS",
    "DeformConvCase",
    "evaluate_goals",
    "FULL_SHAPES",
    "Goal",
    "GRID_SAMPLE",
    "GridSampleShape",
    "largest_constant",
    "LEGEND",
    "LIMIT",
    "loadavg",
    "machine_info",
    "MARK_BEGIN",
    "MARK_END",
    "model_rows",
    "ModelStats",
    "MSDA",
    "MSDAShape",
    "NodeTime",
    "notes",
    "OFFSET_SCALE",
    "OLD_EXPORTER",
    "old_exporter_module",
    "OLD_EXPORTER_VERSION",
    "openvino_compile",
    "openvino_config",
    "openvino_feeds",
    "ORT_CONFIG",
    "ORT_OPT_LEVELS",
    "ort_profile",
    "ort_session",
    "PAUSE_S",
    "peak_memory",
    "PEAK_MEMORY_METHOD",
    "Prepared",
    "QUICK_SHAPES",
    "REFERENCE",
    "render_markdown",
    "rich_tables",
    "run_benchmark",
    "run_suite",
    "select_contenders",
    "SUITE",
    "Suite",
    "suite",
    "SUITES",
    "time_round_robin",
    "time_rows",
    "Unavailable",
    "write_markdown",
    "write_marked_section",
]
