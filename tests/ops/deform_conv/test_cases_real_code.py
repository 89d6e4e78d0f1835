"""Cases c17-c21 (real-code faults): wide maps, run-time weights, offset sizes, asymmetric pads,
OpenVINO's own node. Every expected value comes from torchvision, ONNX Runtime's own
``DeformConv`` kernel on the original file, or OpenVINO on the original file."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
import torch
import torchvision
from onnx import TensorProto, helper, numpy_helper

import deform_onnx
from util import Config, DeformLayer, assert_close, case_config, check, export, reference, run_ort

#: (method, opset) per lowering: native at its floor, the standard-op ones at the default opset.
LOWERINGS = (("native", 19), ("grid_sample", 17), ("gather", 17))
STANDARD = LOWERINGS[1:]


def _export(layer, inputs, method, opset, dynamic=False) -> bytes:
    deform_onnx.register(method)
    try:
        return check(export(layer, inputs, opset, dynamic=dynamic)).SerializeToString()
    finally:
        deform_onnx.unregister()


def wide_inputs(
    cfg: Config, scale: float, seed: int = 1, H=None, W=None, dtype=torch.float32
) -> dict[str, torch.Tensor]:
    """c17's inputs: ``x = randn``, offsets ``scale * tanh(randn)`` (up to ``scale`` px), ``mask = rand``."""
    H, W = H or cfg.H, W or cfg.W
    ho, wo = cfg.out_hw(H, W)
    gen = torch.Generator().manual_seed(seed)
    taps = cfg.kernel[0] * cfg.kernel[1]
    inputs = {
        "x": torch.randn(cfg.N, cfg.C_in, H, W, generator=gen),
        "offset": torch.tanh(torch.randn(cfg.N, 2 * cfg.offset_groups * taps, ho, wo, generator=gen)) * scale,
        "mask": torch.rand(cfg.N, cfg.offset_groups * taps, ho, wo, generator=gen),
    }
    return {k: v.to(dtype) for k, v in inputs.items()}


# -- c17: precision at any width -------------------------------------------------------------------
@pytest.mark.parametrize("W, scale", [(4096, 100.0), (16384, 300.0)])
@pytest.mark.parametrize("method, opset", LOWERINGS)
def test_c17_wide_map_float32(method, opset, W, scale):
    """Every method within 1e-4 of torchvision in float32 at widths 4096 and 16384, offsets up to 300 px."""
    cfg = case_config("c17").at(W=W)
    layer, inputs = DeformLayer(cfg), wide_inputs(cfg, scale)
    got = run_ort(_export(layer, inputs, method, opset), inputs)
    assert_close(got, reference(layer, inputs), what=f"{method}@{opset} W={W}")


@pytest.mark.parametrize("method, opset", LOWERINGS)
def test_c17_dynamic_export_made_small_run_wide(method, opset):
    """An export with dynamic N/H/W made at 8x32 stays exact at 6x4096 (the export-time check cannot see it)."""
    cfg = case_config("c17")
    layer = DeformLayer(cfg)
    data = _export(layer, wide_inputs(cfg, 100.0, H=8, W=32), method, opset, dynamic=True)
    wide = wide_inputs(cfg, 100.0, seed=2)
    assert_close(run_ort(data, wide), reference(layer, wide), what=f"{method}@{opset} dynamic, run at 6x4096")


@functools.cache
def _float16_errors(W: int, scale: float) -> tuple[dict[str, float], float]:
    """Max error against the float32 torchvision result of each standard-op lowering of the float16
    model, and the error float16 cannot avoid: torchvision in float32 on the float16-rounded
    inputs and weights, plus half an ulp of the largest output."""
    cfg = case_config("c17").at(W=W)
    layer32 = DeformLayer(cfg)
    inputs32 = wide_inputs(cfg, scale)
    want = reference(layer32, inputs32).astype(np.float64)
    layer16 = DeformLayer(cfg.at(dtype=torch.float16))
    inputs16 = {k: v.half() for k, v in inputs32.items()}
    rounded = reference(layer16.float(), {k: v.float() for k, v in inputs16.items()})
    layer16.half()
    floor = float(np.abs(rounded - want).max()) + float(np.abs(want).max()) * 2.0**-11
    errors = {}
    for method, opset in STANDARD:
        got = run_ort(_export(layer16, inputs16, method, opset), inputs16)
        assert got.dtype == np.float16
        errors[method] = float(np.abs(got.astype(np.float64) - want).max())
    return errors, floor


