"""``deform_onnx.check_runtimes``: convert a file with each runtime's own converter, run it, compare, time."""

from __future__ import annotations

import math
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...proof.compare import Comparison, compare_outputs
from ...proof.runners import FamilyRunner, RunnerError
from . import family

__all__ = ["RuntimeRow", "check_runtimes", "reference_outputs"]


@dataclass
class RuntimeRow:
    """One runtime's verdict on one file: every output compared per element (:mod:`deform_onnx.proof.compare`).

    Attributes:
        runtime: the family's name (``"mnn"``).
        title: how tables name it.
        version: the runtime's (and its converter's) version; ``None`` when it did not start.
        max_error: the largest max abs difference over its outputs from the reference's (``inf``: another shape
            or another number of outputs).
        tolerance: the worst output's ``atol`` (its ``rtol`` is :attr:`rtol`): each element ``e`` of each output is
            held to ``atol + rtol * |reference e|``, by the output's dtype unless given
            (:func:`deform_onnx.proof.compare.tolerance_for`).
        ms: median milliseconds per run.
        error: the first line of why it did not run (venv, converter, runtime), ``None`` when it ran.
        artifacts: the converter's files kept under ``keep_artifacts`` (after it matched).
        worst_output: the name of the output that failed furthest off, else of the one with the largest error.
        rtol: the worst output's ``rtol``.
        failure: what failed, one line naming each failing output and the runtime (``None``: all matched).
        comparison: the per-output statistics (:class:`deform_onnx.proof.Comparison`), ``None`` when it did not run.
        outputs: every output the runtime returned, ``(name, array)`` in the file's order.
    """

    runtime: str
    title: str
    version: str | None = None
    max_error: float | None = None
    tolerance: float = 0.0
    ms: float | None = None
    error: str | None = None
    artifacts: list[Path] = field(default_factory=list)
    worst_output: str | None = None
    rtol: float = 0.0
    failure: str | None = None
    comparison: Comparison | None = field(default=None, repr=False)
    outputs: list[tuple[str, np.ndarray]] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        """Whether it ran and every output matched the reference, element by element."""
        if self.comparison is not None:
            return self.error is None and self.comparison.ok
        return self.error is None and self.max_error is not None and self.max_error <= self.tolerance


def check_runtimes(
    path: str | os.PathLike,
    runtimes: Sequence[str],
    *,
    model: Any = None,
    args: tuple | None = None,
    inputs: dict[str, np.ndarray] | None = None,
    keep_artifacts: str | os.PathLike | None = None,
    keep_unmatched: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    tolerances: Mapping[str, tuple[float | None, float | None]] | None = None,
    repeats: int = 5,
    timeout: float = 1800,
    log: Callable[[str], None] | None = None,
) -> list[RuntimeRow]:
    """Convert ``path`` with each runtime's own converter, run it there, and compare every output with a reference.

    Each runtime runs in a cached venv of its own (created on first use: ``log`` hears that and pip's
    progress); ``onnxruntime`` and ``openvino`` run with this interpreter. The names
    (:data:`deform_onnx.runtimes.deployed.FAMILIES`): ``onnxruntime`` (``ort``), ``openvino`` (``ov``), ``mnn``
    (MNNConvert), ``ncnn`` (pnnx), ``tflite`` (onnx2tf, then LiteRT; ``litert``), ``tvm`` (relax), ``onnx2torch``.
    Each runs through :class:`deform_onnx.proof.FamilyRunner` and is judged by
    :func:`deform_onnx.proof.compare_outputs`: every output, in the file's order, element by element with its
    dtype's rule (integers exactly), its shape and its precision (a float16 output where float32 is claimed fails).

    Args:
        path: the ONNX file.
        runtimes: family names or aliases.
        model: a ``torch.nn.Module``: the reference is its output on ``args`` (else the file on ONNX Runtime).
        args: the model's inputs (tensors, in the graph inputs' order); also the feeds of every runtime.
        inputs: feeds by graph input name (numpy), when ``args`` is not given; default: random ones
            (``deform-onnx check``'s: offsets ``randn*2``, masks ``rand``), dynamic dims need ``inputs``.
        keep_artifacts: a folder: each converter's output (``.mnn``, ``.ncnn.param``/``.ncnn.bin``, ``.tflite``,
            OpenVINO ``.xml``/``.bin``) is kept there as ``<file stem><suffix>``, only when that runtime matched
            (all of a runtime's files or none).
        keep_unmatched: keep the files of a runtime that ran but missed the tolerance too, for a caller that
            judges its outputs by other rules and keeps only what passes them (``export``'s check:
            :mod:`deform_onnx.exporting.deployed_check`).
        rtol, atol: the tolerance of every output (default: each output dtype's, as ``export`` verifies).
        tolerances: ``{output name: (rtol, atol)}`` for some outputs (wins over ``rtol``/``atol``).
        repeats: timed runs after a warm-up.
        timeout: seconds for each runtime's conversion and runs; a venv step may stall (print nothing, read or
            write nothing) for at most this or 300 s, whichever is less.
        log: receives progress lines (venv creation with pip's output, which runtime runs); default: the
            line saying a venv is being created goes to stderr.

    Returns:
        One :class:`RuntimeRow` per runtime, in order.

    Raises:
        ValueError: an unknown runtime name (one line listing the names), or inputs that do not fit the file.
        FileNotFoundError: ``path`` or ``keep_artifacts`` does not exist.
    """
    fams = [family(r) for r in runtimes]
    log = log or _announce
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    keep = Path(keep_artifacts) if keep_artifacts is not None else None
    if keep is not None and not keep.is_dir():
        raise FileNotFoundError(f"keep_artifacts: {keep} is not a folder; create it first")
    feeds = _feeds(path, args, inputs)
    want = reference_outputs(path, feeds, model, args)
    rows = []
    with tempfile.TemporaryDirectory(prefix="deform-onnx-runtimes-") as tmp:
        for fam in fams:
            work = Path(tmp) / fam.name
            work.mkdir()
            runner = FamilyRunner(fam.name, work, repeats=repeats, timeout=timeout, keep=keep is not None, log=log)
            runner.shapes = [list(a.shape) for _, a in want]
            row = _row(runner, path, feeds, want, (rtol, atol, tolerances), log)
            if keep is not None and (row.ok or (keep_unmatched and row.error is None)):
                row.artifacts = _keep(runner.artifacts, keep, path.stem)
            rows.append(row)
    return rows


