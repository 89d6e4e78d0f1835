"""Models and files several test modules build (shared so that each is written once)."""

from __future__ import annotations

import numpy as np
import onnx
import torch
import torchvision
from onnx import TensorProto, helper, numpy_helper

from util import Config, DeformLayer, make_inputs, op_types

F = TensorProto.FLOAT


class Neck(torch.nn.Module):
    """One DCNv2 (offsets and mask from a conv): tests/formats' small deformable model.

    ``kernel=1`` (one tap instead of 9: a ninth of the decomposed graph, so the cheapest lowering) is for tests of
    a rule that holds per tap, such as a planted fault in the decomposition.
    """

    def __init__(self, kernel: int = 3):
        super().__init__()
        torch.manual_seed(0)
        self.taps = kernel * kernel
        self.offsets = torch.nn.Conv2d(4, 3 * self.taps, kernel, padding=kernel // 2)
        self.dcn = torchvision.ops.DeformConv2d(4, 4, kernel, padding=kernel // 2)

    def forward(self, x):
        o = self.offsets(x)
        return self.dcn(x, o[:, : 2 * self.taps], o[:, 2 * self.taps :].sigmoid())


# -- model builders (also used by test_openvino.py and test_cli_lower_check.py) --------
def dynamo_native(cfg: Config, opset: int, path, seed: int = 0):
    """Export ``DeformLayer(cfg)`` with plain ``torch.onnx.export(dynamo=True)``: a DeformConv model.

    Returns ``(layer, inputs)``; the file is written to ``path``.
    """
    layer = DeformLayer(cfg, seed=seed)
    inputs = make_inputs(cfg, seed=seed + 1)
    torch.onnx.export(
        layer,
        tuple(inputs.values()),
        str(path),
        dynamo=True,
        opset_version=opset,
        input_names=list(inputs),
        output_names=["y"],
        verbose=False,
        external_data=False,
    )
    assert "DeformConv" in op_types(onnx.load(str(path))), "premise: the dynamo exporter emits DeformConv"
    return layer, inputs


def mmcv_model(cfg: Config, *, modulated: bool, domain: str = "mmcv", opset: int = 13, seed: int = 0):
    """One mmcv deformable node built with onnx.helper, weights from ``DeformLayer(cfg)``.

    ``MMCVDeformConv2d(input, offset, weight)`` when not ``modulated`` (cfg
    must have no mask and no bias), else ``MMCVModulatedDeformConv2d(input,
    offset, mask, weight[, bias])``; attributes as mmcv's symbolic writes them.
    Returns ``(proto, layer, inputs)``.
    """
    assert modulated or (not cfg.mask and cfg.bias is False)
    layer = DeformLayer(cfg, seed=seed)
    inputs = make_inputs(cfg, seed=seed + 1)
    inits = [numpy_helper.from_array(layer.conv.weight.detach().numpy(), "weight")]
    if modulated:
        names = ["input", "offset", "mask", "weight"]
        if layer.conv.bias is not None:
            inits.append(numpy_helper.from_array(layer.conv.bias.detach().numpy(), "bias"))
            names.append("bias")
        op, attrs = "MMCVModulatedDeformConv2d", {}
    else:
        names = ["input", "offset", "weight"]
        op, attrs = "MMCVDeformConv2d", {"bias": 0, "im2col_step": 32}
    node = helper.make_node(
        op,
        names,
        ["y"],
        name="dcn",
        domain=domain,
        stride=list(cfg.stride),
        padding=list(cfg.padding),
        dilation=list(cfg.dilation),
        groups=cfg.groups,
        deform_groups=cfg.offset_groups,
        **attrs,
    )
    graph_inputs = [
        helper.make_tensor_value_info(n, F, list(inputs[k].shape))
        for n, k in zip(names, ("x", "offset", "mask"))
        if k in inputs
    ]
    y = helper.make_tensor_value_info("y", F, [cfg.N, cfg.C_out, *cfg.out_hw()])
    graph = helper.make_graph([node], "mmcv", graph_inputs, [y], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(domain, 1)])
    feeds = dict(zip(names, inputs.values()))
    return proto, layer, feeds


def trt_plugin_model(cfg: Config, op: str, *, domain: str = "", attrs: dict | None = None, seed: int = 0):
    """One TensorRT plugin node of deformable convolution built with onnx.helper, weights from ``DeformLayer(cfg)``.

    ``op`` is ``"ModulatedDeformConv2d"`` (TensorRT's plugin: attributes ``stride``, ``padding``, ``dilation`` as
    ``[h, w]``, ``group``, ``deformable_group``) or ``"DCNv2"`` (CenterNet's: ``groups``, ``deformable_group``, the
    pairs as ``[h, w]`` lists); both take ``(input, offset, mask, weight[, bias])``, so ``cfg`` must have a mask.
    ``attrs`` replaces attributes (a ``None`` value drops one). Returns ``(proto, layer, feeds)``; the feeds are
    named as the graph inputs and in ``layer``'s argument order.
    """
    assert cfg.mask, "both plugins take a mask"
    layer = DeformLayer(cfg, seed=seed)
    inputs = make_inputs(cfg, seed=seed + 1)
    names = ["input", "offset", "mask", "weight"]
    inits = [numpy_helper.from_array(layer.conv.weight.detach().numpy(), "weight")]
    if layer.conv.bias is not None:
        inits.append(numpy_helper.from_array(layer.conv.bias.detach().numpy(), "bias"))
        names.append("bias")
    groups = "group" if op == "ModulatedDeformConv2d" else "groups"
    written = {"stride": list(cfg.stride), "padding": list(cfg.padding), "dilation": list(cfg.dilation),
               groups: cfg.groups, "deformable_group": cfg.offset_groups, **(attrs or {})}  # fmt: skip
    node = helper.make_node(
        op, names, ["y"], name="dcn", domain=domain, **{k: v for k, v in written.items() if v is not None}
    )
    graph_inputs = [helper.make_tensor_value_info(n, F, list(v.shape)) for n, v in zip(names, inputs.values())]
    y = helper.make_tensor_value_info("y", F, [cfg.N, cfg.C_out, *cfg.out_hw()])
    graph = helper.make_graph([node], "trt", graph_inputs, [y], inits)
    imports = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    proto = helper.make_model(graph, opset_imports=imports, ir_version=8)
    return proto, layer, dict(zip(names, inputs.values()))


# -- what stays untouched ------------------------------------------------------------------------
def two_node_model(opset: int = 19, batch: int | str = "N") -> onnx.ModelProto:
    """Relu -> Conv (offsets) -> two DeformConv sharing input and offset -> Add, with value_info and metadata."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((6, 6, 3, 3)) / 8).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((6, 3, 3, 3)) / 6).astype(np.float32), "w2"),
        numpy_helper.from_array((rng.standard_normal((36, 6, 3, 3)) / 4).astype(np.float32), "w_off"),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["xr"], name="relu"),
        helper.make_node("Conv", ["xr", "w_off"], ["off"], name="offset_conv", pads=[1, 1, 1, 1], doc_string="offsets"),
        helper.make_node(
            "DeformConv",
            ["xr", "w1", "off", "b1"],
            ["d1"],
            name="dc1",
            pads=[1, 1, 1, 1],
            kernel_shape=[3, 3],
            offset_group=2,
        ),
        helper.make_node(
            "DeformConv", ["xr", "w2", "off"], ["d2"], name="dc2", pads=[1, 1, 1, 1], group=2, offset_group=2
        ),
        helper.make_node("Add", ["d1", "d2"], ["y"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "two",
        [helper.make_tensor_value_info("x", F, [batch, 6, 8, 9])],
        [helper.make_tensor_value_info("y", F, [batch, 6, 8, 9])],
        inits,
        value_info=[
            helper.make_tensor_value_info("off", F, [batch, 36, 8, 9]),
            helper.make_tensor_value_info("d1", F, [batch, 6, 8, 9]),
        ],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.example", 2)],
        producer_name="test",
        doc_string="doc",
    )
    helper.set_model_props(model, {"author": "tests"})
    onnx.checker.check_model(model, full_check=True)
    return model


class ChunkDCN(torch.nn.Module):
    """c31's pattern: one conv gives offset and mask (``torch.chunk`` into three), then DCNv2."""

    def __init__(self, c_in, c_out, kernel, padding):
        super().__init__()
        k = kernel[0] * kernel[1]
        self.conv = torch.nn.Conv2d(c_in, 3 * k, kernel, padding=padding)
        self.dcn = torchvision.ops.DeformConv2d(c_in, c_out, kernel, padding=padding)

    def forward(self, x):
        o1, o2, mask = torch.chunk(self.conv(x), 3, dim=1)
        return self.dcn(x, torch.cat((o1, o2), dim=1), torch.sigmoid(mask))


def unit_scale(model: torch.nn.Module, photo: torch.Tensor, seed: int) -> torch.nn.Module:
    """Re-draw a randomly initialised model so that its features are unit-scale on ``photo``.

    transformers' initialisation (weights of std 0.01, BatchNorm scales drawn
    around 0 with std 0.01) shrinks RT-DETR's encoder features below
    LayerNorm's eps: every encoder score then equals the score head's bias
    (measured: all 336 equal), the top-k query selection is a tie, and the
    zero-initialised sampling-offset and attention-weight layers make the
    deformable sampling independent of the image. Here: PyTorch's default
    initialisation of every Linear and Conv2d, and each batch norm (RT-DETR's
    frozen ones too) normalising its input on the photo, as a trained model's
    statistics would (scale 1, shift 0, running mean and variance of its input).
    """
    torch.manual_seed(seed)
    for module in model.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Conv2d)):
            module.reset_parameters()
    norms = [module for module in model.modules() if hasattr(module, "running_var")]

    def calibrate(module, args):
        module.running_mean.copy_(args[0].mean((0, 2, 3)))
        module.running_var.copy_(args[0].var((0, 2, 3)))

    hooks = [module.register_forward_pre_hook(calibrate) for module in norms]
    with torch.no_grad():
        for module in norms:
            module.weight.fill_(1.0)
            module.bias.zero_()
        model.eval()(photo)
    for hook in hooks:
        hook.remove()
    return model
