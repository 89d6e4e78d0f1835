"""Each deployed family's forms of a DCNv2 layer beside its own dense Conv (issue 38 items 1 and 4).

Used by ``scripts/runtime_venvs.py bench``. For each shape and each (family, target) of :data:`ENTRIES`, the
dense ``Conv`` of the same shape (a plain ``torch.nn.Conv2d`` with the layer's weight and bias) and the layer
exported for that target with each method (``native``, ``grid_sample``, ``gather``: a method the target
refuses, by a fault or by a graph rule, is recorded as refused) are converted and run by that family's own
converter and runtime (:func:`deform_onnx.runtimes.deployed.run_file`, one process per file). Forms are
interleaved: each round runs every file of a (shape, family) back to back, in an order rotated per round; a
cell is the median over rounds of each run's median. The results give the ``deployed runtimes`` block of
BENCHMARKS.md (ms, ratio to the family's own dense Conv, ratio to ORT native) and the data file the targets
read (:data:`deform_onnx.targets.measured.DATA`).
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from deform_onnx.runtimes.deployed import FAMILIES, run_file

#: (family, the target its files are exported for, the methods tried). ORT first: its native form is the
#: ratio's base. target openvino-extension differs from openvino in native (the extension's mapping; its standard-op
#: forms are measured too, at its own opset, for its shape classes: OpenVINO's DeformableConvolution with 8 offset
#: groups ran slower than OpenVINO's grid_sample form), and onnx2torch-native from onnx2torch in native
#: (deform_onnx.onnx2torch.register()'s converter).
ENTRIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("onnxruntime", "onnxruntime", ("native", "grid_sample", "gather")),
    ("openvino", "openvino-extension", ("native", "grid_sample", "gather")),
    ("openvino", "openvino", ("grid_sample", "gather")),
    ("mnn", "mnn", ("native", "grid_sample", "gather")),
    ("ncnn", "ncnn", ("native", "grid_sample", "gather")),
    ("tflite", "tflite", ("native", "grid_sample", "gather")),
    ("tvm", "tvm", ("native", "grid_sample", "gather")),
    ("onnx2torch", "onnx2torch-native", ("native",)),
    ("onnx2torch", "onnx2torch", ("native", "grid_sample", "gather")),
)
DENSE = "dense Conv"
#: The op the layer calls (its registry name): the targets read its shape classes (deform_onnx.targets.measured).
OP = "deform_conv2d"
BASE = ("onnxruntime", "native")  # ORT native: (target, form)
#: Largest error against PyTorch a form may have and count as correct.
TOLERANCE = 1e-4


@dataclass
class Cell:
    """One (target, form, shape): each round's median ms, the opset it was exported at, or why it did not run."""

    runs: list[float] = field(default_factory=list)
    opset: int | None = None
    note: str = ""
    #: the dense Conv's error against PyTorch when above the tolerance (a floor: timed all the same)
    off: str = ""

    @property
    def ms(self) -> float | None:
        """Median over rounds; ``None`` when it never ran correctly."""
        return statistics.median(self.runs) if self.runs and not self.note else None


def _dense_file(case, path: Path) -> Path:
    """The layer's dense ``Conv`` (``torch.nn.Conv2d``, its weight, bias, stride; no offsets) as ONNX."""
    import torch

    import deform_onnx

    s = case.shape
    conv = torch.nn.Conv2d(s.channels, s.channels, 3, stride=s.stride, padding=1).eval()
    with torch.no_grad():
        conv.weight.copy_(case.weight)
        conv.bias.copy_(case.bias)  # type: ignore[union-attr]  # Conv2d's default bias=True
        case.dense_reference = conv(case.inputs["input"]).numpy()
    deform_onnx.export(conv, (case.inputs["input"],), path, opset_version=17, input_names=["input"],
                       output_names=["output"], verify=False)  # fmt: skip
    return path


def _form_file(case, target: str, method: str, path: Path) -> tuple[int | None, str]:
    """Export the layer for ``target`` with ``method``: ``(opset, "")`` or ``(None, why it was refused)``."""
    import deform_onnx

    try:
        report = deform_onnx.export(case.module, case.args, path, target=target, method=method,
                                    input_names=list(case.inputs), output_names=["output"], verify=False)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - the cell says why
        return None, "refused: " + str(exc).splitlines()[0][:90]
    return report.opset, ""