def _row(runner: FamilyRunner, path: Path, feeds: dict, want: list, tol: tuple, log: Callable | None) -> RuntimeRow:
    """Load and run ``path`` on ``runner``, compare every output with ``want``: the row."""
    row = RuntimeRow(runner.name, runner.title)
    try:
        runner.load(path)  # the venv (created on first use, said through log)
        if log is not None:
            log(f"{runner.name}: converting and running {path.name}")
        got = runner.run(feeds)
    except RunnerError as exc:
        row.version, row.ms, row.error = runner.version, runner.ms, str(exc)
        return row
    row.version, row.ms, row.outputs = runner.version, runner.ms, got
    rtol, atol, per_output = tol
    _judge(row, compare_outputs(got, want, runtime=runner.label, rtol=rtol, atol=atol, per_output=per_output))
    if runner.again and row.failure is None:  # a later run of the same feeds gave other bits: judged too
        later = compare_outputs(runner.again, want, runtime=runner.label, rtol=rtol, atol=atol, per_output=per_output)
        if not later.ok:  # the row's outputs are the run that failed (export's other rules replay them)
            row.outputs = runner.again
            _judge(row, later)
            row.failure = f"the first run matched, a later run of the same inputs did not: {row.failure}"
    return row


def _judge(row: RuntimeRow, result: Comparison) -> None:
    """Fill ``row``'s verdict from ``result`` (its statistics, worst output, tolerance and failure line)."""
    row.comparison, row.max_error = result, result.max_error
    worst = result.worst
    if worst is not None:
        row.worst_output, row.tolerance, row.rtol = worst.name, worst.tolerance.atol, worst.tolerance.rtol
    row.failure = result.message() or None


def _announce(line: str) -> None:
    """The default ``log``: say on stderr that a venv is being created, or awaited (minutes, once); nothing else."""
    if line.startswith(("creating the ", "waiting for ")):
        print(f"deform-onnx: {line}", file=sys.stderr, flush=True)


