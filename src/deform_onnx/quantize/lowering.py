"""The float model :func:`~deform_onnx.quantize.quantize` quantizes: its deformable nodes lowered for the target, checked."""

from __future__ import annotations

import numpy as np
import onnx

from ..core.protos import default_opset

#: The ops (registry names) whose file nodes :func:`lower_for_quantization` lowers: the deformable convolutions.
QUANTIZED_OPS = ("deform_conv2d", "dcnv3")
#: The standard node ``method="native"`` writes deformable convolution as.
NATIVE_NODE = ("", "DeformConv")


def deform_kinds() -> set[tuple[str, str]]:
    """``(domain, op_type)`` of the nodes :func:`lower_for_quantization` lowers: every file node the registry
    gives :data:`QUANTIZED_OPS` (``DeformConv``, mmcv's, OpenVINO's, TensorRT's plugins, ``TRTDCNv3``, ...).
    """
    from ..ops.registry import OPS

    return {key for name in QUANTIZED_OPS for key in OPS[name].onnx_nodes}


def native_kinds() -> set[tuple[str, str]]:
    """The node kinds with torchvision's sampling, which ``method="native"`` writes as ``DeformConv`` (OpenVINO's
    ``DeformableConv2D`` has its own border rule; DCNv3 / DCNv4 are other ops): read from the node kinds' registry.
    """
    from ..ops.deform_conv import SOURCE_OPS

    return {key for key, src in SOURCE_OPS.items() if src.torchvision_border}


def _kinds_in(model: onnx.ModelProto, kinds: set[tuple[str, str]]) -> bool:
    from ..ops.deform_conv.source_kinds import key_of

    return any(key_of(n.domain, n.op_type) in kinds for n in model.graph.node)


#: The lowest default-domain opset of a quantized file: per-channel ``DequantizeLinear`` (its ``axis``) is opset 13.
QDQ_OPSET = 13


def lower_for_quantization(
    model: onnx.ModelProto, method: str | None, target: str
) -> tuple[onnx.ModelProto, str | None]:
    """``model`` with its deformable nodes lowered in the integer-contraction form (or as it is).

    ``DeformConv`` and plugin nodes (mmcv's, TensorRT's) of a file below opset 19 (a file rebuilt by :mod:`.rebuild`, an
    mmdeploy export) take the model to opset 19 where they stay ``DeformConv`` (``method="native"``) or become
    its sampler; a file below the method's own opset (grid_sample: 16) is taken to it.
    """
    if not _kinds_in(model, deform_kinds()):
        return model, None
    from ..builder.forms import graph_forms
    from ..ops.registry import lowest_opset
    from ..rewrite import lower
    from ..targets import resolve_target

    opset = default_opset(model)
    native = native_kinds()
    native_below = opset is not None and opset < 19 and _kinds_in(model, native)
    if method == "native":  # plugin nodes become DeformConv at any opset (ONNX Runtime has no kernel for them)
        plugin = _kinds_in(model, native - {NATIVE_NODE})
        return (lower(model, method="native", opset=max(opset or 19, 19)) if native_below or plugin else model), None

    if method is None:
        method = resolve_target("tensorrt").method if target == "tensorrt" else "grid_sample"
    # ONNX Runtime: the weight-first contraction (U8S8 MatMulIntegerToFloat, no transposes), its columns
    # sampled by its own DeformConv kernel where it has one; TensorRT: weight second, GridSample.
    forms = ["integer contraction"]
    sampler = target == "onnxruntime" and ort_has_deform_conv()
    if target == "onnxruntime":
        forms += ["weight first"] + (["DeformConv sampler"] if sampler else [])
    # The DeformConv sampler needs opset 19: a rebuilt opset-17 file is converted (onnx's version converter).
    up = 19 if sampler and native_below and method != "gather" else None  # gather samples with its own Gathers
    if up is None and opset is not None and opset < lowest_opset(method):
        up = lowest_opset(method)  # e.g. an opset-13 mmdeploy file: grid_sample needs 16 (quantize takes no opset)
    with graph_forms(forms):
        lowered = lower(model, method=method, opset=up, target="tensorrt" if target == "tensorrt" else None)
    _drop_unused_initializers(lowered)
    return lowered, method


