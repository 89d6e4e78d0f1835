"""``deform-onnx export``'s rows: one export per planned job (the exporters tried, the checks, the timing).

Each row writes a partial file beside its path; :func:`_commit` renames the
passed rows' files once every row has run, :func:`_discard` removes them all.
"""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._attempts import stage_and_detail
from ._common import one_line
from ._inputs import InputSpec
from ._models import ExampleInputs, from_specs


@dataclass
class Job:
    """One planned export."""

    method: str
    opset: int
    exporter: str  # "dynamo" or "torchscript"
    exporter_chosen: bool  # given with --exporter (no automatic retry with the other one)
    path: Path
    extra: dict = field(default_factory=dict)  # more keyword arguments of deform_onnx.export (target, ...)
    # --method as given when it differs from the lowering shown: "auto" decides per call (a 5-D
    # F.grid_sample below opset 20 takes the gather form), which the resolved name would refuse.
    asked: str | None = None
    # The method came from the CLI's plan, not from the user: a method that cannot take this model
    # (a 5-D F.grid_sample as GridSample below opset 20) fails its own row, the others still run.
    planned: bool = False
    # -o named the file (not a folder): the CLI does not rename it after the form written (_written_forms).
    named: bool = False
    # The method is --target's pick, no --method was given: export() gets none, so that the target's forms per
    # shape class (deform_onnx.targets.measured) apply, as in deform_onnx.export(..., target=...).
    from_target: bool = False


