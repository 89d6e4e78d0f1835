"""Graph rules of the runtime targets, checked on the emitted ONNX graph.

Each rule reads a finished ``onnx.ModelProto`` and returns its violations,
one line each naming the node or value. Rules look at the main graph (the
lowerings write no subgraphs). The rules about one op's nodes live in its folder
(``deform_onnx/ops/<op>/rules.py``) and join :data:`RULES` through the op registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import onnx

_FLOATS = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16,
}  # fmt: skip
#: Inputs that TensorRT treats as shape tensors, by op (index into node.input). ``Range`` is not among
#: them: its inputs are on a shape path only when its output reaches one of these inputs, and the walk of
#: :func:`integer_shape_tensors` goes through it then. A float ``Range`` that feeds data (deform-onnx's own
#: ``torch.linspace`` rewrite, exporters/size_ranges.py) is parsed by onnx-tensorrt (its ``Range`` importer
#: takes FP32 start/limit/delta) and TensorRT allows float shape tensors that are not network inputs or
#: outputs (NVIDIA forum thread 197588, from TensorRT 8.4).
SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "ConstantOfShape": (0,),
    "Pad": (1,), "Resize": (3,), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,),
}  # fmt: skip


def _nodes(model: onnx.ModelProto, op_type: str) -> list[str]:
    return [
        n.name or f"#{i}"
        for i, n in enumerate(model.graph.node)
        if n.op_type == op_type and n.domain in ("", "ai.onnx")
    ]


def no_reshape_allowzero(model: onnx.ModelProto) -> list[str]:
    """``Reshape(allowzero=1)``: onnx2torch 1.5.15 refuses it (measured here; repair ``Reshape allowzero 0``)."""
    found = [
        n.name or f"#{i}"
        for i, n in enumerate(model.graph.node)
        if n.op_type == "Reshape" and any(a.name == "allowzero" and a.i == 1 for a in n.attribute)
    ]
    return (
        [
            f"Reshape node(s) {', '.join(found[:3])} with allowzero=1 and a computed shape (dynamo=False writes Reshape without it)"
        ]
        if found
        else []
    )


def no_isnan(model: onnx.ModelProto) -> list[str]:
    """IsNaN nodes (the NaN guard's test): converters without an IsNaN layer refuse the file."""
    found = _nodes(model, "IsNaN")
    return [f"IsNaN node(s) {', '.join(found[:3])}"] if found else []


def nan_guards(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The ``Where(Equal(v, v), a, b)`` nodes of the main graph (NaN guards), in graph order."""
    producer = {o: n for n in model.graph.node for o in n.output}
    found = []
    for node in model.graph.node:
        if node.op_type != "Where" or node.domain not in ("", "ai.onnx"):
            continue
        cond = producer.get(node.input[0])
        if (
            cond is not None
            and cond.op_type == "Equal"
            and cond.domain in ("", "ai.onnx")
            and cond.input[0] == cond.input[1]
        ):
            found.append(node)
    return found


def no_nan_guard(model: onnx.ModelProto) -> list[str]:
    """No NaN test: ``IsNaN``, or ``Equal(v, v)`` (pnnx's ``torch.eq``, which ncnn has no layer for)."""
    found = _nodes(model, "IsNaN")
    found += [n.name or "Where" for n in nan_guards(model)]
    return [f"NaN guard node(s) {', '.join(found[:3])}"] if found else []


def _inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is best effort; rules then see what the file says
        return model


def ncnn_blobs(model: onnx.ModelProto) -> list[str]:
    """Every value fits an ncnn blob: at most 4-D, or 5-D with a leading 1 (pnnx drops a batch axis of 1).

    ncnn blobs have no batch axis and at most 4 dimensions (w, h, d, c).
    """
    g = _inferred(model).graph
    # A convolution's weight is the layer's parameter in ncnn, not a blob: a Conv3d's 5-D weight fits
    # (pnnx writes Convolution3D), so it is neither counted nor named as the example.
    weights = {n.input[1] for n in model.graph.node if n.op_type in ("Conv", "ConvTranspose") and len(n.input) > 1}
    weights -= {i for n in model.graph.node if n.op_type not in ("Conv", "ConvTranspose") for i in n.input}
    big = []
    for v in (*g.input, *g.value_info, *g.output):
        if not (v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")) or v.name in weights:
            continue
        dims = v.type.tensor_type.shape.dim
        if len(dims) > 5 or (len(dims) == 5 and dims[0].dim_value != 1):
            big.append((v.name, [d.dim_value if d.HasField("dim_value") else "?" for d in dims]))
    if not big:
        return []
    batched = [i.name for i in g.input if (d := i.type.tensor_type.shape.dim) and d[0].dim_value > 1]
    hint = f" (input {batched[0]} has a batch above 1: ncnn has no batch axis; export with batch 1 and run " \
        "the extractor once per image)" if batched else ""  # fmt: skip
    fix = hint or (
        ": fold those axes into one in the model (e.g. the batch with a per-item axis, as a view/reshape) so that "
        "every value is at most 4-D after a leading 1, or export for a runtime that holds them (target 'mnn', "
        "'openvino' or 'onnxruntime')"
    )
    return [
        f"{len(big)} value(s) that no ncnn blob holds (more than 4-D after a leading 1; e.g. {big[0][0]} "
        f"{big[0][1]}){fix}"
    ]


#: ONNX ops ncnn (through pnnx) does not load, with the model code that writes them (measured here: pnnx
#: 20261020 -> ncnn 1.0.20261020, case c38: "layer ScatterElements not exists or registered").
NCNN_UNLOADABLE = {
    "ScatterElements": "an in-place assignment such as x[:, i] = y (torch's select_scatter / index_put)",
    "ScatterND": "an in-place assignment through an index tensor (x[idx] = y)",
    "GatherND": "indexing with a list or tensor of indices such as x[..., [1, 0]]",
}


def _float16_names(model: onnx.ModelProto) -> str:
    """The first float16 graph inputs (else initializers), comma-separated; empty when there is none."""
    half = onnx.TensorProto.FLOAT16
    inputs = [v.name for v in model.graph.input if v.type.tensor_type.elem_type == half]
    weights = [t.name for t in model.graph.initializer if t.data_type == half]
    return ", ".join((inputs or weights)[:3])


def ncnn_float32(model: onnx.ModelProto) -> list[str]:
    """No float16 graph input or initializer: pnnx 20261020 leaves a float16 model's ``Conv`` unconverted and ncnn
    refuses the file ("layer Conv not exists or registered", measured here on an mmcv-style DCNv2 block).
    """
    named = _float16_names(model)
    if not named:
        return []
    return [
        f"a float16 model ({named}): pnnx leaves its float16 Conv unconverted and ncnn does not load it; export "
        "in float32 (ncnn stores and computes in float16 itself where the CPU has it)"
    ]


def onnx2tf_float32(model: onnx.ModelProto) -> list[str]:
    """No float16 graph input or initializer: onnx2tf 1.29 converts float32 ONNX files. Measured here on float16
    files: a ``Conv`` + ``LayerNorm`` failed in conversion ("``x`` and ``y`` must have the same dtype, got tf.float32
    != tf.float64"), a DCNv2 layer's ``.tflite`` took float32 input where the file declares float16, and Grounding
    DINO's encoder crashed onnx2tf (``UnboundLocalError`` in its broadcast check of a ``Mul``).
    """
    named = _float16_names(model)
    if not named:
        return []
    return [
        f"a float16 model ({named}): onnx2tf converts float32 ONNX files (a float16 one failed in its conversion "
        "or took float32 input in LiteRT); export in float32 (onnx2tf writes a float16 .tflite from it itself)"
    ]


def ncnn_loadable(model: onnx.ModelProto) -> list[str]:
    """No node of an op ncnn does not load (:data:`NCNN_UNLOADABLE`), after the target's repairs; each
    violation names the op, its node, the model's source line where the exporter recorded it
    (:func:`.loadable.source_of`) and the model code that writes it.
    """
    from .loadable import source_of

    found = [n for n in model.graph.node if n.op_type in NCNN_UNLOADABLE and n.domain in ("", "ai.onnx")]
    return [
        f"{n.op_type} node {n.name or n.output[0]} ({source_of(n)}) does not load in ncnn; it comes "
        f"from {NCNN_UNLOADABLE[n.op_type]}: "
        "write that part without it (torch.cat of slices, or a computed tensor instead of the in-place write)"
        for n in found
    ]


def dynamic_axes(model: onnx.ModelProto) -> list[tuple[str, int]]:
    """``(graph input name, axis)`` of every input dimension without a fixed size."""
    return [
        (v.name, axis)
        for v in model.graph.input
        if v.type.HasField("tensor_type")
        for axis, d in enumerate(v.type.tensor_type.shape.dim)
        if not d.HasField("dim_value")
    ]


def static_shapes(model: onnx.ModelProto) -> list[str]:
    """Graph inputs with a dynamic dimension: runtimes that compile for one size refuse them."""
    dynamic = list(dict.fromkeys(name for name, _ in dynamic_axes(model)))
    return [f"dynamic input shape(s): {', '.join(dynamic)}"] if dynamic else []


def integer_shape_tensors(model: onnx.ModelProto) -> list[str]:
    """Shape inputs (TensorRT's shape tensors, :data:`SHAPE_INPUTS`) computed from integers only: no float value
    on the path that reaches them (through every producer but ``Shape``/``Size``, ``Range`` included).
    A value is judged by where it flows: a float ``Range`` whose output feeds only data is no shape tensor.
    """
    inferred = _inferred(model)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.value_info, *g.output)}
    types.update({t.name: t.data_type for t in g.initializer})
    producer = {o: n for n in g.node for o in n.output}
    bad: list[str] = []
    for node in g.node:
        for index in SHAPE_INPUTS.get(node.op_type, ()):
            if index >= len(node.input) or not node.input[index]:
                continue
            stack, seen = [node.input[index]], set()
            while stack:
                name = stack.pop()
                if name in seen:
                    continue
                seen.add(name)
                if types.get(name) in _FLOATS:
                    bad.append(f"{node.op_type} {node.name or '?'} input {index} depends on float value {name}")
                    stack.clear()
                    break
                src = producer.get(name)
                if src is not None and src.op_type not in ("Shape", "Size"):  # int64 whatever they read
                    stack.extend(i for i in src.input if i)
    return bad[:1] + ([f"... and {len(bad) - 1} more"] if len(bad) > 1 else [])


from . import npu_rules as _npu  # noqa: E402 - the NPU targets' rules (npu_rules.py reads _inferred from here)
from .loadable import LOADABLE_RULES as _LOADABLE_RULES  # noqa: E402

#: A graph rule: a finished model -> its violations, one line each.
RuleFn = Callable[[onnx.ModelProto], list[str]]

#: Rules of no one op (the runtimes' own graph limits); each op brings its own (:class:`_Rules`).
GENERAL_RULES: dict[str, RuleFn] = {
    "no IsNaN": no_isnan,
    "no NaN guard": no_nan_guard,
    "no Reshape allowzero": no_reshape_allowzero,
    "ncnn blobs": ncnn_blobs,
    "ncnn loadable ops": ncnn_loadable,
    "ncnn float32": ncnn_float32,
    "onnx2tf float32": onnx2tf_float32,
    "static shapes": static_shapes,
    "integer-only shape tensors": integer_shape_tensors,
    "rknn ops": _npu.rknn_ops,
    "no data-dependent gather": _npu.no_data_dependent_gather,
    **_LOADABLE_RULES,  # "<runtime> loadable ops": loadable.py, from each converter's own op list
}


class _Rules(Mapping[str, RuleFn]):
    """Rule name (as shown in ``deform-onnx targets``) -> check: :data:`GENERAL_RULES` and the ``RULES`` of
    every registered op's rules module (:attr:`deform_onnx.ops.registry.OpEntry.rules`), read on each use.
    """

    def _merged(self) -> dict[str, RuleFn]:
        from ..ops.registry import rule_modules

        merged = dict(GENERAL_RULES)
        for module in rule_modules():
            for name, check in module.RULES.items():
                if merged.setdefault(name, check) is not check:
                    raise ValueError(f"graph rule {name!r} of {module.__name__} is already defined")
        return merged

    def __getitem__(self, name: str) -> RuleFn:
        return self._merged()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._merged())

    def __len__(self) -> int:
        return len(self._merged())


#: Every graph rule by name: the general ones and the ops' (see :class:`_Rules`).
RULES: Mapping[str, RuleFn] = _Rules()


def violations(model: onnx.ModelProto, options: tuple[str, ...]) -> list[str]:
    """Violations of the named rules in ``model`` (rule names: :data:`RULES`)."""
    found: list[str] = []
    for name in options:
        found += [f"{name}: {v}" for v in RULES[name](model)]
    return found
