"""The code each deployed runtime runs inside its own venv (one copy: the package's checks and scripts/*_matrix.py).

A runner is Python source run as ``python -c CODE META`` by the runtime venv's
interpreter, where ``META`` is a JSON file: ``model`` (path), ``feeds`` (npz,
inputs by name, in graph order), ``out`` (the file to write every output to: an
``.npz`` of ``o0``, ``o1``, ... in the file's order; converters write their
artifacts beside it, named from it), ``inputs`` (names), ``outputs`` (every
output's name, in the file's order; older callers give ``output``, the first
only), ``output_shapes`` (the reference's, one per output; older: ``output_shape``,
the first's), ``repeats``, ``src`` (the package's parent folder, for the OpenVINO
extension), ``tool`` (the venv's ``bin``, for converter programs), ``extension``
and ``keep`` (OpenVINO: also save the IR it ran). Its last line of stdout is
JSON: ``version``, ``error`` (the first line of what failed, or null), ``ms``
(median of ``repeats`` timed runs after one warm-up) and ``outputs`` (the names
of what it saved, in order). Every runner returns every output the file declares
(:func:`deform_onnx.runtimes.deployed.families.read_outputs` reads them back), so
:func:`deform_onnx.proof.compare_outputs` can judge each one.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from .. import onnx2torch as onnx2torch_converter
from . import tflite_layout, tvm_build
from .runner_prelude import PRELUDE as _HEAD


def _source(module: ModuleType) -> str:
    """``module``'s source, to run inside a runtime's venv (it imports only the standard library at its top)."""
    return "\n" + Path(str(module.__file__)).read_text(encoding="utf-8") + "\n"


ORT = (
    _HEAD
    + """
import onnxruntime as ort
options = ort.SessionOptions()
options.log_severity_level = 3
try:
    s = ort.InferenceSession(meta["model"], options, providers=["CPUExecutionProvider"])
    if bf16:  # numpy has no bfloat16: OrtValues of the bits, typed BFLOAT16 (16)
        args = {i.name: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bf16_bits(feeds[i.name]), 16)
                if i.name in bf16 else ort.OrtValue.ortvalue_from_numpy(feeds[i.name]) for i in s.get_inputs()}
        def run():
            ys = s.run_with_ort_values(None, args)
            return [from_bits(y.numpy()) if "bfloat16" in y.data_type() else y.numpy() for y in ys]
        out, times = timed(run)
    else:
        out, times = timed(lambda: s.run(None, {i.name: feeds[i.name] for i in s.get_inputs()}))
except Exception as exc:
    done(ort.__version__, error=first_line(exc))
done(ort.__version__, out, times)
"""
)

OPENVINO = (
    _HEAD
    + """
import openvino
try:
    from openvino import Core
except ImportError:
    from openvino.runtime import Core
version = (openvino.__version__ if hasattr(openvino, "__version__") else openvino.runtime.get_version()).split("-")[0]
try:
    core = Core()
    if meta["extension"]:
        sys.path.insert(0, meta["src"])
        from deform_onnx.openvino import extension
        core.add_extension(extension())
    model = core.read_model(meta["model"])
    if meta.get("keep"):  # the user's artifact: the IR OpenVINO ran (deform_onnx.check_runtimes(keep_artifacts=...))
        from openvino import save_model
        save_model(model, meta["out"] + ".xml", compress_to_fp16=False)
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    # positional feeds: a port's get_any_name() may be another name of the same tensor (2023.3)
    args = [feeds[next(n for n in p.get_names() if n in feeds)] for p in model.inputs]
    if bf16:  # a bf16 tensor of the bits, as deform_onnx.runtimes._ov_input
        from openvino import Tensor, Type
        names = [next(n for n in p.get_names() if n in feeds) for p in model.inputs]
        args = [a if n not in bf16 else Tensor(Type.bf16, list(a.shape)) for n, a in zip(names, args)]
        for n, t in zip(names, args):
            if n in bf16:
                t.data.view(np.uint16)[...] = bf16_bits(feeds[n])
    # every output in the file's order: by a name of the port when it has the file's, else by position
    ports = list(compiled.outputs)
    named = {n: p for p in ports for n in p.get_names()}
    if all(n in named for n in out_names):
        ports = [named[n] for n in out_names]
    def run():
        request.infer(args)
        ys = []
        for p in ports:
            y = np.array(request.get_tensor(p).data)
            ys.append(from_bits(y) if p.get_element_type().get_type_name() == "bf16" else y.copy())
        return ys
    out, times = timed(run)
