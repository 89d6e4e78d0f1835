"""Runners: each loads an artifact and runs named feeds, returning every output with its name and dtype.

A runner only runs; :func:`deform_onnx.proof.compare.compare_outputs` judges what it returned. One runner per
place a file runs (as Polygraphy's ``BaseRunner``: load, ``infer(feed_dict)`` -> every output by name):

- :class:`OnnxRuntimeRunner`: ONNX Runtime's CPU execution provider, in this interpreter.
- :class:`OpenVINORunner`: OpenVINO's CPU plugin, in this interpreter, on an ONNX file or an IR (``.xml``).
- :class:`FamilyRunner`: a deployed family (:data:`deform_onnx.runtimes.deployed.FAMILIES`: MNN, ncnn,
  TFLite through onnx2tf, TVM, onnx2torch, and ONNX Runtime/OpenVINO as ``check --runtime`` runs them):
  the family's own converter and runtime in its cached venv, every output saved by name and read back.

A new runtime is one more runner (or one more :func:`deform_onnx.runtimes.deployed.register_family`).
"""

from __future__ import annotations

import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: What a runner returns: ``[(the file's name for the output, array), ...]`` in the file's order.
Outputs = list[tuple[str, np.ndarray]]


class RunnerError(RuntimeError):
    """A runner could not load or run the artifact (one line: the converter's or runtime's own words)."""


class Runner(ABC):
    """Load an artifact, run named feeds, return every output.

    Attributes:
        name: the runner's name (``"onnxruntime"``, ``"mnn"``).
        title: how tables name it.
        version: the runtime's version once loaded (``None`` before, or when it did not start).
        ms: median milliseconds of the last :meth:`run`'s timed runs (``None``: not timed).
    """

    name: str = ""
    title: str = ""
    version: str | None = None
    ms: float | None = None

    @abstractmethod
    def load(self, path: str | os.PathLike) -> None:
        """Load (or convert) the artifact at ``path``. Raises :class:`RunnerError` in one line."""

    @abstractmethod
    def run(self, feeds: dict[str, np.ndarray]) -> Outputs:
        """Every output on ``feeds`` (arrays by the file's input names). Raises :class:`RunnerError` in one line."""

    @property
    def label(self) -> str:
        """``name (version)``, as messages name the runner."""
        return f"{self.name} ({self.version})" if self.version else self.name


class OnnxRuntimeRunner(Runner):
    """An ONNX file in ONNX Runtime's CPU execution provider (:func:`deform_onnx.runtimes.sessions.make_session`)."""

    name, title = "onnxruntime", "ONNX Runtime (CPU)"

    def __init__(self, optimize: bool = True) -> None:
        self.optimize = optimize
        self.session = None

    def load(self, path: str | os.PathLike) -> None:  # noqa: D102 - the base class says it
        from ..runtimes.ort_distribution import require
        from ..runtimes.sessions import make_session

        self.version = require().__version__
        try:
            self.session = make_session(Path(path).read_bytes(), optimize=self.optimize)
        except Exception as exc:
            raise RunnerError(_one_line(exc)) from exc

    def run(self, feeds: dict[str, np.ndarray]) -> Outputs:  # noqa: D102
        from ..runtimes.sessions import _run

        assert self.session is not None, "load() first"
        names = [o.name for o in self.session.get_outputs()]
        try:
            got = _run(self.session, {i.name: feeds[i.name] for i in self.session.get_inputs()})
        except Exception as exc:
            raise RunnerError(_one_line(exc)) from exc
        return list(zip(names, [np.asarray(g) for g in got]))


class OpenVINORunner(Runner):
    """An ONNX file or an OpenVINO IR (``.xml`` with its ``.bin``) on OpenVINO's CPU plugin, in this interpreter.

    ``config``: ``compile_model``'s properties; default ``{"INFERENCE_PRECISION_HINT": "f32"}`` (float32 inference:
    on a CPU with bfloat16 (AMX) the plugin's own default runs float32 models in bfloat16); ``{}`` runs with
    OpenVINO's defaults on this CPU. An ONNX file with ``DeformConv`` nodes gets
    :func:`deform_onnx.openvino.extension`.
    """

    name, title = "openvino", "OpenVINO (CPU)"

    def __init__(self, config: dict | None = None) -> None:
        self.config = {"INFERENCE_PRECISION_HINT": "f32"} if config is None else dict(config)
        self.compiled = None
        self.names: list[str] = []

    def load(self, path: str | os.PathLike) -> None:  # noqa: D102
        import openvino as ov

        self.version = ov.get_version().split("-")[0]
        core = ov.Core()
        path = Path(path)
        try:
            if path.suffix != ".xml":
                import onnx

                graph = onnx.load(str(path), load_external_data=False).graph
                if any(n.op_type == "DeformConv" for n in graph.node):
                    from ..openvino import extension

                    core.add_extension(extension())
                self.names = [o.name for o in graph.output]
            model = core.read_model(str(path))
            compiled = self.compiled = core.compile_model(model, "CPU", self.config)
        except Exception as exc:
            raise RunnerError(_one_line(exc)) from exc
        ports = list(compiled.outputs)
        if len(self.names) != len(ports):  # an IR: the ports' own names
            self.names = [p.get_any_name() if p.get_names() else f"output {i}" for i, p in enumerate(ports)]

    def run(self, feeds: dict[str, np.ndarray]) -> Outputs:  # noqa: D102
        assert self.compiled is not None, "load() first"
        try:
            inputs = [feeds[next(n for n in p.get_names() if n in feeds)] for p in self.compiled.inputs]
            request = self.compiled.create_infer_request()
            request.infer(inputs)
            ports = list(self.compiled.outputs)
            named = {n: p for p in ports for n in p.get_names()}
            if all(n in named for n in self.names):
                ports = [named[n] for n in self.names]
            return [(n, np.array(request.get_tensor(p).data).copy()) for n, p in zip(self.names, ports)]
        except Exception as exc:
            raise RunnerError(_one_line(exc)) from exc


class FamilyRunner(Runner):
    """A deployed family: its own converter and runtime in its cached venv (:mod:`deform_onnx.runtimes.deployed`).

    :meth:`load` finds the venv (creating it on first use) and remembers the file; :meth:`run` converts and runs
    it in one process there, every output saved by name (``.npz``) and read back. ``shapes``: the reference's
    output shapes, for runtimes that drop or move axes (ncnn has no batch axis; onnx2tf writes channels last).
    After a run, :attr:`artifacts` lists the converter's files (while :attr:`work` exists), and :attr:`again` holds
    the outputs of a later run of the same feeds when their bits differed from the first run's (judge them too).

    Args:
        family: a family name or alias (``"mnn"``).
        work: a folder for the converter's files (default: a temporary one per run, removed with the runner).
        repeats: timed runs after one warm-up.
        timeout: seconds for the venv step and for each conversion and run.
        keep: OpenVINO: also save the IR it ran (an artifact).
        log: progress lines (venv creation).
    """

    def __init__(
        self,
        family: str,
        work: str | os.PathLike | None = None,
        *,
        repeats: int = 1,
        timeout: float = 1800,
        keep: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> None:
        from ..runtimes.deployed import family as find

        self.family = find(family)
        self.name, self.title = self.family.name, self.family.title
        self.repeats, self.timeout, self.keep, self.log = repeats, timeout, keep, log
        self._tmp = tempfile.TemporaryDirectory(prefix=f"deform-onnx-{self.name}-") if work is None else None
        self.work = Path(work) if work is not None else Path(self._tmp.name)  # type: ignore[union-attr]
        self.path: Path | None = None
        self.python: Path | None = None
        self.artifacts: list[tuple[Path, str]] = []
        self.shapes: list[list[int]] | None = None
        #: after :meth:`run`: a later run's outputs whose bits differed from the returned ones (empty: none did)
        self.again: Outputs = []

    def load(self, path: str | os.PathLike) -> None:  # noqa: D102
        from ..runtimes.deployed import interpreter

        self.path = Path(path)
        try:
            self.python = interpreter(self.family, min(self.timeout, 300), self.log)  # a venv step's stall limit
        except RuntimeError as exc:
            raise RunnerError(str(exc).splitlines()[0]) from exc

    def run(self, feeds: dict[str, np.ndarray]) -> Outputs:  # noqa: D102
        from ..runtimes.deployed import run_file

        assert self.path is not None and self.python is not None, "load() first"
        run = run_file(self.family, self.python, self.path, feeds, self.shapes or [], self.work,
                       repeats=self.repeats, timeout=self.timeout, keep=self.keep)  # fmt: skip
        self.version, self.ms = run.version, run.ms
        if run.error is not None:
            raise RunnerError(run.error)
        self.artifacts, self.again = run.artifacts, run.again
        return run.outputs


def runner_for(name: str, **options) -> Runner:
    """The runner ``check_runtimes`` uses for the family called ``name`` (:class:`FamilyRunner`; ``options`` its)."""
    return FamilyRunner(name, **options)


def _one_line(exc: BaseException) -> str:
    from ..runtimes.deployed import first_line

    return first_line(exc if str(exc).strip() else type(exc).__name__)


__all__ = ["FamilyRunner", "OnnxRuntimeRunner", "OpenVINORunner", "Outputs", "Runner", "RunnerError", "runner_for"]
