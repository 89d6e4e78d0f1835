"""Down-conversion adapters (:mod:`deform_onnx.conversion`), one small opset-18 model per adapter.

The oracle is the opset-18 model itself run in ONNX Runtime (its kernels follow each op's
opset-18 schema); the converted model must be valid at the target (``full_check``), hold no
node of the newer schema, and give the same numbers. Fast: no PyTorch export.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from deform_onnx.conversion import ADAPTERS, ConversionError, convert_down
from deform_onnx.conversion.adapters import register

RNG = np.random.default_rng(0)


def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model)  # output shapes, which full_check requires


def _run(proto, feeds):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _ints(name, values):
    return h.make_tensor(name, T.INT64, [len(values)], values)


def _check(proto, target, feeds, adapter, more_feeds=()):
    converted, repairs = convert_down(proto, target)
    assert next(o.version for o in converted.opset_import if o.domain == "") == target
    assert all(o.domain != "deform_onnx.converted" for o in converted.opset_import)
    onnx.checker.check_model(converted, full_check=True)
    assert [r.name for r in repairs] == [adapter]
    assert repairs[0].reason and repairs[0].nodes == 1 and str(repairs[0]).startswith(f"{adapter} (")
    for f in [feeds, *more_feeds]:
        for want, got in zip(_run(proto, f), _run(converted, f), strict=True):
            assert want.shape == got.shape
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    return converted


@pytest.mark.parametrize("size", [9, 8, 7])  # 3 into 3s; 8 -> 3, 3, 2; 7 -> 3, 3, 1
@pytest.mark.parametrize("target", [17, 14])
def test_split_18_17_static(size, target):
    parts = 3
    x = h.make_tensor_value_info("x", T.FLOAT, [2, size])
    outs = [h.make_tensor_value_info(f"y{i}", T.FLOAT, None) for i in range(parts)]
    node = h.make_node("Split", ["x"], [f"y{i}" for i in range(parts)], axis=1, num_outputs=parts)
    proto = _model([node], [x], outs)
    converted = _check(proto, target, {"x": RNG.standard_normal((2, size)).astype(np.float32)}, "split_18_17")
    split = next(n for n in converted.graph.node if n.op_type == "Split")
    assert [a.name for a in split.attribute] == ["axis"] and len(split.input) == 2


def test_split_18_17_dynamic_axis():
    """The split axis is dynamic: sizes computed at run time (ceil, last part the rest), any size."""
    x = h.make_tensor_value_info("x", T.FLOAT, [2, "C"])
    outs = [h.make_tensor_value_info(f"y{i}", T.FLOAT, None) for i in range(3)]
    proto = _model([h.make_node("Split", ["x"], ["y0", "y1", "y2"], axis=-1, num_outputs=3)], [x], outs)
    feeds = [{"x": RNG.standard_normal((2, c)).astype(np.float32)} for c in (7, 8, 9)]
    _check(proto, 17, feeds[0], "split_18_17", feeds[1:])


def test_pad_18_17_with_axes():
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 2, 3, 4])
    y = h.make_tensor_value_info("y", T.FLOAT, None)
    node = h.make_node("Pad", ["x", "pads", "value", "axes"], ["y"], mode="constant")
    inits = [_ints("pads", [1, 2, 0, 3]), _ints("axes", [2, -1]), h.make_tensor("value", T.FLOAT, [], [0.5])]
    _check(
        _model([node], [x], [y], inits), 14, {"x": RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)}, "pad_18_17"
    )


def test_pad_18_17_runtime_axes_is_unrepairable():
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 2, 3, 4])
    axes = h.make_tensor_value_info("axes", T.INT64, [2])
    y = h.make_tensor_value_info("y", T.FLOAT, None)
    node = h.make_node("Pad", ["x", "pads", "", "axes"], ["y"], name="p")
    proto = _model([node], [x, axes], [y], [_ints("pads", [1, 1, 1, 1])])
    with pytest.raises(
        ConversionError, match=r"Pad node 'p' cannot be converted from opset 18 to 17 \(pad_18_17\): .*run-time axes"
    ):
        convert_down(proto, 17)


def test_shape_15_14_slice():
    x = h.make_tensor_value_info("x", T.FLOAT, [2, 3, "H", 5])
    y = h.make_tensor_value_info("y", T.INT64, None)
    proto = _model([h.make_node("Shape", ["x"], ["y"], start=1, end=-1)], [x], [y])
    _check(proto, 14, {"x": np.zeros((2, 3, 7, 5), np.float32)}, "shape_15_14")


@pytest.mark.parametrize("axes, noop", [([1, -1], 0), ([], 0), ([], 1)], ids=["axes", "all", "noop"])
def test_reduce_18_17(axes, noop):
    x = h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])
    y = h.make_tensor_value_info("y", T.FLOAT, None)
    inputs = ["x", "axes"] if axes else ["x"]
    node = h.make_node("ReduceMean", inputs, ["y"], keepdims=0, noop_with_empty_axes=noop)
    inits = [_ints("axes", axes)] if axes else []
    converted = _check(
        _model([node], [x], [y], inits),
        17,
        {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32)},
        "reducemean_18_17",
    )
    assert all(a.name != "noop_with_empty_axes" for n in converted.graph.node for a in n.attribute)


@pytest.mark.parametrize("dtype", [T.FLOAT, T.FLOAT16])
def test_layernormalization_17_16(dtype):
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    x = h.make_tensor_value_info("x", dtype, [2, 3, 4])
    y = h.make_tensor_value_info("y", dtype, None)
    scale = h.make_tensor("scale", dtype, [3, 4], (1 + 0.1 * RNG.standard_normal(12)).astype(np_dtype).tolist())
    bias = h.make_tensor("bias", dtype, [3, 4], RNG.standard_normal(12).astype(np_dtype).tolist())
    node = h.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-2, epsilon=1e-3)
    proto = _model([node], [x], [y], [scale, bias])
    converted, repairs = convert_down(proto, 16)
    onnx.checker.check_model(converted, full_check=True)
    assert [r.name for r in repairs] == ["layernormalization_17_16"]
    assert "LayerNormalization" not in {n.op_type for n in converted.graph.node}
    feeds = {"x": RNG.standard_normal((2, 3, 4)).astype(np_dtype)}
    tol = 2e-3 if dtype == T.FLOAT16 else 1e-5  # float16: one output ulp near 2
    np.testing.assert_allclose(_run(converted, feeds)[0], _run(proto, feeds)[0], rtol=tol, atol=tol)


def test_batchnormalization_15_14_mixed_types():
    x = h.make_tensor_value_info("x", T.FLOAT16, [1, 2, 3, 3])
    y = h.make_tensor_value_info("y", T.FLOAT16, None)
    inits = [
        h.make_tensor(n, T.FLOAT, [2], v)
        for n, v in (("s", [1.5, 0.5]), ("b", [0.1, -0.2]), ("m", [0.3, -0.1]), ("v", [1.2, 0.8]))
    ]
    node = h.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
    proto = _model([node], [x], [y], inits)
    converted, repairs = convert_down(proto, 14)
    onnx.checker.check_model(converted, full_check=True)
    assert [r.name for r in repairs] == ["batchnormalization_15_14"]
    feeds = {"x": RNG.standard_normal((1, 2, 3, 3)).astype(np.float16)}
    np.testing.assert_allclose(_run(converted, feeds)[0], _run(proto, feeds)[0], rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("target", [12, 11])
def test_concat_13_12(target):
    """onnx's converter has no Concat 13 -> 12 adapter (an mmdeploy file at opset 13 lowered to 11 failed)."""
    a, b = h.make_tensor_value_info("a", T.FLOAT, [2, 3]), h.make_tensor_value_info("b", T.FLOAT, [2, 4])
    proto = _model([h.make_node("Concat", ["a", "b"], ["y"], axis=1)], [a, b],
                   [h.make_tensor_value_info("y", T.FLOAT, None)], opset=13)  # fmt: skip
    feeds = {"a": RNG.standard_normal((2, 3)).astype(np.float32), "b": RNG.standard_normal((2, 4)).astype(np.float32)}
    _check(proto, target, feeds, "concat_13_12")


