"""Graph form ``"quad table"`` on ONNX Runtime's gather form, timed interleaved in one process (issue 38).

For each shape (``N,C,H[,og=G]``, as ``scripts/runtime_venvs.py bench`` takes them) the benchmark layer
(:class:`deform_onnx.bench.deform_conv.DeformConvCase`) is exported as ``target="onnxruntime", method="gather"``
writes it (``default``), once more (``default2``: the same bytes, the control), and with the form ``quad table``
added (``quad``; the other weightings measured, slower still, were removed: commit 7d53a34 has them). Each file is checked against PyTorch (the max error printed), then all are timed in this
process by ONNX Runtime at one thread: rounds of ``--repeats`` runs per file, the files in an order rotated per
round; per file the median over rounds of each round's median, wall and process CPU time, and its ratio to the
geometric mean of the two ``default`` files.

Usage: ``PYTHONPATH=src python scripts/repro/quad_table_ort.py [--rounds R] [--repeats K] SHAPE ...``.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    """Parse the arguments, export, check, time, print."""
    import onnxruntime as ort

    import deform_onnx
    from deform_onnx.bench.deform_conv import BenchShape, DeformConvCase
    from deform_onnx.builder.forms import graph_forms

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="+", type=BenchShape.parse)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--repeats", type=int, default=5)
    opts = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="quad-table-ort-"))
    print("load average at the start:", os.getloadavg(), flush=True)
    for shape in opts.shapes:
        case = DeformConvCase(shape, work / shape.label.replace(" ", "_"), threads=1)
        contenders = {"default": [], "quad": ["quad table"], "default2": []}
        runs = {}
        for name, forms in contenders.items():
            buf = io.BytesIO()
            with graph_forms(forms):
                deform_onnx.export(case.module, case.args, buf, target="onnxruntime", method="gather",
                                   input_names=list(case.inputs), output_names=["output"], verify=False)  # fmt: skip
            so = ort.SessionOptions()
            so.intra_op_num_threads = so.inter_op_num_threads = 1
            sess = ort.InferenceSession(buf.getvalue(), so, providers=["CPUExecutionProvider"])
            err = float(np.abs(sess.run(None, case.feeds)[0] - case.reference).max())
            print(f"{shape.label} {name}: max error {err:.2g}", flush=True)
            runs[name] = lambda s=sess, f=case.feeds: s.run(None, f)
        wall: dict[str, list[float]] = {n: [] for n in runs}
        cpu: dict[str, list[float]] = {n: [] for n in runs}
        names = list(runs)
        for r in range(opts.rounds):
            k = r % len(names)
            for n in names[k:] + names[:k]:
                runs[n]()
                w, c = [], []
                for _ in range(opts.repeats):
                    t, p = time.perf_counter(), time.process_time()
                    runs[n]()
                    w.append(time.perf_counter() - t)
                    c.append(time.process_time() - p)
                wall[n].append(statistics.median(w) * 1e3)
                cpu[n].append(statistics.median(c) * 1e3)
        for kind, per in (("wall", wall), ("CPU", cpu)):
            med = {n: statistics.median(v) for n, v in per.items()}
            base = (med["default"] * med["default2"]) ** 0.5
            row = ", ".join(f"{n} {t:.2f} ms ({t / base:.2f}x)" for n, t in med.items())
            print(f"{shape.label} {kind}: {row}", flush=True)
    print("load average at the end:", os.getloadavg(), flush=True)


if __name__ == "__main__":
    main()
