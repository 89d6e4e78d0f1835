"""Graph repairs a runtime target applies to the exported file: rewrites that keep every value the same.

A repair runs on the written graph after the export, before the target's rules
(:mod:`.rules`) check it (``Target.repairs`` names them; :meth:`.base.Choice.repair_graph`
applies them), so it also reaches nodes torch's exporters write, which the
lowerings' graph forms (:mod:`deform_onnx.builder.forms`) do not.

- ``"Reshape allowzero 0"``: torch's dynamo exporter writes every ``view`` /
  ``reshape`` as ``Reshape(allowzero=1)``; onnx2torch 1.5.15 refuses it
  ('"allowzero=1" is not implemented', measured here with
  scripts/op_matrix.py on Deformable DETR's MSDA core and the DCNv3 layer).
  ``allowzero`` only matters when the shape holds a 0 (ONNX ``Reshape``-14:
  with 0 a dimension is copied from the input, with allowzero=1 it is set to 0),
  so the attribute is dropped where the shape is a constant without a 0; a
  computed shape keeps it (rule ``no Reshape allowzero`` then names the node).
- ``"stack flatten as Concat"`` (:mod:`.repair_stack`): ``torch.stack(xs, dim=a).flatten(a, a + 1)``
  as one ``Concat`` (onnx2tf 1.29.24 misconverts the 5-D stack and its Reshape: Deformable DETR's
  per-level MSDA core 1.0 off in LiteRT).
- ``"Sum as Add"``: each ``Sum`` of the main graph as a chain of ``Add`` (both broadcast the same way,
  ONNX ``Sum``-13 / ``Add``-14; a one-input ``Sum`` becomes ``Identity``): RKNN-Toolkit2's op table marks
  ``Sum`` "Not Supported" and ``Add`` supported (``doc/RKNNToolKit2_OP_Support-v2.1.0.md``). The values are
  the same up to float rounding of the summation order, which ``Sum`` leaves unspecified.
- ``"Range as constant"``: a ``Range`` whose start, limit and delta are known before run time (constants,
  or shape arithmetic on static shapes: the lowerings' base grids, which ``lower`` builds from ``Shape``)
  becomes the constant it computes; RKNN-Toolkit2's op table marks ``Range`` "Not Supported". A ``Range``
  of a dynamic size is left (rule ``rknn ops`` then names it).
- ``"Tile as Concat"``: a ``Tile`` with constant repeats as ``Concat`` of copies along each repeated axis (pnnx writes
  ``Tile`` as ``torch.tile``, which ncnn does not load: RepPoints' grid points).
- ``"scatter as Concat"`` / ``"index list as Concat"`` (:mod:`.repair_index`): ``x[:, i] = y`` and
  ``x[[1, 0]]`` (``ScatterElements`` / ``GatherND``, which ncnn does not load) as ``Slice`` + ``Concat``;
  MNN 3.6.1 loads ``ScatterElements`` but ran PWC-Net's ``vgrid[:, 1, :, :] = ...`` 22 off, so target mnn applies
  the first too.
- ``"constant operand last"`` (:mod:`.repair_tflite`): a binary elementwise op with one constant operand
  gets the value first and the constant without leading 1-axes (onnx2tf transposes a constant added to a
  square ``[N, H, W]`` value otherwise: a flow warp's ``xs + flow[:, 0]``; MNN 3.6.1 samples a wrong layout when
  a ``GridSample`` reads such an op with a 4-D constant first and a ``Conv`` output second: BasicVSR++).
- ``"GELU divisor as [1]"`` (:mod:`.repair_tflite`): exact GELU's ``x / sqrt(2)`` with a ``[1]`` divisor instead of
  a 0-d one, so that onnx2tf fuses it into TFLite's ``GELU`` (otherwise its ``Erf`` is a Select TensorFlow op
  that LiteRT refuses: InternImage's GELUs).
- ``"square input read by Max"`` (:mod:`.repair_tflite`): a 3-D..5-D graph input whose non-batch axes are all
  equal is read through ``Max(x, x)`` (onnx2tf makes it channels-last but records it as untransposed, so a
  ``Reshape`` reading it mixed the axes: a DCNv2 layer on ``[1, 8, 8, 8]`` 2.2 off in LiteRT).
- ``"output names without ':'"`` (:mod:`.repair_tflite`): graph outputs named with a ``:`` (TorchScript's
  ``onnx::Conv_864``) renamed with ``_`` (onnx2tf 1.29.24 lost such outputs: S2ANet's aligned feature).
- ``"static shape arithmetic folded"`` (:mod:`.repair_shapes`): TorchScript's ``Shape -> Gather -> ...`` chains
  on static shapes (``torch.chunk``'s split points) as constants (TVM's frontend and ncnn's blob rule lost the
  shapes after such a ``Slice``).
- ``"Split as Slice"`` (:mod:`.repair_split`): a ``Split`` with pieces known before run time as ``Slice`` nodes
  (onnx2torch converts no ``Split``-18, the version of every ``Split`` at the opset 19 of target
  ``onnx2torch-native``: mmdet's DCNv2 ``torch.chunk``).
- ``"ceil_mode pooling explicit"`` (:mod:`.repair_pool`): ``ceil_mode=1`` pools ncnn computes otherwise than
  PyTorch (an average counting pads whose last window overhangs: PaddleOCR's ``ResNet_vd`` shortcut
  ``AvgPool2d(2, 2, ceil_mode=True)`` on an odd map; a last window PyTorch drops) as ``ceil_mode=0``, or an
  explicit ``Pad`` + ``count_include_pad=0``.
- ``"Einsum as MatMul"`` (:mod:`.repair_einsum`): a two-operand batched-matmul ``Einsum`` as ``Transpose`` +
  ``MatMul`` (MNN 3.6.1 returns ``bmn,bcn->bcm`` with its output axes swapped: DAT's attention).
- ``"reductions as pooling and Conv"`` (:mod:`.repair_reduce`): ``Reduce*`` over the non-batch axes of a static
  2-D..4-D value as ``GlobalAveragePool`` / ``AveragePool`` / ``MaxPool``, a ones-weight ``Conv`` (a channel sum) or
  ``Transpose`` + ``MaxPool`` (a channel max) and elementwise ops (pnnx 20261020 writes every ``Reduce*`` as an ncnn
  ``Reduction`` over the ONNX axes not shifted for ncnn's missing batch axis: SE blocks, CBAM, SuperPoint's
  ``F.normalize`` of sampled descriptors).
- ``"ConstantOfShape value written"``: a ``ConstantOfShape`` without its optional ``value`` gets the value the
  ONNX spec defaults to (a one-element float32 0, ``ConstantOfShape``-9/20/21): MNNConvert 3.6.1 folds such a node
  into a constant of uninitialised memory, different from one conversion of the same file to the next (VFNet's
  ``new_zeros`` star offsets: 4 of 15 conversions wrong, up to 1.9e32; ``scripts/repro/mnn_constant_of_shape.py``).
- ``"float Equal as arithmetic"`` (:mod:`.repair_equal`): ``(a == b).float()`` of float tensors as
  ``1 - min(ceil(|a - b|), 1)`` (ncnn has no comparison layer: pnnx's ``torch.eq`` refused CenterNet's heat-map NMS
  ``keep = (hmax == heat).float()``); the same 0/1 for finite operands.
- ``"float16 InstanceNormalization in float32"`` (:mod:`.repair_float16`): a float16 ``InstanceNormalization``
  (``nn.GroupNorm``'s export) between ``Cast`` nodes to and from float32 (TVM 0.27 computes its statistics in
  float16: a float16 ``GroupNorm(8, 32)`` 0.17 off PyTorch).
- ``"integer Clip as Max/Min"`` (:mod:`.repair_clip`): a ``Clip`` of an integer tensor as ``Max`` + ``Min``
  (onnx2torch 1.5.15 clamps with float bounds, turning int64 indices into float32: RT-DETRv2's discrete sampling).
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
from onnx import helper, numpy_helper

from ..core.protos import constant_tensors, drop_unused_nodes
from .repair_clip import integer_clip_as_max_min
from .repair_einsum import einsum_as_matmul
from .repair_equal import float_equal_as_arithmetic
from .repair_float16 import float16_instance_norm_in_float32
from .repair_index import index_list_as_concat, scatter_as_concat
from .repair_pool import ceil_mode_pooling_explicit
from .repair_reduce import reductions_as_pooling_and_conv
from .repair_shapes import static_shape_arithmetic_folded
from .repair_split import split_as_slice
from .repair_stack import stack_flatten_as_concat
from .repair_tflite import (
    constant_operand_last,
    gelu_divisor_1d,
    output_names_without_colon,
    square_input_read_by_max,
)

__all__ = ["REPAIRS", "constant_of_shape_value_written", "range_as_constant", "reshape_allowzero_0", "sum_as_add"]


def reshape_allowzero_0(model: onnx.ModelProto) -> list[str]:
    """Drop ``allowzero=1`` from the main graph's ``Reshape`` nodes whose shape is a constant without a 0.

    Edits ``model`` in place. Returns one line naming how many nodes changed (empty when none).
    """
    constants = constant_tensors(model.graph)
    changed = 0
    for node in model.graph.node:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        flag = next((a for a in node.attribute if a.name == "allowzero"), None)
        shape = constants.get(node.input[1])
        if flag is None or flag.i == 0 or shape is None or (numpy_helper.to_array(shape) == 0).any():
            continue
        node.attribute.remove(flag)
        changed += 1
    return [f"Reshape allowzero=1 dropped on {changed} node(s) with a constant shape without 0"] if changed else []


def sum_as_add(model: onnx.ModelProto) -> list[str]:
    """Write each ``Sum`` node of the main graph as a left-to-right chain of ``Add`` nodes (in place).

    Returns one line naming how many ``Sum`` nodes changed (empty when none).
    """
    from onnx import helper

    nodes: list[onnx.NodeProto] = []
    changed = 0
    for node in model.graph.node:
        if node.op_type != "Sum" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        changed += 1
        base = node.name or f"sum{changed}"
        if len(node.input) == 1:
            nodes.append(helper.make_node("Identity", [node.input[0]], [node.output[0]], name=base))
            continue
        acc = node.input[0]
        for k, term in enumerate(node.input[1:], 1):
            out = node.output[0] if k == len(node.input) - 1 else f"{base}__add{k}"
            nodes.append(helper.make_node("Add", [acc, term], [out], name=f"{base}__add{k}"))
            acc = out
    if changed:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return [f"Sum written as Add on {changed} node(s)"] if changed else []


def tile_as_concat(model: onnx.ModelProto) -> list[str]:
    """Write each main-graph ``Tile`` whose repeats are a constant as ``Concat`` of copies, axis by axis (in place).

    ``Tile`` is by definition its input concatenated ``repeats[a]`` times along each axis ``a``, so the values are the
    same. pnnx 20261020 writes an ONNX ``Tile`` as ``torch.tile``, which ncnn 1.0.20261020 does not load ("layer
    torch.tile not exists or registered": RepPoints' ``gen_grid_from_reg``, ``grid_x.unsqueeze(1).repeat(1, k, 1, 1,
    1)``); ``Concat`` loads. A ``Tile`` of computed repeats is left. Returns one line naming how many changed.
    """
    graph = model.graph
    constants = constant_tensors(graph)
    nodes, changed = [], 0
    for node in graph.node:
        repeats = constants.get(node.input[1]) if node.op_type == "Tile" and len(node.input) == 2 else None
        if repeats is None or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        current = node.input[0]
        tiled = [(axis, int(r)) for axis, r in enumerate(numpy_helper.to_array(repeats).reshape(-1)) if r != 1]
        if any(r < 1 for _, r in tiled):
            nodes.append(node)  # an empty result: left as it is
            continue
        for i, (axis, times) in enumerate(tiled):
            out = node.output[0] if i == len(tiled) - 1 else f"{node.output[0]}_tiled{axis}"
            name = f"{node.name or node.output[0]}_concat{axis}"
            nodes.append(helper.make_node("Concat", [current] * times, [out], name=name, axis=axis))
            current = out
        if not tiled:
            nodes.append(helper.make_node("Identity", [current], [node.output[0]], name=node.name))
        changed += 1
    if changed:
        del graph.node[:]
        graph.node.extend(nodes)
        drop_unused_nodes(model)
    return [f"Tile with constant repeats written as Concat on {changed} node(s)"] if changed else []


def range_as_constant(model: onnx.ModelProto) -> list[str]:
    """Replace each main-graph ``Range`` with foldable inputs by a ``Constant`` of its values (in place).

    Returns one line naming how many ``Range`` nodes changed (empty when none).
    """
    import numpy as np
    from onnx import helper

    from .repair_stack import _constants as arrays
    from .repair_stack import _fold, _static_shapes

    graph = model.graph
    if not any(n.op_type == "Range" for n in graph.node):
        return []
    consts, shapes = arrays(graph), _static_shapes(model)
    changed = 0
    for index, node in enumerate(graph.node):
        if node.op_type != "Range" or node.domain not in ("", "ai.onnx"):
            continue
        values = [_fold(model, x, shapes, consts) for x in node.input]
        if any(v is None for v in values):
            continue
        start, limit, delta = (np.asarray(v).reshape(()) for v in values)
        result = np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)
        tensor = numpy_helper.from_array(result, node.output[0])
        graph.node[index].CopyFrom(helper.make_node("Constant", [], [node.output[0]], name=node.name, value=tensor))
        changed += 1
    if not changed:
        return []
    drop_unused_nodes(model)
    return [f"Range written as a constant on {changed} node(s)"]


def constant_of_shape_value_written(model: onnx.ModelProto) -> list[str]:
    """Give each main-graph ``ConstantOfShape`` without a ``value`` attribute the spec's default, float32 ``[0]``.

    The ONNX spec (``ConstantOfShape``-9 and later): "If not specified, it defaults to a tensor of value 0 and
    datatype float32", so the values are unchanged. Edits ``model`` in place. Returns one line naming how many
    nodes changed (empty when none).
    """
    import numpy as np
    from onnx import helper

    changed = 0
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx"):
            continue
        if any(a.name == "value" for a in node.attribute):
            continue
        node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(np.zeros([1], np.float32))))
        changed += 1
    return [f"ConstantOfShape value 0.0 written on {changed} node(s)"] if changed else []


#: Repair name (``Target.repairs``) -> function editing the model in place, returning what it did.
REPAIRS: dict[str, Callable[[onnx.ModelProto], list[str]]] = {
    "Reshape allowzero 0": reshape_allowzero_0,
    "stack flatten as Concat": stack_flatten_as_concat,  # repair_stack.py
    "Sum as Add": sum_as_add,
    "Range as constant": range_as_constant,
    "Tile as Concat": tile_as_concat,
    "scatter as Concat": scatter_as_concat,  # repair_index.py
    "index list as Concat": index_list_as_concat,  # repair_index.py
    "constant operand last": constant_operand_last,  # repair_tflite.py
    "GELU divisor as [1]": gelu_divisor_1d,  # repair_tflite.py
    "square input read by Max": square_input_read_by_max,  # repair_tflite.py
    "output names without ':'": output_names_without_colon,  # repair_tflite.py
    "static shape arithmetic folded": static_shape_arithmetic_folded,  # repair_shapes.py
    "Split as Slice": split_as_slice,  # repair_split.py
    "ceil_mode pooling explicit": ceil_mode_pooling_explicit,  # repair_pool.py
    "Einsum as MatMul": einsum_as_matmul,  # repair_einsum.py
    "reductions as pooling and Conv": reductions_as_pooling_and_conv,  # repair_reduce.py
    "integer Clip as Max/Min": integer_clip_as_max_min,  # repair_clip.py
    "ConstantOfShape value written": constant_of_shape_value_written,
    "float Equal as arithmetic": float_equal_as_arithmetic,  # repair_equal.py
    "float16 InstanceNormalization in float32": float16_instance_norm_in_float32,  # repair_float16.py
}