except Exception as exc:
    done(version, error=first_line(exc))
done(version, out, times)
"""
)

# MNNConvert exits 0 even when it fails: success is a non-empty .mnn file. The file is converted twice: MNNConvert
# 3.6.1 folded a ConstantOfShape without its value into uninitialised memory, so one conversion of a file could
# match and the user's next one not; two models that differ beyond their mnn_uuid must compute the same values.
MNN = (
    _HEAD
    + """
import os, re, subprocess
import MNN, MNN.expr as F, MNN.nn as nn
version = MNN.version()
target = meta["out"] + ".mnn"
def convert(path):
    # MNNConvert's converter function, not its `mnnconvert` script: the script imports MNN.tools.utils.log, which
    # runs `pip install -U aliyun-log-python-sdk` when that is missing and then sends telemetry (its MNNLogger)
    return subprocess.run([sys.executable, "-c", "import sys, _tools; _tools.mnnconvert(sys.argv)", "-f", "ONNX",
                           "--modelFile", meta["model"], "--MNNModel", path, "--bizCode", "MNN"],
                          capture_output=True, text=True, timeout=600)
stage("converting with MNNConvert")
conv = convert(target)
if not os.path.isfile(target) or os.path.getsize(target) == 0:
    log = [l.strip() for l in (conv.stdout + conv.stderr).splitlines() if l.strip()]
    bad = [l for l in log if any(w in l.lower() for w in ("not support", "error", "can't", "fail"))]
    done(version, error="MNNConvert wrote no model: " + ((bad or log or ["no output"])[0][:250]))
stage("converting again with MNNConvert (its output must not change)")
again = meta["out"] + ".again.mnn"
convert(again)
uuid = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
def model_bytes(path):
    return uuid.sub(b"", open(path, "rb").read()) if os.path.isfile(path) else None
same = model_bytes(target) == model_bytes(again)
def runner(path):
    net = nn.load_module_from_file(path, meta["inputs"], out_names)
    def run():
        # MNN's const takes no float16 array ("numpy type does not match", printed without a newline); a float16
        # file's input is float32 in MNN, as in ncnn
        xs = [F.const(feeds[n].astype(np.float32) if feeds[n].dtype == np.float16 else feeds[n],
                      list(feeds[n].shape), F.NCHW) for n in meta["inputs"]]
        ys = net.forward(xs)
        if not ys:  # MNN prints why on the C stdout (e.g. "Compute Shape Error for val_36")
            raise RuntimeError("MNN's forward gave no output (its shape computation failed)")
        if not isinstance(ys, (list, tuple)):
            ys = [ys]
        # NC4HW4 (MNN's packed layout) back to NCHW; other layouts are read as they are
        return [(F.convert(y, F.NCHW) if y.data_format == F.NC4HW4 else y).read().copy() for y in ys]
    return run
try:
    out, times = timed(runner(target))
    if not same:
        stage("running the second conversion")
        other = runner(again)() if model_bytes(again) is not None else None
        if other is None or _bits(other) != _bits(out):  # _bits: the prelude's, as timed compares runs
            def gap(a, b):
                a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
                return float(np.max(np.abs(a - b), initial=0.0)) if a.shape == b.shape else float("inf")
            gap = "" if other is None else " (max difference %.3g)" % max(map(gap, out, other))
            done(version, error="MNNConvert converted the same file twice into models that compute different "
                 "values" + gap + ": its conversion of this file is not reproducible (MNNConvert 3.6.1 folds a "
                 "ConstantOfShape without its value attribute into uninitialised memory: target 'mnn' writes the "
                 "value)")
