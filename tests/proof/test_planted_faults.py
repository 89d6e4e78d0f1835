"""Planted faults on every runner (issue 35, item 7): each is refused, naming the output and the runtime.

One small model returns five outputs: ``y`` (a DCNv2 layer), ``k`` (an int64 argmax of the input over
channels), ``z`` (``4 tanh`` of a 1x1 convolution), ``v`` (``y`` with 1000 added to its first four channels:
large and small elements) and ``w`` (a 3x3 convolution). It is exported once per runtime's target, and the
file is planted through the ONNX graph (no mock of the comparison): after the five healthy outputs come
faulted copies, built from the healthy graph's own nodes and initializers,

(b) ``k_bad``: ``k + 1``, the integer output one off;
(c) ``z_bad``: ``z`` cast to float16, where PyTorch's output is float32 (a precision drop);
(d) ``v_bad``: ``v`` with 0.5 added to every element of its small channels (the added constant edited),
    checked with ``rtol=1e-3`` given for it (a whole-output bound ``atol + rtol * max|v|`` is about 1 there);
(a) ``w_bad``, the last output: ``w``'s convolution with one weight (an initializer) moved by 0.25.

The reference is the model's outputs, then again those with a copy. Each family converts and runs the file
once (module-scoped, through :func:`deform_onnx.check_runtimes`): the healthy outputs must be right (checked
here against PyTorch) and pass, each fault must be in what the runtime returned (checked here) and be named,
with the runtime, in the refusal, and nothing is kept. ncnn's file has neither ``k`` nor the float16 copy
(no integer tensors: pnnx writes no ArgMax layer; it writes a ``Tensor.to`` layer ncnn cannot load). ONNX
Runtime and OpenVINO also run in this interpreter through :class:`deform_onnx.proof.OnnxRuntimeRunner` and
:class:`deform_onnx.proof.OpenVINORunner` (the ONNX file and its IR); a healthy file passes on OpenVINO and
its kept IR reruns here.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import torchvision
from onnx import TensorProto, helper, numpy_helper

import deform_onnx
from deform_onnx.proof import OnnxRuntimeRunner, OpenVINORunner, compare_outputs

#: family -> the target its file is exported for.
TARGETS = {
    "onnxruntime": None,
    "openvino": "openvino-extension",
    "mnn": "mnn",
    "ncnn": "ncnn",
    "tflite": "tflite",
    "tvm": "tvm",
    "onnx2torch": "onnx2torch",
}
#: Families whose runtime applies a float16 cast at an output (measured here): MNN and LiteRT (onnx2tf) drop it and
#: return the float32 values, exact, so the file they run has no precision drop; pnnx writes a ``Tensor.to``
#: layer ncnn cannot load, so ncnn's faulted file has no float16 output.
CASTS_TO_FLOAT16 = ("onnxruntime", "openvino", "tvm", "onnx2torch")
#: families that run in their own venvs (the others run with this interpreter).
DEPLOYED = ("mnn", "ncnn", "tflite", "tvm", "onnx2torch")
#: The float32 rule for the healthy file, checked here per element (the project's 1e-4 at unit scale).
RTOL = ATOL = 1e-4


class Five(torch.nn.Module):
    """``(y, k, z, v, w)`` as the module docstring says; ``integer=False`` drops ``k`` (ncnn)."""

    def __init__(self, integer: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.integer = integer
        self.off = torch.nn.Conv2d(4, 18, 3, padding=1)
        self.msk = torch.nn.Conv2d(4, 9, 3, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(4, 8, 3, padding=1)
        self.a = torch.nn.Conv2d(4, 4, 1)
        self.b = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.register_buffer("shift", torch.tensor([1000.0] * 4 + [0.0] * 4).view(1, 8, 1, 1))

    def forward(self, x: torch.Tensor):
        y = self.dcn(x, self.off(x), torch.sigmoid(self.msk(x)))
        z = torch.tanh(self.a(x)) * 4
        v = y + self.shift
        w = self.b(x)
        if self.integer:
            return y, torch.argmax(x, dim=1), z, v, w
        return y, z, v, w


def _names(integer: bool) -> list[str]:
    return ["y", "k", "z", "v", "w"] if integer else ["y", "z", "v", "w"]


#: The planted copies, ``<healthy output>_bad``, after the five healthy outputs (``w_bad`` last).
PLANTED = ("k", "z", "v", "w")


def _planted(name: str) -> list[str]:
    """The outputs planted on ``name``'s file (ncnn: neither the integer nor the float16 one, see above)."""
    return ["v", "w"] if name == "ncnn" else list(PLANTED)


class Twice(torch.nn.Module):
    """The reference of the planted file: the model's outputs, then again those that have a planted copy."""

    def __init__(self, model: Five, planted: list[str]) -> None:
        super().__init__()
        self.model, self.planted = model, planted

    def forward(self, x: torch.Tensor):
        outs = dict(zip(_names(self.model.integer), self.model(x)))
        return (*outs.values(), *(outs[n] for n in self.planted))