@pytest.mark.parametrize("W, scale", [(1024, 30.0), (4096, 100.0), (16384, 300.0)])
def test_c17_wide_map_float16(W, scale):
    """float16: no standard-op method worse than twice the best one, and none worse than twice the
    error float16 itself cannot avoid (rounded inputs and weights, rounded output)."""
    errors, floor = _float16_errors(W, scale)
    assert max(errors.values()) <= 2 * min(errors.values()), errors
    assert max(errors.values()) <= 2 * floor, (errors, floor)


# -- c18: weights computed at run time -------------------------------------------------------------
class OnesWeightSampler(torch.nn.Module):
    """An anchor-free head's sampling step: 1x1 deformable conv with a weight built in forward."""

    def forward(self, feat, offset):
        weight = feat.new_ones(feat.shape[1], 1, 1, 1)
        return torchvision.ops.deform_conv2d(feat, offset, weight)


class DynamicFilter(torch.nn.Module):
    """A 3x3 weight produced by a Linear layer from a code vector (a dynamic filter)."""

    def __init__(self, C: int):
        super().__init__()
        self.C = C
        self.make = torch.nn.Linear(4, C * C * 9)

    def forward(self, feat, offset, code):
        weight = self.make(code).view(self.C, self.C, 3, 3) / 10
        return torchvision.ops.deform_conv2d(feat, offset, weight, padding=1)


def _c18_model_and_inputs(kind: str, H: int, W: int, seed: int = 0):
    cfg = case_config("c18")
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(0)
    feat = torch.randn(cfg.N, cfg.C_in, H, W, generator=gen)
    if kind == "ones":
        offset = torch.randn(cfg.N, 2 * cfg.offset_groups, H, W, generator=gen) * cfg.offset_scale
        return OnesWeightSampler().eval(), {"feat": feat, "offset": offset}
    offset = torch.randn(cfg.N, 18, H, W, generator=gen) * cfg.offset_scale
    return DynamicFilter(cfg.C_in).eval(), {"feat": feat, "offset": offset, "code": torch.randn(4, generator=gen)}


@pytest.mark.parametrize("kind", ["ones", "dynamic_filter"])
@pytest.mark.parametrize("dynamo, opset", [(False, 11), (False, 17), (True, 17)])
def test_c18_run_time_weight_exports_dynamic(tmp_path, kind, dynamo, opset):
    """Valid models from both exporters with dynamic N/H/W that match torchvision at the export
    size (export's own check) and at a new size (1x8x17x6)."""
    from torch.export import Dim

    model, inputs = _c18_model_and_inputs(kind, 9, 13)
    names = list(inputs)
    spatial = {0: "N", 2: "H", 3: "W"}
    kwargs = dict(input_names=names, opset_version=opset, dynamo=dynamo)
    if dynamo:
        dims = {0: Dim("N"), 2: Dim("H"), 3: Dim("W")}
        kwargs["dynamic_shapes"] = {n: (dims if n != "code" else None) for n in names}
    else:
        kwargs["dynamic_axes"] = {n: spatial for n in names if n != "code"}
    path = tmp_path / "m.onnx"
    report = deform_onnx.export(model, tuple(inputs.values()), path, **kwargs)
    assert report.exporter == ("dynamo" if dynamo else "torchscript")
    _, new = _c18_model_and_inputs(kind, 17, 6, seed=1)
    got = run_ort(
        check(path.read_bytes()).SerializeToString(),
        dict(zip([i.name for i in onnx.load(path).graph.input], new.values())),
    )
    assert_close(got, reference(model, new), what=f"c18 {kind} at 1x8x17x6")


@pytest.mark.parametrize("method", ["native", "grid_sample", "gather"])
def test_c18_file_with_a_computed_weight_lowers(method):
    """A DeformConv whose weight is ConstantOfShape(Concat(Shape(x)[1], [1, 1, 1])), symbolic N/H/W:
    ``lower`` finds the weight's shape by shape inference and matches torchvision at two sizes."""
    import onnxruntime as ort

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
        helper.make_node("Concat", ["c", "ones3"], ["wshape"], axis=0),
        helper.make_node("ConstantOfShape", ["wshape"], ["W"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("DeformConv", ["x", "W", "offset"], ["y"], group=8, offset_group=8),
    ]
    graph = helper.make_graph(
        nodes, "c18", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, "H", "W"]),
                       helper.make_tensor_value_info("offset", TensorProto.FLOAT, ["N", 16, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, "H", "W"])],
        [numpy_helper.from_array(np.array([1], np.int64), "one"), numpy_helper.from_array(np.ones(3, np.int64), "ones3")],
    )  # fmt: skip
    lowered = deform_onnx.lower(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), method=method)
    session = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    for H, W in ((9, 13), (17, 6)):
        model, inputs = _c18_model_and_inputs("ones", H, W)
        (got,) = session.run(None, {"x": inputs["feat"].numpy(), "offset": inputs["offset"].numpy()})
        assert_close(got, reference(model, inputs), what=f"{method} {H}x{W}")