except Exception as exc:
    done(version, error=first_line(exc))
done(version, out, times)
"""
)

# The build: the host's target and a CPU schedule (tvm_build: its source runs first, in the venv).
TVM = (
    _HEAD
    + _source(tvm_build)
    + """
import onnx, tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx
try:
    shapes = {n: list(feeds[n].shape) for n in meta["inputs"]}
    mod = from_onnx(onnx.load(meta["model"]), shape_dict=shapes, keep_params_in_input=False)
    target = host_target()
    ex, scheduled, kernels = build(mod, target)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    make = tvm.runtime.tensor if hasattr(tvm.runtime, "tensor") else tvm.nd.array
    if bf16:
        import ml_dtypes
    args = [make(feeds[n].astype(ml_dtypes.bfloat16) if n in bf16 else feeds[n]) for n in meta["inputs"]]
    def flat(y):  # a tensor, or a tuple of them (several outputs), nested
        return [y.numpy()] if hasattr(y, "numpy") else [a for t in y for a in flat(t)]
    def run():
        return flat(vm["main"](*args))
    out, times = timed(run)
except Exception as exc:
    done(tvm.__version__, error=first_line(exc))
# the version says how it was built: the target (the host's CPU: tvm_build.host_target), the kernels scheduled
built = f"llvm -mcpu={target.attrs.get('mcpu', 'generic')}, {scheduled}/{kernels} kernels scheduled"
done(f"{tvm.__version__} ({built})", out, times)
"""
)

# pnnx exits 0 even when it fails: success is a .ncnn.param/.ncnn.bin pair.
NCNN = (
    _HEAD
    + """
import os, shutil, subprocess
import ncnn
work = meta["out"] + ".pnnx"
os.makedirs(work, exist_ok=True)
model = os.path.join(work, "m.onnx")
shutil.copy(meta["model"], model)
# pnnx checks each input's type against the file's: bfloat16 and float16 ones are named so (without the suffix a
# float16 file wrote no model: measured here); ncnn itself takes float32 Mats
def typed(n):
    return "bf16" if n in bf16 else ("f16" if feeds[n].dtype == np.float16 else "")
shapes = ",".join("[" + ",".join(map(str, feeds[n].shape)) + "]" + typed(n) for n in meta["inputs"])
# fp16=0: pnnx writes float16 weights by default (the bundled example then ends 8.7e-3 off PyTorch, measured here)
# the wheel's own binary (its `pnnx` script imports the package, which imports torch: not installed here)
import importlib.util
exe = os.path.join(list(importlib.util.find_spec("pnnx").submodule_search_locations)[0], "pnnx")
stage("converting the file with pnnx")
conv = subprocess.run([exe, model, "inputshape=" + shapes, "fp16=0"], cwd=work,
                      capture_output=True, text=True, timeout=600)
param, weights = os.path.join(work, "m.ncnn.param"), os.path.join(work, "m.ncnn.bin")
if not (os.path.isfile(param) and os.path.isfile(weights)):
    # onnxruntime's own warnings (pnnx runs it for shape inference) are not why
    log = [l.strip() for l in (conv.stdout + conv.stderr).splitlines() if l.strip() and "[W:onnxruntime" not in l]
    bad = [l for l in log if any(w in l.lower() for w in ("not support", "error", "fail", "unknown", "not load"))]
    done(ncnn.__version__, error="pnnx wrote no ncnn model: " + ((bad or log or ["no output"])[0][:250]))
