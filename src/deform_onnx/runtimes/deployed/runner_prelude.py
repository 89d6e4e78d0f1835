"""The prelude every deployed runner's code starts with (:mod:`.runners`): the meta file, feeds, status line, timing.

Defines, inside the runtime's venv: ``meta`` and ``feeds`` (read from the runner's argument), ``bf16`` (inputs the
file types bfloat16), ``out_names`` / ``out_shapes``, ``done(version, outs, times, error)`` (saves every output and
prints the status line), ``first_line(exc)``, ``stage(what)`` (names the step a crash happens in) and ``timed(fn)``
(one warm-up, then ``repeats`` timed runs; a later run whose bits differ from the first is saved too, ``AGAIN``).
"""

PRELUDE = """
import json, statistics, sys, time
import numpy as np
meta = json.load(open(sys.argv[1]))
feeds = dict(np.load(meta["feeds"]))
# inputs the file types bfloat16: stored as float32 (exact), given to each runtime in its bfloat16 form
bf16 = set(meta.get("bfloat16", []))
def bf16_bits(a):  # exact for values bfloat16 holds
    return (np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
def from_bits(u):
    return (np.asarray(u).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
# every output the file declares, in its order (meta["outputs"]; older callers give the first one only)
out_names = meta.get("outputs") or [meta["output"]]
out_shapes = meta.get("output_shapes") or [meta.get("output_shape")]
# a timed run whose outputs differ from the first run's bits (timed): saved too (a0, a1, ...), so that every
# run is judged (MNN 3.6.1 gave other values on later runs of the same inputs for some graphs)
AGAIN = []
def _float(o):
    o = np.asarray(o)
    return o.astype(np.float32) if o.dtype.name == "bfloat16" else o  # ml_dtypes: np.save writes raw records
def done(version, outs=None, times=None, error=None):
    # outs: every output in the file's order (a list of arrays), saved as one .npz: o0, o1, ...
    names = None
    if outs is not None:
        arrays = {f"o{i}": _float(o) for i, o in enumerate(outs)}
        arrays.update({f"a{i}": _float(o) for i, o in enumerate(AGAIN)})
        with open(meta["out"], "wb") as f:
            np.savez(f, **arrays)
        names = [out_names[i] if i < len(out_names) else f"output {i}" for i in range(len(outs))]
    ms = statistics.median(times) * 1e3 if times else None
    print(json.dumps({"version": version, "error": error, "ms": ms, "outputs": names, "again": bool(AGAIN)}))
    sys.exit(0)
def shape_of(i):
    return out_shapes[i] if i < len(out_shapes) and out_shapes[i] is not None else None
def first_line(exc):
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, LookupError):  # a KeyError's text is only the key: "'conv.bias'" said nothing
        text = f"{type(exc).__name__}: {text}"
    # OpenVINO and others put the location first ("Exception from ...", "Check '...' failed at ..."): skip it
    skip = ("Exception from", "Check '")
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith(skip)]
    if len(lines) > 1 and lines[0].endswith(":"):  # a heading ("FrontEnd API failed with GeneralFailure:")
        lines[0] = f"{lines[0]} {lines[1]}"
    # OpenVINO >= 2026 names the unconverted ops in a summary line further down
    lines = [l for l in lines if l.startswith("-- No conversion rule")][:1] or lines
    return lines[0][:300] if lines else type(exc).__name__
def stage(what):  # on stderr: a runtime that crashes the runner (a signal, no status line) is named in this step
    print("deform-onnx stage: " + what, file=sys.stderr, flush=True)
def _bits(outs):
    return [(np.asarray(o).shape, np.asarray(o).dtype.str, np.ascontiguousarray(o).tobytes()) for o in outs]
def timed(fn):
    stage("running the converted model")
    out = fn()
    first, times = _bits(out), []
    for _ in range(max(meta["repeats"], 1)):  # at least one more run: it is judged too
        t = time.perf_counter(); again = fn(); times.append(time.perf_counter() - t)
        if not AGAIN and _bits(again) != first:
            AGAIN.extend(again)
    return out, times
"""
