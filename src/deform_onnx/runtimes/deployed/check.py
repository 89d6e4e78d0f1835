"""``deform_onnx.check_runtimes``: convert a file with each runtime's own converter, run it, compare, time."""

from __future__ import annotations

import math
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import family, interpreter, run_file

__all__ = ["RuntimeRow", "check_runtimes", "reference_outputs"]


@dataclass
class RuntimeRow:
    """One runtime's verdict on one file.

    Attributes:
        runtime: the family's name (``"mnn"``).
        title: how tables name it.
        version: the runtime's (and its converter's) version; ``None`` when it did not start.
        max_error: max abs difference of its first output from the reference's (``inf``: another shape).
        tolerance: the bound it was held to (``deform-onnx check``'s: float32 ``atol`` 1e-4, float16/bfloat16
            ``atol + rtol * max|reference|``: :func:`deform_onnx.exporting.verification.tolerance_for`).
        ms: median milliseconds per run.
        error: the first line of why it did not run (venv, converter, runtime), ``None`` when it ran.
        artifacts: the converter's files kept under ``keep_artifacts`` (after it matched).
    """

    runtime: str
    title: str
    version: str | None = None
    max_error: float | None = None
    tolerance: float = 0.0
    ms: float | None = None
    error: str | None = None
    artifacts: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether it ran and matched the reference within :attr:`tolerance`."""
        return self.error is None and self.max_error is not None and self.max_error <= self.tolerance


def check_runtimes(
    path: str | os.PathLike,
    runtimes: Sequence[str],
    *,
    model: Any = None,
    args: tuple | None = None,
    inputs: dict[str, np.ndarray] | None = None,
    keep_artifacts: str | os.PathLike | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    repeats: int = 5,
    timeout: float = 1800,
    log: Callable[[str], None] | None = None,
) -> list[RuntimeRow]:
    """Convert ``path`` with each runtime's own converter, run it there, and compare with a reference.

    Each runtime runs in a cached venv of its own (created on first use: ``log`` hears that and pip's
    progress); ``onnxruntime`` and ``openvino`` run in this interpreter. The names
    (:data:`deform_onnx.runtimes.deployed.FAMILIES`): ``onnxruntime`` (``ort``), ``openvino`` (``ov``), ``mnn``
    (MNNConvert), ``ncnn`` (pnnx), ``tflite`` (onnx2tf, then LiteRT; ``litert``), ``tvm`` (relax), ``onnx2torch``.

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
        rtol, atol: the tolerance (default: the output dtype's, as ``export`` verifies).
        repeats: timed runs after a warm-up.
        timeout: seconds for each runtime's conversion and runs; a venv step may stall (print nothing, read or
            write nothing) for at most this or 300 s, whichever is less.
        log: receives progress lines (venv creation with pip's output, which runtime runs); default: the
            line saying a venv is being created goes to stderr.

    Returns:
        One :class:`RuntimeRow` per runtime, in order; only the first output is compared.

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
    from ...exporting.verification import tolerance_for

    tol = tolerance_for(want.dtype, rtol, atol)
    # deform-onnx check's rule: float32 a flat atol (1e-4); low precision (or an rtol given) scales with the output
    scaled = tol.dtype in ("float16", "bfloat16") or rtol is not None
    bound = tol.atol + (tol.rtol * float(np.abs(want.astype(np.float64)).max()) if scaled and want.size else 0.0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="deform-onnx-runtimes-") as tmp:
        for fam in fams:
            row = RuntimeRow(fam.name, fam.title, tolerance=bound)
            try:
                python = interpreter(fam, min(timeout, 300), log)
            except RuntimeError as exc:
                row.error = str(exc).splitlines()[0]
                rows.append(row)
                continue
            if log is not None:
                log(f"{fam.name}: converting and running {path.name}")
            work = Path(tmp) / fam.name
            work.mkdir()
            run = run_file(fam, python, path, feeds, list(want.shape), work, repeats=repeats, timeout=timeout,
                           keep=keep is not None)  # fmt: skip
            row.version, row.error, row.ms = run.version, run.error, run.ms
            if run.output is not None:
                row.max_error = _max_error(run.output, want)
            if row.ok and keep is not None:
                row.artifacts = _keep(run.artifacts, keep, path.stem)
            rows.append(row)
    return rows


def _announce(line: str) -> None:
    """The default ``log``: say on stderr that a venv is being created, or awaited (minutes, once); nothing else."""
    if line.startswith(("creating the ", "waiting for ")):
        print(f"deform-onnx: {line}", file=sys.stderr, flush=True)


def _max_error(got: np.ndarray, want: np.ndarray) -> float:
    """Max abs difference (``inf`` for another shape, ``nan`` when either holds a NaN the other lacks)."""
    from .. import max_abs_error

    return max_abs_error([np.asarray(got, dtype=np.float64)], [want.astype(np.float64)])


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
    """A tensor as numpy (bfloat16 as float32: exact)."""
    import torch

    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
    return np.asarray(t)


def reference_outputs(path: Path, feeds: dict[str, np.ndarray], model: Any = None, args: tuple | None = None):
    """The reference's first output: ``model(*args)`` in PyTorch when a model is given, else the file on ONNX Runtime."""
    if model is not None:
        import torch

        call = args if args is not None else tuple(torch.from_numpy(a) for a in feeds.values())
        with torch.no_grad():
            out = model(*(call if isinstance(call, tuple | list) else (call,)))
        while isinstance(out, tuple | list | dict):
            out = next(iter(out.values())) if isinstance(out, dict) else out[0]
        return _numpy(out)
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})[0])


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
    """One line: ``mnn (MNN 3.6.1): max abs error 2.1 > 0.0001`` or ``mnn: <why it did not run>``."""
    who = f"{row.runtime} ({row.version})" if row.version else row.runtime
    if row.error is not None:
        return f"{who}: {row.error}"
    err = "another output shape" if row.max_error is None or math.isinf(row.max_error) else f"{row.max_error:.2g}"
    return f"{who}: max abs error {err} > {row.tolerance:.2g}"
