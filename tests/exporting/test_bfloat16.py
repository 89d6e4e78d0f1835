"""bfloat16 models (case c31): a conv whose output torch.chunk splits into DCNv2's offset and mask,
the whole module ``.to(torch.bfloat16)``.

ONNX types Conv in bfloat16 from opset 22: with no opset given export picks 22 (with a target too: its
own pick is not the user's); a lower one is an ``ExportError`` naming 22 (never onnx's raw ``InferenceError``). torchvision has no bfloat16 CPU
kernel, so the reference is the float32 model (a copy, upcast); ONNX Runtime CPU has no bfloat16
Conv, OpenVINO CPU runs the file. Without OpenVINO: a one-line ``MissingKernelError`` naming
``verify=False``.
"""

from __future__ import annotations

import copy
import io
import sys

import numpy as np
import onnx
import pytest
import torch

import deform_onnx
from deform_onnx.core.errors import ExportError, MissingKernelError, VerificationError
from deform_onnx.exporting import bfloat16
from models import ChunkDCN
from util import load_cases

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def c31():
    case = load_cases()["c31"]["input"]
    assert case["dtype"] == "bfloat16" and case["mask"]
    torch.manual_seed(0)
    model = ChunkDCN(case["C_in"], case["C_out"], tuple(case["kernel"]), tuple(case["padding"]))
    with torch.no_grad():  # offsets of a few pixels, so that the sampling is not trivial
        model.conv.weight.mul_(4)
    model = model.to(torch.bfloat16).eval()
    x = torch.randn(case["N"], case["C_in"], case["H"], case["W"]).to(torch.bfloat16)
    return model, x


#: Measured max abs error of c31's files against the float32 copy (OpenVINO CPU, outputs of scale 1.03,
#: where a bfloat16 ulp is 7.8e-3): grid_sample 2.0e-2, gather 4.6e-2. The bounds sit just above them
#: (the bfloat16 default tolerance, 8e-2 + 8e-2|x|, is the rule verification applies, not a measure).
BOUND = {"grid_sample": 3e-2, "gather": 6e-2}


def openvino_run(data: bytes, feeds: dict[str, torch.Tensor]) -> list[np.ndarray]:
    """The file's outputs (float64) on OpenVINO CPU, fed by the file's input names; bfloat16 in and out as its bits.

    Written here with OpenVINO's own API (not deform_onnx's session), so that the error is measured apart
    from what verification reports.
    """
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(model=data), "CPU")
    request = compiled.create_infer_request()
    for port in compiled.inputs:  # OpenVINO drops inputs the graph does not use
        a = feeds[next(n for n in port.get_names() if n in feeds)]
        if a.dtype == torch.bfloat16:
            tensor = ov.Tensor(ov.Type.bf16, list(a.shape))
            tensor.data.view(np.int16)[...] = a.contiguous().view(torch.int16).numpy()
        else:
            tensor = ov.Tensor(a.numpy())
        request.set_tensor(port, tensor)
    request.infer()
    outputs = []
    for port in compiled.outputs:
        bits = np.array(request.get_tensor(port).data).view(np.int16).copy()
        outputs.append(torch.from_numpy(bits).view(torch.bfloat16).double().numpy())
    return outputs


def float32_copy(model, *args) -> np.ndarray:
    """The reference: the model upcast to float32 on the upcast inputs (torchvision has no bfloat16 CPU kernel)."""
    cast = [a.float() if a.is_floating_point() else a for a in args]
    with torch.no_grad():
        return copy.deepcopy(model).float()(*cast).double().numpy()


def file_error(data: bytes, model, args, names=None) -> float:
    """Max abs error of the file's one output on OpenVINO against the float32 copy, on ``args``."""
    names = names or [i.name for i in onnx.load_from_string(data).graph.input]
    (got,) = openvino_run(data, dict(zip(names, args)))
    return float(np.abs(got - float32_copy(model, *args)).max())


@pytest.fixture(scope="module")
def exported(c31, tmp_path_factory):
    model, x = c31
    path = tmp_path_factory.mktemp("bf16") / "c31.onnx"
    return path, deform_onnx.export(model, (x,), path)  # default arguments


def test_default_picks_opset_22_and_verifies_against_float32(c31, exported):
    """Default arguments: opset 22, bfloat16 inputs/outputs, verified (OpenVINO) within bfloat16's 8e-2."""
    path, report = exported
    assert report.opset == 22 and report.exporter == "dynamo"
    model, x = c31
    err = file_error(path.read_bytes(), model, (x,))
    assert err <= BOUND["grid_sample"] and report.max_error == pytest.approx(err, rel=1e-6), (err, report.max_error)
    proto = onnx.load(path)
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16
    assert proto.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16


