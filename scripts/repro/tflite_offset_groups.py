"""The ``tflite`` target's gather forms with offset groups, converted once and timed interleaved in LiteRT (issue 38).

For each shape (``N,C,H[,og=G]`` as ``scripts/runtime_venvs.py bench`` takes them) the benchmark layer
(:class:`deform_onnx.bench.deform_conv.DeformConvCase`) is exported as the ``tflite`` target writes it
(gather@13 with the form ``flat sampling grid``) with each of these forms:

- ``apart``: ``offset groups apart``, the target's form before issue 38 (each group's indices computed on
  their own: one ``Gather`` of a ``C/G``-channel row per corner, tap, group and band);
- ``flat``: ``flat offset groups``, the target's form now (2-D index math, the groups folded into the
  gathered rows: one ``Gather`` per corner and tap for every group; one offset group: the default form);
- ``target``: ``export(target="tflite")``, the target's forms and repairs as they are (``target2``: the same
  again, the control); ``target+FORM``: with another graph form too, e.g. ``target+quad table``;
- ``dense``: the layer's dense ``Conv`` (``torch.nn.Conv2d``, its weight and bias), the floor.

Each file is converted by onnx2tf and checked against PyTorch by the deployed runner
(:func:`deform_onnx.runtimes.deployed.run_file`: the error printed), then every ``.tflite`` is loaded once
in one LiteRT process (the runtime's default threads, as the runner; one more session of the first file is
made first and never timed) and timed in rounds, the files in an order rotated per round, ``repeats`` runs
each; the median over rounds of each round's median, wall and process CPU time, is printed with its ratio to
the form converted twice (the geometric mean of its two files: their spread is the noise) and to ``dense``,
the op count of each ``.tflite``, and the load average. Each conversion's time (onnx2tf, then one checked
run) is printed too. ``--retime JOB ...`` times the files of an earlier run's ``job.json`` again, in the
order ``--forms`` names them (the file timed first ran slower than its copy in several runs here, whichever
it was).

Usage: ``PYTHONPATH=src python scripts/repro/tflite_offset_groups.py [--rounds R] [--repeats K] [--forms F,...]
SHAPE ...`` (``--forms`` default ``apart,flat,dense,apart2``; ``flat+FORM``: with another graph form too, e.g.
``flat+whole map``). Measured here on 1x64x64 og8: ``flat`` ran within ``apart``'s spread (its ops an eighth,
its conversion several times faster); ``flat+float row index`` and ``flat+whole map`` gained nothing either.

The quad table (issue 38, ``--forms "target,target+quad table,dense,target2"``; the other weightings below were
measured with commit 7d53a34, which had them):
on 1x64x64 og8 every weighting ran slower than the target's form or within its control's spread (``corner
axis``), although op by op (``scripts/repro/litert_op_profile.py --cpu``) its ``Gather`` nodes and onnx2tf's
negative-index fix took a fraction of the target's: the ``ReduceSum`` over the middle corner axis, or the
weighting that replaces it, costs more than the gathers save, and the whole model did not follow the op sums.
On 1x64x64, 1x256x32 and 4x64x32 the ``ReduceSum`` weighting ran slower and ``corner axis`` within the spread or
slower. So the ``tflite`` target does not ask for it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

TIMER = """
import json, statistics, sys, time
import numpy as np
from ai_edge_litert.interpreter import Interpreter
job = json.load(open(sys.argv[1]))
its = {}
first = next(iter(job["files"].values()))
for name, path in [("warm-up", first), *job["files"].items()]:  # a first session never timed: it ran slower
    it = Interpreter(model_path=path)
    it.allocate_tensors()
    feeds = dict(np.load(job["feeds"]))
    for d in it.get_input_details():
        bare = d["name"].removeprefix("serving_default_").split(":")[0]
        a = feeds.get(bare)
        if a is None or list(a.shape) != list(d["shape"]):
            a = np.moveaxis(feeds[bare], 1, -1).copy() if bare in feeds else np.zeros(d["shape"], d["dtype"])
        it.set_tensor(d["index"], a.astype(d["dtype"]))
    it.invoke()
    its[name] = it
kept = its.pop("warm-up")  # alive, untimed
ops = {n: len(it._get_ops_details()) for n, it in its.items()}
per = {n: [] for n in its}
cpu = {n: [] for n in its}
names = list(its)
for r in range(job["rounds"]):
    k = r % len(names)
    for n in names[k:] + names[:k]:
        ts, cs = [], []
        for _ in range(job["repeats"]):
            t, c = time.perf_counter(), time.process_time()
            its[n].invoke()
            ts.append(time.perf_counter() - t)
            cs.append(time.process_time() - c)
        per[n].append(statistics.median(ts) * 1e3)
        cpu[n].append(statistics.median(cs) * 1e3)
print(json.dumps({"ms": {n: statistics.median(v) for n, v in per.items()},
                  "cpu": {n: statistics.median(v) for n, v in cpu.items()}, "ops": ops}))
