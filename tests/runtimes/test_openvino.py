"""OpenVINO: the conversion extension (native DeformConv / mmcv nodes on OpenVINO's kernel) and lowered files.

Cases c04 and c12 of ``shared/cases/cases.json``. Every model is compiled at
inference precision f32 (OpenVINO's CPU default may be bf16); expected values
are torchvision's ``deform_conv2d`` on the same tensors.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("openvino", reason="OpenVINO tests need `pip install openvino`")

import deform_onnx
import deform_onnx.openvino as dov
from models import mmcv_model, trt_plugin_model
from util import UNEVEN, Config, DeformLayer, assert_close, case_config, make_inputs, reference, run_ov


def test_plain_openvino_rejects_deformconv(c12_native):
    """Premise of the extension: OpenVINO alone cannot read the file."""
    import openvino as ov

    with pytest.raises(Exception, match="DeformConv"):
        ov.Core().read_model(str(c12_native[0]))


def test_c04_extension_and_lowered(c04_native):
    path, layer, inputs = c04_native
    want = reference(layer, inputs)
    assert_close(run_ov(path, inputs), want, what="c04 extension")
    assert_close(run_ov(deform_onnx.lower(path), inputs), want, what="c04 lowered")


def _out_of_image_fraction(cfg: Config, offset: torch.Tensor) -> float:
    """Share of sample points with a corner outside the image (where border rules matter)."""
    kh, kw = cfg.kernel
    ho, wo = cfg.out_hw()
    off = offset.reshape(cfg.N, cfg.offset_groups, kh * kw, 2, ho, wo)
    i = torch.arange(kh).repeat_interleave(kw).reshape(1, 1, -1, 1, 1) * cfg.dilation[0]
    j = torch.arange(kw).repeat(kh).reshape(1, 1, -1, 1, 1) * cfg.dilation[1]
    y = torch.arange(ho).reshape(1, 1, 1, -1, 1) * cfg.stride[0] - cfg.padding[0] + i + off[:, :, :, 0]
    x = torch.arange(wo).reshape(1, 1, 1, 1, -1) * cfg.stride[1] - cfg.padding[1] + j + off[:, :, :, 1]
    outside = (y < 0) | (y > cfg.H - 1) | (x < 0) | (x > cfg.W - 1)
    return float(outside.float().mean())


def test_c12_extension_matches_torchvision_at_borders(c12_native):
    path, layer, inputs = c12_native
    cfg = case_config("c12")
    assert _out_of_image_fraction(cfg, inputs["offset"]) > 0.3, "premise: many samples cross the border"
    assert_close(run_ov(path, inputs), reference(layer, inputs), what="c12 extension")


def test_c12_border_flag_matters(c12_native, monkeypatch):
    """With OpenVINO's default bilinear_interpolation_pad=False the same model differs at borders."""
    import openvino.opset8 as ops

    path, layer, inputs = c12_native
    real = ops.deformable_convolution

    def default_pad(*args, **kwargs):
        kwargs["bilinear_interpolation_pad"] = False
        return real(*args, **kwargs)

    monkeypatch.setattr(ops, "deformable_convolution", default_pad)
    err = np.abs(run_ov(path, inputs) - reference(layer, inputs)).max()
    assert err > 1e-2, f"expected a border difference without the flag, got {err}"


@pytest.mark.parametrize("opset", [17, 16, 11])
def test_dynamo_native_lowered_runs_on_openvino(c12_native, opset):
    path, layer, inputs = c12_native
    assert_close(
        run_ov(deform_onnx.lower(path, opset=opset), inputs), reference(layer, inputs), what=f"lowered@{opset}"
    )


def _native_node_model(cfg: Config, layer: DeformLayer, inputs, empty_bias: bool) -> onnx.ModelProto:
    """A DeformConv node with every attribute set; ``empty_bias`` leaves B empty before the mask."""
    names = ["x", "w", "offset", "" if empty_bias else "b"] + (["mask"] if cfg.mask else [])
    inits = [numpy_helper.from_array(layer.conv.weight.detach().numpy(), "w")]
    if not empty_bias:
        inits.append(numpy_helper.from_array(layer.conv.bias.detach().numpy(), "b"))
    node = helper.make_node(
        "DeformConv",
        names,
        ["y"],
        name="dc",
        dilations=list(cfg.dilation),
        group=cfg.groups,
        kernel_shape=list(cfg.kernel),
        offset_group=cfg.offset_groups,
        pads=[*cfg.padding, *cfg.padding],
        strides=list(cfg.stride),
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [cfg.N, cfg.C_out, *cfg.out_hw()])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("empty_bias", [False, True])
def test_extension_layout_with_groups_stride_dilation(empty_bias):
    # Uneven stride/padding/dilation, groups and offset groups: a swapped (dy, dx) or group layout fails.
    cfg = UNEVEN.at(N=2, bias=not empty_bias)
    layer = DeformLayer(cfg)
    inputs = make_inputs(cfg)
    model = _native_node_model(cfg, layer, inputs, empty_bias)
    assert_close(run_ov(model, inputs), reference(layer, inputs), what=f"extension empty_bias={empty_bias}")


@pytest.mark.parametrize(
    "modulated, bias, domain", [(False, False, "mmcv"), (True, True, "mmcv"), (True, False, "mmdeploy")]
)
def test_extension_mmcv_nodes(modulated, bias, domain):
    cfg = Config(C_in=8, C_out=4, H=7, W=8, stride=(1, 2), groups=2, offset_groups=2, mask=modulated, bias=bias)
    proto, layer, feeds = mmcv_model(cfg, modulated=modulated, domain=domain)
    want = reference(layer, dict(zip(("x", "offset", "mask"), feeds.values())))
    assert_close(run_ov(proto, feeds), want, what=f"{domain} modulated={modulated}")
    assert_close(run_ov(deform_onnx.lower(proto), feeds), want, what=f"{domain} lowered")


@pytest.mark.parametrize("op, domain", [("ModulatedDeformConv2d", "trt"), ("DCNv2", "")])
def test_extension_tensorrt_plugin_nodes(op, domain):
    """TensorRT's plugin node kinds reach the extension through the registry alone (no edit of the runtime)."""
    cfg = UNEVEN.at(mask=True, bias=True)
    proto, layer, feeds = trt_plugin_model(cfg, op, domain=domain)
    assert_close(run_ov(proto, feeds), reference(layer, feeds), what=f"{domain}::{op} on the extension")


def test_extension_rejects_conflicting_mmcv_attributes():
    """The extension reads attributes through the same rules as lower() (registry)."""
    cfg = Config(C_in=4, C_out=4, H=6, W=6, mask=False, bias=False)
    proto, _, _ = mmcv_model(cfg, modulated=False)
    proto.graph.node[0].attribute.append(helper.make_attribute("deformable_groups", 1))  # deform_groups is set too
    with pytest.raises(Exception, match="deform_groups and deformable_groups"):
        dov.compile(proto)
