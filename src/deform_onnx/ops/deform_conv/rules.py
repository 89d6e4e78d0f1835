"""The target graph rules deformable convolution brings (:mod:`deform_onnx.targets.rules`).

The runtimes without a DeformConv kernel name ``"no DeformConv"`` in their ``options`` and a
fault on method ``native`` (:mod:`deform_onnx.targets.table`). ``"deform_conv2d static H and W"``
(:data:`TARGET_RULES`: ``tvm``): TVM 0.27's relax ONNX frontend converts no lowering of a deformable
convolution whose map has a dynamic height or width, in either form ("Reshape requires the input new shape
to be Shape", measured here); the rule says so from the graph, before the file is built in TVM.
"""

from __future__ import annotations

import onnx

from ...targets.rules import RuleFn, _nodes, dynamic_axes  # the rules' own graph readers


def no_deformconv(model: onnx.ModelProto) -> list[str]:
    """DeformConv nodes: runtimes without a DeformConv kernel refuse the file."""
    found = _nodes(model, "DeformConv")
    return [f"DeformConv node(s) {', '.join(found[:3])}"] if found else []


def static_height_and_width(model: onnx.ModelProto) -> list[str]:
    """A lowered ``deform_conv2d`` (the file's record of its calls) in a graph whose inputs have a dynamic axis
    other than the first: TVM's frontend refuses it (a dynamic batch alone converts).

    A file without the record (``lower`` of a file written elsewhere) is left to the check in the runtime.
    """
    from ...builder import written

    if not any(c.op == "deform_conv2d" for c in written.read(model)):
        return []
    dynamic = [f"{name} axis {axis}" for name, axis in dynamic_axes(model) if axis > 0]
    if not dynamic:
        return []
    return [
        f"deform_conv2d with a dynamic height or width ({', '.join(dynamic[:3])}): TVM 0.27's frontend converts "
        "no lowering of it; export with static sizes (CLI: without --dynamic) or only the batch dynamic (Python: "
        "dynamic_axes / dynamic_shapes on axis 0)"
    ]


#: Rule name -> check (joined with the targets' own by :data:`deform_onnx.targets.rules.RULES`).
RULES: dict[str, RuleFn] = {
    "no DeformConv": no_deformconv,
    "deform_conv2d static H and W": static_height_and_width,
}
#: Target name -> the rules above it also checks.
TARGET_RULES: dict[str, tuple[str, ...]] = {"tvm": ("deform_conv2d static H and W",)}
