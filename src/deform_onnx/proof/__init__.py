"""One proof for every artifact: runners that load and run it, one per-element comparison of every output.

:mod:`.compare` holds the rules (per-output, per-element, by dtype; shape, precision and NaN/Inf checks;
error statistics); :mod:`.runners` the runners (ONNX Runtime, OpenVINO on ONNX and IR, each deployed family in
its venv). docs/verification.md, "One comparison, many runners", says what each runner compares and where.
"""

from .compare import (
    DEFAULT_TOLERANCES,
    Comparison,
    OutputResult,
    Tolerance,
    compare_output,
    compare_outputs,
    tolerance_for,
)
from .runners import FamilyRunner, OnnxRuntimeRunner, OpenVINORunner, Outputs, Runner, RunnerError, runner_for

__all__ = [
    "DEFAULT_TOLERANCES",
    "Comparison",
    "FamilyRunner",
    "OnnxRuntimeRunner",
    "OpenVINORunner",
    "OutputResult",
    "Outputs",
    "Runner",
    "RunnerError",
    "Tolerance",
    "compare_output",
    "compare_outputs",
    "runner_for",
    "tolerance_for",
]