def plant(healthy: Path, out: Path, planted: list[str]) -> None:
    """Write ``healthy`` plus a faulted copy of each output in ``planted`` (``<name>_bad``, in that order) to ``out``.

    The copies are built from the healthy graph's own nodes and initializers, each with the fault of the module
    docstring; the healthy outputs stay as they were.
    """
    proto = onnx.load(str(healthy))
    graph = proto.graph
    producer = {o: n for n in graph.node for o in n.output}
    inits = {i.name: i for i in graph.initializer}
    types = {o.name: o.type.tensor_type.elem_type for o in graph.output}

    def copy_with(output: str, index: int, edit) -> None:
        """``output``'s node again, its ``index``-th input (an initializer) edited, writing ``output_bad``."""
        node = producer[output]
        array = edit(numpy_helper.to_array(inits[node.input[index]]).copy())
        graph.initializer.append(numpy_helper.from_array(array, f"{output}__bad_init"))
        inputs = [f"{output}__bad_init" if k == index else i for k, i in enumerate(node.input)]
        graph.node.append(helper.make_node(node.op_type, inputs, [f"{output}_bad"], name=f"{output}_bad"))
        graph.node[-1].attribute.extend(node.attribute)

    for name in planted:
        elem = types[name]
        if name == "k":  # (b) the integer output one off
            graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "k__one"))
            graph.node.append(helper.make_node("Add", ["k", "k__one"], ["k_bad"]))
        elif name == "z":  # (c) float16 where PyTorch's output is float32 (a round trip float16 -> float32 inside
            # the graph is no fault to test: OpenVINO removes such a pair and computes in float32)
            graph.node.append(helper.make_node("Cast", ["z"], ["z_bad"], to=TensorProto.FLOAT16))
            elem = TensorProto.FLOAT16
        elif name == "v":  # (d) the small channels 0.5 off: the added constant edited (a new Add of a (1, 8, 1, 1)
            # constant after v is no fault onnx2tf keeps: its .tflite adds it to other elements, measured here)
            assert producer["v"].op_type == "Add"
            index = next(k for k, i in enumerate(producer["v"].input) if i in inits)
            copy_with("v", index, lambda a: a + np.array([0.0] * 4 + [0.5] * 4, a.dtype).reshape(a.shape))
        else:  # (a) the last output's convolution with one weight moved
            assert producer["w"].op_type == "Conv"

            def move(a: np.ndarray) -> np.ndarray:
                a[0, 0, 1, 1] += 0.25
                return a

            copy_with("w", 1, move)
        info = onnx.ValueInfoProto()
        info.CopyFrom(next(o for o in graph.output if o.name == name))  # the healthy output's shape
        info.name, info.type.tensor_type.elem_type = f"{name}_bad", elem
        graph.output.append(info)
    onnx.checker.check_model(proto)
    onnx.save(proto, str(out))


@pytest.fixture(scope="module")
def inputs() -> torch.Tensor:
    return torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))


def _export(folder: Path, name: str, x: torch.Tensor):
    """The healthy file for ``name``'s target, the planted one, its reference model and PyTorch's outputs by name."""
    integer = name != "ncnn"
    model = Five(integer).eval()
    healthy, faulted = folder / f"five_{name}.onnx", folder / f"five_{name}_planted.onnx"
    deform_onnx.export(model, (x,), healthy, input_names=["x"], output_names=_names(integer), target=TARGETS[name])
    plant(healthy, faulted, _planted(name))
    with torch.no_grad():
        want = dict(zip(_names(integer), [t.numpy() for t in model(x)]))
    return healthy, faulted, Twice(model, _planted(name)).eval(), want


@pytest.fixture(scope="module", params=list(TARGETS))
def family_run(request, tmp_path_factory, inputs):
    """Per family: the planted file converted and run once through ``check_runtimes`` (keeping artifacts)."""
    name = request.param
    if name in DEPLOYED and os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES") == "1":
        pytest.skip("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES=1")
    folder = tmp_path_factory.mktemp(f"proof-{name}")
    _, faulted, reference, want = _export(folder, name, inputs)
    kept = folder / "kept"
    kept.mkdir()
    (row,) = deform_onnx.check_runtimes(faulted, [name], model=reference, args=(inputs,), keep_artifacts=kept,
                                        tolerances={"v_bad": (1e-3, None)}, repeats=1)  # fmt: skip
    return name, want, row, kept