def _run(fam: str, python: Path, path: Path, feeds: dict, want: np.ndarray, work: Path, repeats: int):
    """``(ms, note)`` of one file on one family."""
    run = run_file(FAMILIES[fam], python, path, feeds, list(want.shape), work, repeats=repeats)
    if run.error is not None or run.output is None or run.ms is None:
        return None, (run.error or "no output")[:90]
    if run.output.size != want.size:
        return None, f"output of {run.output.size} values, not {want.size}"
    # one reading only: the tflite runner reads each output's layout from onnx2tf (C = H = W included)
    err = float(np.abs(run.output.reshape(want.shape) - want).max())
    return run.ms, "" if err <= TOLERANCE else f"wrong: {err:.2g} off"


#: Largest ratio between two timings of the same dense ``Conv`` file's work in one run (shapes that differ only in
#: offset groups or mask have the same dense ``Conv``) before the run counts as too noisy to pick forms from.
NOISE_LIMIT = 1.3


def noisy(cells: dict[str, dict[str, dict[str, Cell]]], shapes, limit: float = NOISE_LIMIT) -> list[str]:
    """Lines naming each target whose same dense ``Conv`` took times further apart than ``limit`` in this run.

    The shapes ``1x64x64`` and ``1x64x64 og8`` (or ``no mask``) have one dense ``Conv`` (N, C, H and stride equal):
    its two timings differ only by the machine's noise, which the forms' ratios to it then carry. A single run on a
    shared machine whose floor moved that much should not decide a target's forms (its picks flip on noise).
    """
    lines = []
    groups: dict[tuple, list[str]] = {}
    for s in shapes:
        groups.setdefault((s.batch, s.channels, s.size, s.stride), []).append(s.label)
    for target, forms in cells.items():
        for labels in groups.values():
            times = {label: forms.get(DENSE, {}).get(label) for label in labels}
            ms = {label: c.ms for label, c in times.items() if c is not None and c.ms}
            if len(ms) < 2:
                continue
            low, high = min(ms, key=ms.__getitem__), max(ms, key=ms.__getitem__)
            if ms[high] > limit * ms[low]:
                lines.append(f"{target}: the same dense Conv took {ms[low]:.2f} ms ({low}) and {ms[high]:.2f} ms "
                             f"({high}), {ms[high] / ms[low]:.2f}x apart (limit {limit}x)")  # fmt: skip
    return lines


def measure(shapes, pythons: dict[str, Path], repeats: int, rounds: int, entries=ENTRIES,
            log: Callable[[str], None] = print) -> dict[str, dict[str, dict[str, Cell]]]:  # fmt: skip
    """``{target: {form: {shape label: Cell}}}``; form ``"dense Conv"`` is the family's own dense Conv."""
    from deform_onnx.bench.deform_conv import DeformConvCase

    work = Path(tempfile.mkdtemp(prefix="deform-onnx-forms-"))
    cells: dict[str, dict[str, dict[str, Cell]]] = {t: {} for _, t, _ in entries}
    cases = {}
    for s in shapes:  # every file first (exports are not what is timed)
        case = cases[s.label] = DeformConvCase(s, work / s.label.replace(" ", "_"), threads=2)
        case.dense_path = _dense_file(case, case.workdir / "dense.onnx")
        case.files = {}
        for _, target, methods in entries:
            cells[target].setdefault(DENSE, {})[s.label] = Cell(opset=17)
            for method in methods:
                path = case.workdir / f"{target}.{method}.onnx"
                opset, why = _form_file(case, target, method, path)
                cells[target].setdefault(method, {})[s.label] = Cell(opset=opset, note=why)
                if not why:
                    case.files[(target, method)] = path
    for r in range(rounds):
        for s in shapes:
            case = cases[s.label]
            for fam, target, methods in entries:
                jobs = [(DENSE, case.dense_path, case.dense_reference)]
                jobs += [(m, case.files[(target, m)], case.reference) for m in methods if (target, m) in case.files]
                k = r % len(jobs)
                for form, path, want in jobs[k:] + jobs[:k]:
                    cell = cells[target][form][s.label]
                    if cell.note:
                        continue
                    out = case.workdir / f"{target}.{fam}"
                    out.mkdir(exist_ok=True)
                    ms, note = _run(fam, pythons[fam], path, case.feeds, want, out, repeats)
                    if form == DENSE and note.startswith("wrong") and ms is not None:
                        cell.off, note = note.removeprefix("wrong: "), ""
                    cell.note = note
                    if ms is not None and not note:
                        cell.runs.append(ms)
                    log(f"  round {r + 1} {s.label} {target} {form}: " + (f"{ms:.2f} ms" if ms else "") + f" {note}")
    return cells