def test_kernel_size_unknowable_is_a_clear_error():
    """A weight of unknown shape, 9 taps (3x3? 1x9? 9x1?): the error names the fix."""
    from deform_onnx.ops.deform_conv.spec import DeformConvSpec

    with pytest.raises(ValueError, match="kernel size is unknown.*9 taps.*static shape"):
        DeformConvSpec.from_shapes((1, 8, 9, 9), None, (1, 18, 9, 9), groups=1, offset_groups=1)
    spec = DeformConvSpec.from_shapes((1, 8, 9, 9), None, (1, 16, 9, 9), groups=8, offset_groups=8, out_channels=8)
    assert spec.kernel == (1, 1) and spec.out_channels == 8 and spec.channels_per_group == 1


# -- c19: the output size is conv arithmetic ---------------------------------------------------------
def _c19_model(kind: str, opset: int) -> tuple[onnx.ModelProto, DeformLayer]:
    cfg = case_config("c19")
    layer = DeformLayer(cfg)
    w = numpy_helper.from_array(layer.conv.weight.detach().numpy(), "W")
    b = numpy_helper.from_array(layer.conv.bias.detach().numpy(), "B")
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", cfg.C_in, "H", "W"]),
        helper.make_tensor_value_info("offset", TensorProto.FLOAT, ["N", 18, "Ho", "Wo"]),
        helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["N", 9, "Ho", "Wo"]),
    ]
    if kind == "mmcv":
        node = helper.make_node("MMCVModulatedDeformConv2d", ["x", "offset", "mask", "W", "B"], ["y"], domain="mmcv",
                                stride=[1, 1], padding=[1, 1], dilation=[1, 1], groups=1, deform_groups=1)  # fmt: skip
        imports = [helper.make_opsetid("", opset), helper.make_opsetid("mmcv", 1)]
    else:
        node = helper.make_node(
            "DeformConv", ["x", "W", "offset", "B", "mask"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]
        )
        imports = [helper.make_opsetid("", opset)]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])
    return helper.make_model(helper.make_graph([node], "c19", inputs, [y], [w, b]), opset_imports=imports), layer


@pytest.mark.parametrize("kind", ["mmcv", "DeformConv"])
@pytest.mark.parametrize("method", ["native", "grid_sample", "gather"])
def test_c19_offset_of_the_wrong_size_fails_at_run_time(kind, method):
    """Symbolic N/H/W; offset and mask 20x20 for a 10x10 output: the lowered graph raises instead of
    returning a 20x20 output; with the right size it matches torchvision."""
    import onnxruntime as ort

    model, layer = _c19_model(kind, 19)
    lowered = deform_onnx.lower(model, method=method, opset=19)
    session = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, 10, 10, generator=gen)
    for size in (20, 5):
        bad = {
            "x": x,
            "offset": torch.randn(2, 18, size, size, generator=gen),
            "mask": torch.rand(2, 9, size, size, generator=gen),
        }
        with pytest.raises(Exception, match="Reshape|DeformConv|[Ss]hape"):
            session.run(None, {k: v.numpy() for k, v in bad.items()})
    good = {
        "x": x,
        "offset": torch.randn(2, 18, 10, 10, generator=gen) * 2,
        "mask": torch.rand(2, 9, 10, 10, generator=gen),
    }
    (got,) = session.run(None, {k: v.numpy() for k, v in good.items()})
    assert_close(got, reference(layer, good), what=f"c19 {kind} {method}")


def test_static_offset_size_mismatch_is_an_export_error():
    from deform_onnx.ops.deform_conv.spec import DeformConvSpec

    with pytest.raises(ValueError, match="offset height 20 does not match the output height 10"):
        DeformConvSpec.from_shapes((2, 8, 10, 10), (8, 8, 3, 3), (2, 18, 20, 10), padding=1)
    with pytest.raises(ValueError, match="mask width 7 does not match the output width 10"):
        DeformConvSpec.from_shapes((2, 8, 10, 10), (8, 8, 3, 3), (2, 18, 10, 10), (2, 9, 10, 7), padding=1)