def test_concat_13_of_bfloat16_is_unrepairable():
    a = h.make_tensor_value_info("a", T.BFLOAT16, [2, 3])
    proto = _model([h.make_node("Concat", ["a", "a"], ["y"], axis=1)], [a],
                   [h.make_tensor_value_info("y", T.BFLOAT16, None)], opset=13)  # fmt: skip
    with pytest.raises(ConversionError, match="bfloat16"):
        convert_down(proto, 12)


def test_missing_adapter_names_the_op(monkeypatch):
    monkeypatch.setattr("deform_onnx.conversion.ADAPTERS", {})
    x = h.make_tensor_value_info("x", T.FLOAT, [2, 6])
    outs = [h.make_tensor_value_info(f"y{i}", T.FLOAT, None) for i in range(2)]
    proto = _model([h.make_node("Split", ["x"], ["y0", "y1"], axis=1, num_outputs=2)], [x], outs)
    with pytest.raises(ConversionError, match=r"no adapter for Split \(from opset 18\).*from opset 18 to 17"):
        convert_down(proto, 17)


def test_one_adapter_per_step():
    assert ("Split", 18) in ADAPTERS and ADAPTERS[("Split", 18)].name == "split_18_17"
    with pytest.raises(ValueError, match="duplicate down-conversion adapter for Split from opset 18"):
        register("Split", 18, "again")(lambda node, tape, target: [])