def test_onnxruntime_cpu_has_no_bfloat16_conv(exported):
    """Measured: ONNX Runtime CPU refuses the file (no bfloat16 Conv), so verification needs OpenVINO."""
    path, _ = exported
    got, why = bfloat16._onnxruntime_session(path.read_bytes())
    assert got is None and "bfloat16 kernel for Conv" in why


@pytest.mark.parametrize(
    "kw", [{"opset_version": 17}, {"opset_version": 20}, {"dynamo": False}], ids=["17", "20", "torchscript"]
)
def test_lower_opset_is_an_export_error_naming_22(c31, tmp_path, kw):
    """An explicit opset below 22 (or the TorchScript exporter): ExportError naming 22, nothing written."""
    model, x = c31
    path = tmp_path / "no.onnx"
    with pytest.raises(ExportError, match="opset 22"):
        deform_onnx.export(model, (x,), path, **kw)
    assert not path.exists()


def test_without_openvino_a_missing_kernel_error(c31, monkeypatch, tmp_path):
    """No runtime that runs bfloat16 Conv: one line naming verify=False; verify=False writes the file."""
    model, x = c31
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino fails
    with pytest.raises(MissingKernelError, match="verify=False") as info:
        deform_onnx.export(model, (x,), tmp_path / "a.onnx")
    assert "\n" not in str(info.value) and not (tmp_path / "a.onnx").exists()
    report = deform_onnx.export(model, (x,), tmp_path / "b.onnx", verify=False)
    assert report.opset == 22 and (tmp_path / "b.onnx").is_file()


@pytest.mark.parametrize("target", ["openvino", "tflite"])
def test_a_target_picks_opset_22(c31, target):
    """With a target and no opset: 22, not the target's pick (openvino 17; tflite 13, TorchScript), verified."""
    model, x = c31
    buf = io.BytesIO()
    report = deform_onnx.export(model, (x,), buf, target=target, verify_runtimes=())  # no conversion in tflite here
    assert report.opset == 22 and report.exporter == "dynamo"
    err = file_error(buf.getvalue(), model, (x,))  # tflite's method is gather, openvino's grid_sample
    assert err <= BOUND["gather" if target == "tflite" else "grid_sample"], err
    assert report.max_error == pytest.approx(err, rel=1e-6)
    with pytest.raises(ExportError, match="opset 22"):  # an explicit lower opset is still refused
        deform_onnx.export(model, (x,), io.BytesIO(), target=target, opset_version=17)


@pytest.mark.parametrize("target", ["onnxruntime", "onnxruntime<1.25"])
def test_onnxruntime_target_refuses_bfloat16(c31, tmp_path, target):
    """ONNX Runtime has no bfloat16 Conv/GridSample: no file for it (one line, before export work); force writes one."""
    model, x = c31
    path = tmp_path / "b.onnx"
    with pytest.raises(MissingKernelError, match="cannot run a bfloat16 model.*float32") as info:
        deform_onnx.export(model, (x,), path, target=target)
    assert "\n" not in str(info.value) and not path.exists()
    # a float32 copy of the same model is exported for that target as usual
    deform_onnx.export(ChunkDCN(16, 16, (3, 3), (1, 1)).eval(), (x.float(),), path, target=target)
    assert path.is_file()


@pytest.mark.parametrize("method", ["gather", "native"])
def test_other_methods(c31, method):
    """gather runs on OpenVINO in bfloat16 too; native DeformConv does not (no conversion rule): one line."""
    model, x = c31
    if method == "gather":
        buf = io.BytesIO()
        report = deform_onnx.export(model, (x,), buf, method=method)
        err = file_error(buf.getvalue(), model, (x,))
        assert report.opset == 22 and err <= BOUND["gather"] and report.max_error == pytest.approx(err, rel=1e-6)
        return
    with pytest.raises(MissingKernelError, match="DeformConv.*verify=False") as info:
        deform_onnx.export(model, (x,), io.BytesIO(), method=method)
    assert "\n" not in str(info.value)


def test_verification_sees_a_wrong_file(c31, exported):
    """A planted fault: the same file checked against a model whose DCN weights changed is refused."""
    model, x = c31
    path, _ = exported
    other = ChunkDCN(16, 16, (3, 3), (1, 1)).to(torch.bfloat16).eval()
    other.load_state_dict(model.state_dict())
    with torch.no_grad():
        other.dcn.weight.mul_(1.5)
    with pytest.raises(VerificationError, match="float32 model"):
        bfloat16.verify_bfloat16(other, (x,), path.read_bytes())


def test_float32_models_are_untouched():
    """No bfloat16 anywhere: the opset stays as given (None: the usual default)."""
    model = ChunkDCN(4, 4, (3, 3), (1, 1))
    assert bfloat16.choose_opset(model, (torch.randn(1, 4, 5, 5),), None, True) is None
    assert bfloat16.choose_opset(model, (torch.randn(1, 4, 5, 5),), 13, False) == 13


