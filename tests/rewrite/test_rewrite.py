"""``deform_onnx.lower``: rewriting DeformConv and mmcv nodes of existing ONNX files.

Cases c04 and c09 of ``shared/cases/cases.json`` (the OpenVINO halves of c04
and c12 are in test_openvino.py). Expected outputs are torchvision's
``deform_conv2d`` on the same tensors (through ``util.DeformLayer``), or the
original model on ONNX Runtime's native DeformConv kernel when the test is
about keeping a model's behaviour.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import deform_onnx
from deform_onnx.rewrite import ModelFileError, lower_file
from models import mmcv_model, two_node_model
from util import (
    UNEVEN,
    Config,
    DeformLayer,
    assert_close,
    case_config,
    default_opset,
    make_inputs,
    op_types,
    reference,
    run_ort,
)

F = TensorProto.FLOAT


def run_feeds(model: onnx.ModelProto, feeds: dict[str, torch.Tensor]) -> np.ndarray:
    """ONNX Runtime CPU on a proto with feeds named as the graph inputs."""
    return run_ort(model.SerializeToString(), feeds)


def standard_only(model: onnx.ModelProto) -> None:
    """Every node is a standard ONNX op other than DeformConv, and the model is valid."""
    onnx.checker.check_model(model, full_check=True)
    assert all(n.domain in ("", "ai.onnx") for n in model.graph.node), [(n.domain, n.op_type) for n in model.graph.node]
    assert "DeformConv" not in op_types(model)


# -- dynamo-exported DeformConv models ----------------------------------------------------
def test_c04_lower_matches_reference(c04_native):
    path, layer, inputs = c04_native
    lowered = deform_onnx.lower(path)
    standard_only(lowered)
    assert default_opset(lowered) == 19
    assert "GridSample" in op_types(lowered)  # auto at 19
    assert_close(run_feeds(lowered, inputs), reference(layer, inputs), what="c04 lowered")


@pytest.mark.parametrize("opset, lowering_op", [(17, "GridSample"), (16, "GridSample"), (11, "Gather")])
def test_dynamo_native_lowered_at_opset_matches_original(c12_native, opset, lowering_op):
    path, layer, inputs = c12_native
    lowered = deform_onnx.lower(path, opset=opset)
    standard_only(lowered)
    assert default_opset(lowered) == opset
    assert lowering_op in op_types(lowered)
    original = run_ort(path.read_bytes(), inputs)  # ORT's native DeformConv kernel
    got = run_feeds(lowered, inputs)
    assert_close(got, original, what=f"lowered@{opset} vs original on ORT")
    assert_close(got, reference(layer, inputs), what=f"lowered@{opset} vs torchvision")


@pytest.mark.parametrize("method", ["native", "grid_sample", "gather"])
def test_lower_each_method_keeps_opset(c12_native, method):
    path, layer, inputs = c12_native
    lowered = deform_onnx.lower(path, method=method)
    onnx.checker.check_model(lowered, full_check=True)
    assert default_opset(lowered) == 20
    assert ("DeformConv" in op_types(lowered)) == (method == "native")
    assert_close(run_feeds(lowered, inputs), reference(layer, inputs), what=method)


def test_deformconv_in_too_old_opset_file_is_rescued():
    """The dynamo exporter at opset 17/18 writes DeformConv into an opset-17 model (invalid); lower() fixes it."""
    cfg = Config(C_in=4, C_out=4, H=6, W=7, offset_groups=2, mask=True, bias=True)
    layer = DeformLayer(cfg)
    inputs = make_inputs(cfg)
    node = helper.make_node(
        "DeformConv", ["x", "w", "offset", "b", "mask"], ["y"], name="dc", pads=[1, 1, 1, 1], offset_group=2
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(k, F, list(v.shape)) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", F, [cfg.N, cfg.C_out, *cfg.out_hw()])],
        [
            numpy_helper.from_array(layer.conv.weight.detach().numpy(), "w"),
            numpy_helper.from_array(layer.conv.bias.detach().numpy(), "b"),
        ],
    )
    invalid = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(invalid, full_check=True)
    lowered = deform_onnx.lower(invalid)
    standard_only(lowered)
    assert default_opset(lowered) == 17
    assert_close(run_feeds(lowered, inputs), reference(layer, inputs), what="rescued opset-17 file")


# -- mmcv nodes ------------------------------------------------------------------------------
def test_c09_mmcv_modulated_lowers_to_standard_ops():
    cfg = case_config("c09")
    proto, layer, feeds = mmcv_model(cfg, modulated=True)
    lowered = deform_onnx.lower(proto)
    standard_only(lowered)
    assert "mmcv" not in {o.domain for o in lowered.opset_import}
    assert default_opset(lowered) == 13
    assert_close(
        run_feeds(lowered, feeds), reference(layer, dict(zip(("x", "offset", "mask"), feeds.values()))), what="c09"
    )


def test_a_plugin_output_without_shape_gets_its_shape_when_lowered():
    """mmcv's symbolic types its node's output by rank at most; lowered to standard ops, the output's shape is
    known and written (onnx2tf refused an output without one: "Output tensors of a Functional model must be the
    output of a TensorFlow `Layer` ... Found: 0.0"); values inside the graph keep their value_info."""
    cfg = case_config("c09")
    proto, layer, feeds = mmcv_model(cfg, modulated=True)
    proto.graph.output[0].type.tensor_type.ClearField("shape")
    lowered = deform_onnx.lower(proto)
    dims = [d.dim_value for d in lowered.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [cfg.N, cfg.C_out, *cfg.out_hw()] and len(lowered.graph.value_info) == len(proto.graph.value_info)
    assert_close(
        run_feeds(lowered, feeds), reference(layer, dict(zip(("x", "offset", "mask"), feeds.values()))), what="c09"
    )


MMCV_KINDS = [
    # (modulated, bias, domain)
    (False, False, "mmcv"),
    (True, True, "mmcv"),
    (True, False, "mmcv"),
    (False, False, "mmdeploy"),
    (True, True, "mmdeploy"),
]


@pytest.mark.parametrize("modulated, bias, domain", MMCV_KINDS)
def test_mmcv_nodes_lower_and_match_torchvision(modulated, bias, domain):
    # Uneven stride/padding/dilation and groups catch a swapped (h, w) or a layout slip.
    cfg = UNEVEN.at(mask=modulated, bias=bias)
    proto, layer, feeds = mmcv_model(cfg, modulated=modulated, domain=domain)
    lowered = deform_onnx.lower(proto)
    standard_only(lowered)
    assert domain not in {o.domain for o in lowered.opset_import}
    want = reference(layer, dict(zip(("x", "offset", "mask"), feeds.values())))
    assert_close(run_feeds(lowered, feeds), want, what=f"{domain} modulated={modulated} bias={bias}")


def test_mmdeploy_four_entry_padding():
    cfg = Config(C_in=4, C_out=4, H=6, W=6, mask=False, bias=False)
    proto, layer, feeds = mmcv_model(cfg, modulated=False, domain="mmdeploy")
    attr = next(a for a in proto.graph.node[0].attribute if a.name == "padding")
    attr.ints[:] = [1, 1, 1, 1]  # mmdeploy writes [ph, ph, pw, pw]
    lowered = deform_onnx.lower(proto)
    assert_close(
        run_feeds(lowered, feeds), reference(layer, dict(zip(("x", "offset"), feeds.values()))), what="4-entry padding"
    )
    # [ph, ph, pw, pw] with ph != pw: padding (1, 0), as mmdeploy's symbolic wrote it.
    cfg10 = cfg.at(padding=(1, 0))
    proto, layer, feeds = mmcv_model(cfg10, modulated=False, domain="mmdeploy")
    attr = next(a for a in proto.graph.node[0].attribute if a.name == "padding")
    attr.ints[:] = [1, 1, 0, 0]
    lowered = deform_onnx.lower(proto)
    assert_close(
        run_feeds(lowered, feeds), reference(layer, dict(zip(("x", "offset"), feeds.values()))), what="[1, 1, 0, 0]"
    )
    attr.ints[:] = [1, 0, 1, 0]  # means (1, 0) to mmdeploy's kernels but not to its symbolic
    with pytest.raises(ValueError, match="dcn.*ambiguous"):
        deform_onnx.lower(proto)


def two_node_reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """torchvision on the same tensors and the same graph."""
    from torchvision.ops import deform_conv2d

    w = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in model.graph.initializer}
    xr = torch.relu(torch.from_numpy(x))
    off = torch.nn.functional.conv2d(xr, w["w_off"], padding=1)
    d1 = deform_conv2d(xr, off, w["w1"], w["b1"], padding=1)
    # groups=2 is implied by the weight's shape; offset groups by the offset's channels.
    d2 = deform_conv2d(xr, off, w["w2"], None, padding=1)
    return (d1 + d2).numpy()


def assert_untouched(before: onnx.ModelProto, after: onnx.ModelProto, replaced: set[str]) -> None:
    """Everything but the replaced nodes is byte-for-byte what it was."""
    old = {n.name: n.SerializeToString() for n in before.graph.node}
    new = {n.name: n.SerializeToString() for n in after.graph.node}
    for name, data in old.items():
        if name in replaced:
            assert name not in new
        else:
            assert new.get(name) == data, f"node {name} changed"
    old_init = {t.name: numpy_helper.to_array(t).tobytes() for t in before.graph.initializer}
    new_init = {t.name: numpy_helper.to_array(t).tobytes() for t in after.graph.initializer}
    assert {k: new_init.get(k) for k in old_init} == old_init
    assert [v.SerializeToString() for v in after.graph.input] == [v.SerializeToString() for v in before.graph.input]
    assert [v.SerializeToString() for v in after.graph.output] == [v.SerializeToString() for v in before.graph.output]
    assert [v.SerializeToString() for v in after.graph.value_info] == [
        v.SerializeToString() for v in before.graph.value_info
    ]
    assert after.metadata_props == before.metadata_props
    assert (after.producer_name, after.doc_string) == (before.producer_name, before.doc_string)
    # Case c25: the IR version written is the lowest the opsets need (onnx's own table).
    assert after.ir_version == onnx.helper.find_min_ir_version_for(after.opset_import, ignore_unknown=True)
    assert {(o.domain, o.version) for o in after.opset_import} == {(o.domain, o.version) for o in before.opset_import}


def test_two_nodes_sharing_input_keep_everything_else():
    model = two_node_model()
    before = model.SerializeToString()
    lowered = deform_onnx.lower(model)
    assert model.SerializeToString() == before, "the input ModelProto must not be modified"
    standard_only(lowered)
    assert_untouched(model, lowered, {"dc1", "dc2"})
    x = np.random.default_rng(1).standard_normal((2, 6, 8, 9)).astype(np.float32)
    feeds = {"x": torch.from_numpy(x)}
    assert_close(run_feeds(lowered, feeds), run_feeds(model, feeds), what="vs ORT native")
    assert_close(run_feeds(lowered, feeds), two_node_reference(model, x), what="vs torchvision")


def test_a_static_map_without_value_info_takes_the_grid_sample_form():
    """The DeformConv nodes' input is a Relu's output with no value_info (as a TorchScript export writes it): lower
    types the file first, so the static 2x6x8x9 map takes the grid_sample form asked for, not the gather sampler
    that a map of unknown size takes (and a target's class form sees the batch)."""
    model = two_node_model(batch=2)
    assert "xr" not in {v.name for v in model.graph.value_info}
    lowered = deform_onnx.lower(model, method="grid_sample")
    standard_only(lowered)
    assert "GridSample" in op_types(lowered)
    assert_untouched(model, lowered, {"dc1", "dc2"})  # the shapes inferred to pick the form are not written
    x = np.random.default_rng(2).standard_normal((2, 6, 8, 9)).astype(np.float32)
    assert_close(run_feeds(lowered, {"x": torch.from_numpy(x)}), two_node_reference(model, x), what="vs torchvision")


def test_external_data_is_kept(tmp_path):
    model = two_node_model()
    src_dir, dst_dir = tmp_path / "src", tmp_path / "dst"
    src_dir.mkdir()
    src = src_dir / "m.onnx"
    # onnx.save moves the tensors of the proto it saves to external data: save a copy.
    onnx.save(
        two_node_model(),
        str(src),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    src_bytes = {p.name: p.read_bytes() for p in src_dir.iterdir()}
    report = lower_file(src, dst_dir / "out.onnx")
    assert [r.node for r in report.replaced] == ["dc1", "dc2"]
    assert {p.name: p.read_bytes() for p in src_dir.iterdir()} == src_bytes, "input files must not change"
    assert sorted(p.name for p in dst_dir.iterdir()) == ["out.onnx", "out.onnx.data"]
    raw = onnx.load(str(dst_dir / "out.onnx"), load_external_data=False)
    assert any(t.data_location == TensorProto.EXTERNAL for t in raw.graph.initializer)
    lowered = onnx.load(str(dst_dir / "out.onnx"))
    standard_only(lowered)
    assert_untouched(onnx.load(str(src)), lowered, {"dc1", "dc2"})
    x = np.random.default_rng(2).standard_normal((1, 6, 8, 9)).astype(np.float32)
    got = run_ort(str(dst_dir / "out.onnx"), {"x": torch.from_numpy(x)})
    assert_close(got, two_node_reference(model, x), what="external data")


def test_in_place_with_external_data(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(two_node_model(), str(src), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    lower_file(src, src)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data"]
    lowered = onnx.load(str(src))
    standard_only(lowered)
    x = np.random.default_rng(3).standard_normal((1, 6, 8, 9)).astype(np.float32)
    assert_close(run_ort(str(src), {"x": torch.from_numpy(x)}), two_node_reference(lowered, x), what="in place")


def test_model_without_deformable_nodes_comes_back_unchanged(tmp_path):
    model = two_node_model()
    lowered = deform_onnx.lower(model)
    assert deform_onnx.lower(lowered).SerializeToString() == lowered.SerializeToString()
    path = tmp_path / "plain.onnx"
    onnx.save(lowered, str(path))
    assert deform_onnx.lower(path).SerializeToString() == lowered.SerializeToString()
    report = lower_file(path, path)
    assert not report.changed and path.read_bytes() == lowered.SerializeToString()


# -- errors ---------------------------------------------------------------------------------------
def _single(node: onnx.NodeProto, weight_shape, opset: int = 19, weight_as_input: bool = False) -> onnx.ModelProto:
    inputs = [
        helper.make_tensor_value_info("x", F, [1, 4, 6, 6]),
        helper.make_tensor_value_info("offset", F, [1, 18, 4, 4]),
    ]
    inits = []
    if weight_as_input:
        inputs.append(helper.make_tensor_value_info("w", F, weight_shape))
    else:
        inits.append(numpy_helper.from_array(np.zeros(weight_shape, np.float32), "w"))
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", F, [1, 4, 4, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("mmcv", 1)])


@pytest.mark.parametrize(
    "node, weight_shape, kwargs, match",
    [
        (
            helper.make_node("DeformConv", ["x", "w", "offset"], ["y"], name="n1", foo=1),
            [4, 4, 3, 3],
            {},
            "n1.*unknown attribute.*foo",
        ),
        (
            helper.make_node("DeformConv", ["x", "w", "offset"], ["y"], name="n2", pads=[0] * 6),
            [4, 4, 3, 3, 3],
            {},
            "n2.*2-D",
        ),
        (helper.make_node("DeformConv", ["x", "w", "offset"], ["y"], name="n3"), [4, 4, 3, 3, 3], {}, "n3.*2-D"),
        (
            helper.make_node("DeformConv", ["x", "w", "offset"], ["y"], name="n4", pads=[1, 1, 0, 0]),
            [4, 4, 3, 3],
            {},
            "n4.*offset height 4 does not match the output height 5",
        ),
        (
            helper.make_node("DeformConv", ["x", "w", "offset"], ["y"], name="n5"),
            ["Co", 4, 3, 3],
            {"weight_as_input": True},
            "n5.*weight's shape is not static",
        ),
        (
            helper.make_node("DeformConv", ["x", "w", "offset"], ["y"], name="n6", kernel_shape=[5, 5]),
            [4, 4, 3, 3],
            {},
            r"n6.*kernel \(5, 5\) does not match the weight",
        ),
        (
            helper.make_node("MMCVDeformConv2d", ["x", "offset", "w"], ["y"], name="n7", domain="mmcv", bias=1),
            [4, 4, 3, 3],
            {},
            "n7.*bias",
        ),
        (
            helper.make_node("DeformConv", ["x", "w", "offset"], ["y"], name="n8", group=3),
            [4, 4, 3, 3],
            {},
            "n8.*groups",
        ),
    ],
)
def test_bad_nodes_raise_naming_the_node(node, weight_shape, kwargs, match):
    with pytest.raises(ValueError, match=match):
        deform_onnx.lower(_single(node, weight_shape, **kwargs))


def test_opset_too_low_for_method_names_the_fix():
    model = _single(
        helper.make_node("MMCVDeformConv2d", ["x", "offset", "w"], ["y"], name="n", domain="mmcv"),
        [4, 4, 3, 3],
        opset=13,
    )
    with pytest.raises(ValueError, match="opset 13.*--opset"):
        deform_onnx.lower(model, method="grid_sample")
    lowered = deform_onnx.lower(model, method="grid_sample", opset=16)
    onnx.checker.check_model(lowered, full_check=True)
    assert default_opset(lowered) == 16 and "GridSample" in op_types(lowered)


def test_bad_path_and_bad_method(tmp_path):
    with pytest.raises(ModelFileError, match="no such file"):
        deform_onnx.lower(tmp_path / "missing.onnx")
    (tmp_path / "text.onnx").write_text("not a model\n")
    with pytest.raises(ModelFileError):
        deform_onnx.lower(tmp_path / "text.onnx")
    with pytest.raises(ValueError, match="unknown method"):
        deform_onnx.lower(two_node_model(), method="bilinear")


def test_node_in_subgraph_with_constant_weight():
    """A DeformConv inside an If branch whose weight comes from a Constant node of the main graph."""
    rng = np.random.default_rng(4)
    weight = (rng.standard_normal((4, 4, 3, 3)) / 6).astype(np.float32)
    then_graph = helper.make_graph(
        [helper.make_node("DeformConv", ["x", "wc", "offset"], ["yt"], name="inner", pads=[1, 1, 1, 1])],
        "then",
        [],
        [helper.make_tensor_value_info("yt", F, [1, 4, 5, 5])],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["ye"])],
        "else",
        [],
        [helper.make_tensor_value_info("ye", F, [1, 4, 5, 5])],
    )
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["wc"], name="weight", value=numpy_helper.from_array(weight)),
            helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_graph, else_branch=else_graph),
        ],
        "g",
        [
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", F, [1, 4, 5, 5]),
            helper.make_tensor_value_info("offset", F, [1, 18, 5, 5]),
        ],
        [helper.make_tensor_value_info("y", F, [1, 4, 5, 5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    lowered = deform_onnx.lower(model)
    onnx.checker.check_model(lowered, full_check=True)
    branch = next(a.g for a in lowered.graph.node[1].attribute if a.name == "then_branch")
    branch_ops = [n.op_type for n in branch.node]
    assert "DeformConv" not in branch_ops and "GridSample" in branch_ops
    x = torch.from_numpy(rng.standard_normal((1, 4, 5, 5)).astype(np.float32))
    offset = torch.from_numpy((rng.standard_normal((1, 18, 5, 5)) * 2).astype(np.float32))
    feeds = {"cond": torch.tensor(True), "x": x, "offset": offset}
    from torchvision.ops import deform_conv2d

    want = deform_conv2d(x, offset, torch.from_numpy(weight), padding=1).numpy()
    assert_close(run_feeds(lowered, feeds), want, what="If branch")


def test_failed_opset_conversion_names_the_lowest_reachable_opset():
    """onnx's converter has no BatchNormalization adapter below 15 (deform_onnx.conversion has 15->14, not
    below): the error says so and names 14, the lowest opset lower() reaches."""
    inits = [numpy_helper.from_array(np.ones(4, np.float32), n) for n in ("s", "b", "m", "v")]
    graph = helper.make_graph(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
        "bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    with pytest.raises(
        ValueError,
        match=r"no adapter from version 15 for BatchNormalization\); the lowest opset this model converts to is 14",
    ):
        deform_onnx.lower(model, opset=11)
    assert next(o.version for o in deform_onnx.lower(model, opset=14).opset_import if o.domain == "") == 14