# -- c20: asymmetric pads ------------------------------------------------------------------------------
@functools.cache
def _c20() -> tuple[onnx.ModelProto, dict[str, np.ndarray], np.ndarray]:
    """c20's DeformConv-19 (pads [0, 0, 1, 1], bias from a Constant node), inputs, and ONNX Runtime's
    own DeformConv output on it (the reference: torchvision has no asymmetric padding)."""
    import onnxruntime as ort

    cfg = case_config("c20")
    layer = DeformLayer(cfg)
    pads = [0, 0, 1, 1]
    ho = (cfg.H + 1 - 3) // cfg.stride[0] + 1
    wo = (cfg.W + 1 - 3) // cfg.stride[1] + 1
    gen = torch.Generator().manual_seed(1)
    feeds = {
        "x": torch.randn(cfg.N, cfg.C_in, cfg.H, cfg.W, generator=gen).numpy(),
        "offset": (torch.randn(cfg.N, 2 * cfg.offset_groups * 9, ho, wo, generator=gen) * cfg.offset_scale).numpy(),
        "mask": torch.rand(cfg.N, cfg.offset_groups * 9, ho, wo, generator=gen).numpy(),
    }
    nodes = [
        helper.make_node("Constant", [], ["B"], value=numpy_helper.from_array(layer.conv.bias.detach().numpy(), "B")),
        helper.make_node("DeformConv", ["x", "W", "offset", "B", "mask"], ["y"], name="dcn", pads=pads,
                         strides=list(cfg.stride), group=cfg.groups, offset_group=cfg.offset_groups, kernel_shape=[3, 3]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "c20", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])],
        [numpy_helper.from_array(layer.conv.weight.detach().numpy(), "W")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return model, feeds, want


@pytest.mark.parametrize("method", ["native", "grid_sample", "gather"])
def test_c20_asymmetric_pads_lower(method):
    import onnxruntime as ort

    model, feeds, want = _c20()
    assert want.shape == (1, 6, 5, 4)  # (10+0+1-3)//2+1, (9+0+1-3)//2+1
    lowered = deform_onnx.lower(model, method=method)
    onnx.checker.check_model(lowered, full_check=True)
    (got,) = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert_close(got, want, what=f"c20 {method}")


def test_c20_asymmetric_pads_openvino_extension():
    from deform_onnx.runtimes import openvino as dov

    model, feeds, want = _c20()
    compiled = dov.compile(model, device="CPU", precision="f32")
    (got,) = compiled(feeds).values()
    assert_close(np.asarray(got), want, what="c20 OpenVINO extension")


def test_asymmetric_pads_match_torchvision_on_a_padded_input():
    """pads [1, 2, 0, 1] == torchvision with padding 0 on the input zero-padded by (top 1, left 2,
    bottom 0, right 1): a corner in the band is a zero pixel either way, and every sampling point
    shifts by the begin pads. Checked for every method against torchvision."""
    import onnxruntime as ort

    gen = torch.Generator().manual_seed(5)
    x = torch.randn(1, 4, 7, 6, generator=gen)
    w = torch.randn(4, 4, 3, 3, generator=gen) / 6
    xp = torch.nn.functional.pad(x, (2, 1, 1, 0))
    offset = torch.randn(1, 18, xp.shape[2] - 2, xp.shape[3] - 2, generator=gen) * 2
    want = torchvision.ops.deform_conv2d(xp, offset, w).numpy()
    node = helper.make_node("DeformConv", ["x", "W", "offset"], ["y"], pads=[1, 2, 0, 1], kernel_shape=[3, 3])
    graph = helper.make_graph(
        [node], "asym", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
                         helper.make_tensor_value_info("offset", TensorProto.FLOAT, list(offset.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])], [numpy_helper.from_array(w.numpy(), "W")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    for method in ("native", "grid_sample", "gather"):
        lowered = deform_onnx.lower(model, method=method)
        (got,) = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x.numpy(), "offset": offset.numpy()}
        )
        assert_close(got, want, what=f"asymmetric pads {method}")


