"""The ``"offset groups along H"`` form on ncnn and MNN (issue 38): one GridSample for every offset group.

Exports the DCNv2 layer of BENCHMARKS.md's shapes with method grid_sample for target ``ncnn`` and ``mnn``,
with the target's own forms but without this one (``base``; ``lower_grid_sample.STACKED_MAX_ROWS`` set to 0
while it exports), the same file again (``control``: the noise of the timing) and with the form (``along_h``;
a file identical to an earlier one, e.g. the form on one offset group, is reported and not timed;
``--band-pixels``: also both in row bands of at most that many output pixels; ``--reference along_h``: the
form's file is the one the others are compared with, the control is a second copy of it and only it is also
exported in bands, e.g. the band size of ncnn's current og8 file).
Each file is converted and run once by the family's own runner
(:func:`deform_onnx.runtimes.deployed.run_file`) and compared with PyTorch (1e-4); then every correct file
of a (family, shape) is loaded in one process of that family's venv and timed in rounds of ``--reps`` runs
per file, the files in an order rotated per round, at one thread and at the family's other thread count
(ncnn: its default, MNN: 2), ``--runs`` processes each, the thread counts alternating. Printed per file:
the median over rounds of the round's median (wall and process CPU time) and the median of the per-round
ratios to the reference (``base`` unless ``--reference``).

    PYTHONPATH=src python scripts/repro/offset_groups_along_h.py --families ncnn mnn --shapes 1,64,64,og=8
    PYTHONPATH=src python scripts/repro/offset_groups_along_h.py --families ncnn --shapes 1,64,64,og=8 \
        --reference along_h --band-pixels 1024 512 256 --runs 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from channel_blocks import ROUND_ROBIN, summary

FORM = "offset groups along H"
SHAPES = ("1,64,64,og=8", "1,64,64,og=2", "1,256,32,og=4")
VARIANTS = (("base", []), ("control", []), ("along_h", [FORM]))  # (name, forms added)

# The timing loop, run by the family's Python: FILES (name -> converted files), KIND, ROUNDS, REPS, FEEDS, INPUTS,
# THREADS come first.
TIMER = (
    r"""
import json, statistics, time
import numpy as np
feeds = dict(np.load(FEEDS))
def make(paths):
    if KIND == "ncnn":
        import ncnn
        net = ncnn.Net()
        net.opt.use_vulkan_compute = False
        for flag in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_storage"):
            setattr(net.opt, flag, False)
        if THREADS:
            net.opt.num_threads = THREADS
        assert net.load_param(paths[0]) == 0 and net.load_model(paths[1]) == 0
        mats = [ncnn.Mat(np.ascontiguousarray(feeds[n][0])) for n in INPUTS]
        def run():
            ex = net.create_extractor()
            for i, m in enumerate(mats):
                ex.input(f"in{i}", m)
            ret, y = ex.extract("out0")
            assert ret == 0
        return run
    import MNN, MNN.expr as F, MNN.nn as nn
    net = nn.load_module_from_file(paths[0], INPUTS, ["output"], thread_num=THREADS or 1)
    def run():
        xs = [F.const(feeds[n], list(feeds[n].shape), F.NCHW) for n in INPUTS]
        ys = net.forward(xs)
        ys = ys[0] if isinstance(ys, (list, tuple)) else ys
        ys.read()
    return run