def test_report_has_the_checks_of_float16s_rules(exported):
    """bfloat16 goes through verification's rules and report: each output's check is filled (float32 copy)."""
    _, report = exported
    assert set(report.checks) == set(report.tolerances) and report.checks
    for name, check in report.checks.items():
        assert check.reference == "float32 copy" and "bfloat16 default" in check.rule
        assert check.pytorch_error is None  # torchvision has no bfloat16 CPU kernel: no own run to compare
        assert report.tolerances[name].dtype == "bfloat16"
    assert report.max_error == max(c.error for c in report.checks.values())
    assert report.onnxruntime is None and any("verified on OpenVINO" in n for n in report.notes), report.notes


class SkipsAnInput(torch.nn.Module):
    """``x [1, 4, H, W]``, ``unused [1, 4]`` int64 (not read), ``bias [4]``: c31's chunked DCNv2 plus ``bias``."""

    def __init__(self):
        super().__init__()
        self.dcn = ChunkDCN(4, 4, (3, 3), (1, 1))

    def forward(self, x, unused, bias):
        return self.dcn(x) + bias[None, :, None, None]


@pytest.fixture(scope="module")
def skips():
    torch.manual_seed(0)
    model = SkipsAnInput().to(torch.bfloat16).eval()
    args = (
        torch.randn(1, 4, 8, 8).to(torch.bfloat16),
        torch.arange(4).reshape(1, 4),
        torch.randn(4).to(torch.bfloat16),
    )
    return model, args, ["x", "unused", "bias"]


def test_an_input_the_runtime_drops_is_skipped_by_name(skips):
    """OpenVINO drops the unused input (the file keeps it): ``bias`` still gets its own tensor, not ``unused``'s."""
    model, args, names = skips
    buf = io.BytesIO()
    report = deform_onnx.export(model, args, buf, input_names=names)
    err = file_error(buf.getvalue(), model, args, names)
    # measured 8.1e-3 (outputs of scale 2.1); bias fed another input's tensor would be off by about the bias, ~1
    assert report.opset == 22 and err <= 2e-2 and report.max_error == pytest.approx(err, rel=1e-6), err


def test_reordered_inputs_are_fed_by_name(skips):
    """A file whose graph lists its inputs in another order (bias, unused, x) is fed by name; by position it fails."""
    model, args, names = skips
    f = io.BytesIO()
    deform_onnx.export(model, args, f, input_names=names, verify=False)
    proto = onnx.load_from_string(f.getvalue())
    inputs = list(proto.graph.input)
    assert [i.name for i in inputs] == names
    del proto.graph.input[:]
    proto.graph.input.extend(reversed(inputs))
    data = proto.SerializeToString()
    verified = bfloat16.verify_bfloat16(model, args, data, input_names=names)
    err = file_error(data, model, args, names)  # fed by name here too; measured 8.1e-3 as the test above
    assert err <= 2e-2 and verified.max_error == pytest.approx(err, rel=1e-6), err
    assert set(verified.checks) == {o.name for o in proto.graph.output}
    with pytest.raises(Exception):  # noqa: B017 - the runtime's own error: x's tensor fed to bias
        bfloat16.verify_bfloat16(model, args, data)


def test_dynamic_hw_is_checked_at_a_second_size_as_the_float32_copy():
    """Dynamic H/W: the second size is picked by running the float32 copy (torchvision has no bfloat16 kernel,
    so every size was refused before), and the file is verified there on OpenVINO by the same rules."""
    torch.manual_seed(0)
    model = ChunkDCN(4, 4, (3, 3), (1, 1)).to(torch.bfloat16).eval()
    x = torch.randn(1, 4, 12, 12).to(torch.bfloat16)
    dims = {"x": {2: torch.export.Dim("H", min=4), 3: torch.export.Dim("W", min=4)}}
    buf = io.BytesIO()
    report = deform_onnx.export(model, (x,), buf, dynamic_shapes=dims)
    # the example, a second size, and the declared lower bound (H = W = 4)
    assert len(report.checked_shapes) == 3 and report.checked_shapes[1] != report.checked_shapes[0]
    assert report.checked_shapes[2] == [(1, 4, 4, 4)]
    assert all(v.runtime == "OpenVINO" and v.checks for v in report.size_checks)
    second = report.size_checks[0]
    assert all(c.reference == "float32 copy" for c in second.checks.values())
    # The file at that size (1x4x20x8), on a tensor of this test's own, against the float32 copy: measured
    # 3.9e-2 on outputs of scale 0.88 (verification's own tensor there: 1.6e-2)
    other = torch.randn(*report.checked_shapes[1][0], generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    err = file_error(buf.getvalue(), model, (other,))
    assert err <= 5e-2 and second.max_error <= 5e-2, (err, second.max_error)
