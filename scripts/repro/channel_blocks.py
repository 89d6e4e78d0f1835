"""The ``"GridSample channel blocks"`` form on the deployed families other than MNN (issue 38).

Exports the DCNv2 layer of BENCHMARKS.md's shapes with method grid_sample for each family's target, without the
form and with it at 8, 16, 32 and 64 channels per block (``lower_grid_sample``'s block sizes patched around the
export; without the form: larger than any group, so a target that asks for the form gets one block), checks each file in ONNX Runtime against PyTorch, then times every file of a (family, shape) in one
process of that family's venv at one thread: rounds of ``--reps`` runs per file, the files in an order rotated
per round; per file the median over rounds of each round's median (wall and process CPU time) and the median of
the per-round ratios to the file without the form. tflite files are converted once by the family's own runner
(:func:`deform_onnx.runtimes.deployed.run_file`, which also checks its output).

    PYTHONPATH=src python scripts/repro/channel_blocks.py --families onnxruntime openvino tvm tflite
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

SHAPES = ("1,64,64", "1,256,32", "4,64,32")
TARGETS = {"onnxruntime": "onnxruntime", "openvino": "openvino", "tvm": "tvm", "tflite": "tflite"}
BLOCKS = (0, 8, 16, 32, 64)  # 0: without the form

# Rounds of REPS timed calls per file, the files in an order rotated per round (``runs``: name -> callable), wall and
# process CPU time per call; shared with offset_groups_along_h.py.
ROUND_ROBIN = r"""
names = list(runs)
wall = {n: [] for n in names}; cpu = {n: [] for n in names}
for r in range(ROUNDS):
    k = r % len(names)
    for n in names[k:] + names[:k]:
        fn = runs[n]; fn(); w, c = [], []
        for _ in range(REPS):
            t, p = time.perf_counter(), time.process_time(); fn()
            w.append(time.perf_counter() - t); c.append(time.process_time() - p)
        wall[n].append(statistics.median(w) * 1e3); cpu[n].append(statistics.median(c) * 1e3)
print("RESULT " + json.dumps({"wall": wall, "cpu": cpu}))
"""

# The timing loop, run by the family's Python: FILES (name -> path), KIND, ROUNDS, REPS, FEEDS (npz) come first.
TIMER = (
    r"""
import json, os, statistics, sys, time
import numpy as np
feeds = dict(np.load(FEEDS))
def make(name, path):
    if KIND == "onnxruntime":
        import onnxruntime as ort
        o = ort.SessionOptions(); o.intra_op_num_threads = 1; o.inter_op_num_threads = 1
        s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])
        args = {i.name: feeds[i.name] for i in s.get_inputs()}
        return lambda: s.run(None, args)
    if KIND == "openvino":
        import openvino as ov
        core = ov.Core()
        c = core.compile_model(core.read_model(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                              "INFERENCE_NUM_THREADS": 1})
        r = c.create_infer_request()
        args = [feeds[next(n for n in p.get_names() if n in feeds)] for p in c.inputs]
        return lambda: r.infer(args)
    if KIND == "tvm":
        import onnx, tvm
        from tvm import relax
        from tvm.relax.frontend.onnx import from_onnx
        names = [i.name for i in onnx.load(path, load_external_data=False).graph.input if i.name in feeds]
        mod = from_onnx(onnx.load(path), shape_dict={n: list(feeds[n].shape) for n in names},
                        keep_params_in_input=False)
        ex, _, _ = build(mod, host_target(1))
        vm = relax.VirtualMachine(ex, tvm.cpu())
        mk = tvm.runtime.tensor if hasattr(tvm.runtime, "tensor") else tvm.nd.array
        args = [mk(feeds[n]) for n in names]
        return lambda: vm["main"](*args)
    if KIND == "tflite":
        from ai_edge_litert.interpreter import Interpreter
        it = Interpreter(model_path=path, num_threads=1)
        it.allocate_tensors()
        ins = it.get_input_details()
        for i, d in enumerate(ins):
            n = d["name"].removeprefix("serving_default_").split(":")[0]
            n = n if n in feeds else list(feeds)[i]
            it.set_tensor(d["index"], np.moveaxis(feeds[n], 1, -1).copy())
        return it.invoke