try:
    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    # float32 throughout: ncnn may store and compute float16/bfloat16 where the CPU has it
    for flag in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic", "use_bf16_storage"):
        setattr(net.opt, flag, False)
    # ncnn says why a layer cannot load on the C stderr only: capture fd 2 around the load
    stage("loading pnnx's ncnn model")
    log_path = os.path.join(work, "load.log")
    saved, log_fd = os.dup(2), os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(log_fd, 2)
    try:
        loaded = net.load_param(param) == 0 and net.load_model(weights) == 0
    finally:
        os.dup2(saved, 2)
        os.close(log_fd)
    if not loaded:
        why = [l.strip() for l in open(log_path).read().splitlines() if l.strip()]
        raise RuntimeError("ncnn could not load the pnnx output: " + (why[0] if why else "no message"))
    def run():
        ex = net.create_extractor()
        for i, n in enumerate(meta["inputs"]):
            fed = feeds[n][0]
            # clone: a Mat over numpy's memory has no refcount, which ncnn dereferences before a layer runs in place on
            # it (net.cpp, light mode: `*bottom_blob.refcount != 1`): a graph whose first op was Neg, Abs or Mul of
            # the input crashed the runner (SIGSEGV, measured here)
            arr = np.ascontiguousarray(fed, np.float32 if fed.dtype == np.float16 else fed.dtype)
            ex.input(f"in{i}", ncnn.Mat(arr).clone())
        ys = []
        for i in range(len(out_names)):  # pnnx names the file's outputs out0, out1, ... in order
            ret, y = ex.extract(f"out{i}")
            if ret != 0:
                raise RuntimeError(f"ncnn extract of output {out_names[i]!r} (out{i}) returned {ret}")
            y, shape = np.array(y), shape_of(i)
            # ncnn has no batch axis, and a leading 1 of an intermediate reshape may stay as a depth axis
            ys.append(y.reshape(shape) if shape is not None and y.size == np.prod(shape) else y[None])
        return ys
    out, times = timed(run)
except Exception as exc:
    done(ncnn.__version__, error=first_line(exc))
done(ncnn.__version__, out, times)
"""
)

# onnx2tf writes channels-last models. Its layout of each input and output is read from onnx2tf, never guessed from
# shapes alone: a [1, 8, 8, 8] value has the same shape either way (C == H == W). Inputs: onnx2tf 1.29's
# ops/Input.py makes every 3-D to 5-D input channels-last unless keep_* flags name it (none are given here).
# Outputs: convert() returns no final transpose (each output is its tensor as the graph left it, onnx2tf.py
# get_tf_model_outputs): its layout follows from the op that made it, as onnx2tf's converter for that op lays
# it out (the convert step below). An output is read in that layout, else as its shape says; one whose shape reads
# both ways and whose layout is not known is refused as ambiguous.
# It exits 0 on some failures too: success is a *_float32.tflite file.
TFLITE = (
    _HEAD
    + f"LAYOUT = {_source(tflite_layout)!r}\n"
    + """
import glob, os, shutil, subprocess
from importlib.metadata import version as dist_version
from ai_edge_litert.interpreter import Interpreter
version = "onnx2tf " + dist_version("onnx2tf") + " + LiteRT " + dist_version("ai-edge-litert")
work = meta["out"] + ".tf"
# for an image-like input (3 channels) onnx2tf downloads sample images (20x128x128x3, NHWC) unless that
# file is in its working folder: write it from this model's own input (no network here)
os.makedirs(work, exist_ok=True)
for n in meta["inputs"]:
    if feeds[n].ndim == 4 and feeds[n].shape[1] == 3:
        sample = np.resize(feeds[n].transpose(0, 2, 3, 1), (20, 128, 128, 3)).astype(np.float32)
        np.save(os.path.join(work, "calibration_image_sample_data_20x128x128x3_float32.npy"), sample)