def geomean(values: list[float]) -> float | None:
    """Geometric mean, ``None`` of nothing."""
    return statistics.geometric_mean(values) if values else None


def data_file(cells, shapes, meta: dict) -> dict:
    """What :data:`deform_onnx.targets.measured.DATA` holds: the run's facts and every cell's ms per target."""
    targets = {}
    for target, forms in cells.items():
        targets[target] = {
            form: {"opset": next((c.opset for c in by.values() if c.opset), None),
                   "ms": {label: (round(c.ms, 4) if c.ms is not None else None) for label, c in by.items()},
                   "notes": {label: c.note for label, c in by.items() if c.note},
                   "off": {label: c.off for label, c in by.items() if c.off}}
            for form, by in forms.items()
        }  # fmt: skip
    return {**meta, "op": OP, "shapes": [s.label for s in shapes], "dense": DENSE, "targets": targets}


DATA_HEAD = '''"""What ``scripts/runtime_venvs.py bench`` measured: each deployed target's forms beside its dense Conv.

Generated (do not edit): :mod:`deform_onnx.targets.measured` reads it. Empty: no measurement, the table's picks.
"""

'''


def write_data(path: Path, data: dict) -> None:
    """Write ``data`` as the module ``path`` (``DATA = {...}``, ruff-formatted), complete or not at all."""
    import pprint
    import subprocess
    import sys

    tmp = path.with_name(path.stem + ".tmp.py")
    tmp.write_text(DATA_HEAD + "DATA: dict = " + pprint.pformat(data, width=110, sort_dicts=False) + "\n")
    ruff = Path(sys.executable).with_name("ruff")
    if ruff.is_file():
        subprocess.run([str(ruff), "format", "-q", str(tmp)], check=True)
    os.replace(tmp, path)


def cells_from_data(data: dict) -> dict[str, dict[str, dict[str, Cell]]]:
    """The cells of :func:`measure` back from :func:`data_file`'s dict (one run per cell: its median)."""
    return {
        target: {
            form: {label: Cell(runs=[ms] if ms is not None else [], opset=by.get("opset"),
                               note=(by.get("notes") or {}).get(label, ""), off=(by.get("off") or {}).get(label, ""))
                   for label, ms in by["ms"].items()}
            for form, by in forms.items()
        }
        for target, forms in data["targets"].items()
    }  # fmt: skip


def table(cells, labels: list[str], picks: dict[str, tuple[str, dict[str, str]]]) -> list[str]:
    """The block's table: one row per (target, form), ms (x the family's dense Conv, x ORT native) per shape.

    ``picks[target]``: ``(the target's default method, {shape label: (method, class)})``, the second for the
    shapes whose class takes another form (its cell there is marked).
    """
    base = cells[BASE[0]][BASE[1]]
    head = ["| family (file's target): form | " + " | ".join(labels) + " | geomean x own dense Conv | "
            "geomean x ORT native |", "|---|" + "---|" * (len(labels) + 2)]  # fmt: skip
    rows = []
    for fam, target, _ in ENTRIES:
        if target not in cells:
            continue
        for form, by in cells[target].items():
            dense, cols, own, ort = cells[target][DENSE], [], [], []
            for label in labels:
                c = by[label]
                if c.ms is None:
                    cols.append(f"- ({c.note})" if c.note else "-")
                    continue
                d, b = dense[label].ms, base[label].ms
                parts = [f"{c.ms / d:.2f}x dense" if d and form != DENSE else "", f"{c.ms / b:.2f}x ORT" if b else ""]
                own.append(c.ms / d) if d else None
                ort.append(c.ms / b) if b else None
                parts.append(f"{c.off} from PyTorch" if c.off else "")
                per_class = picks.get(target, ("", {}))[1].get(label)
                mark = f" **(pick: {per_class[1]})**" if per_class and per_class[0] == form else ""
                cols.append(f"{c.ms:.2f} (" + ", ".join(p for p in parts if p) + ")" + mark)
            g_own, g_ort = geomean(own), geomean(ort)
            mark = " **(pick)**" if picks.get(target, ("", {}))[0] == form else ""
            rows.append(f"| {fam} ({target}): {form}{mark} | " + " | ".join(c.replace("|", "\\|") for c in cols)
                        + f" | {f'{g_own:.2f}x' if g_own and form != DENSE else '-'} | "
                        + f"{f'{g_ort:.2f}x' if g_ort else '-'} |")  # fmt: skip
    return head + rows