@dataclass
class Result:
    """One table row: what the export and the checks gave (``problem``: why it failed, if it did)."""

    job: Job
    exporter: str = "-"
    nodes: int | None = None
    size: int | None = None
    error: float | None = None
    resized_error: float | None = None
    ort_ms: float | None = None
    problem: str | None = None
    resized_ok: bool = True
    #: Written with ``--no-verify``: not run in ONNX Runtime nor compared with PyTorch.
    unverified: bool = False
    #: The file this run wrote, not yet renamed to ``job.path`` (see :func:`_commit`).
    partial: Path | None = None
    #: (exporter, what happened, detail lines) for each exporter tried: ``--verbose``.
    attempts: list[tuple[str, str, list[str]]] = field(default_factory=list)
    #: The form the written file holds (``report.method``, :mod:`deform_onnx.builder.written`; :mod:`._written_forms`).
    form: str | None = None
    #: ``--verify-runtime``: one line per runtime the file also ran on (``report.runtimes``).
    runtimes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Exported and verified by :func:`deform_onnx.export` (within the tolerance), and the resized check passed."""
        if self.unverified:
            return self.problem is None
        return self.problem is None and self.error is not None and self.resized_ok


class _Refused(Exception):
    """A user error met while exporting (``ValueError`` of :func:`deform_onnx.export`): exit 2, one line."""


@dataclass(frozen=True)
class RowContext:
    """What every row of one ``deform-onnx export`` shares.

    Attributes:
        net: the model; ``inputs``: its example inputs (:class:`._models.ExampleInputs`).
        resized: the first input at a second size (``--dynamic``), else ``None``.
        dynamic_kw: exporter -> the dynamic-shape keywords of :func:`deform_onnx.export` (``--dynamic``).
        repeat: timed runs per latency.
        progress: the rich progress bar and ``task`` its task.
        notes: lines printed after the table (appended to).
    """

    net: Any
    inputs: ExampleInputs
    resized: Any
    dynamic_kw: dict
    repeat: int
    progress: Any
    task: Any
    notes: list[str]


def _run_job(job: Job, ctx: RowContext) -> Result:
    """Export one job into a partial file and check it; a failed row leaves no file.

    The file is renamed to ``job.path`` by :func:`_commit` once every row has run.
    Raises :class:`_Refused` for a user error (a rule of the target, a bad argument):
    it holds for every exporter, so the other one is not tried.
    """
    result = Result(job)
    try:
        report = _export_job(job, result, ctx)
        if report is not None:
            _time_and_resize(job, result, report, ctx)
    except _Refused:
        _remove(result.partial)
        raise
    except Exception as exc:  # noqa: BLE001 - a failed row says why in the table, never a traceback
        result.problem = result.problem or f"{type(exc).__name__}: {one_line(exc)}"
        result.attempts.append((result.exporter, f"stopped at the CLI's checks: {result.problem}", []))
    if not result.ok:
        _remove(result.partial)
        result.partial = None
    return result


def _export_job(job: Job, result: Result, ctx: RowContext):
    """Export (retrying with TorchScript when the dynamo path fails); the report, or ``None`` for a failed row."""
    from ..core.errors import MissingKernelError
    from ..exporting import api

    label = f"{job.method}@{job.opset}"
    exporters = [job.exporter]
    if not job.exporter_chosen and job.exporter == "dynamo" and _torchscript_allows(job.opset):
        exporters.append("torchscript")
    result.partial = _partial_path(job.path)
    for exporter in exporters:
        ctx.progress.update(ctx.task, description=f"{label}: exporting ({exporter})")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                report = api.export(
                    ctx.net, tuple(ctx.inputs.tensors), result.partial, **_export_kwargs(job, exporter, ctx)
                )
        except api.VerificationError as exc:
            result.exporter, result.problem = exporter, one_line(exc)
            result.attempts.append((exporter, *stage_and_detail(exc, verification=True)))
            return None
        except ValueError as exc:  # the target's rules, the arguments: the same for either exporter
            result.attempts.append((exporter, *stage_and_detail(exc)))
            if job.planned and job.extra.get("target") is None:
                result.exporter, result.problem = exporter, _cli_wording(one_line(exc))
                return None
            raise _Refused(_cli_wording(one_line(exc))) from None
        except MissingKernelError as exc:  # the runtime lacks a kernel: the other exporter meets it too
            result.exporter, result.problem = exporter, _cli_wording(one_line(exc))
            result.attempts.append((exporter, *stage_and_detail(exc)))
            return None
        except Exception as exc:  # noqa: BLE001 - the exporter's own failures: report, try the next exporter or give up
            result.exporter, result.problem = exporter, f"{type(exc).__name__}: {one_line(exc)}"
            result.attempts.append((exporter, *stage_and_detail(exc)))
            if exporter != exporters[-1]:
                ctx.notes.append(f"{label}: the dynamo exporter failed ({result.problem}); trying TorchScript")
            continue
        ctx.notes.extend(f"{label}: {one_line(w.message)}" for w in caught if str(w.message).startswith("deform_onnx"))
        _record(result, report, exporter)
        return report
    return None


def _export_kwargs(job: Job, exporter: str, ctx: RowContext) -> dict:
    """The keywords of :func:`deform_onnx.export` for one job on one exporter."""
    return dict(
        opset_version=job.opset,
        method=None if job.from_target else job.asked or job.method,
        dynamo=exporter == "dynamo",
        input_names=list(ctx.inputs.names),
        # No tolerance given: export()'s own rules decide (the dtype's default, float16 against a float32 copy,
        # an ill-conditioned float32 model against float64: deform_onnx.exporting.verification), as for the API.
        fallback=not job.exporter_chosen,  # --exporter forces that exporter
        # export() checks the file at the second size (and writes nothing when it fails there).
        verify_shapes=[tuple(ctx.resized.shape)] if ctx.resized is not None else None,
        **ctx.dynamic_kw[exporter] if ctx.dynamic_kw else {},
        **job.extra,
        format="onnx",  # the rows write to hidden ".NAME.onnx.partial-PID" files: not a suffix formats know
    )


def _record(result: Result, report, exporter: str) -> None:
    """Fill the row from the export's report (the exporter that ran, its fallback, the file's size)."""
    if report.fallback_reason:
        result.attempts.append((exporter, f"stopped: {report.fallback_reason}", []))
        result.attempts.append((report.exporter, "exported (deform_onnx.export's own fallback)", []))
    else:
        result.attempts.append((exporter, "exported", []))
    result.problem = None
    result.exporter = report.exporter + (
        " (fallback)" if report.fallback_reason or exporter != result.job.exporter else ""
    )
    result.nodes, result.size, result.error = report.node_count, report.file_size, report.max_error
    result.form = report.method
    result.runtimes = list(report.runtimes)


def _time_and_resize(job: Job, result: Result, report, ctx: RowContext) -> None:
    """Time the written file in ONNX Runtime and take the second-size result of its report (unless --no-verify)."""
    if not job.extra.get("verify", True):
        result.unverified = True
        return
    ctx.progress.update(ctx.task, description=f"{job.method}@{job.opset}: timing ONNX Runtime")
    session = _session(result.partial)  # type: ignore[arg-type]  # set by _export_job
    from ..runtimes.sessions import feeds_by_name  # by name, as export verified it: the graph may drop an input

    tensors, names = ctx.inputs.tensors, ctx.inputs.names
    feed = feeds_by_name([i.name for i in session.get_inputs()], [t.numpy() for t in tensors], names)
    result.ort_ms = _median_ms(lambda: session.run(None, feed), ctx.repeat)
    if (
        ctx.resized is not None
    ):  # checked by export() (deform_onnx.exporting.dynamic_check): it raised if the file failed there
        result.resized_error = max((v.max_error for v in report.size_checks), default=None)
        result.resized_ok = bool(report.size_checks)


def _cli_wording(text: str) -> str:
    """The Python spellings (``verify=False``, ``force=True``) in the CLI's (``--no-verify``, ``--force``)."""
    for python, cli in (
        ("verify=False (CLI: --no-verify)", "--no-verify"),
        ("verify=False", "--no-verify"),
        ("force=True (CLI: --force)", "--force"),
        ("force=True", "--force"),
    ):
        text = text.replace(python, cli)
    return text