"""


FORMS = "apart,flat,dense,apart2"


def _time(python, job: Path, label: str, load: list) -> None:
    """Time the files of ``job`` in one LiteRT process and print each one's ms and ratios.

    Ratios are to the first file's form and its copy (``NAME2``: the geometric mean of the two, the control's
    spread in its own row) and to the dense Conv.
    """
    load.append(os.getloadavg())
    done = subprocess.run([str(python), "-c", TIMER, str(job)], capture_output=True, text=True, check=False)
    load.append(os.getloadavg())
    if done.returncode:
        print(done.stderr[-2000:])
        return
    res = json.loads(done.stdout.strip().splitlines()[-1])
    names = list(res["ms"])
    copied = next((n for n in names if n + "2" in names), None)  # the form converted twice
    pair = [copied, copied + "2"] if copied else [names[0]]
    for kind in ("ms", "cpu"):
        res[kind]["base"] = float(np.prod([res[kind][n] for n in pair]) ** (1 / len(pair)))
    for form in names:
        parts = []
        for kind, what in (("ms", "wall"), ("cpu", "CPU")):
            t = res[kind][form]
            ratios = [f"{t / res[kind][b]:.2f}x {b}" for b in ("base", "dense") if b in res[kind] and b != form]
            parts.append(f"{what} {t:.2f} ms ({', '.join(ratios)})")
        print(f"{label} {form}: {'; '.join(parts)}; {res['ops'][form]} ops", flush=True)
    print(f"{label}: base = geometric mean of {' and '.join(pair)}", flush=True)


def main() -> None:
    """Parse the arguments, export, convert, check, time, print."""
    import torch

    import deform_onnx
    from deform_onnx.bench.deform_conv import BenchShape, DeformConvCase
    from deform_onnx.builder.forms import graph_forms
    from deform_onnx.runtimes.deployed import FAMILIES, interpreter, run_file

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="*", type=BenchShape.parse)
    ap.add_argument("--retime", nargs="*", default=[], help="job.json files of an earlier run: time its files again")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--forms", default=FORMS, help="comma-separated; 'flat+FORM': another form too")
    opts = ap.parse_args()
    fam = FAMILIES["tflite"]
    python = interpreter(fam)
    work = Path(tempfile.mkdtemp(prefix="tflite-offset-groups-"))
    load = [os.getloadavg()]
    for path in opts.retime:  # files converted by an earlier run, timed again (in the order --forms gives)
        job = json.loads(Path(path).read_text())
        files = job["files"]
        order = [f for f in opts.forms.split(",") if f in files] if opts.forms != FORMS else list(files)
        job.update(files={f: files[f] for f in order}, rounds=opts.rounds, repeats=opts.repeats)
        again = work / f"job{len(load)}.json"
        again.write_text(json.dumps(job))
        _time(python, again, Path(path).parent.name, load)
    for shape in [] if opts.retime else opts.shapes:
        case = DeformConvCase(shape, work / shape.label.replace(" ", "_"), threads=2)
        files = {}
        for form in opts.forms.split(","):
            path = case.workdir / f"{form.replace(' ', '_').replace('+', '-')}.onnx"
            if form == "dense":
                conv = torch.nn.Conv2d(shape.channels, shape.channels, 3, stride=shape.stride, padding=1).eval()
                with torch.no_grad():
                    conv.weight.copy_(case.weight)
                    conv.bias.copy_(case.bias)  # type: ignore[union-attr]
                    want = conv(case.inputs["input"]).numpy()
                deform_onnx.export(conv, (case.inputs["input"],), path, opset_version=17, input_names=["input"],
                                   output_names=["output"], verify=False)  # fmt: skip
                feeds = {"input": case.feeds["input"]}
            elif form.rstrip("0123456789").startswith("target"):  # "target2": a copy, the control
                first, *more = form.split("+")  # "target+quad table": that form as well
                buf = io.BytesIO()
                with graph_forms(more):  # the target's forms and repairs, and the forms named
                    deform_onnx.export(case.module, case.args, buf, target="tflite", verify_runtimes=(),
                                       input_names=list(case.inputs), output_names=["output"], verify=False)  # fmt: skip
                path.write_bytes(buf.getvalue())
                want, feeds = case.reference, case.feeds
            else:
                buf = io.BytesIO()
                first, *more = form.split("+")  # "flat+float row index": that form as well
                forms = ["flat offset groups" if first.startswith("flat") else "offset groups apart", *more]
                with graph_forms([*forms, "flat sampling grid"]):  # the tflite target's gather@13, forms as named
                    deform_onnx.export(case.module, case.args, buf, method="gather", opset_version=13, dynamo=False,
                                       input_names=list(case.inputs), output_names=["output"], verify=False)  # fmt: skip
                path.write_bytes(buf.getvalue())
                want, feeds = case.reference, case.feeds
            out = path.with_suffix("")
            out.mkdir()
            start, before = time.perf_counter(), os.getloadavg()[0]
            run = run_file(fam, python, path, feeds, list(want.shape), out, repeats=1, timeout=1800)
            took = f"converted and run in {time.perf_counter() - start:.0f} s (load average {before:.1f})"
            err = None if run.output is None else float(np.abs(run.output.reshape(want.shape) - want).max())
            print(f"{shape.label} {form}: {run.error or f'max error {err:.2g}'}; {took}", flush=True)
            if run.artifacts:
                files[form] = str(run.artifacts[0][0])
        np.savez(case.workdir / "feeds.npz", **case.feeds)  # type: ignore[arg-type]
        job = case.workdir / "job.json"
        job.write_text(json.dumps({"files": files, "feeds": str(case.workdir / "feeds.npz"),
                                   "rounds": opts.rounds, "repeats": opts.repeats}))  # fmt: skip
        _time(python, job, shape.label, load)
    print(
        "load average (1/5/15 min) at the start and around each timing:",
        [tuple(round(x, 2) for x in la) for la in load],
    )


if __name__ == "__main__":
    main()
