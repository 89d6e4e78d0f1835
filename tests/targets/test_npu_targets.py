"""NPU targets ``rknn``, ``qnn``, ``hailo`` and the GridSample rule of target ``webgpu`` (issue 36 item 3).

Each target exports the same small DCNv2 layer (case c25) once (module-scoped); the tests read the written
graph independently of the rules' code (op types, opset, GridSample modes and ranks) for the form the
runtime mishandles, and run the file in ONNX Runtime against torchvision on the same tensors. Planted
faults (a graph in the faulty form) must be found by the target's rules and refused.

Sources (read, not run here: no RKNN toolkit, Qualcomm device, Hailo compiler or browser):
RKNN-Toolkit2's op table v2.1.0 (GridSample, DeformConv, GatherND, Sum "Not Supported"; opset 19),
airockchip/rknn_model_zoo#366 (GridSample on the CPU); the QNN EP's operator list (GridSample, no
DeformConv, no dynamic shapes) and HTP tests (GridSample-20 at opset 20); hailo_model_zoo#161 (the
parser refuses RT-DETR's sampling); microsoft/onnxruntime#32275 (WebGPU GridSample wrong in RT-DETR
decoders, no release known fixed).
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import helper

import deform_onnx
from deform_onnx.targets import resolve_target, violations
from deform_onnx.targets.repairs import sum_as_add
from util import DeformLayer, assert_close, case_config, make_inputs, op_types, reference, run_ort

CFG = case_config("c25")


@pytest.fixture(scope="module")
def layer_inputs():
    layer = DeformLayer(CFG).eval()
    inputs = make_inputs(CFG)
    return layer, inputs, reference(layer, inputs)


def _export(layer_inputs, path=None, **kw) -> tuple[onnx.ModelProto, bytes]:
    layer, inputs, _ = layer_inputs
    out = io.BytesIO() if path is None else path
    deform_onnx.export(layer, tuple(inputs.values()), out, input_names=list(inputs), **kw)
    data = out.getvalue() if path is None else path.read_bytes()
    return onnx.load_from_string(data), data


@pytest.fixture(scope="module")
def files(layer_inputs):
    """One export per target: ``{name: (proto, bytes)}`` (hailo with force=True: the form it would write)."""
    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in ("rknn", "qnn", "webgpu"):
            out[name] = _export(layer_inputs, target=name)
        out["hailo"] = _export(layer_inputs, target="hailo", force=True)
    out["hailo warnings"] = [str(w.message) for w in caught if "'hailo'" in str(w.message)]
    return out


def _opset(proto: onnx.ModelProto) -> int:
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


def _matches(layer_inputs, data: bytes, what: str) -> None:
    _, inputs, want = layer_inputs
    assert_close(run_ort(data, inputs), want, what=what)


# -- rknn ----------------------------------------------------------------------------------------------
def test_rknn_file_has_no_op_rknn_lacks_and_matches(layer_inputs, files):
    proto, data = files["rknn"]
    ops = set(op_types(proto))
    assert _opset(proto) == 17 and "Gather" in ops
    assert not ops & {"GridSample", "DeformConv", "GatherND", "Sum", "IsNaN", "Range"}, ops
    _matches(layer_inputs, data, "target rknn")


def test_rknn_rule_finds_sum_and_gridsample(layer_inputs):
    """The plain gather form holds Sum (RKNN: Not Supported): the rule names it; the target's repair removes it."""
    plain, _ = _export(layer_inputs, method="gather", opset_version=17)
    assert "Sum" in op_types(plain), "premise: the gather form writes Sum"
    found = violations(plain, resolve_target("rknn").rules)
    assert any(v.startswith("rknn ops") and "Sum" in v for v in found), found
    grid, _ = _export(layer_inputs, method="grid_sample", opset_version=17)
    found = violations(grid, resolve_target("rknn").rules)
    assert any(v.startswith("no GridSample") for v in found) and any("GridSample" in v for v in found), found


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"method": "grid_sample"}, r"'rknn' mishandles grid_sample.*rknn_model_zoo#366"),
        ({"opset_version": 20}, r"'rknn' mishandles opset outside 12 to 19"),
        ({"opset_version": 11, "dynamo": False}, r"'rknn' mishandles opset outside 12 to 19"),
        ({"method": "native", "opset_version": 19}, r"'rknn' mishandles native"),
    ],
)
def test_rknn_refuses_what_it_cannot_convert(layer_inputs, tmp_path, kw, match):
    path = tmp_path / "no.onnx"
    with pytest.raises(ValueError, match=match) as info:
        _export(layer_inputs, path, target="rknn", **kw)
    assert "\n" not in str(info.value) and not path.exists()