def _partial_path(path: Path) -> Path:
    """A hidden file beside ``path`` that this run writes first (renamed by :func:`_commit`)."""
    import os

    return path.with_name(f".{path.name}.partial-{os.getpid()}")


def _remove(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def _discard(results: list[Result]) -> None:
    """Remove every partial file of this run (a user error or an interrupt: nothing is written)."""
    for r in results:
        _remove(r.partial)
        r.partial = None


def _commit(results: list[Result]) -> None:
    """Rename each passed row's partial file to its path (atomic); failed rows have none.

    A file of the same name from an earlier run is replaced by a passed row's and left as it was
    by a failed row (it may be the user's; the failure line says it is not this run's).
    """
    import os

    for r in results:
        if r.partial is not None and r.ok:
            os.replace(r.partial, r.job.path)
        else:
            _remove(r.partial)
            if not r.ok and r.job.path.exists():
                r.problem = f"{r.problem} ({r.job.path} is an earlier file, left as it was)"
        r.partial = None


def _torchscript_allows(opset: int) -> bool:
    from ._limits import TORCHSCRIPT_MAX_OPSET

    return opset <= TORCHSCRIPT_MAX_OPSET


def _resized_input(net, x, name: str):
    """A second input for dynamic models: the size :mod:`deform_onnx.exporting.sizes` picks for dynamic N, H, W (the
    one place that picks second sizes, shared with ``deform_onnx.export``), from the photo where it fits.
    """
    from ..exporting import sizes

    axes = sizes.dynamic_axes_of((x,), dynamic_axes={name: {0: "N", x.dim() - 2: "H", x.dim() - 1: "W"}},
                                 input_names=[name])  # fmt: skip
    picked, _ = sizes.second_inputs(net, (x,), axes)
    if not picked:  # PyTorch runs none: export() then refuses each row, naming the sizes it tried
        return None
    return from_specs([InputSpec(None, picked[0][1][0])], str(x.dtype).removeprefix("torch.")).tensors[0]


def _dynamic_kwargs(rank: int, name: str) -> dict[str, dict]:
    """Keyword arguments of :func:`deform_onnx.export` that make N and the last two axes dynamic, per exporter.

    Both exporters get ``dynamic_axes``, as a user of ``deform_onnx.export`` writes it: on the dynamo path
    strict ``Dim``s refuse a model whose code specialises a size that export's own rewrites keep symbolic
    (``int(x.shape[2])`` into ``torch.linspace``), and the second-size check decides either way.
    """
    axes = {0: "N", rank - 2: "H", rank - 1: "W"}
    return {"dynamo": {"dynamic_axes": {name: axes}}, "torchscript": {"dynamic_axes": {name: axes}}}


def _session(path: Path):
    from ..runtimes.ort_distribution import require

    ort = require()

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _median_ms(fn, repeat: int) -> float:
    for _ in range(3):  # warm-up: first-run allocation, kernel selection, thread-pool start
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3
