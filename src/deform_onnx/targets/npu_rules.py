"""Graph rules of the NPU targets (``rknn``, ``hailo``), joined to :data:`deform_onnx.targets.rules.RULES`.

- ``"rknn ops"``: no op that RKNN-Toolkit2 lists as "Not Supported" in its ONNX op table
  (airockchip/rknn-toolkit2 ``doc/RKNNToolKit2_OP_Support-v2.1.0.md``, opset up to 19). ``GridSample``,
  ``DeformConv``, ``GatherND``, ``IsNaN`` and ``Sum`` are among them: the gather form with ``Gather`` (not
  ``GatherND``), the ``Equal(v, v)`` NaN guard and ``Sum`` written as ``Add`` (repair ``"Sum as Add"``,
  :mod:`.repairs`) converts.
- ``"no data-dependent gather"``: no ``Gather`` / ``GatherElements`` / ``GatherND`` whose indices are
  computed from a float value (the gather form's sample positions come from the offsets). Hailo's parser
  refuses RT-DETR's sampling (hailo-ai/hailo_model_zoo#161, Dataflow Compiler 3.30) and no public source
  shows a deformable-sampling form that parses there, so target ``hailo`` refuses this form too.
"""

from __future__ import annotations

import onnx

__all__ = ["RKNN_UNSUPPORTED", "rknn_ops", "no_data_dependent_gather"]

#: ONNX ops marked "Not Supported" in RKNN-Toolkit2's op table (v2.1.0; ONNX opset 19).
RKNN_UNSUPPORTED = frozenset(
    """Abs Acos Acosh Asin Asinh Atan Atanh Bernoulli BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor
    BlackmanWindow CastLike Ceil Celu CenterCropPad Col2Im Compress ConcatFromSequence ConvInteger Cosh CumSum
    DeformConv Det DFT DynamicQuantizeLinear Einsum GatherND GlobalLpPool GridSample GroupNormalization
    HammingWindow HannWindow Hardmax IsInf IsNaN Loop LpPool MatMulInteger Mean MelWeightMatrix Multinomial Neg
    NegativeLogLikelihoodLoss NonMaxSuppression NonZero Not OneHot Optional OptionalGetElement OptionalHasElement
    Or QLinearConv QLinearMatMul RandomNormal RandomNormalLike RandomUniform RandomUniformLike Range Reciprocal
    ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceProd ReduceSumSquare RNN Round Scan ScatterElements
    Selu SequenceAt SequenceConstruct SequenceEmpty SequenceErase SequenceInsert SequenceLength SequenceMap Shrink
    Sign Sinh SoftmaxCrossEntropyLoss Softsign SplitToSequence STFT StringNormalizer Sum Tan TfIdfVectorizer
    ThresholdedRelu TopK Trilu Unique Xor""".split()
)

_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
_GATHERS = ("Gather", "GatherElements", "GatherND")


def rknn_ops(model: onnx.ModelProto) -> list[str]:
    """Ops of the main graph that RKNN-Toolkit2's op table marks "Not Supported" (:data:`RKNN_UNSUPPORTED`)."""
    found = sorted(
        {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx") and n.op_type in RKNN_UNSUPPORTED}
    )
    return [f"op(s) {', '.join(found)} marked Not Supported in RKNN-Toolkit2's op table"] if found else []


def no_data_dependent_gather(model: onnx.ModelProto) -> list[str]:
    """Gather nodes whose indices depend on a float value (through every producer but ``Shape``/``Size``)."""
    from .rules import _inferred

    g = _inferred(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.value_info, *g.output)}
    types.update({t.name: t.data_type for t in g.initializer})
    producer = {o: n for n in g.node for o in n.output}
    found = []
    for i, node in enumerate(g.node):
        if node.op_type not in _GATHERS or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        stack, seen = [node.input[1]], set()
        while stack:
            name = stack.pop()
            if name in seen or not name:
                continue
            seen.add(name)
            if types.get(name) in _FLOATS:
                found.append(node.name or f"#{i}")
                break
            src = producer.get(name)
            if src is not None and src.op_type not in ("Shape", "Size"):
                stack.extend(src.input)
    if not found:
        return []
    return [
        f"{len(found)} gather node(s) with indices computed from float values (e.g. {found[0]}): data-dependent sampling"
    ]
