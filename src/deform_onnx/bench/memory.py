"""Peak memory of one inference, measured in a fresh Python process (so no other model's arena counts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from .config import ORT_CONFIG, ORT_OPT_LEVELS, openvino_config

# -- peak memory in a fresh process -------------------------------------------
_CHILD = textwrap.dedent(
    r"""
    import gc, json, resource, sys
    import numpy as np

    job = json.loads(sys.argv[1])
    data = dict(np.load(job["inputs"]))
    feeds = {k: data[k] for k in job["feeds"] if k in data}
    threads = job["threads"]

    if job["kind"] == "ort":
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        for key, value in job["ort_config"].items():
            so.add_session_config_entry(key, value)
        if job.get("opt_level"):
            so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, job["opt_level"])
        sess = ort.InferenceSession(job["model"], so, providers=["CPUExecutionProvider"])
        names = {i.name for i in sess.get_inputs()}
        feeds = {k: v for k, v in feeds.items() if k in names}
        run = lambda: sess.run(None, feeds)
    elif job["kind"] == "ov":
        import openvino as ov
        core = ov.Core()
        if job["extension"]:
            from deform_onnx import openvino as dov
            for ext in dov.extension():
                core.add_extension(ext)
        compiled = core.compile_model(core.read_model(job["model"]), "CPU", job["ov_config"])
        request = compiled.create_infer_request()
        feeds = {i: next(v for k, v in feeds.items() if k in port.get_names())
                 for i, port in enumerate(compiled.inputs)}
        run = lambda: request.infer(feeds)
    else:
        import torch
        from torchvision.ops import deform_conv2d
        torch.set_num_threads(threads)
        t = {k: torch.from_numpy(v) for k, v in feeds.items()}
        w, b = torch.from_numpy(data["weight"]), torch.from_numpy(data["bias"])
        s = int(data["stride"])
        def run():
            with torch.inference_mode():
                return deform_conv2d(t["input"], t["offset"], w, b, stride=s, padding=1, mask=t.get("mask"))

    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise OSError(key)

    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the RSS high-water mark (Linux >= 4.0)
        before = status("VmRSS")
        run()
        peak = status("VmHWM") - before
        method = "VmHWM after clear_refs"
    except OSError:
        before = status("VmRSS") if sys.platform.startswith("linux") else 0
        run()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
        method = "ru_maxrss"
    print(json.dumps({"peak_bytes": max(peak, 0), "method": method}))
    """
)

#: How :func:`peak_memory` measures (for reports).
PEAK_MEMORY_METHOD = (
    "peak memory = resident-set high-water mark during the first inference in a fresh process "
    "(session/compiled model and inputs already in memory; Linux VmHWM, reset with /proc/self/clear_refs) "
    "minus the resident set just before it"
)


def peak_memory(job: dict, inputs: Path, threads: int, timeout: float = 600) -> int:
    """Peak extra resident memory (bytes) of one inference of ``job``, in a fresh Python process.

    ``job``: ``{"kind": "ort" | "ov" | "torch", "model": path, "extension": bool, "opt_level": name}``
    (``torch``: torchvision's deformable convolution on the arrays ``weight``, ``bias``, ``stride`` of
    ``inputs``). Every array of ``inputs`` (.npz) that the model names is fed.

    Raises:
        RuntimeError: the child process failed (its last stderr line is in the message).
    """
    with np.load(inputs) as data:
        names = list(data.files)
    level = job.get("opt_level")
    job = dict(
        job,
        inputs=str(inputs),
        feeds=names,
        threads=threads,
        ov_config=openvino_config(threads),
        ort_config=ORT_CONFIG,
        opt_level=ORT_OPT_LEVELS[level] if level else None,
    )
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(job)], capture_output=True, text=True, timeout=timeout, env=env
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"peak-memory process failed: {last}")
    return int(json.loads(proc.stdout.strip().splitlines()[-1])["peak_bytes"])
