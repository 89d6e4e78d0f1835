"""The reference outputs ``deform-onnx check`` compares every path with, fast at any size.

In order of preference:

1. ONNX Runtime on the model as it is, when that path ran.
2. ONNX Runtime on the model re-stamped as the standard ``DeformConv``
   (``lower(method="native")`` at opset ``max(current, 19)``): files that plain
   ONNX Runtime rejects (``DeformConv`` below opset 19, as ``torch.onnx.export``
   writes at ``opset_version=17``; mmcv nodes) then run on ORT's own kernel,
   which matches torchvision (docs/verification.md).
3. ``onnx.reference.ReferenceEvaluator`` (numpy) with every ``DeformConv``
   node evaluated by torchvision's ``deform_conv2d`` (the oracle of this
   package) instead of onnx's pure-Python loops, which took 89 s on a 16x16
   input. It shows progress node by node and stops at the deadline.
   For a file with MSDA or DCNv3 plugin nodes (mmdeploy's ``MMCVMultiScaleDeformableAttention``,
   TensorRT's ``MultiscaleDeformableAttnPlugin_TRT``, ``TRTDCNv3``) 2 would run the lowering under test
   itself (``lower(method="native")`` writes them in the same standard ops as every method): the file is
   evaluated as it is instead, each plugin node computed by the package's PyTorch references
   (:func:`~deform_onnx.ops.msda.op.ms_deform_attn_reference`, Deformable DETR's per-level
   ``F.grid_sample`` core; :func:`~deform_onnx.dcnv3_core`), not by a lowering.
4. For a file with OpenVINO's own nodes (``org.openvinotoolkit::DeformableConv2D``, whose border rule
   ``DeformConv`` cannot express, so 2 and 3 cannot run): OpenVINO on the file as it is (f32), the
   runtime that defines that node.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from .deadline import Deadline, one_line, ort_run

#: ``progress(description, completed, total)``; ``total`` is None when unknown.
Progress = Callable[[str, int, "int | None"], None]

#: Label of each reference, as the check table's title shows it.
ORT_AS_IS = "onnxruntime as is"
ORT_RESTAMPED = "onnxruntime DeformConv kernel (re-stamped at opset {opset})"
EVALUATOR = "onnx.reference with torchvision's deform_conv2d"
OPENVINO_AS_IS = "openvino as is (the runtime of the file's org.openvinotoolkit nodes)"
PLUGIN_EVALUATOR = "onnx.reference with the PyTorch references of the file's plugin nodes"
#: Plugin nodes whose ``lower(method="native")`` is the same standard-op lowering as every method's.
PLUGIN_NODES = {("mmdeploy", "MMCVMultiScaleDeformableAttention"), ("mmcv", "MMCVMultiScaleDeformableAttention"),
                ("", "MultiscaleDeformableAttnPlugin_TRT"), ("trt", "MultiscaleDeformableAttnPlugin_TRT"),
                ("mmdeploy", "TRTDCNv3")}  # fmt: skip


def _no_progress(description: str, completed: int, total: int | None) -> None:
    pass


def reference(
    model: str | os.PathLike,
    feeds: dict[str, np.ndarray],
    results: Sequence,
    *,
    timeout: float | None = None,
    progress: Progress | None = None,
) -> tuple[list[np.ndarray] | None, str]:
    """Outputs to compare every path with, and a label saying where they come from.

    Args:
        model: the ONNX file being checked.
        feeds: its inputs by name.
        results: the :class:`~deform_onnx.runtimes.PathResult` list of
            :func:`~deform_onnx.runtimes.run_paths` (an ORT "as is" row that ran
            is used directly).
        timeout: seconds each attempt may run (``None``: no limit).
        progress: called as the slow evaluator advances.

    Returns:
        ``(outputs, label)``, or ``(None, reason)`` when no reference could be
        computed (the reason is one line naming each attempt's failure).
    """
    progress = progress or _no_progress
    for r in results:
        if r.runtime == "onnxruntime" and r.path == "as is" and r.ran:
            return r.outputs, ORT_AS_IS
    from ..rewrite import default_opset, lower, read_model

    reasons = []
    try:
        ir_model = read_model(model)
        if any(node.domain == "org.openvinotoolkit" for node in ir_model.graph):
            for r in results:  # OpenVINO's own node: OpenVINO is the reference (f32, not its bf16 defaults row)
                if r.runtime == "openvino" and r.path in ("as is", "extension") and r.ran and not r.defaults:
                    return r.outputs, OPENVINO_AS_IS
        if any((node.domain, node.op_type) in PLUGIN_NODES for node in ir_model.graph):
            progress("reference: the plugin nodes' PyTorch references", 0, None)
            return _evaluate(str(model), feeds, Deadline(timeout), progress, _plugin_ops()), PLUGIN_EVALUATOR
        opset = max(default_opset(ir_model) or 19, 19)
        native = lower(model, method="native", opset=opset)
    except Exception as e:  # noqa: BLE001 - reported as the reason
        return None, f"no reference: lower(method='native') failed: {one_line(e)}"
    progress("reference: onnxruntime's DeformConv kernel", 0, None)
    try:
        return _ort(native, feeds, Deadline(timeout)), ORT_RESTAMPED.format(opset=opset)
    except Exception as e:  # noqa: BLE001 - next attempt
        reasons.append(f"onnxruntime at opset {opset}: {one_line(e)}")
    try:
        return _evaluate(native, feeds, Deadline(timeout), progress), EVALUATOR
    except Exception as e:  # noqa: BLE001
        reasons.append(f"onnx.reference: {one_line(e)}")
    return None, "no reference: " + "; ".join(reasons)


def _ort(model, feeds: dict[str, np.ndarray], deadline: Deadline) -> list[np.ndarray]:
    from .onnxruntime import session

    sess = session(model)
    names = [o.name for o in sess.get_outputs()]
    return [np.asarray(a) for a in ort_run(sess, names, feeds, deadline)]


def _evaluate(
    model, feeds: dict[str, np.ndarray], deadline: Deadline, progress: Progress, more: Sequence = ()
) -> list[np.ndarray]:
    """``ReferenceEvaluator`` with torchvision's DeformConv (and ``more`` ops), checking the deadline before each node."""
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(model, new_ops=[_deform_conv_op(), *more])
    nodes = list(getattr(evaluator, "rt_nodes_", []))  # onnx >= 1.13; without it: no per-node progress
    for index, node in enumerate(nodes):
        node.run = _watched(node.run, f"reference: {node.op_type}", index, len(nodes), deadline, progress)
    outputs = evaluator.run(None, feeds)
    deadline.check("the reference evaluator")
    return [np.asarray(o) for o in outputs]


def _watched(run, description: str, index: int, total: int, deadline: Deadline, progress: Progress):
    def watched(*args, **kwargs):
        deadline.check("the reference evaluator")
        progress(description, index, total)
        return run(*args, **kwargs)

    return watched


def _deform_conv_op():
    """An ``OpRun`` for ONNX ``DeformConv`` (opset 19) computed by ``torchvision.ops.deform_conv2d``."""
    import torch
    import torchvision
    from onnx.reference.op_run import OpRun

    class DeformConv(OpRun):
        op_domain = ""

        def _run(
            self,
            X,
            W,
            offset,
            B=None,
            mask=None,
            dilations=None,
            group=None,
            kernel_shape=None,
            offset_group=None,
            pads=None,
            strides=None,
        ):
            x = torch.from_numpy(np.ascontiguousarray(X))
            if pads is not None and any(pads):
                # torchvision pads symmetrically; zero-padding the input first is the same sampling
                # (a corner outside the image contributes 0 either way) and allows any ONNX pads.
                top, left, bottom, right = pads
                x = torch.nn.functional.pad(x, (left, right, top, bottom))
            y = torchvision.ops.deform_conv2d(
                x,
                torch.from_numpy(np.ascontiguousarray(offset)),
                torch.from_numpy(np.ascontiguousarray(W)),
                None if B is None else torch.from_numpy(np.ascontiguousarray(B)),
                stride=tuple(strides or (1, 1)),
                padding=0,
                dilation=tuple(dilations or (1, 1)),
                mask=None if mask is None else torch.from_numpy(np.ascontiguousarray(mask)),
            )
            return (y.numpy(),)

    return DeformConv


def _plugin_ops() -> list:
    """``OpRun`` classes for :data:`PLUGIN_NODES`, each computed by the package's PyTorch reference of its op."""
    import torch
    from onnx.reference.op_run import OpRun

    from ..ops.dcnv3.reference import dcnv3_core
    from ..ops.msda.op import ms_deform_attn_reference

    def t(a):
        return torch.from_numpy(np.array(a))  # a copy: the evaluator's arrays are read-only

    def msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
        return ms_deform_attn_reference(t(value), t(spatial_shapes).long(), t(sampling_locations), t(attention_weights))

    class MMCVMultiScaleDeformableAttention(OpRun):
        def _run(
            self, value, spatial_shapes, level_start_index, sampling_locations, attention_weights, im2col_step=None
        ):
            return (msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights).numpy(),)

    class MultiscaleDeformableAttnPlugin_TRT(OpRun):  # noqa: N801 - the node's op type
        def _run(self, value, spatial_shapes, level_start_index, sampling_locations, attention_weights):
            n, _, m, d = value.shape
            out = msda(value, spatial_shapes, level_start_index, sampling_locations, attention_weights)
            return (out.reshape(n, -1, m, d).numpy(),)  # the plugin's [N, Lq, M, D]

    class TRTDCNv3(OpRun):
        def _run(self, input, offset, mask, **attrs):  # the node's attributes, as OpRun passes them
            names = ("kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w",
                     "group", "group_channels", "offset_scale")  # fmt: skip
            kw = {name: attrs[name] for name in names}
            y = dcnv3_core(t(input), t(offset), t(mask), **kw, remove_center=bool(attrs.get("remove_center") or 0))
            return (y.numpy(),)

    ops = []
    for cls in (MMCVMultiScaleDeformableAttention, MultiscaleDeformableAttnPlugin_TRT, TRTDCNv3):
        for domain, op_type in PLUGIN_NODES:
            if op_type == cls.__name__:
                ops.append(type(cls.__name__, (cls,), {"op_domain": domain}))
    return ops


__all__ = ["reference", "ORT_AS_IS", "ORT_RESTAMPED", "EVALUATOR", "OPENVINO_AS_IS", "PLUGIN_EVALUATOR"]
