"""A toy op defined outside the package, to show that an op is one module: "shift", a map moved one pixel right.

``deform_onnx_toy::shift(x)`` (a ``torch.library`` custom op) returns ``x`` shifted by one pixel along
its last axis (width), the first column zero: ``out[..., 0] = 0``, ``out[..., 1:] = x[..., :-1]``.
It brings what an op of the family brings, in one place:

- two lowerings: ``pad`` (``Slice`` the last column off, ``Pad`` one zero column in front) and ``concat``
  (``Slice``, then ``Concat`` behind a zero column from ``ConstantOfShape``), both from opset 11;
- its torch binding (the TorchScript symbolic and the dynamo translation);
- its file node ``deform_onnx.toy::Shift`` for ``deform_onnx.lower`` (the file-node interface);
- a target rule (``no Shift node``, checked by target ``generic``) and a made-up fault (target
  ``tensorrt`` refuses the ``pad`` form; a toy claim, not a measured one);
- a check of the modules that call it (:class:`Shift` takes 4-D maps only).

:func:`entry` builds its :class:`~deform_onnx.ops.registry.OpEntry`; the test registers it and
unregisters it afterwards (tests/ops/test_toy_op_plugin.py). Nothing in ``src/`` names it.
"""

from __future__ import annotations

import contextlib

import onnx_ir as ir
import torch

from deform_onnx.core.errors import BadModuleInput
from deform_onnx.ops.registry import Lowering, OpEntry, resolve

OP_NAME = "deform_onnx_toy::shift"
DOMAIN, OP_TYPE = "deform_onnx.toy", "Shift"


@torch.library.custom_op(OP_NAME, mutates_args=())
def shift(x: torch.Tensor) -> torch.Tensor:
    """``x`` shifted one pixel right along the last axis; the first column is 0 (any rank >= 1)."""
    return torch.nn.functional.pad(x[..., :-1], (1, 0))


@shift.register_fake
def _(x):
    return torch.empty_like(x)


class Shift(torch.nn.Module):
    """``forward(x [N, C, H, W]) -> [N, C, H, W]``: :func:`shift`."""

    def forward(self, x):
        return shift(x)


def reference(x):
    """The op's semantics in plain torch (what the tests compare with)."""
    out = torch.zeros_like(x)
    out[..., 1:] = x[..., :-1]
    return out


# -- lowerings ---------------------------------------------------------------------------------
def lower_pad(b, x):
    """``Slice`` off the last column, ``Pad`` one zero column in front (Pad's pads input: opset 11)."""
    kept = b.slice(x, 0, -1, axis=-1)
    rank = len(b.static_shape(x) or (0, 0, 0, 0))
    pads = [0] * (2 * rank)
    pads[rank - 1] = 1  # the begin pad of the last axis
    return b.op("Pad", kept, b.i64(pads), mode="constant")


def lower_concat(b, x):
    """``Slice`` off the last column, ``Concat`` it behind a zero column (``ConstantOfShape``, cast to x's dtype)."""
    kept = b.slice(x, 0, -1, axis=-1)
    zeros = b.cast_like(b.op("ConstantOfShape", b.op("Shape", b.slice(x, 0, 1, axis=-1))), x)
    return b.op("Concat", zeros, kept, axis=-1)


LOWERINGS = {"pad": Lowering("pad", 11, lower_pad), "concat": Lowering("concat", 11, lower_concat)}


def entry() -> OpEntry:
    """The toy's registry entry: this module is its binding, its file-node module and its rules module."""
    return OpEntry(
        name="shift",
        title="shift",
        lowerings=LOWERINGS,
        methods={"native": "pad", "grid_sample": "pad", "gather": "concat"},
        auto=("pad",),
        torch_ops=(OP_NAME,),
        onnx_nodes=((DOMAIN, OP_TYPE),),
        binding=__name__,
        sources=__name__,
        rules=__name__,
        module_checks=__name__,
    )


# -- torch binding (deform_onnx.ops.registry.OpEntry.binding) ------------------------------------
TORCHSCRIPT_OP = OP_NAME


def make_symbolic(method: str = "auto"):
    """The TorchScript symbolic of ``deform_onnx_toy::shift`` for ``method``."""
    from deform_onnx.builder.torchscript import TorchScriptBuilder

    def symbolic(g, x):
        return resolve("shift", method, g.opset).fn(TorchScriptBuilder(g), x)

    return symbolic


def translations(method: str, opset: int | None, build_opset, builder) -> dict:
    """The dynamo translation of ``torch.ops.deform_onnx_toy.shift``: the lowering chosen for the target opset."""

    def translate(x):
        build = build_opset(opset or 18)
        return resolve("shift", method, opset if opset is not None else build).fn(builder(build), x)

    return {torch.ops.deform_onnx_toy.shift.default: translate}


# -- file nodes (deform_onnx.ops.file_nodes) ---------------------------------------------------
def nodes_lowered(model: ir.Model, method: str, opset: int | None) -> list[ir.Node]:
    """Every ``deform_onnx.toy::Shift`` node of the main graph and its subgraphs."""
    return [n for n in ir.traversal.RecursiveGraphIterator(model.graph) if (n.domain, n.op_type) == (DOMAIN, OP_TYPE)]


def lower_node(node: ir.Node, b, method: str, opset: int) -> tuple[ir.Value, str]:
    """Emit the lowering ``method`` resolves to; returns its output and name."""
    lowering = resolve("shift", method, opset)
    return lowering.fn(b, node.inputs[0]), lowering.name


# -- target rules and faults (deform_onnx.targets) ---------------------------------------------
def no_shift_node(model) -> list[str]:
    """A graph rule: no ``deform_onnx.toy::Shift`` node is left."""
    found = [n.name or "?" for n in model.graph.node if (n.domain, n.op_type) == (DOMAIN, OP_TYPE)]
    return [f"Shift node(s) {', '.join(found[:3])}"] if found else []


RULES = {"no Shift node": no_shift_node}
TARGET_RULES = {"generic": ("no Shift node",)}


def _faults():
    from deform_onnx.targets import Fault

    return {
        "tensorrt": (
            Fault(
                what="shift's pad form",
                why="a made-up fault of the toy op (no runtime was asked)",
                hits=lambda lowering, opset: lowering == "pad",
                fix="use method gather (the concat form)",
            ),
        )
    }


def __getattr__(name: str):
    if name == "FAULTS":  # built on first use: deform_onnx.targets imports onnx
        return _faults()
    raise AttributeError(name)


# -- checks of the model's modules (deform_onnx.ops.registry.OpEntry.module_checks) -----------------
def check_modules(model: torch.nn.Module) -> contextlib.ExitStack:
    """A forward pre-hook on every :class:`Shift`: its input must be a 4-D map."""
    stack = contextlib.ExitStack()
    for name, module in model.named_modules():
        if isinstance(module, Shift):

            def check(module, args, where=name or "model"):
                if args and isinstance(args[0], torch.Tensor) and args[0].dim() != 4:
                    raise BadModuleInput(f"{where} (Shift): input has rank {args[0].dim()}, expected a 4-D map")

            stack.callback(module.register_forward_pre_hook(check).remove)
    return stack
