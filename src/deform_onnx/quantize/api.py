""":func:`quantize`: an INT8 file of a deformable model, placed so that it keeps accuracy (see :mod:`.placement`)."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx

from ..core.atomic_io import check_output_path, commit_copies
from ..core.protos import dims
from .calibration import Preprocess, Reader, eval_feeds, feeds
from .from_model import is_module
from .gate import DEFAULT_MAX_ERROR, DEFAULT_MIN_COSINE, Bound, enforce
from .lowering import check_lowering, lower_for_quantization, opset_note, pre_process, raise_to_qdq_opset, skipped_note
from .measure import measure
from .placement import LAYOUT_OPS, LINEAR_OPS, Placement, place
from .rebuild import rebuild_deform_convs, rebuilt_note
from .report import HELD_OUT_NOTE, QuantizeReport, form_written
from .tensorrt import tensorrt_violations as tensorrt_violations
from .timing import fused_kernels, median_ms, slower_note
from .weight_first import overrides, quantize_before_layout

#: Targets and the quantizer each uses.
TARGETS = {"onnxruntime": "onnxruntime.quantization", "tensorrt": "onnxruntime.quantization", "openvino": "nncf"}

Progress = Callable[[str, int, int], None]


def quantize(
    src,
    dst: str | os.PathLike,
    calibration,
    *,
    args=None,
    target: str | None = None,
    method: str | None = None,
    preprocess: Preprocess | None = None,
    eval_inputs=None,
    per_channel: bool = True,
    quantize_offset_path: bool = False,
    skip_lowering_check: bool = False,
    min_cosine: float = DEFAULT_MIN_COSINE,
    max_error: float = DEFAULT_MAX_ERROR,
    accept: bool = False,
    progress: Progress | None = None,
) -> QuantizeReport:
    """Write an INT8 (QDQ) version of the float ONNX file (or PyTorch model) ``src`` to ``dst``, calibrated on ``calibration``.

    Built on the field's quantizers: ``onnxruntime.quantization``
    (``quant_pre_process``, then ``quantize_static``: QDQ format, MinMax
    calibration, per-channel int8 weights) for ONNX Runtime and TensorRT, and
    nncf (``nncf.quantize`` on the OpenVINO model read with
    :func:`deform_onnx.openvino.extension`) for OpenVINO.

    Deformable-convolution nodes (``DeformConv``, mmcv's) are first lowered to
    standard ops (``method``, default ``grid_sample``; the target's for
    TensorRT) with the ``"integer contraction"`` form
    (:mod:`deform_onnx.ops.deform_conv.integer_contraction`), so that the
    contraction becomes ``MatMul`` on 2-D constant weights, which ONNX Runtime
    fuses into ``MatMulIntegerToFloat``. For ONNX Runtime the weight comes
    first (``"weight first"``: U8S8, no transposes) and, with ONNX Runtime >=
    1.25 and an opset >= 19 file, the columns are sampled by its own
    ``DeformConv`` kernel (``"DeformConv sampler"``,
    :mod:`deform_onnx.ops.deform_conv.sampler_columns`; the file then needs
    ONNX Runtime >= 1.25). The lowered float model is checked against
    ``src`` on the evaluation sample before quantizing
    (:func:`~deform_onnx.quantize.lowering.check_lowering`; ``src`` re-stamped
    as ``DeformConv`` where ONNX Runtime cannot run it; ``skip_lowering_check``).
    ``method="native"`` keeps ``DeformConv`` (float) and quantizes the rest.
    An already-lowered file (a default export) reaches the
    same form: the layers its export recorded are rebuilt as ``DeformConv``
    first (:mod:`.rebuild`; weights read back from the file), and the INT8
    file is then at opset 19 for the DeformConv sampler. A PyTorch model
    (``src`` a ``torch.nn.Module``, with ``args``) is exported first for this
    (:func:`~.from_model.export_for_quantization`).

    Placement (:mod:`.placement`): the contraction and the model's
    ``Conv``/``MatMul``/``Gemm`` are quantized; the offset path (offset and
    mask predictors, sampling coordinates, index and corner-weight
    arithmetic), the samplers and the mask product stay float. Per target:

    - ``"onnxruntime"`` (default): uint8 activations, int8 weights, no Q/DQ on
      ``MatMul``/``Gemm`` outputs (so ONNX Runtime's ``MatMulQDQRules`` pick
      ``MatMulIntegerToFloat``); Conv outputs quantized (``ConvQDQRules``
      need the output Q for ``QLinearConv``).
    - ``"tensorrt"``: TensorRT's explicit quantization: symmetric signed int8
      (zero point 0) for activations and weights, per-channel weights, Q/DQ
      on the inputs of weighted ops only, none on their outputs (NVIDIA,
      "Explicit Quantization" and "Working with Quantized Types", TensorRT
      documentation, docs.nvidia.com/deeplearning/tensorrt/latest/inference-library/);
        biases stay float (TensorRT's DequantizeLinear takes no int32); the
      result is checked by :func:`tensorrt_violations`.
    - ``"openvino"``: nncf; ``dst`` is an OpenVINO IR (``.xml`` + ``.bin``);
      the offset path goes to nncf's ``IgnoredScope``.

    Args:
        src: float ONNX file (float32 inputs), or a ``torch.nn.Module`` calling ``deform_conv2d`` (then ``args``).
        dst: output path (``.onnx``; ``.xml`` for ``openvino``). Written atomically.
        calibration: an iterable of samples (dicts by input name, tuples in input order, or
            arrays), an ``.npz`` file, or a folder of images (with ``preprocess``);
            see :func:`deform_onnx.quantize.calibration.feeds`.
        args: the module's example inputs (a tuple of tensors, as for :func:`deform_onnx.export`); only with a module.
        target: ``"onnxruntime"`` (default), ``"tensorrt"`` or ``"openvino"``.
        method: lowering of deformable nodes (``"grid_sample"``, ``"gather"``, ``"native"`` to keep them).
        preprocess: how a folder's images become the input (:class:`Preprocess`).
        eval_inputs: held-out inputs the INT8 file is measured and gated on: one sample (a dict, a tuple in
            input order, an array), a list of samples, or an ``.npz``/folder as ``calibration``; default: every
            calibration sample (then the measure is not held out; a note says so).
        per_channel: per-output-channel weight scales (default on).
        quantize_offset_path: also quantize the offset path's convolutions (to measure the
            harm; the report's ``sample_shift_px`` shows how far samples move).
        skip_lowering_check: do not check the lowered float model against ``src`` (the report
            notes it). Without it, a check that cannot run (ONNX Runtime runs neither ``src`` nor its
            ``DeformConv`` re-stamp) is a ``ValueError``: the INT8 file is measured against the lowered
            model, so a wrong lowering would go unseen.
        min_cosine, max_error: the accuracy gate (:mod:`deform_onnx.quantize.gate`): on each evaluation input,
            each output's cosine to the float model's at least ``min_cosine`` (default 0.99) and its largest
            error at most ``max_error`` times its largest float value (default 0.35); else nothing is written.
        accept: write a file below that bound anyway (``report.accepted``; a note says by how much).
        progress: called as ``progress(step, done, total)``.

    Returns:
        A :class:`QuantizeReport`.

    Raises:
        AccuracyError: the INT8 file misses the accuracy bound on some output (without ``accept``): one line
            naming the output, the input and by how much; nothing written.
        ValueError: unknown target or method, a bound out of range, ``dst`` equal to ``src`` or of the wrong suffix, a
            ``src`` that is no ONNX model or has inputs other than float32, a lowering that misses ``src``
            or cannot be checked against it (see ``skip_lowering_check``),
            bad calibration data (see :func:`~deform_onnx.quantize.calibration.feeds`), a model
            with nothing to quantize, or a TensorRT placement rule broken.
        FileNotFoundError: ``src`` or ``dst``'s folder is missing.
        NotADirectoryError, PermissionError: ``dst`` is a folder, its folder is a file, or no file can be
            made in its folder (checked first, before any work).
        ImportError: nncf is not installed (``target="openvino"``; ``pip install deform-onnx[quantize]``).
    """
    bound = Bound(min_cosine, max_error, accept)  # a bound out of range: before any work (a module's export too)
    if is_module(src):
        from .from_model import quantize_model

        return quantize_model(
            src, dst, calibration, args=args, target=target, method=method, preprocess=preprocess,
            eval_inputs=eval_inputs, per_channel=per_channel, quantize_offset_path=quantize_offset_path,
            skip_lowering_check=skip_lowering_check, min_cosine=min_cosine, max_error=max_error, accept=accept,
            progress=progress,
        )  # fmt: skip
    if args is not None:
        raise ValueError("args= is for a PyTorch model as src; a file's inputs come from the file")
    src, dst = Path(src), Path(dst)
    target = target or "onnxruntime"
    if target not in TARGETS:
        raise ValueError(f"target {target!r}: use one of {', '.join(TARGETS)}")
    want = ".xml" if target == "openvino" else ".onnx"
    if dst.suffix != want:
        raise ValueError(f"dst {dst}: target {target!r} writes a {want} file; name it {dst.with_suffix(want).name}")
    if not src.is_file():
        raise FileNotFoundError(f"src {src}: no such file")
    if dst.resolve() == src.resolve():
        raise ValueError(f"dst {dst} is src: give another path")
    check_output_path(dst, "dst")  # before any work: a folder it cannot write fails here, not after quantizing
    if method not in (None, "grid_sample", "gather", "native"):
        raise ValueError(f"method {method!r}: use grid_sample, gather or native")
    step = progress or (lambda *_: None)
    step("read", 0, 1)
    try:
        model = onnx.load(str(src))
    except Exception as exc:
        raise ValueError(
            f"src {src}: not an ONNX model ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        ) from exc
    inputs = _inputs(model)
    kinds = {v.name: v.type.tensor_type.elem_type for v in model.graph.input}
    not_float = [n for n, _ in inputs if kinds.get(n) != onnx.TensorProto.FLOAT]
    if not_float:
        raise ValueError(
            f"src {src}: inputs {not_float} are not float32; quantize a float32 export "
            "(the quantizers calibrate float32 graphs)"
        )
    samples = feeds(calibration, inputs, preprocess)
    evaluations = samples if eval_inputs is None else eval_feeds(eval_inputs, inputs, preprocess)
    if target == "openvino":
        from .openvino import quantize_openvino

        return quantize_openvino(src, dst, model, samples, evaluations, step, bound, eval_given=eval_inputs is not None)
    return _quantize_onnx(
        _Job(src, dst, model, samples, evaluations, target, method, per_channel, quantize_offset_path,
             skip_lowering_check, step, bound, eval_given=eval_inputs is not None)
    )  # fmt: skip


def _inputs(model: onnx.ModelProto) -> list[tuple[str, list]]:
    inits = {t.name for t in model.graph.initializer}
    out = []
    for value in model.graph.input:
        if value.name in inits:
            continue
        out.append((value.name, dims(value.type.tensor_type, symbols=True)))
    return out


@dataclass(frozen=True)
class _Job:
    """One ONNX Runtime / TensorRT quantization, as :func:`quantize` checked it.

    Attributes:
        src: the float file; ``dst``: the output path; ``model``: ``src`` read.
        samples: the calibration feeds; ``evaluations``: the feeds the report measures and the gate holds on.
        target: ``"onnxruntime"`` or ``"tensorrt"``; ``method``: the lowering (``None``: the default).
        per_channel, quantize_offset_path, skip_lowering_check: as :func:`quantize` takes them.
        step: the progress callback; ``bound``: the accuracy gate; ``eval_given``: the evaluation feeds were
            given (held out).
    """

    src: Path
    dst: Path
    model: onnx.ModelProto
    samples: list
    evaluations: list[dict]
    target: str
    method: str | None
    per_channel: bool
    quantize_offset_path: bool
    skip_lowering_check: bool
    step: Progress
    bound: Bound
    eval_given: bool


def _quantize_onnx(job: _Job) -> QuantizeReport:
    """Lower, pre-process, place, quantize (``quantize_static``), check, measure and write one file."""
    try:
        from onnxruntime.quantization.shape_inference import quant_pre_process
    except ImportError as exc:
        raise ImportError(
            "deform_onnx.quantize needs ONNX Runtime's quantizer: pip install 'deform-onnx[quantize]' "
            "(or any onnxruntime distribution)"
        ) from exc

    job.step("lower", 0, 1)
    # A lowered file that recorded its layers (deform_onnx.export): each back as DeformConv first (.rebuild).
    source, rebuilt, rebuild_notes = rebuild_deform_convs(job.model, job.evaluations[0])
    lowered, used = lower_for_quantization(source, job.method, job.target)
    lowered = raise_to_qdq_opset(lowered)
    moved = opset_note(job.model, lowered)
    checked = used is not None or bool(rebuilt) or moved is not None
    if checked and not job.skip_lowering_check:
        check_lowering(job.src, job.model, lowered, job.evaluations)
    with tempfile.TemporaryDirectory(prefix="deform_onnx_quantize_") as tmp:
        tmp_in, tmp_pre, tmp_q = (os.path.join(tmp, n) for n in ("float.onnx", "pre.onnx", "int8.onnx"))
        onnx.save(lowered, tmp_in)
        job.step("pre-process", 0, 1)
        pre_process(quant_pre_process, tmp_in, tmp_pre)
        pre = onnx.load(tmp_pre)
        _name_nodes(pre)
        onnx.save(pre, tmp_pre)
        placement = place(
            pre, quantize_offset_path=job.quantize_offset_path, allow_computed_bias=job.target == "tensorrt"
        )
        if not placement.quantize:
            raise ValueError(f"{job.src}: no Conv, MatMul or Gemm outside the offset path: nothing to quantize")
        _quantize_static(job, tmp_pre, tmp_q, placement)
        job.step("check", 0, 1)
        quantized = _checked(job, tmp_q, placement)
        report = QuantizeReport(
            src=job.src, dst=job.dst, target=job.target, quantizer=TARGETS[job.target], method=used,
            samples=len(job.samples), notes=list(rebuild_notes),
        )  # fmt: skip
        if rebuilt:
            report.notes.append(rebuilt_note(rebuilt, job.model, lowered))
        elif moved is not None:
            report.notes.append(moved)
        report.notes += _notes(job, used, lowered, placement)
        if checked and job.skip_lowering_check:
            report.notes.append(skipped_note(job.src))
        report.form, report.rebuilt = form_written(lowered, placement, used), rebuilt
        ops = {n.name: n.op_type for n in pre.graph.node}
        report.quantized = [(n, ops[n], placement.why_quantized.get(n, "")) for n in placement.quantize]
        report.kept_float = [(n, ops[n], why) for n, why in placement.keep_float.items()]
        job.step("measure", 0, 1)
        measure(report, pre, quantized, placement, job.evaluations)
        report.bound = str(job.bound)
        note = enforce(report.outputs, job.bound, len(job.evaluations), job.eval_given, job.dst)
        if note is not None:  # below the bound, written on request (accept=True)
            report.accepted = True
            report.notes.append(note)
        if job.target == "onnxruntime":
            _time(report, job, pre, tmp_q, tmp)
        commit_copies([(tmp_q, job.dst)])
    job.step("done", 1, 1)
    return report


def _quantize_static(job: _Job, tmp_pre: str, tmp_q: str, placement: Placement) -> None:
    """``onnxruntime.quantization.quantize_static`` with the placement and the target's options (QDQ, MinMax)."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    trt = job.target == "tensorrt"
    extra = {
        # No Q on the weighted ops' outputs: MatMulIntegerToFloat for ONNX Runtime; TensorRT's recommended placement.
        "OpTypesToExcludeOutputQuantization": list(LINEAR_OPS) if trt else ["MatMul", "Gemm"],
        "ActivationSymmetric": trt,
        "WeightSymmetric": True,
        # TensorRT's DequantizeLinear takes INT8/FP8/INT4/FP4, not int32: biases stay float there.
        "QuantizeBias": not trt,
        # Per output channel: the last axis of a MatMul weight ([C, Co], or [groups, C/g, Co/g] batched).
        "QDQOpTypePerChannelSupportToAxis": {"MatMul": -1},
    }
    if placement.weight_first and not trt:
        extra["TensorQuantOverrides"] = overrides(placement)
    total = len(job.samples)
    done = [0]

    def on_sample():
        done[0] += 1
        job.step("calibrate", done[0], total)

    root = logging.getLogger()  # the quantizer logs a warning per float Gemm it skips, on the root logger
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        quantize_static(
            tmp_pre,
            tmp_q,
            Reader(job.samples, on_sample),
            quant_format=QuantFormat.QDQ,
            per_channel=job.per_channel,
            activation_type=QuantType.QInt8 if trt else QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            # 7-bit weights: x86-64 CPUs without VNNI (AVX2, AVX-512F) multiply u8 x s8 with vpmaddubsw, whose
            # int16 pair sums saturate with full-range weights (onnxruntime's quantization docs, "reduce_range");
            # a file quantized without it missed the accuracy gate when run on such a CPU (measured, AMD EPYC AVX2)
            reduce_range=not trt,
            op_types_to_quantize=list(LINEAR_OPS + LAYOUT_OPS),
            nodes_to_quantize=placement.quantize,
            calibrate_method=CalibrationMethod.MinMax,
            extra_options=extra,
        )
    finally:
        root.setLevel(level)


def _checked(job: _Job, tmp_q: str, placement: Placement) -> onnx.ModelProto:
    """The quantized file with the float reads wired back and Q moved above the layout ops, checked (TensorRT's rules)."""
    quantized = onnx.load(tmp_q)
    if not job.quantize_offset_path:
        float_reads(quantized, set(placement.keep_float) | placement.offset_path)
    quantize_before_layout(quantized, placement)
    onnx.save(quantized, tmp_q)
    onnx.checker.check_model(quantized)
    if job.target == "tensorrt":
        found = tensorrt_violations(quantized, placement)
        if found:
            raise ValueError(f"target 'tensorrt': {found[0]}")
    return quantized


def _notes(job: _Job, used: str | None, lowered: onnx.ModelProto, placement: Placement) -> list[str]:
    """The report's notes: not held out, the DeformConv sampler's runtime need, a contraction left float."""
    notes: list[str] = []
    if not job.eval_given:
        notes.append(HELD_OUT_NOTE)
    if used is not None and any(n.op_type == "DeformConv" for n in lowered.graph.node):
        notes.append(
            "the columns are sampled by ONNX Runtime's DeformConv kernel (float; depthwise, one-hot weight, "
            "one per row band of a large map) and contracted on integers: the file needs ONNX Runtime >= 1.25"
        )
    if used is None and any(
        why.startswith(("Gemm with a computed C", "weight is MatMul's first")) for why in placement.keep_float.values()
    ):
        notes.append(
            "the contraction of this already-lowered file stays float (it has no record of its deformable "
            "layers: deform_onnx.export's dynamo exporter writes one): quantize the native file (DeformConv), "
            "or the PyTorch model (deform_onnx.quantize(model, ..., args=...)), which are lowered in the "
            "INT8 form first"
        )
    return notes


def _time(report: QuantizeReport, job: _Job, pre: onnx.ModelProto, tmp_q: str, tmp: str) -> None:
    """ONNX Runtime's fused integer kernels and the float and INT8 files' times (a note when INT8 is slower)."""
    report.fused = fused_kernels(tmp_q, tmp)
    report.float_ms = median_ms(job.model, job.evaluations[0]) or median_ms(pre, job.evaluations[0])
    report.int8_ms = median_ms(tmp_q, job.evaluations[0])
    if report.float_ms and report.int8_ms and (note := slower_note(report.float_ms, report.int8_ms)):
        report.notes.append(note)


def float_reads(model: onnx.ModelProto, keep: set[str]) -> int:
    """Let the float nodes ``keep`` read the float tensors the quantizer put a Q/DQ pair on; returns how many.

    ``quantize_static`` puts one ``QuantizeLinear -> DequantizeLinear`` pair on
    a tensor and sends every consumer through it, so an offset predictor or a
    sampler that shares its input with a quantized convolution would read the
    rounded features. Its input is wired back to the tensor before the pair,
    unless that tensor is the output of a ``Conv``/``MatMul``/``Gemm``: ONNX
    Runtime fuses a weighted op with its output ``Q`` only when the ``Q`` is its
    sole consumer (``ConvNodeGroupSelector``), and a second float reader would
    undo that fusion.
    """
    producer = {o: n for n in model.graph.node for o in n.output}
    inits = {t.name for t in model.graph.initializer}
    count = 0
    for node in model.graph.node:
        if node.name not in keep:
            continue
        for k, name in enumerate(node.input):
            dq = producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            q = producer.get(dq.input[0])
            if q is None or q.op_type != "QuantizeLinear" or q.input[0] in inits:
                continue
            source = producer.get(q.input[0])
            if source is not None and source.op_type in LINEAR_OPS:
                continue
            node.input[k] = q.input[0]
            count += 1
    return count


def _name_nodes(model: onnx.ModelProto) -> None:
    """Give every node a unique name (placement and ``nodes_to_quantize`` go by name)."""
    seen: set[str] = set()
    for i, node in enumerate(model.graph.node):
        if not node.name or node.name in seen:
            node.name = f"{node.op_type}_{i}"
        seen.add(node.name)