def _feeds(path: Path, args: tuple | None, inputs: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """Feeds by graph input name: ``args`` in graph order, else ``inputs``, else random (check's rules)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    init = {i.name for i in graph.initializer}
    graph_inputs = [i.name for i in graph.input if i.name not in init]
    if args is not None:
        tensors = [a for a in (args if isinstance(args, tuple | list) else (args,))]
        if len(tensors) != len(graph_inputs):
            raise ValueError(f"{path.name} takes {len(graph_inputs)} inputs ({', '.join(graph_inputs)}), "
                             f"args holds {len(tensors)}")  # fmt: skip
        return {n: _numpy(t) for n, t in zip(graph_inputs, tensors, strict=True)}
    from ...cli._feeds import make_feeds
    from ...rewrite import read_model

    return make_feeds(read_model(path), {}, inputs, 0)


def _numpy(t: Any) -> np.ndarray:
    """A tensor as numpy (bfloat16 as float32: exact; the feeds a runtime gets)."""
    import torch

    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    return np.asarray(t)


def _float32_reference(model, call: tuple, graph_outputs, exc: Exception) -> list:
    """The reference of a float16 / bfloat16 model PyTorch cannot run on CPU (``avg_pool3d`` has no ``Half`` kernel:
    LivePortrait's warping network in float16), as :func:`deform_onnx.exporting.verification.verify` takes it: the
    model's float32 copy, each output rounded to the file's dtype for it.

    Raises:
        ValueError: the float32 copy does not run either (both reasons named), or ``exc`` when the model is not a
            low-precision one.
    """
    import onnx
    import torch

    from ...exporting.pytorch_runs import copy_run

    low = (torch.float16, torch.bfloat16)
    if not any(isinstance(a, torch.Tensor) and a.dtype in low for a in call):
        raise exc
    copy32, why = copy_run(model, call, torch.float32)
    if copy32 is None:
        raise ValueError(f"the model runs neither in its own dtype ({type(exc).__name__}: {exc}) nor as a float32 "
                         f"copy ({why}): nothing to compare the runtime with") from None  # fmt: skip
    dtypes = [onnx.helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type) for o in graph_outputs]
    by_name = {np.dtype("float16"): torch.float16}
    return [(p, t.to(by_name.get(dtypes[i], t.dtype)) if i < len(dtypes) else t) for i, (p, t) in enumerate(copy32)]


def reference_outputs(
    path: Path, feeds: dict[str, np.ndarray], model: Any = None, args: tuple | None = None
) -> list[tuple[str, np.ndarray]]:
    """Every reference output, ``(the file's output name, array)`` in the file's order: ``model(*args)`` in PyTorch
    (flattened as the exporters flatten it; bfloat16 as ``ml_dtypes.bfloat16``; a float16/bfloat16 output is the
    model's float32 copy on upcast inputs, rounded to the output's dtype) when a model is given, else the
    file on ONNX Runtime (CPU). When the model returns another number of outputs than the file holds, they keep
    PyTorch's names (the comparison then refuses the pairing).
    """
    import onnx

    graph_outputs = onnx.load(str(path), load_external_data=False).graph.output
    names = [o.name for o in graph_outputs]
    if model is not None:
        import torch

        from ..sessions import _feed, output_tensors

        call = args if args is not None else tuple(torch.from_numpy(a) for a in feeds.values())
        call = tuple(call) if isinstance(call, tuple | list) else (call,)
        try:
            with torch.no_grad():
                own = output_tensors(model(*call))
        except Exception as exc:  # noqa: BLE001 - a low-precision kernel PyTorch lacks on CPU: its float32 copy
            own = _float32_reference(model, call, graph_outputs, exc)
        pairs = [(p, _feed(t)) for p, t in own]
        if any(t.dtype in (torch.float16, torch.bfloat16) for _, t in own):
            # As export's own check (docs/verification.md): PyTorch's low-precision output is no trustworthy
            # reference on CPU (a float16 DCNv2 is ~2e-2 off its float32 model), its float32 copy is.
            from ...exporting.verification import upcast_run

            copy32, _ = upcast_run(model, call, torch.float32)
            if copy32 is not None and len(copy32) == len(own):
                pairs = [(p, _feed(c.to(t.dtype)) if t.dtype in (torch.float16, torch.bfloat16) else a)
                         for (p, t), c, (_, a) in zip(own, copy32, pairs)]  # fmt: skip
        if len(pairs) == len(names):
            return [(n, a) for n, (_, a) in zip(names, pairs)]
        return [(p or f"output {i}", a) for i, (p, a) in enumerate(pairs)]
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})
    return [(o.name, np.asarray(g)) for o, g in zip(session.get_outputs(), got)]


def _keep(files: list[tuple[Path, str]], folder: Path, stem: str) -> list[Path]:
    """Copy ``files`` into ``folder`` as ``<stem><suffix>``: temporary names first, then renamed (all or none),
    with a new file's mode (:func:`~deform_onnx.core.atomic_io.commit_copies`).
    """
    from ...core.atomic_io import commit_copies

    return commit_copies([(src, folder / f"{stem}{suffix}") for src, suffix in files])


def failed(rows: list[RuntimeRow]) -> list[RuntimeRow]:
    """The rows that did not run or missed their tolerance."""
    return [r for r in rows if not r.ok]


def describe(row: RuntimeRow) -> str:
    """One line: ``mnn (3.6.1): output 'z' misses the reference at 12 of 256 elements (max abs error 2.1; ...)``
    (every failing output), or ``mnn: <why it did not run>``.
    """
    who = f"{row.runtime} ({row.version})" if row.version else row.runtime
    if row.error is not None:
        return f"{who}: {row.error}"
    if row.failure is not None:
        return row.failure
    err = "another output shape" if row.max_error is None or math.isinf(row.max_error) else f"{row.max_error:.2g}"
    return f"{who}: max abs error {err} > {row.tolerance:.2g}"
