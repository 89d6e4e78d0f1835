"""The target graph rules ``F.grid_sample``'s GridSample nodes bring (:mod:`deform_onnx.targets.rules`).

Targets name them in their ``options`` (``Target.grid_sample`` implies the 5-D and cubic ones).
"""

from __future__ import annotations

import onnx

from ...targets.rules import RuleFn, _inferred, _nodes  # the rules' own graph readers


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def no_gridsample_20(model: onnx.ModelProto) -> list[str]:
    """GridSample-20 spells bilinear ``mode="linear"``; readers that know only ``"bilinear"`` sample nearest."""
    if _opset(model) < 20:
        return []
    found = _nodes(model, "GridSample")
    return [f"GridSample-20 node(s) {', '.join(found[:3])} (mode 'linear') at opset {_opset(model)}"] if found else []


def _gridsamples(model: onnx.ModelProto) -> list[tuple[str, str, int | None]]:
    """``(name, mode, input rank or None)`` of the main graph's GridSample nodes."""
    found = [n for n in model.graph.node if n.op_type == "GridSample" and n.domain in ("", "ai.onnx")]
    if not found:
        return []
    g = _inferred(model).graph
    ranks = {
        v.name: len(v.type.tensor_type.shape.dim)
        for v in (*g.input, *g.value_info)
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")
    }
    ranks.update({t.name: len(t.dims) for t in g.initializer})
    out = []
    for i, n in enumerate(found):
        mode = next((a.s.decode() for a in n.attribute if a.name == "mode"), "linear")
        out.append((n.name or f"#{i}", mode, ranks.get(n.input[0])))
    return out


def no_5d_gridsample(model: onnx.ModelProto) -> list[str]:
    """5-D GridSample (GridSample-20 N-D): OpenVINO rejects it (openvinotoolkit/openvino#37770), TensorRT's is 4-D."""
    found = [name for name, _, rank in _gridsamples(model) if rank is not None and rank > 4]
    return [f"5-D GridSample node(s) {', '.join(found[:3])}"] if found else []


def no_gridsample_cubic(model: onnx.ModelProto) -> list[str]:
    """GridSample mode cubic / bicubic: wrong or missing where the target has not been measured to match PyTorch."""
    found = [name for name, mode, _ in _gridsamples(model) if mode in ("cubic", "bicubic")]
    return [f"GridSample cubic node(s) {', '.join(found[:3])}"] if found else []


def no_gridsample_reflection(model: onnx.ModelProto) -> list[str]:
    """GridSample ``padding_mode="reflection"``: MNN 3.6.1 samples it wrong (measured here, scripts/op_matrix.py)."""
    found = [
        n.name or f"#{i}"
        for i, n in enumerate(x for x in model.graph.node if x.op_type == "GridSample" and x.domain in ("", "ai.onnx"))
        if any(a.name == "padding_mode" and a.s == b"reflection" for a in n.attribute)
    ]
    return [f"GridSample reflection node(s) {', '.join(found[:3])}"] if found else []


def gridsample_batch_1(model: onnx.ModelProto) -> list[str]:
    """GridSample on a batch of one: ncnn has no batch axis, and a GridSample of batch 2 runs there with an output
    of another shape (measured here: pnnx 20261020 -> ncnn 1.0.20261020, ``F.grid_sample`` on ``[2, 4, 8, 8]``;
    batch 1 matches within 1.2e-7). A dynamic batch counts as more than one.
    """
    g = _inferred(model).graph
    batch = {
        v.name: (v.type.tensor_type.shape.dim[0].dim_value or None) if v.type.tensor_type.shape.dim else None
        for v in (*g.input, *g.value_info)
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")
    }
    found = [
        f"{n.name or n.output[0]} (batch {batch.get(n.input[0]) or 'dynamic'})"
        for n in model.graph.node
        if n.op_type == "GridSample" and n.domain in ("", "ai.onnx") and batch.get(n.input[0]) != 1
    ]
    inits = {t.name for t in g.initializer}
    images = [i for i in g.input if i.name not in inits and len(i.type.tensor_type.shape.dim) >= 3]
    if any(batch.get(i.name) != 1 for i in images):
        hint = " (export with batch 1 and run the extractor once per image)"
    else:  # the model's code made the batch: DCNv3's groups or an MSDA core's heads folded into it
        hint = (
            " (groups or heads folded into the batch by the model's code. InternImage's dcnv3_core_pytorch: call "
            "deform_onnx.ops.dcnv3.dcnv3_core with the same arguments, which samples each group apart for ncnn. "
            "An MSDA core's bs * n_heads (Deformable DETR, RT-DETR, D-FINE: value_l.reshape(bs * n_head, c, h, w)) "
            "has no ncnn form here: export it for a runtime with a batch axis (target 'mnn', 'openvino', "
            "'onnxruntime', 'tvm'))"
        )
    return (
        [f"GridSample node(s) over a batch other than 1, which ncnn has no axis for: {', '.join(found[:3])}{hint}"]
        if (found)
        else []
    )


def no_gridsample(model: onnx.ModelProto) -> list[str]:
    """GridSample nodes: runtimes and converters without a GridSample kernel refuse the file."""
    found = _nodes(model, "GridSample")
    return [f"GridSample node(s) {', '.join(found[:3])}"] if found else []


#: Rule name -> check (joined with the targets' own by :data:`deform_onnx.targets.rules.RULES`).
RULES: dict[str, RuleFn] = {
    "no GridSample-20": no_gridsample_20,
    "no GridSample": no_gridsample,
    "no 5-D GridSample": no_5d_gridsample,
    "no GridSample cubic": no_gridsample_cubic,
    "no GridSample reflection": no_gridsample_reflection,
    "GridSample batch 1": gridsample_batch_1,
}