def test_sum_as_add_keeps_values():
    """Sum of 3 broadcast inputs and of 1 input, rewritten: Add / Identity only, the same values in ONNX Runtime."""
    a, b, c = (
        helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s)
        for n, s in (("a", [2, 3]), ("b", [3]), ("c", [2, 1]))
    )
    y, z = (helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in (("y", [2, 3]), ("z", [3])))
    graph = helper.make_graph(
        [helper.make_node("Sum", ["a", "b", "c"], ["y"], name="s3"), helper.make_node("Sum", ["b"], ["z"])],
        "g", [a, b, c], [y, z],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {
        n: np.random.default_rng(0).standard_normal(s).astype(np.float32)
        for n, s in (("a", (2, 3)), ("b", (3,)), ("c", (2, 1)))
    }
    import onnxruntime as ort

    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert sum_as_add(model) == ["Sum written as Add on 2 node(s)"]
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ["Add", "Add", "Identity"]
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6)
    assert sum_as_add(model) == []


def test_lower_native_file_for_rknn_and_hailo(layer_inputs):
    """lower(): a DeformConv file becomes RKNN's form (no Sum, no GatherND) and matches; for hailo it is refused."""
    native, _ = _export(layer_inputs, method="native", opset_version=19)
    proto = deform_onnx.lower(native, target="rknn")
    ops = set(op_types(proto))
    assert _opset(proto) == 19 and "Gather" in ops and not ops & {"DeformConv", "GridSample", "GatherND", "Sum"}, ops
    _matches(layer_inputs, proto.SerializeToString(), "lower --target rknn")
    with pytest.raises(ValueError, match=r"target 'hailo': no data-dependent gather"):
        deform_onnx.lower(native, target="hailo")


# -- qnn -----------------------------------------------------------------------------------------------
def test_qnn_file_is_gridsample_20_without_deformconv_and_matches(layer_inputs, files):
    proto, data = files["qnn"]
    assert _opset(proto) == 20 and "DeformConv" not in op_types(proto)
    inferred = onnx.shape_inference.infer_shapes(proto).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in (*inferred.input, *inferred.value_info)}
    modes = [(next(a.s.decode() for a in n.attribute if a.name == "mode"), ranks[n.input[0]])
             for n in proto.graph.node if n.op_type == "GridSample"]  # fmt: skip
    assert modes and set(modes) == {("linear", 4)}, modes
    assert all(d.HasField("dim_value") for v in proto.graph.input for d in v.type.tensor_type.shape.dim)
    _matches(layer_inputs, data, "target qnn")


def test_qnn_refuses_native_and_dynamic_shapes(layer_inputs, tmp_path):
    with pytest.raises(ValueError, match=r"'qnn' mishandles native.*QNN EP"):
        _export(layer_inputs, tmp_path / "n.onnx", target="qnn", method="native")
    path = tmp_path / "d.onnx"
    dyn = {"x": {0: "n"}, "offset": {0: "n"}, "mask": {0: "n"}}
    with pytest.raises(ValueError, match=r"target 'qnn': static shapes"):
        _export(layer_inputs, path, target="qnn", dynamic_axes=dyn)
    assert not path.exists()


# -- hailo ---------------------------------------------------------------------------------------------
def test_hailo_refuses_deformable_sampling_before_export(layer_inputs, tmp_path):
    path = tmp_path / "h.onnx"
    with pytest.raises(deform_onnx.ExportError, match=r"'hailo' cannot run a deformable sampling model.*#161") as info:
        _export(layer_inputs, path, target="hailo")
    assert "\n" not in str(info.value) and not path.exists()


