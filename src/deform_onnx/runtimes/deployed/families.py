"""The runtimes users deploy to, each run through its own converter in its own cached venv.

A :class:`Family` names a runtime (``mnn``, ``ncnn``, ``tflite``, ``tvm``, ``onnx2torch``,
and ``onnxruntime``/``openvino``, which run in this interpreter), the venv that holds it
(:func:`deform_onnx.runtimes.venvs.cached_venv`, requirements pinned to the versions
measured here), the runner it executes there (:mod:`.runners`) and the artifacts its
converter writes (the user's deployable file: ``.mnn``, ncnn ``.param``/``.bin``,
``.tflite``, OpenVINO ``.xml``/``.bin``). :func:`run_file` converts and runs one ONNX
file on one family; :func:`deform_onnx.check_runtimes` compares the result with a
reference. New families: :func:`register_family`.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import sealed, venvs
from . import runners

__all__ = ["FAMILIES", "Family", "Run", "crash_line", "family", "interpreter", "register_family", "run_file"]

#: Each artifact a converter wrote: ``(the file it wrote, the suffix it is kept under)``.
Artifacts = Callable[[Path], list[tuple[Path, str]]]


def _none(out: Path) -> list[tuple[Path, str]]:
    return []


@dataclass(frozen=True)
class Family:
    """One deployed runtime.

    Attributes:
        name: its name (``check_runtimes(runtimes=...)``, ``--runtime``).
        title: how tables name it.
        runner: the code it runs (:mod:`.runners`).
        venv: folder under :func:`~deform_onnx.runtimes.venvs.venv_root`; ``None``: this interpreter.
        requirements: what its venv installs (pinned: the versions measured with this package).
        aliases: other names it answers to.
        options: extra ``pip install`` options of its venv.
        inherit: its venv also sees this interpreter's packages (onnx2torch: the project's torch).
        modules: for ``venv=None``: the modules this interpreter must have, and the extra that installs them.
        artifacts: the files its converter wrote for the output path ``out`` (kept with ``keep_artifacts``).
        extension: when the file holds ``DeformConv``: OpenVINO adds :func:`deform_onnx.openvino.extension`,
            onnx2torch calls :func:`deform_onnx.onnx2torch.register` (``meta["extension"]``).
    """

    name: str
    title: str
    runner: str
    venv: str | None = None
    requirements: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    inherit: bool = False
    modules: tuple[tuple[str, str], ...] = ()
    artifacts: Artifacts = field(default=_none)
    extension: bool = False


FAMILIES: dict[str, Family] = {}


def register_family(fam: Family) -> Family:
    """Add ``fam`` to :data:`FAMILIES` (a name or alias taken already raises ``ValueError``)."""
    taken = {n for f in FAMILIES.values() for n in (f.name, *f.aliases)}
    if taken & {fam.name, *fam.aliases}:
        raise ValueError(f"runtime family {fam.name!r}: a name of {(fam.name, *fam.aliases)} is registered already")
    FAMILIES[fam.name] = fam
    return fam


def names() -> list[str]:
    """Every name and alias, sorted."""
    return sorted(n for f in FAMILIES.values() for n in (f.name, *f.aliases))


def family(name: str) -> Family:
    """The family called ``name`` (or one of its aliases, any case).

    Raises:
        ValueError: one line listing the names.
    """
    key = name.strip().lower()
    for fam in FAMILIES.values():
        if key == fam.name or key in fam.aliases:
            return fam
    raise ValueError(f"unknown runtime {name!r}; choose from {', '.join(names())}")


def interpreter(fam: Family, timeout: float = 300, log: Callable[[str], None] | None = None) -> Path:
    """The Python that runs ``fam``: its cached venv's (created on first use, saying so through ``log``).

    ``timeout``: seconds a venv step may stall (no output, nothing read or written), not a total; a second
    process asking for the same venv meanwhile waits for it (:func:`deform_onnx.runtimes.venvs.cached_venv`).

    Raises:
        RuntimeError: one line: the venv could not be created (e.g. no registry access: pip's last line), or
            this interpreter lacks what a ``venv=None`` family needs (naming the extra).
    """
    if fam.venv is None:
        missing = [(m, extra) for m, extra in fam.modules if importlib.util.find_spec(m) is None]
        if missing:
            raise RuntimeError(f"{fam.name} needs {missing[0][0]}: pip install 'deform-onnx[{missing[0][1]}]'")
        return Path(sys.executable)
    return venvs.cached_venv(
        fam.venv, fam.requirements, timeout=timeout, options=fam.options, inherit=fam.inherit, log=log
    )


@dataclass
class Run:
    """What one family did with one file.

    Attributes:
        version: the runtime's version (with its converter's), ``None`` when it did not start.
        error: the first line of what failed (conversion, loading, running), ``None`` when it ran.
        ms: median milliseconds of the timed runs.
        outputs: every output it returned, ``(the file's name for it, array)`` in the file's order (empty when
            it failed).
        artifacts: the converter's files, ``(path, suffix to keep it under)``.
        again: the outputs of a later run of the same feeds whose bits differ from :attr:`outputs` (the first
            such run; empty when every run gave the same bits): a caller judges them too.
    """

    version: str | None
    error: str | None
    ms: float | None = None
    outputs: list[tuple[str, np.ndarray]] = field(default_factory=list)
    artifacts: list[tuple[Path, str]] = field(default_factory=list)
    again: list[tuple[str, np.ndarray]] = field(default_factory=list)

    @property
    def output(self) -> np.ndarray | None:
        """Its first output (``None`` when it failed); :attr:`outputs` holds every one."""
        return self.outputs[0][1] if self.outputs else None


def run_file(
    fam: Family,
    python: Path,
    model: Path,
    feeds: dict[str, np.ndarray],
    output_shape: list[int] | list[list[int]],
    work: Path,
    *,
    repeats: int = 5,
    timeout: float = 600,
    keep: bool = False,
) -> Run:
    """Convert and run ``model`` on ``feeds`` with ``fam``'s runner under ``python`` (from :func:`interpreter`).

    Args:
        fam: the family.
        python: the interpreter to run it with.
        model: the ONNX file.
        feeds: inputs by graph input name (numpy arrays; bfloat16 inputs as float32).
        output_shape: the reference's output shapes, one list per output of the file (ncnn drops the batch axis;
            onnx2tf moves channels); one list of ints is the first output's (the others then unknown).
        work: an existing folder for the converter's files.
        repeats: timed runs after a warm-up (the median is ``ms``).
        timeout: seconds the conversion and the runs may take.
        keep: OpenVINO: also save the IR it ran.

    Returns:
        The :class:`Run`; a converter that crashed, timed out or wrote nothing is its ``error``.
    """
    import onnx

    graph = onnx.load(str(model), load_external_data=False).graph
    inputs = [i.name for i in graph.input if i.name in feeds]
    bf16 = [i.name for i in graph.input if i.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16]
    stem = work / model.stem
    out = Path(f"{stem}.{fam.name}.out.npz")
    out.unlink(missing_ok=True)
    np.savez(f"{stem}.feeds.npz", **{n: feeds[n] for n in inputs})  # type: ignore[arg-type]
    nested = bool(output_shape) and isinstance(output_shape[0], list | tuple)
    shapes = [list(s) for s in output_shape] if nested else ([list(output_shape)] if output_shape else [])  # type: ignore[arg-type]
    meta = {"model": str(model), "feeds": f"{stem}.feeds.npz", "out": str(out), "inputs": inputs,
            "output": graph.output[0].name, "output_shape": shapes[0] if shapes else None,
            "outputs": [o.name for o in graph.output], "output_shapes": shapes, "repeats": repeats,
            "src": str(Path(__file__).resolve().parents[3]), "tool": str(python.parent),
            "extension": fam.extension and any(n.op_type == "DeformConv" for n in graph.node), "keep": keep,
            "bfloat16": bf16}  # fmt: skip
    return run_meta(fam, python, meta, out, timeout)


def run_meta(fam: Family, python: Path, meta: dict, out: Path, timeout: float) -> Run:
    """Run ``fam``'s runner on a prepared ``meta`` (:mod:`.runners`'s keys) and read what it did.

    The runner (and the converter it starts) runs in :func:`deform_onnx.runtimes.sealed.run_env`: its venv
    first on ``PATH``, none of the user's venv, ``PYTHON*`` or ``PIP_*`` settings, ``pip`` refused.
    """
    meta_path = out.with_suffix(".json")
    meta_path.write_text(json.dumps(meta))
    try:
        done = subprocess.run(
            [str(python), "-c", fam.runner, str(meta_path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=sealed.run_env(python),
        )
    except subprocess.TimeoutExpired:
        return Run(None, f"timed out after {timeout:g} s")
    try:  # the status is the last line; a runtime may have printed to it without a newline (MNN does)
        last = done.stdout.strip().splitlines()[-1]
        status = json.loads(last[last.rindex('{"version"') :] if '{"version"' in last else last)
    except (IndexError, json.JSONDecodeError):  # the runtime crashed (a segfault, an abort)
        return Run(None, crash_line(done.returncode, done.stderr))
    run = Run(status["version"], status["error"], status["ms"])
    if run.error is None:
        run.outputs = read_outputs(out, status.get("outputs"))
        if status.get("again"):
            run.again = read_outputs(out, status.get("outputs"), prefix="a")
        run.artifacts = [(p, s) for p, s in fam.artifacts(out) if p.is_file()]
    return run


def read_outputs(out: Path, names: list[str] | None, prefix: str = "o") -> list[tuple[str, np.ndarray]]:
    """The outputs a runner saved at ``out``: every one, named and in order (an ``.npz`` of ``o0``, ``o1``, ...;
    ``prefix="a"``: a later run's, when its bits differed; a runner of an older layout saved one ``.npy``).
    """
    saved = np.load(out)
    if isinstance(saved, np.ndarray):
        arrays = [saved] if prefix == "o" else []
    else:
        with saved:
            arrays = [saved[f"{prefix}{i}"] for i in range(sum(f.startswith(prefix) for f in saved.files))]
    names = list(names or [])
    return [(names[i] if i < len(names) else f"output {i}", a) for i, a in enumerate(arrays)]


#: What a runner prints to stderr before each step (:mod:`.runners` ``stage``), so a crash names the step.
STAGE = "deform-onnx stage: "


def crash_line(returncode: int, stderr: str) -> str:
    """Why a runner wrote no status line, for every family: the signal that ended it (a runtime's own crash, e.g.
    ``SIGSEGV``) or its exit code, the step it was in (its last ``stage`` line), what it printed, and what to try.

    A crash says nothing about the file's values; before this the row read only "runner exited -11: no output".
    """
    import signal

    lines = [line.strip() for line in (stderr or "").splitlines() if line.strip()]
    stages = [line[len(STAGE) :] for line in lines if line.startswith(STAGE)]
    said = [line for line in lines if not line.startswith(STAGE)]
    where = f" while {stages[-1]}" if stages else ""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "a signal"
        what = f"the runtime crashed ({name}, signal {-returncode}){where}, before it reported a result"
        if -returncode == signal.SIGKILL:
            what += " (a SIGKILL is often the system out of memory)"
    else:
        what = f"the runner exited {returncode}{where} without reporting a result"
    told = f": {first_line(chr(10).join(said))}" if said else ""
    return (
        f"{what}{told}. This is a fault in the runtime, not a difference in values: export with another method= or "
        "for another target= (`deform-onnx targets` lists each target's forms), or report it to the runtime"
    )


def first_line(text: BaseException | str) -> str:
    """The first non-empty line of ``text`` (at most 300 characters)."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return (lines[0] if lines else "no output")[:300]


def _mnn_files(out: Path) -> list[tuple[Path, str]]:
    return [(Path(f"{out}.mnn"), ".mnn")]


def _ncnn_files(out: Path) -> list[tuple[Path, str]]:
    work = Path(f"{out}.pnnx")
    return [(work / "m.ncnn.param", ".ncnn.param"), (work / "m.ncnn.bin", ".ncnn.bin")]


def _tflite_files(out: Path) -> list[tuple[Path, str]]:
    return [(Path(p), ".tflite") for p in sorted(glob.glob(f"{out}.tf/*_float32.tflite"))[:1]]


def _ir_files(out: Path) -> list[tuple[Path, str]]:
    return [(Path(f"{out}.xml"), ".xml"), (Path(f"{out}.bin"), ".bin")]


#: onnx2tf and what it imports (its 1.29 metadata pins most of them; onnxsim 0.4.36 among them).
ONNX2TF = (
    "onnx2tf==1.29.24",
    "tensorflow==2.19.0",
    "tf-keras==2.19.0",
    "ai-edge-litert==2.1.0",
    "onnx==1.19.1",
    "onnx-graphsurgeon==0.5.8",
    "sng4onnx==2.0.1",
    "psutil==5.9.5",
    "onnxruntime==1.23.0",
)

register_family(
    Family(
        "onnxruntime", "ONNX Runtime (CPU)", runners.ORT, aliases=("ort",), modules=(("onnxruntime", "onnxruntime"),)
    )
)
register_family(
    Family(
        "openvino",
        "OpenVINO (CPU)",
        runners.OPENVINO,
        aliases=("ov",),
        artifacts=_ir_files,
        extension=True,
        modules=(("openvino", "openvino"),),
    )
)
register_family(Family("mnn", "MNN (MNNConvert + runtime)", runners.MNN, "mnn", ("MNN==3.6.1",), artifacts=_mnn_files))
register_family(
    # --no-deps: pnnx's wheel requires torch (4 GB with CUDA) for its Python API; the ONNX path runs its binary
    Family(
        "ncnn",
        "ncnn (through pnnx)",
        runners.NCNN,
        "pnnx",
        ("pnnx==20261020", "ncnn==1.0.20261020", "numpy"),
        aliases=("pnnx",),
        options=("--no-deps",),
        artifacts=_ncnn_files,
    )
)
register_family(
    Family(
        "tflite",
        "TFLite / LiteRT (through onnx2tf)",
        runners.TFLITE,
        "onnx2tf",
        ONNX2TF,
        aliases=("litert", "onnx2tf"),
        artifacts=_tflite_files,
    )
)
register_family(
    Family("tvm", "Apache TVM (relax, llvm)", runners.TVM, "tvm", ("apache-tvm==0.27.0.post1", "onnx==1.23.2"))
)
register_family(
    Family(
        "onnx2torch",
        "onnx2torch (torch.fx, CPU)",
        runners.ONNX2TORCH,
        "onnx2torch",
        ("onnx2torch==1.5.15",),
        options=("--no-deps",),
        inherit=True,
        extension=True,
    )
)