def raise_to_qdq_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` at opset :data:`QDQ_OPSET` when it is below (onnx's version converter, through ``lower``).

    ONNX Runtime's quantizer writes per-channel ``DequantizeLinear`` with an ``axis`` at any opset, which
    is invalid below 13 (an opset-11 gather export failed ``onnx.checker`` after quantizing).
    """
    opset = default_opset(model)
    if opset is None or opset >= QDQ_OPSET:
        return model
    from ..rewrite import lower

    return lower(model, opset=QDQ_OPSET)


def opset_note(model: onnx.ModelProto, lowered: onnx.ModelProto) -> str | None:
    """The report's note when the INT8 file's opset is not ``model``'s, saying what needed it (``None``: the same)."""
    old, new = default_opset(model), default_opset(lowered)
    if old == new:
        return None
    if any(n.op_type == "DeformConv" for n in lowered.graph.node) and new is not None and new >= 19:
        why = "DeformConv needs 19"
    elif new == QDQ_OPSET:
        why = f"per-channel DequantizeLinear needs {QDQ_OPSET}"
    else:
        why = "the lowering's GridSample needs 16"
    return f"the INT8 file is at opset {new} (the file's: {old}): {why}"


def _drop_unused_initializers(model: onnx.ModelProto) -> None:
    """Drop the weights the lowering read as constants and no node reads (ONNX Runtime warns about each)."""
    used = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    kept = [t for t in model.graph.initializer if t.name in used]
    if len(kept) < len(model.graph.initializer):
        del model.graph.initializer[:]
        model.graph.initializer.extend(kept)


#: How to quantize without the lowering check, as the error names it (Python, then CLI).
SKIP_OPTION = "skip_lowering_check=True (CLI: --skip-lowering-check)"


def check_lowering(src, model: onnx.ModelProto, lowered: onnx.ModelProto, evaluations: list[dict]) -> None:
    """Refuse a lowered float model whose outputs miss ``src``'s on any evaluation input, per element and output.

    The quantized file is measured against the lowered float model, so a wrong lowering would go unseen
    there. Every output is compared element by element at verification's tolerance for its dtype
    (:func:`~deform_onnx.exporting.verification.tolerance_for`: float32 ``1e-4 + 1e-4*|x|``, integers
    exactly), on every input: a fault in a small-valued part of an output is not hidden by a large part
    elsewhere. ``src``'s outputs come from ONNX Runtime on ``src``, or, where it cannot run ``src`` (mmcv
    nodes, ``DeformConv`` below opset 19), on ``src`` re-stamped as the standard ``DeformConv`` (the
    reference of ``deform-onnx check``: ONNX Runtime's own kernel, which matches torchvision).

    Raises:
        ValueError: the lowered model misses ``src`` (naming the output, the input, the worst element and the
            tolerance) or has another number of outputs; or the check cannot run (neither way of running
            ``src`` works): one line naming why and :data:`SKIP_OPTION`, the explicit way to quantize without it.
    """
    from .timing import ort_session

    wants, why = source_outputs(model, evaluations)
    if wants is None:
        raise ValueError(
            f"{src}: the lowered float model cannot be checked against the original ({why}), so a wrong lowering "
            f"would go unseen in the quantized file; pass {SKIP_OPTION} to quantize without that check"
        )
    session = ort_session(lowered)
    names = [o.name for o in model.graph.output]
    for i, (evaluation, want) in enumerate(zip(evaluations, wants, strict=True)):
        got = session.run(None, evaluation)
        if len(got) != len(want):
            raise ValueError(f"{src}: the lowered float model has {len(got)} outputs, the original {len(want)} "
                             f"({', '.join(names)}); nothing written: please report this model")  # fmt: skip
        for name, g, w in zip(names, got, want):
            miss = elementwise_miss(np.asarray(g), np.asarray(w))
            if miss is not None:
                on = f" on evaluation input {i + 1} of {len(evaluations)}" if len(evaluations) > 1 else ""
                raise ValueError(f"{src}: the lowered float model's output {name!r}{on} {miss} (the reference: the "
                                 "original model); nothing written: please report this model")  # fmt: skip


def elementwise_miss(got: np.ndarray, want: np.ndarray) -> str | None:
    """How ``got`` misses ``want`` at verification's tolerance for ``want``'s dtype, in words (``None``: every
    element is within it): :func:`deform_onnx.proof.compare.compare_output`, the one compare of the lowering check.
    """
    from ..proof.compare import compare_output, tolerance_for

    return compare_output("", got, want, tolerance_for(want.dtype)).failure


def skipped_note(src) -> str:
    """The report's note when the caller skipped :func:`check_lowering`."""
    return f"the lowered float model was not checked against {src} ({SKIP_OPTION} was given)"


def source_outputs(model: onnx.ModelProto, evaluations: list[dict]) -> tuple[list[list] | None, str | None]:
    """``model``'s outputs on each of ``evaluations`` in ONNX Runtime, or on its ``DeformConv`` re-stamp;
    ``(None, why)`` when neither runs.
    """
    from ..rewrite import lower
    from ..runtimes.deadline import one_line
    from .timing import ort_session

    try:
        session = ort_session(model)
        return [session.run(None, e) for e in evaluations], None
    except Exception as exc:  # noqa: BLE001 - nodes ONNX Runtime has no kernel for: try the re-stamp
        first = one_line(exc)
    current = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 19)
    opset = max(current, 19)
    try:
        session = ort_session(lower(model, method="native", opset=opset))
        return [session.run(None, e) for e in evaluations], None
    except Exception as exc:  # noqa: BLE001 - said in the one-line error
        return None, (f"ONNX Runtime cannot run it: {first[:120]}; nor its deformable nodes re-stamped as DeformConv "
                      f"at opset {opset}: {one_line(exc)[:120]}")  # fmt: skip


def ort_has_deform_conv() -> bool:
    """Whether the installed ONNX Runtime has a ``DeformConv`` kernel (1.25 on: microsoft/onnxruntime#27393)."""
    import onnxruntime
    from packaging.version import Version

    return Version(onnxruntime.__version__.split("+")[0]) >= Version("1.25")


def pre_process(quant_pre_process, src: str, dst: str) -> None:
    """ONNX Runtime's ``quant_pre_process``; without its symbolic shape inference where that fails.

    Its symbolic shape inference asserts on a ``Range`` over a dynamic size (onnxruntime's
    ``symbolic_shape_infer._infer_Range``: ``assert len(x) == 1``), which every dynamic file of the
    lowerings holds; ONNX's own shape inference still runs, and quantization does not need the symbols.
    """
    try:
        quant_pre_process(src, dst)
    except Exception:  # noqa: BLE001 - any failure of the optional symbolic pass: retry without it
        quant_pre_process(src, dst, skip_symbolic_shape=True)