def test_hailo_forced_file_is_gather_13_flagged_and_right(layer_inputs, files):
    """force=True writes the gather form at 13 (unverified on Hailo): the rule names its data-dependent gathers."""
    proto, data = files["hailo"]
    assert _opset(proto) == 13 and not set(op_types(proto)) & {"GridSample", "DeformConv"}
    assert any("no data-dependent gather" in w for w in files["hailo warnings"]), files["hailo warnings"]
    _matches(layer_inputs, data, "target hailo (forced)")


def test_data_dependent_gather_rule_reads_where_indices_come_from():
    """Indices from a float input (Floor, Cast) are data-dependent; constant or integer-input indices are not."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 3])
    p = helper.make_tensor_value_info("p", onnx.TensorProto.FLOAT, [2])
    i = helper.make_tensor_value_info("i", onnx.TensorProto.INT64, [2])
    outs = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("y1", "y2", "y3")]
    nodes = [
        helper.make_node("Floor", ["p"], ["pf"]),
        helper.make_node("Cast", ["pf"], ["pi"], to=onnx.TensorProto.INT64),
        helper.make_node("Gather", ["x", "pi"], ["y1"], name="sampled"),
        helper.make_node("Gather", ["x", "k"], ["y2"], name="constant"),
        helper.make_node("Gather", ["x", "i"], ["y3"], name="embedding"),
    ]
    k = helper.make_tensor("k", onnx.TensorProto.INT64, [2], [0, 2])
    model = helper.make_model(helper.make_graph(nodes, "g", [x, p, i], outs, [k]))
    found = violations(model, ("no data-dependent gather",))
    assert len(found) == 1 and "1 gather node(s)" in found[0] and "sampled" in found[0], found
    del model.graph.node[:3]
    assert violations(model, ("no data-dependent gather",)) == []


def test_hailo_exports_a_model_without_sampling():
    """The refusal is the model's sampling, not the target: a plain conv exports for hailo."""
    conv = torch.nn.Conv2d(2, 3, 3).eval()
    buf = io.BytesIO()
    deform_onnx.export(conv, (torch.randn(1, 2, 6, 6),), buf, target="hailo")
    assert "Conv" in op_types(onnx.load_from_string(buf.getvalue()))


# -- webgpu: gather while #32275 has no known fixed release --------------------------------------------
def test_webgpu_file_has_no_gridsample_and_matches(layer_inputs, files):
    proto, data = files["webgpu"]
    ops = set(op_types(proto))
    assert "GridSample" not in ops and "DeformConv" not in ops and "Gather" in ops
    _matches(layer_inputs, data, "target webgpu")


def test_webgpu_refuses_gridsample_naming_32275(layer_inputs, tmp_path):
    with pytest.raises(ValueError, match=r"'webgpu>=1.26' mishandles grid_sample.*onnxruntime#32275"):
        _export(layer_inputs, tmp_path / "w.onnx", target="webgpu>=1.26", method="grid_sample")


def _range_model(width) -> onnx.ModelProto:
    """y = x + arange(x.shape[1]) with the arange computed from Shape (as lower() writes base grids)."""
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, width])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, width])
    inits = [helper.make_tensor(n, onnx.TensorProto.INT64, [], [v]) for n, v in (("one", 1), ("zero", 0))]
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["w"], axis=0),
        helper.make_node("Range", ["zero", "w", "one"], ["r"], name="grid"),
        helper.make_node("Cast", ["r"], ["rf"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Add", ["x", "rf"], ["y"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    return model


def test_range_as_constant_folds_static_ranges_only():
    import onnxruntime as ort

    from deform_onnx.targets.repairs import range_as_constant

    model = _range_model(5)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32)}
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]  # noqa: E731
    want = run(model)
    assert range_as_constant(model) == ["Range written as a constant on 1 node(s)"]
    assert "Range" not in op_types(model) and "Shape" not in op_types(model)
    np.testing.assert_array_equal(run(model), want)
    dynamic = _range_model("w")
    assert range_as_constant(dynamic) == [] and "Range" in op_types(dynamic)