# onnx2tf runs `onnxsim` (0.4.36, its pin) from PATH first, as in an activated venv, and writes the
# simplified model over its input: convert a copy. The sealed environment (deform_onnx.runtimes.sealed)
# has the venv's bin on PATH already, after the refusing pip: added only when a caller did not seal
model = os.path.join(work, "model.onnx")
shutil.copyfile(meta["model"], model)
path = os.environ.get("PATH", "")
env = dict(os.environ, PATH=path if meta["tool"] in path.split(os.pathsep) else meta["tool"] + os.pathsep + path)
# onnx2tf's own convert() and its float32 .tflite step, as its command line runs them (the same bytes, measured),
# without the command's saved_model and float16 .tflite that nothing here reads (most of its time on small files)
convert = LAYOUT + '''
import json, sys, onnx, onnx2tf, tensorflow as tf
import onnx2tf.onnx2tf as core
# onnx2tf's record of each tensor (its op, its ONNX shape): the dict convert() hands to
# get_tf_model_outputs when it picks the outputs
records = {}
def outputs_of(*, tf_layers_dict, output_names, _get=core.get_tf_model_outputs):
    records.update(tf_layers_dict)
    return _get(tf_layers_dict=tf_layers_dict, output_names=output_names)
core.get_tf_model_outputs = outputs_of
model = onnx2tf.convert(input_onnx_file_path=sys.argv[1], output_folder_path=sys.argv[2], non_verbose=True,
                        disable_model_save=True)
# each output's layout in onnx2tf's conversion (tflite_layout: its source runs first), from the graph it converted
graph = onnx.load(sys.argv[1], load_external_data=False).graph
json.dump({"layouts": output_layouts(graph, records, sys.argv[3:]), "ops": op_names(graph, sys.argv[3:])},
          open(sys.argv[2] + "/layouts.json", "w"))
try:
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
except Exception:
    run = tf.function(lambda *inputs: model(inputs),
                      input_signature=[tf.TensorSpec(t.shape, t.dtype, t.name) for t in model.inputs])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([run.get_concrete_function()])
converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]
converter.unfold_batchmatmul = False
open(sys.argv[2] + "/model_float32.tflite", "wb").write(converter.convert())
'''
conv = subprocess.run([sys.executable, "-c", convert, model, work, *out_names],
                      capture_output=True, text=True, timeout=1800, cwd=work, env=env)
found = glob.glob(os.path.join(work, "*_float32.tflite"))
if not found:
    log = [l.strip() for l in (conv.stdout + conv.stderr).splitlines() if l.strip()]
    bad = [l for l in log if any(w in l for w in ("ERROR", "Error", "error:"))]
    why = (bad or log or ["no output"])[-1]
    # tf_keras names the layer on this line and says what went wrong on the next one
    at = len(log) - 1 - log[::-1].index(why) if why in log else -1
    if "Exception encountered when calling layer" in why and 0 <= at < len(log) - 1:
        why = f"{why} {log[at + 1]}"
    done(version, error="onnx2tf wrote no .tflite: " + why[:300])