# -- c21: OpenVINO's own node ---------------------------------------------------------------------------
def _c21(mask: bool, scale: float) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    cfg = case_config("c21")
    gen = torch.Generator().manual_seed(7)
    ho, wo = cfg.out_hw()
    feeds = {
        "x": torch.randn(cfg.N, cfg.C_in, cfg.H, cfg.W, generator=gen).numpy(),
        "offset": (torch.randn(cfg.N, 2 * cfg.offset_groups * 9, ho, wo, generator=gen) * scale).numpy(),
    }
    if mask:
        feeds["mask"] = torch.rand(cfg.N, cfg.offset_groups * 9, ho, wo, generator=gen).numpy()
    w = (torch.randn(cfg.C_out, cfg.C_in, 3, 3, generator=gen) / 8).numpy()
    node = helper.make_node("DeformableConv2D", ["x", "offset", "W"] + (["mask"] if mask else []), ["y"],
                            domain="org.openvinotoolkit", strides=list(cfg.stride), pads=[*cfg.padding, *cfg.padding],
                            dilations=list(cfg.dilation), group=cfg.groups, deformable_groups=cfg.offset_groups)  # fmt: skip
    graph = helper.make_graph(
        [node], "c21", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])], [numpy_helper.from_array(w, "W")],
    )  # fmt: skip
    imports = [helper.make_opsetid("", 17), helper.make_opsetid("org.openvinotoolkit", 1)]
    return helper.make_model(graph, opset_imports=imports), feeds


@pytest.mark.parametrize("mask, scale", [(False, 2.0), (True, 2.0), (False, 0.3)])
@pytest.mark.parametrize("method", ["grid_sample", "gather"])
def test_c21_openvino_node_lowers_to_openvinos_numbers(method, mask, scale):
    """The lowered file runs on ONNX Runtime and matches plain OpenVINO on the original file."""
    import onnxruntime as ort
    import openvino as ov

    model, feeds = _c21(mask, scale)
    core = ov.Core()  # plain OpenVINO: its own frontend mapping of the node
    compiled = core.compile_model(
        core.read_model(model.SerializeToString(), b""), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    want = compiled(feeds)[0]
    lowered = deform_onnx.lower(model, method=method)
    assert {n.domain for n in lowered.graph.node} <= {"", "ai.onnx"}
    (got,) = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert_close(got, want, what=f"c21 {method}")


def test_c21_agrees_with_torchvision_inside_the_image():
    """Where every sample stays in [0, size-1] (interior outputs, small offsets) the two border
    rules agree, so the lowered OpenVINO node equals torchvision there."""
    import onnxruntime as ort

    model, feeds = _c21(False, 0.3)
    feeds["offset"] = np.clip(feeds["offset"], -0.45, 0.45)  # interior outputs then sample inside the image
    lowered = deform_onnx.lower(model, method="gather")
    (got,) = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    w = numpy_helper.to_array(model.graph.initializer[0])
    want = torchvision.ops.deform_conv2d(torch.from_numpy(feeds["x"]), torch.from_numpy(feeds["offset"]),
                                         torch.from_numpy(w), padding=1).numpy()  # fmt: skip
    assert_close(got[:, :, 2:-2, 2:-2], want[:, :, 2:-2, 2:-2], what="c21 interior vs torchvision")
    assert np.abs(got - want).max() > 1e-2  # and the border rules do differ at the edges


def test_c21_native_refuses_openvinos_border_rule():
    model, _ = _c21(False, 2.0)
    with pytest.raises(ValueError, match="OpenVINO's.*grid_sample' or 'gather"):
        deform_onnx.lower(model, method="native", opset=19)


def test_c17_default_export_of_a_4096_wide_map(tmp_path):
    """``deform_onnx.export(model, args, path)`` with no other argument on a 4096-wide map: written,
    verified against PyTorch by export itself, and within 1e-4 of torchvision when run here. Two rows of the
    case's six: the width is the case's rule (the rows only add bands of the same code, 6 -> 2)."""
    cfg = case_config("c17").at(H=2)
    layer, inputs = DeformLayer(cfg), wide_inputs(cfg, 100.0)
    path = tmp_path / "wide.onnx"
    report = deform_onnx.export(layer, tuple(inputs.values()), path)
    assert report.max_error is not None and report.max_error <= 1e-4
    got = run_ort(check(path.read_bytes()).SerializeToString(), inputs)
    assert_close(
        got, reference(layer, inputs), what=f"default export ({report.exporter}, {report.method}@{report.opset})"
    )


@pytest.mark.parametrize("kind", ["ones", "dynamic_filter"])
def test_c18_default_export(tmp_path, kind):
    """``deform_onnx.export(model, args, path)`` with no other argument on the run-time-weight models."""
    model, inputs = _c18_model_and_inputs(kind, 9, 13)
    path = tmp_path / "m.onnx"
    report = deform_onnx.export(model, tuple(inputs.values()), path)
    assert report.max_error is not None and report.max_error <= 1e-4
    feeds = dict(zip([i.name for i in onnx.load(path).graph.input], inputs.values()))
    assert_close(run_ort(check(path.read_bytes()).SerializeToString(), feeds), reference(model, inputs), what=kind)
