"""Grounding DINO's image encoder in float16 (``tests/real_code/grounding_dino_style.py``, transformers' code).

- Target ``tvm``: TVM 0.27's legalized ``GridSample`` of a float16 map returns float32 whatever the grid's dtype,
  so MSDA's ``sampled * attention_weights`` (both float16 in the model) was refused ("Binary operators must have
  the same datatype"); the target's form ``GridSample one dtype`` now samples a float16 map on a float16 grid in
  float32 too, and casts the result back. And TVM computes a float16 ``InstanceNormalization`` (``nn.GroupNorm``'s
  export: the input projections' ``GroupNorm``) with float16 statistics, 0.17 off: the target's repair
  ``"float16 InstanceNormalization in float32"`` (``targets/repair_float16.py``) casts around it.
- Target ``tflite``: onnx2tf converts float32 files (rule ``onnx2tf float32``): a float16 model is refused naming
  the fix. TorchScript (every target whose opset is below dynamo's): the size-following ``torch.linspace``
  of ``get_reference_points`` in float16 was an ONNX ``Range`` of float16, which ONNX does not type ("not valid
  ONNX"); its indices are an int64 ``Range`` cast now (``exporters/size_ranges.py``).
"""

from __future__ import annotations

import io
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import deform_onnx
from deform_onnx.targets import resolve_target
from deform_onnx.targets.repair_float16 import float16_instance_norm_in_float32
from real_code.grounding_dino_style import GroundingDinoImageEncoder, multi_scale_deformable_attention

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))
#: float16's export rule (docs/verification.md), against the float32 copy of the model
F16 = 1e-2


def _ort(data: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


class _ProjectAndAttend(torch.nn.Module):
    """The encoder's first input projection (``Conv2d`` 1x1 + ``GroupNorm``) feeding MSDA over two levels, with
    the sampling locations and attention weights given: the float16 ops the ``tvm`` target's fixes are for."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Sequential(torch.nn.Conv2d(8, 16, kernel_size=1), torch.nn.GroupNorm(4, 16))

    def forward(self, feature, locations, weights):
        small = torch.nn.functional.avg_pool2d(feature, 2)
        levels = [self.proj(f).flatten(2).transpose(1, 2) for f in (feature, small)]
        value = torch.cat(levels, 1).view(feature.shape[0], -1, 4, 4)  # [N, S, heads, dim]
        shapes = torch.as_tensor([feature.shape[-2:], small.shape[-2:]], dtype=torch.long)
        return multi_scale_deformable_attention(value, shapes, locations, weights)


def _attend_inputs(dtype=torch.float16):
    g = torch.Generator().manual_seed(0)
    feature = torch.randn(1, 8, 8, 8, generator=g) * 3 + 1
    locations = torch.rand(1, 12, 4, 2, 2, 2, generator=g)
    weights = torch.softmax(torch.randn(1, 12, 4, 4, generator=g), -1).view(1, 12, 4, 2, 2)
    return tuple(t.to(dtype) for t in (feature, locations, weights))


@pytest.fixture(scope="module")
def attend_tvm():
    torch.manual_seed(0)
    model = _ProjectAndAttend().eval().half()
    buf = io.BytesIO()
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    report = deform_onnx.export(model, _attend_inputs(), buf, target="tvm", input_names=["f", "loc", "w"], **opt_out)
    return model, onnx.load_from_string(buf.getvalue()), report


def test_tvm_float16_projection_and_msda_run(attend_tvm):
    """The file samples in float32, normalises in float32, ran in TVM (unless opted out) and gives the float32
    copy's values in ONNX Runtime within float16's rule."""
    model, proto, report = attend_tvm
    assert "float16 InstanceNormalization in float32" in resolve_target("tvm").repairs
    made = {o: n for n in proto.graph.node for o in n.output}
    samplers = [n for n in proto.graph.node if n.op_type == "GridSample"]
    assert samplers and all(made[i].op_type == "Cast" for n in samplers for i in n.input)
    norms = [n for n in proto.graph.node if n.op_type == "InstanceNormalization"]
    assert norms and all(made[n.input[0]].op_type == "Cast" for n in norms)
    assert "target 'tvm': float16 InstanceNormalization computed in float32 on 2 node(s)" in report.repairs
    if not NO_RUNTIMES:
        assert any(line.startswith("tvm") for line in report.runtimes), report.runtimes
    inputs = _attend_inputs()
    (got,) = _ort(proto.SerializeToString(), dict(zip(("f", "loc", "w"), (t.numpy() for t in inputs), strict=True)))
    with torch.no_grad():
        want = model.float()(*(t.float() for t in inputs)).numpy()
    model.half()
    assert got.dtype == np.float16 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want, atol=F16, rtol=F16)


def test_instance_norm_repair_keeps_onnx_values():
    """The rewritten node gives ONNX Runtime's float16 values of the original (computed in float32 there too)."""
    x = (np.random.default_rng(0).standard_normal([1, 4, 32, 32]) * 3 + 2).astype(np.float16)
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], name="norm", epsilon=1e-5)],
        "g",
        [value("x", TensorProto.FLOAT16, [1, 4, 32, 32])],
        [value("y", TensorProto.FLOAT16, [1, 4, 32, 32])],
        [
            helper.make_tensor("s", TensorProto.FLOAT16, [4], np.array([1, 2, 0.5, -1], np.float16).view(np.uint16)),
            helper.make_tensor("b", TensorProto.FLOAT16, [4], np.array([0, 1, -1, 3], np.float16).view(np.uint16)),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (want,) = _ort(model.SerializeToString(), {"x": x})
    assert float16_instance_norm_in_float32(model) == ["float16 InstanceNormalization computed in float32 on 1 node(s)"]
    onnx.checker.check_model(model, full_check=True)
    (got,) = _ort(model.SerializeToString(), {"x": x})
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2**-10, atol=2**-14)