def _held(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Which elements of ``got`` are within the float32 rule of ``want`` (exact for integers), computed here."""
    if want.dtype.kind in "iub":
        return got.astype(np.int64) == want.astype(np.int64)
    return np.abs(got.astype(np.float64) - want) <= ATOL + RTOL * np.abs(want.astype(np.float64))


@pytest.mark.slow
def test_every_output_judged_on_its_own(family_run) -> None:
    """One run of the planted file: each healthy output right and passed, each planted fault in what the runtime
    returned and named with the runtime in the refusal; nothing kept."""
    name, want, row, kept = family_run
    assert row.error is None, row.error
    got = dict(row.outputs)
    bad = [f"{n}_bad" for n in _planted(name)]
    assert list(got) == [*want, *bad]
    for n in want:  # the healthy outputs, checked here against PyTorch
        assert got[n].shape == want[n].shape and _held(got[n], want[n]).all(), (name, n)
    # the faults are in the runtime's own outputs (computed here)
    assert not _held(got["w_bad"], want["w"]).all()
    small = np.abs(got["v_bad"][:, 4:] - want["v"][:, 4:] - 0.5).max()
    assert small <= 1e-3, small  # 0.5 off on the small channels ...
    assert 1e-4 + 1e-3 * np.abs(want["v"]).max() >= 0.5  # ... which a whole-output bound would pass
    if "k" in _planted(name):
        assert np.array_equal(got["k_bad"].astype(np.int64), want["k"] + 1)
    faulted = ["w_bad", "v_bad"] + (["k_bad"] if "k" in _planted(name) else [])
    if "z" in _planted(name) and name in CASTS_TO_FLOAT16:
        faulted.append("z_bad")
        assert got["z_bad"].dtype == np.float16
        off = np.abs(got["z_bad"].astype(np.float32) - want["z"])
        assert off.max() <= 2**-10 + 1e-5 and not _held(got["z_bad"], want["z"]).all()  # float16 rounding (|z| < 4)
    elif "z" in _planted(name):  # the runtime returns float32 for the float16 output: right there, and passed
        assert got["z_bad"].dtype == np.float32 and _held(got["z_bad"], want["z"]).all()
    assert not row.ok
    message = row.failure or ""
    assert message.startswith(f"{name} ({row.version}): output "), message
    for n in faulted:
        assert f"{name} ({row.version}): output {n!r} " in message, (n, message)
    for n in set(got) - set(faulted):
        assert f"output {n!r}" not in message, (n, message)
    if "z_bad" in faulted:
        assert "output 'z_bad' is float16 where the reference is float32 (a precision drop" in message
    assert row.worst_output in faulted
    assert list(kept.iterdir()) == []  # nothing kept from a runtime that failed


@pytest.fixture(scope="module")
def ort_files(tmp_path_factory, inputs):
    folder = tmp_path_factory.mktemp("proof-inprocess")
    return _export(folder, "onnxruntime", inputs), folder


def test_healthy_file_kept_and_rerun(ort_files, inputs) -> None:
    """A healthy file passes check_runtimes on OpenVINO; its IR is kept readable (0644) and reruns right here."""
    (healthy, _, _, want), folder = ort_files
    kept = folder / "kept"
    kept.mkdir()
    model = Five().eval()
    (row,) = deform_onnx.check_runtimes(healthy, ["openvino"], model=model, args=(inputs,), keep_artifacts=kept,
                                        repeats=1)  # fmt: skip
    assert row.ok and row.failure is None and row.worst_output in want, row
    assert sorted(p.name for p in kept.iterdir()) == [f"{healthy.stem}.bin", f"{healthy.stem}.xml"]
    umask = os.umask(0)
    os.umask(umask)
    for kept_file in kept.iterdir():  # readable like any file the user writes (not mkstemp's 0600)
        assert kept_file.stat().st_mode & 0o777 == 0o666 & ~umask, kept_file
    runner = OpenVINORunner()  # the kept IR, rerun here in a plain Core at float32 inference
    runner.load(kept / f"{healthy.stem}.xml")
    for n, got in runner.run({"x": inputs.numpy()}):
        assert _held(got, want[n]).all(), n


@pytest.mark.parametrize("runner", ["onnxruntime", "openvino", "openvino IR"])
def test_in_process_runners_refuse_the_planted_faults(ort_files, inputs, runner: str) -> None:
    """ONNX Runtime and OpenVINO (ONNX file and IR) in this interpreter: every planted output named, the rest pass."""
    (_, faulted, reference, want), folder = ort_files
    path = faulted
    if runner == "openvino IR":
        import openvino as ov

        path = folder / "planted.xml"
        ov.save_model(ov.convert_model(str(faulted)), str(path), compress_to_fp16=False)
    run = OnnxRuntimeRunner() if runner == "onnxruntime" else OpenVINORunner()
    run.load(path)
    got = run.run({"x": inputs.numpy()})
    with torch.no_grad():
        expected = [t.numpy() for t in reference(inputs)]
    names = [n for n, _ in got]
    assert names == [*want, "k_bad", "z_bad", "v_bad", "w_bad"]
    result = compare_outputs(got, list(zip(names, expected)), runtime=run.label, per_output={"v_bad": (1e-3, None)})
    assert {o.name for o in result.failures} == {"k_bad", "z_bad", "v_bad", "w_bad"}
    message = result.message()
    assert all(f"{run.label}: output {n!r}" in message for n in ("k_bad", "z_bad", "v_bad", "w_bad")), message
    assert not _held(dict(got)["w_bad"], want["w"]).all()  # the fault is in what the runtime returned