runs = {name: make(name, path) for name, path in FILES.items()}
"""
    + ROUND_ROBIN
)


def export_all(shapes, families, out: Path, blocks_tried=BLOCKS) -> dict:
    """``{shape label: {"feeds": npz, "files": {family: {variant: path}}}}``; each file checked in ORT."""
    import onnxruntime as ort
    import torch

    import deform_onnx
    from deform_onnx.bench.deform_conv import BenchShape, DeformConvCase
    from deform_onnx.builder.forms import graph_forms
    from deform_onnx.ops.deform_conv import lower_grid_sample as lgs

    torch.manual_seed(0)
    plan: dict = {}
    sizes = lgs.BLOCK_CHANNELS, lgs.SMALL_BLOCK_CHANNELS
    for text in shapes:
        s = BenchShape.parse(text)
        case = DeformConvCase(s, out / s.label, threads=1)
        feeds = out / s.label / "feeds.npz"
        np.savez(feeds, **case.feeds)
        files: dict = {}
        for fam in families:
            seen: dict[bytes, str] = {}
            for blocks in blocks_tried:
                name = "base" if not blocks else f"b{blocks}"
                path = out / s.label / f"{fam}.{name}.onnx"
                lgs.BLOCK_CHANNELS = lgs.SMALL_BLOCK_CHANNELS = blocks or 1 << 30
                with graph_forms(["GridSample channel blocks"] if blocks else []):
                    deform_onnx.export(case.module, case.args, path, target=TARGETS[fam], method="grid_sample",
                                       input_names=list(case.inputs), output_names=["output"], verify=False)  # fmt: skip
                data = path.read_bytes()
                if data in seen:  # the form changed nothing (e.g. 64 channels in blocks of 64)
                    print(f"{s.label} {fam} {name}: the same file as {seen[data]}")
                    continue
                seen[data] = name
                o = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
                y = o.run(None, case.feeds)[0]
                err = float(np.abs(y - case.reference).max())
                print(f"{s.label} {fam} {name}: ORT {err:.2g} off PyTorch")
                assert err < 1e-4, (s.label, fam, name, err)
                files.setdefault(fam, {})[name] = str(path)
        lgs.BLOCK_CHANNELS, lgs.SMALL_BLOCK_CHANNELS = sizes
        plan[s.label] = {"feeds": str(feeds), "files": files, "reference": case.reference, "case": case}
    return plan


def to_tflite(files: dict, case, work: Path) -> dict:
    """Each file converted by the tflite runner (checked against PyTorch): ``{variant: .tflite path}``."""
    from deform_onnx.runtimes.deployed import FAMILIES, interpreter, run_file

    fam = FAMILIES["tflite"]
    python = interpreter(fam)
    done = {}
    for name, path in files.items():
        tflite = work / f"{Path(path).stem}.tflite.out.npz.tf" / "model_float32.tflite"
        if tflite.is_file():  # converted and checked by an earlier run
            done[name] = str(tflite)
            continue
        run = run_file(fam, python, Path(path), case.feeds, list(case.reference.shape), work, repeats=1)
        if run.error or run.output is None:
            print(f"tflite {name}: {run.error}")
            continue
        err = float(np.abs(run.output.reshape(case.reference.shape) - case.reference).max())
        print(f"tflite {name}: LiteRT {err:.2g} off PyTorch")
        if err < 1e-4:
            done[name] = str(tflite)
    return done


def time_files(fam: str, files: dict, feeds: str, rounds: int, reps: int) -> dict:
    """Run :data:`TIMER` in ``fam``'s Python on ``files``: ``{"wall"|"cpu": {variant: [ms per round]}}``."""
    from deform_onnx.runtimes.deployed import FAMILIES, interpreter, runners, tvm_build

    python = interpreter(FAMILIES[fam]) if fam in ("tvm", "tflite") else Path(sys.executable)
    head = f"FILES = {files!r}\nKIND = {fam!r}\nROUNDS = {rounds}\nREPS = {reps}\nFEEDS = {feeds!r}\n"
    if fam == "tvm":
        head += runners._source(tvm_build)
    env = dict(os.environ, TVM_NUM_THREADS="1", OMP_NUM_THREADS="1", TF_NUM_INTRAOP_THREADS="1")
    done = subprocess.run([str(python), "-c", head + TIMER], capture_output=True, text=True, env=env, timeout=3000)
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if not line:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(line[-1][7:])


def summary(res: dict, reference: str = "base", width: int = 5) -> str:
    """Per variant: median ms over rounds (wall, CPU) and the median per-round ratio to ``reference``."""
    import statistics as st

    out = []
    for name in res["wall"]:
        parts = []
        for view in ("wall", "cpu"):
            ms, base = res[view][name], res[view][reference]
            ratio = st.median(a / b for a, b in zip(ms, base))
            parts.append(f"{view} {st.median(ms):7.2f} ms {ratio:.3f}x")
        out.append(f"    {name:{width}s} " + " | ".join(parts))
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", nargs="+", default=list(TARGETS))
    p.add_argument("--shapes", nargs="+", default=list(SHAPES))
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--blocks", type=int, nargs="+", default=list(BLOCKS), help="channels per block; 0: no form")
    a = p.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="channel-blocks-"))
    plan = export_all(a.shapes, a.families, out, a.blocks)
    for label, item in plan.items():
        for fam in a.families:
            files = item["files"][fam]
            if fam == "tflite":
                work = out / label / "tflite"
                work.mkdir(exist_ok=True)
                files = to_tflite(files, item["case"], work)
            res = time_files(fam, files, item["feeds"], a.rounds, a.reps)
            print(f"{fam} {label} ({a.rounds} rounds x {a.reps} runs, one thread):\n{summary(res)}", flush=True)


if __name__ == "__main__":
    main()
