"""Planted faults on every runner (issue 35, item 7): each is refused, naming the output and the runtime.

One small model returns five outputs: ``y`` (a DCNv2 layer), ``k`` (an int64 argmax of the input over
channels; not on ncnn, which has no integer tensors: pnnx writes no ArgMax layer), ``z`` (``4 tanh`` of a 1x1
convolution), ``v`` (``y`` with 1000 added to its first four channels: large and small elements) and ``w``
(a 3x3 convolution, the last output). It is exported once per runtime's target; the faulted copy is the same
file with four faults planted through the ONNX graph (no mock of the comparison):

(a) ``w``, the last output: one weight of its convolution (an initializer) moved by 0.25;
(b) ``k``, the integer output: 1 added (an ``Add`` of a constant after it);
(c) ``z``: cast to float16 at the end, where PyTorch's output is float32 (a precision drop);
(d) ``v``: 0.5 added to every element of its small channels (its added constant edited), checked with
    ``rtol=1e-3`` given for ``v``
    (a whole-output bound ``atol + rtol * max|v|`` is about 2 there and would pass it).

Each family converts each file once (module-scoped); the runtime's own outputs are checked here against
PyTorch (the healthy file matches, the faults are in what the runtime returned), and
:func:`deform_onnx.check_runtimes` must refuse the faulted file naming every faulted output and the runtime,
while naming no healthy one, and keep nothing. ONNX Runtime and OpenVINO also run in this interpreter
through :class:`deform_onnx.proof.OnnxRuntimeRunner` and :class:`deform_onnx.proof.OpenVINORunner` (on the
ONNX file and on its IR).
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
    """``(y, k, z, v, w)`` as the module docstring says; ``integer=False`` drops ``k``."""

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


def _before_output(proto: onnx.ModelProto, name: str, make) -> None:
    """Route graph output ``name`` through new nodes: ``make(inner name, out name)`` returns them."""
    inner = f"{name}__healthy"
    for node in proto.graph.node:
        node.output[:] = [inner if o == name else o for o in node.output]
        node.input[:] = [inner if i == name else i for i in node.input]
    proto.graph.node.extend(make(inner, name))


def plant(healthy: Path, out: Path, integer: bool, precision: bool = True) -> None:
    """Write ``healthy`` with the faults of the module docstring to ``out`` (``integer``/``precision``: (b)/(c))."""
    proto = onnx.load(str(healthy))
    graph = proto.graph
    # (a) the last output's convolution: one weight moved (its initializer edited)
    conv = next(n for n in graph.node if n.output[0] == "w")
    assert conv.op_type == "Conv", conv.op_type
    weight = next(i for i in graph.initializer if i.name == conv.input[1])
    array = numpy_helper.to_array(weight).copy()
    array[0, 0, 1, 1] += 0.25
    weight.CopyFrom(numpy_helper.from_array(array, weight.name))
    if integer:  # (b) the integer output one off at one element
        graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "k__bump"))
        _before_output(proto, "k", lambda i, o: [helper.make_node("Add", [i, "k__bump"], [o])])
    # (c) float16 where PyTorch's output is float32: the output cast to float16 (a round trip float16 -> float32
    # inside the graph is no fault to test: OpenVINO removes such a pair and computes in float32)
    if precision:
        _before_output(proto, "z", lambda i, o: [helper.make_node("Cast", [i], [o], to=TensorProto.FLOAT16)])
        next(o for o in graph.output if o.name == "z").type.tensor_type.elem_type = TensorProto.FLOAT16
    # (d) the small channels of v 0.5 off: the added constant (an initializer) edited. A new Add of a (1, 8, 1, 1)
    # constant after v instead is no fault onnx2tf keeps: its .tflite adds it to other elements (measured here)
    add = next(n for n in graph.node if n.output[0] == "v")
    shift = next(i for i in graph.initializer if i.name in add.input)
    array = numpy_helper.to_array(shift).copy()
    array[0, 4:] += 0.5
    shift.CopyFrom(numpy_helper.from_array(array, shift.name))
    onnx.checker.check_model(proto)
    onnx.save(proto, str(out))


@pytest.fixture(scope="module")
def inputs() -> torch.Tensor:
    return torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))


def _export(folder: Path, name: str, x: torch.Tensor):
    """The healthy file for ``name``'s target, its faulted copy, the model and PyTorch's outputs by name."""
    integer = name != "ncnn"
    model = Five(integer).eval()
    healthy, faulted = folder / f"five_{name}.onnx", folder / f"five_{name}_faulted.onnx"
    deform_onnx.export(model, (x,), healthy, input_names=["x"], output_names=_names(integer), target=TARGETS[name])
    plant(healthy, faulted, integer, precision=name != "ncnn")
    with torch.no_grad():
        want = dict(zip(_names(integer), [t.numpy() for t in model(x)]))
    return healthy, faulted, model, want


@pytest.fixture(scope="module", params=list(TARGETS))
def family_runs(request, tmp_path_factory, inputs):
    """Per family: the two files checked once each with ``check_runtimes`` (kept artifacts in two folders)."""
    name = request.param
    if name in DEPLOYED and os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES") == "1":
        pytest.skip("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES=1")
    folder = tmp_path_factory.mktemp(f"proof-{name}")
    healthy, faulted, model, want = _export(folder, name, inputs)
    rows = {}
    for kind, path in (("healthy", healthy), ("faulted", faulted)):
        kept = folder / f"kept-{kind}"
        kept.mkdir()
        (row,) = deform_onnx.check_runtimes(path, [name], model=model, args=(inputs,), keep_artifacts=kept,
                                            tolerances={"v": (1e-3, None)}, repeats=1)  # fmt: skip
        rows[kind] = (row, kept)
    return name, healthy, want, rows


def _held(got: np.ndarray, want: np.ndarray, rtol: float = RTOL) -> np.ndarray:
    """Which elements of ``got`` are within the float32 rule of ``want`` (exact for integers), computed here."""
    if want.dtype.kind in "iub":
        return got.astype(np.int64) == want.astype(np.int64)
    return np.abs(got.astype(np.float64) - want) <= ATOL + rtol * np.abs(want.astype(np.float64))


@pytest.mark.slow
def test_healthy_file_matches_every_output(family_runs, inputs) -> None:
    """The healthy file: every output the runtime returned is right (checked here); the row passes; kept."""
    name, healthy, want, rows = family_runs
    row, kept = rows["healthy"]
    assert row.error is None, row.error
    assert [n for n, _ in row.outputs] == list(want)
    for n, got in row.outputs:
        assert got.shape == want[n].shape, (n, got.shape)
        assert _held(got, want[n]).all(), (name, n)
    assert row.ok and row.failure is None, row
    files = {p.name.removeprefix(healthy.stem) for p in kept.iterdir()}
    wanted = {
        "mnn": {".mnn"},
        "ncnn": {".ncnn.param", ".ncnn.bin"},
        "tflite": {".tflite"},
        "openvino": {".xml", ".bin"},
    }
    assert files == wanted.get(name, set())
    umask = os.umask(0)
    os.umask(umask)
    for kept_file in kept.iterdir():  # readable like any file the user writes (not mkstemp's 0600)
        assert kept_file.stat().st_mode & 0o777 == 0o666 & ~umask, kept_file
    if name == "openvino":  # the kept IR, rerun here in a plain Core at float32 inference
        runner = OpenVINORunner()
        runner.load(kept / f"{healthy.stem}.xml")
        for n, got in runner.run({"x": inputs.numpy()}):
            assert _held(got, want[n]).all(), n


@pytest.mark.slow
def test_planted_faults_are_refused(family_runs) -> None:
    """The faulted file: each fault is in what the runtime returned, and the row names each faulted output."""
    name, _, want, rows = family_runs
    row, kept = rows["faulted"]
    assert row.error is None, row.error
    got = dict(row.outputs)
    # the faults are in the runtime's own outputs (computed here), the healthy output is not
    assert _held(got["y"], want["y"]).all()
    assert not _held(got["w"], want["w"]).all()
    if name in CASTS_TO_FLOAT16:
        assert got["z"].dtype == np.float16
        off = np.abs(got["z"].astype(np.float32) - want["z"])
        assert off.max() <= 2**-10 + 1e-5 and not _held(got["z"], want["z"]).all()  # float16 rounding (|z| < 4)
    else:  # the runtime returns float32 for the float16 output, or the file has none: z is right there
        assert got["z"].dtype == np.float32 and _held(got["z"], want["z"]).all()
    small = np.abs(got["v"][:, 4:] - want["v"][:, 4:] - 0.5).max()
    assert small <= 1e-3, small  # 0.5 off on the small channels ...
    assert 1e-4 + 1e-3 * np.abs(want["v"]).max() >= 0.5  # ... which a whole-output bound would pass
    if "k" in want:
        assert np.array_equal(got["k"].astype(np.int64), want["k"] + 1)
    assert not row.ok
    message = row.failure or ""
    assert message.startswith(f"{name} ({row.version}): output "), message
    faulted = ["w", "v"] + (["k"] if "k" in want else []) + (["z"] if name in CASTS_TO_FLOAT16 else [])
    for n in faulted:
        assert f"{name} ({row.version}): output {n!r} " in message, (n, message)
    for n in {"y", "z"} - set(faulted):
        assert f"output {n!r}" not in message, (n, message)
    if "z" in faulted:
        assert "output 'z' is float16 where the reference is float32 (a precision drop" in message
    assert row.worst_output in faulted
    assert list(kept.iterdir()) == []  # nothing kept from a runtime that failed


@pytest.fixture(scope="module")
def ort_files(tmp_path_factory, inputs):
    folder = tmp_path_factory.mktemp("proof-inprocess")
    return _export(folder, "onnxruntime", inputs), folder


@pytest.mark.parametrize("runner", ["onnxruntime", "openvino", "openvino IR"])
def test_in_process_runners_refuse_the_planted_faults(ort_files, inputs, runner: str) -> None:
    """ONNX Runtime and OpenVINO (ONNX file and IR) in this interpreter: every faulted output named, 'y' passes."""
    (healthy, faulted, _, want), folder = ort_files
    path = faulted
    if runner == "openvino IR":
        import openvino as ov

        path = folder / "faulted.xml"
        ov.save_model(ov.convert_model(str(faulted)), str(path), compress_to_fp16=False)
    run = OnnxRuntimeRunner() if runner == "onnxruntime" else OpenVINORunner()
    run.load(path)
    got = run.run({"x": inputs.numpy()})
    assert [n for n, _ in got] == list(want)
    result = compare_outputs(got, list(want.items()), runtime=run.label, per_output={"v": (1e-3, None)})
    assert not result.ok
    assert {o.name for o in result.failures} == {"k", "z", "v", "w"}
    message = result.message()
    assert all(f"{run.label}: output {n!r}" in message for n in ("k", "z", "v", "w")), message
    assert not _held(dict(got)["w"], want["w"]).all()  # the fault is in what the runtime returned
    healthy_run = OnnxRuntimeRunner() if runner == "onnxruntime" else OpenVINORunner()
    healthy_run.load(healthy)
    assert compare_outputs(healthy_run.run({"x": inputs.numpy()}), list(want.items()), runtime=run.label).ok