try:
    it = Interpreter(model_path=found[0])
    it.allocate_tensors()
    details = it.get_input_details()
    def feed(d):
        bare = d["name"].removeprefix("serving_default_").split(":")[0]
        by_name = [n for n in meta["inputs"] if n == bare]
        n = by_name[0] if by_name else meta["inputs"][details.index(d)]
        a = feeds[n]
        # onnx2tf moves axis 1 last on every 3-D to 5-D input (NCW, NCHW, NCDHW -> channels last), whatever its shape
        if 3 <= a.ndim <= 5:
            a = np.moveaxis(a, 1, -1).copy()
        if list(d["shape"]) != list(a.shape):
            raise RuntimeError(f"LiteRT input {d['name']!r} has shape {list(d['shape'])}, not {n!r}'s "
                               f"{list(a.shape)} (channels last for 3-D to 5-D)")
        return a.astype(d["dtype"]) if n in bf16 and a.dtype != d["dtype"] else a
    # the file's outputs in its order: the output tensors are PartitionedCall:0, 1, ... in another order, and
    # the signature names them with the ONNX names (onnx2tf may sanitise a name: then its position)
    def out_details(details):
        try:
            sig = it.get_signature_runner().get_output_details()
        except Exception:
            return details
        clean = {"".join(c if c.isalnum() else "_" for c in k): d for k, d in sig.items()}
        picked = [sig.get(n) or clean.get("".join(c if c.isalnum() else "_" for c in n)) for n in out_names]
        return picked if all(d is not None for d in picked) and len(picked) == len(details) else details
    outputs = out_details(it.get_output_details())
    layouts = json.load(open(os.path.join(work, "layouts.json")))
    def back_to_nchw(y, i):
        # onnx2tf keeps some outputs as the file lays them out (a Reshape's, a final transpose folded away): move
        # back a channels-last one only
        if not 3 <= y.ndim <= 5:
            return y
        shape, name, back = shape_of(i), out_names[i], np.moveaxis(y, -1, 1)
        as_file = shape is not None and list(y.shape) == shape
        as_moved = shape is not None and list(back.shape) == shape
        recorded = layouts["layouts"].get(name)
        if as_file and as_moved and recorded is None:
            op = layouts["ops"].get(name, "?")
            raise RuntimeError(f"output {name!r} {shape} has the same shape channels-first and channels-last, and "
                               f"the layout onnx2tf gives its op ({op}) is not known here: cannot tell how to read it "
                               "(an output whose channel and spatial sizes differ can be read)")
        # a shape that reads one way only says it; the layout from onnx2tf's ops decides a square one
        moved = (as_moved and not as_file) or (as_moved and as_file and recorded == "channels-last") or (
            shape is None and recorded == "channels-last")
        return back.copy() if moved else y
    def run():
        for d in details:
            it.set_tensor(d["index"], feed(d))
        it.invoke()
        return [back_to_nchw(it.get_tensor(d["index"]), i) for i, d in enumerate(outputs)]
    out, times = timed(run)
except Exception as exc:
    done(version, error=first_line(exc))
done(version, out, times)
"""
)

# onnx2torch rebuilds the graph as a torch.fx module (a converter per ONNX op), run here on the CPU. A file with
# DeformConv (target onnx2torch-native) gets deform_onnx.onnx2torch.register()'s converter (its source runs first).
ONNX2TORCH = (
    _HEAD
    + _source(onnx2torch_converter)
    + """
from importlib.metadata import version as dist_version
import onnx, torch
from onnx2torch import convert
version = "onnx2torch " + dist_version("onnx2torch") + " + torch " + torch.__version__.split("+")[0]
try:
    if meta.get("extension"):  # the file holds DeformConv: torchvision.ops.deform_conv2d
        register()
        version += " + deform_onnx.onnx2torch.register()"
    net = convert(onnx.load(meta["model"])).eval()
    args = [torch.from_numpy(feeds[n]) for n in meta["inputs"]]
    args = [a.to(torch.bfloat16) if n in bf16 else a for n, a in zip(meta["inputs"], args)]
    def run():
        with torch.inference_mode():  # no autograd bookkeeping on the graph's few hundred small ops
            y = net(*args)
        ys = list(y) if isinstance(y, (list, tuple)) else [y]
        return [(t.float() if t.dtype == torch.bfloat16 else t).numpy() for t in ys]
    out, times = timed(run)
except Exception as exc:
    done(version, error=first_line(exc))
done(version, out, times)
"""
)

#: Rewriters: ``python -c CODE IN OUT`` writes the rewritten model; last line of stdout is the tool's version.
ONNXSIM = """
import sys, onnx, onnxsim
model, ok = onnxsim.simplify(onnx.load(sys.argv[1]))
if not ok:
    raise SystemExit("onnxsim: the simplified model failed its own check")
onnx.save(model, sys.argv[2])
print(onnxsim.__version__)
"""
ONNXSLIM = """
import sys, onnx, onnxslim
onnx.save(onnxslim.slim(sys.argv[1]), sys.argv[2])
print(onnxslim.__version__)
"""