runs = {name: make(paths) for name, paths in FILES.items()}
"""
    + ROUND_ROBIN
)


def export_and_check(
    text: str, fam: str, out: Path, band_pixels=(), reference: str = "base"
) -> tuple[dict, dict, list[str]]:
    """``({variant: converted files}, feeds, input names)`` of one (shape, family); each file checked in the runtime.

    ``band_pixels``: also each file with output row bands of at most that many pixels (``common.BAND_PIXELS``).
    ``reference``: ``"base"`` or ``"along_h"``, the variant that ``control`` copies (``"along_h"``: only it in
    bands).
    """
    import deform_onnx
    from deform_onnx.bench.deform_conv import BenchShape, DeformConvCase
    from deform_onnx.builder.forms import graph_forms
    from deform_onnx.ops.deform_conv import common
    from deform_onnx.ops.deform_conv import lower_grid_sample as lgs
    from deform_onnx.runtimes.deployed import FAMILIES, interpreter, run_file

    s = BenchShape.parse(text)
    work = out / s.label.replace(" ", "_") / fam
    case = DeformConvCase(s, work, threads=1)
    python = interpreter(FAMILIES[fam])
    files: dict[str, list[str]] = {}
    seen: dict[bytes, str] = {}
    own = dict(VARIANTS)
    if reference != "base":  # the reference first: a later identical file is reported and not timed
        own = {reference: own[reference], "control": own[reference]}
    variants = [(name, forms, None) for name, forms in own.items()]
    banded = (("base", []), ("along_h", [FORM])) if reference == "base" else ((reference, own[reference]),)
    variants += [(f"{n}_b{p}", f, p) for p in band_pixels for n, f in banded]
    default_pixels, rows = common.BAND_PIXELS, lgs.STACKED_MAX_ROWS
    for name, forms, pixels in variants:
        path = work / f"{name}.onnx"
        lgs.STACKED_MAX_ROWS = rows if forms else 0  # without the form even where the target asks for it
        common.BAND_PIXELS = pixels or default_pixels
        try:
            with graph_forms(forms):
                deform_onnx.export(case.module, case.args, path, target=fam, method="grid_sample",
                                   input_names=list(case.inputs), output_names=["output"], verify=False)  # fmt: skip
        except ValueError as exc:  # a target's rule (ncnn: a batch above 1)
            print(f"{s.label} {fam} {name}: {str(exc).splitlines()[0][:200]}")
            continue
        finally:
            common.BAND_PIXELS, lgs.STACKED_MAX_ROWS = default_pixels, rows
        data = path.read_bytes()
        if name != "control" and data in seen:  # e.g. the form on one offset group
            print(f"{s.label} {fam} {name}: the same file as {seen[data]}")
            continue
        seen[data] = name
        run = run_file(FAMILIES[fam], python, path, case.feeds, list(case.reference.shape), work, repeats=1)
        if run.error or run.output is None:
            print(f"{s.label} {fam} {name}: {run.error}")
            continue
        err = float(np.abs(run.output.reshape(case.reference.shape) - case.reference).max())
        print(f"{s.label} {fam} {name}: {err:.2g} off PyTorch in {fam} {run.version}", flush=True)
        if err > 1e-4:
            continue
        kept = work / f"{name}.{fam}"
        kept.mkdir(exist_ok=True)
        paths = []
        for p, suffix in run.artifacts:
            shutil.copy(p, kept / f"m{suffix}")
            paths.append(str(kept / f"m{suffix}"))
        files[name] = paths
    feeds = work / "timing_feeds.npz"
    np.savez(feeds, **case.feeds)  # type: ignore[arg-type]
    return files, {"path": str(feeds)}, list(case.inputs)


def time_files(fam: str, files: dict, feeds: str, inputs: list[str], threads: int, rounds: int, reps: int) -> dict:
    """Run :data:`TIMER` in ``fam``'s venv: ``{"wall"|"cpu": {variant: [ms per round]}}``."""
    from deform_onnx.runtimes.deployed import FAMILIES, interpreter
    from deform_onnx.runtimes.sealed import run_env

    python = interpreter(FAMILIES[fam])
    head = (
        f"FILES = {files!r}\nKIND = {fam!r}\nROUNDS = {rounds}\nREPS = {reps}\nFEEDS = {feeds!r}\n"
        f"INPUTS = {inputs!r}\nTHREADS = {threads}\n"
    )
    done = subprocess.run([str(python), "-c", head + TIMER], capture_output=True, text=True, env=run_env(python),
                          timeout=3000)  # fmt: skip
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if not line:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(line[-1][7:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", nargs="+", default=["ncnn", "mnn"])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES))
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 0], help="0: ncnn's default, MNN 2")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--band-pixels", type=int, nargs="*", default=[], help="also the form in smaller row bands")
    p.add_argument("--runs", type=int, default=1, help="timing processes per thread count, thread counts alternating")
    p.add_argument("--reference", choices=("base", "along_h"), default="base", help="the file compared with")
    a = p.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="groups-along-h-"))
    for text in a.shapes:
        for fam in a.families:
            files, feeds, inputs = export_and_check(text, fam, out, a.band_pixels, a.reference)
            if len(files) < 3 or a.reference not in files:
                continue
            for run in range(a.runs):
                for threads in a.threads:
                    t = threads or (2 if fam == "mnn" else 0)
                    res = time_files(fam, files, feeds["path"], inputs, t, a.rounds, a.reps)
                    label = f"{t} thread(s)" if t else "default threads"
                    head = f"{fam} {text} run {run + 1} ({a.rounds} rounds x {a.reps} runs, {label})"
                    print(f"{head}:\n{summary(res, a.reference, width=13)}", flush=True)


if __name__ == "__main__":
    main()
