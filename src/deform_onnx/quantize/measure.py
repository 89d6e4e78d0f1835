"""quantize's measurements of the INT8 file against the float model, over every evaluation input.

The per-layer table (:class:`~.report.LayerError`, worst over the inputs), each graph output's accuracy
(:class:`~.gate.OutputAccuracy`, what the gate holds), and how far the sampling coordinates moved.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..core.protos import inferred_dims
from .gate import output_accuracy
from .placement import LINEAR_OPS, SAMPLERS, Placement
from .report import LayerError, QuantizeReport, compare
from .timing import ort_session


def measure(
    report: QuantizeReport,
    pre: onnx.ModelProto,
    quantized: onnx.ModelProto,
    placement: Placement,
    evaluations: list[dict],
) -> None:
    """Fill the per-layer table, each output's accuracy and the sample shift, over every input of ``evaluations``.

    ``pre``: the float model that was quantized; ``quantized``: the INT8 model. Each layer's row is its worst
    input (smallest cosine, largest errors); the sample shift is the largest over the inputs, its mean over all.
    """
    nodes = {n.name: n for n in pre.graph.node}
    rows: list[tuple[str, str, str, str]] = []  # tensor, node, op, role
    for name, op, why in report.quantized:
        if op in LINEAR_OPS:
            rows.append((nodes[name].output[0], name, op, why))
    for name in placement.samplers:
        rows.append((nodes[name].output[0], name, nodes[name].op_type, "sampler (float)"))
    outputs = [o.name for o in pre.graph.output]
    rows += [(o, "", "output", "graph output") for o in outputs]
    grid_tensors = [t for _, t in placement.grids]
    data_tensors = [nodes[s].input[SAMPLERS[nodes[s].op_type][0]] for s, _ in placement.grids]
    watch = list(dict.fromkeys([r[0] for r in rows] + grid_tensors))
    shapes = inferred_dims(pre)
    unknown = [d for d in dict.fromkeys(data_tensors) if not _static_4d(shapes.get(d))]  # sizes read at run time
    float_watch = list(dict.fromkeys(watch + unknown))
    q_names = {t for n in quantized.graph.node for t in n.output}
    q_watch = [t for t in watch if t in q_names or t in outputs]
    float_session = ort_session(_with_outputs(pre, float_watch))
    q_session = ort_session(_with_outputs(quantized, q_watch))
    errors: dict[int, list[tuple[float, float, float]]] = {}
    reference, got = [], []
    shift, total, count = 0.0, 0.0, 0
    for evaluation in evaluations:
        float_run = dict(zip(float_watch, float_session.run(float_watch, evaluation)))
        for d in unknown:
            shapes[d] = list(np.shape(float_run[d]))
        q_run = dict(zip(q_watch, q_session.run(q_watch, evaluation)))
        for k, (tensor, *_) in enumerate(rows):
            if tensor in q_run:
                errors.setdefault(k, []).append(compare(float_run[tensor], q_run[tensor]))
        reference.append([float_run[o] for o in outputs])
        got.append([q_run[o] for o in outputs])
        s, t, c = _shift(placement, nodes, data_tensors, shapes, (float_run, q_run))
        shift, total, count = max(shift, s), total + t, count + c
    for k, found in errors.items():
        cosines, max_abs, rel = zip(*found)
        report.layers.append(LayerError(*rows[k], min(cosines), max(max_abs), max(rel)))
    report.outputs = output_accuracy(outputs, reference, got)
    report.eval_samples = len(evaluations)
    report.output_cosine = min(a.cosine for a in report.outputs)
    if count:  # else no coordinate tensor survived quantization under its name: not measured
        report.sample_shift_px, report.mean_sample_shift_px = shift, total / count


def _shift(placement: Placement, nodes: dict, data_tensors: list[str], shapes: dict, runs) -> tuple[float, float, int]:
    """``(largest, sum, count)`` of the sampling coordinates' moves in pixels on one input (``runs``: float, int8)."""
    float_run, q_run = runs
    shift, total, count = 0.0, 0.0, 0
    for (sampler, grid), data in zip(placement.grids, data_tensors):
        if grid not in q_run:
            continue
        delta = np.abs(np.asarray(float_run[grid], np.float64) - np.asarray(q_run[grid], np.float64))
        op = nodes[sampler].op_type
        if op == "GridSample":  # normalised (x, y) -> pixels: size / 2 per unit (align_corners=0)
            shape = shapes.get(data)
            if shape is None or not _static_4d(shape):
                continue
            delta = delta * (np.array([shape[3], shape[2]], np.float64) / 2.0)
        elif op.startswith("Gather"):  # a changed index moves a corner by at least one pixel
            delta = (delta > 0).astype(np.float64)
        if delta.size:
            shift, total, count = max(shift, float(delta.max())), total + float(delta.sum()), count + delta.size
    return shift, total, count


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    have = {o.name for o in copy.graph.output}
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
    for name in names:
        if name not in have:
            elem = types.get(name) or onnx.TensorProto.FLOAT
            copy.graph.output.append(onnx.helper.make_tensor_value_info(name, elem, None))
    return copy


def _static_4d(shape) -> bool:
    return shape is not None and len(shape) == 4 and all(isinstance(d, int) and d > 0 for d in shape[2:])