class _ReferencePoints(torch.nn.Module):
    """``get_reference_points`` of a float16 map and its half-size level, as the encoder calls it."""

    def forward(self, feature):
        small = torch.nn.functional.avg_pool2d(feature, 2)
        shapes = torch.as_tensor([feature.shape[-2:], small.shape[-2:]], dtype=torch.long)
        ratios = torch.ones(feature.shape[0], 2, 2, dtype=feature.dtype)
        return GroundingDinoImageEncoder.get_reference_points(shapes, ratios, feature.device)


def test_torchscript_float16_reference_points_follow_the_size():
    """TorchScript at opset 13 (as target tflite exports), H and W dynamic: a valid file whose float16 reference
    points match PyTorch's at another size too."""
    feature = torch.randn(1, 4, 8, 12).half()
    buf = io.BytesIO()
    deform_onnx.export(
        _ReferencePoints(),
        (feature,),
        buf,
        dynamo=False,
        opset_version=13,
        input_names=["f"],
        dynamic_axes={"f": {2: "H", 3: "W"}},
    )
    assert "Range" in {n.op_type for n in onnx.load_from_string(buf.getvalue()).graph.node}  # follows the size
    other = torch.randn(1, 4, 16, 6).half()
    (got,) = _ort(buf.getvalue(), {"f": other.numpy()})
    want = _ReferencePoints()(other).numpy()
    assert got.dtype == np.float16 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=F16, rtol=F16)


def test_tflite_refuses_a_float16_model_naming_the_fix():
    """onnx2tf converts float32 files (float16 ones failed in its conversion, or took float32 input in LiteRT):
    target tflite refuses a float16 model in one line, before any conversion, and writes nothing."""
    torch.manual_seed(0)
    with pytest.raises(
        ValueError, match=r"target 'tflite': onnx2tf float32: a float16 model \(f, loc, w\).*export in float32"
    ):
        deform_onnx.export(_ProjectAndAttend().eval().half(), _attend_inputs(), io.BytesIO(), target="tflite",
                           input_names=["f", "loc", "w"])  # fmt: skip


def test_ncnn_names_the_dtype_first():
    """A float16 MSDA model breaks two ncnn rules (its 6-D sampling values fit no ncnn blob, and ncnn loads no
    float16 file): the refusal names the dtype, which no change to the graph fixes, not the blobs."""
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=r"target 'ncnn': ncnn float32: a float16 model .*export in float32"):
        deform_onnx.export(_ProjectAndAttend().eval().half(), _attend_inputs(), io.BytesIO(), target="ncnn",
                           input_names=["f", "loc", "w"])  # fmt: skip
