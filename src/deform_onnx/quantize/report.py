""":class:`QuantizeReport`: what :func:`deform_onnx.quantize` quantized, what it kept float and why, and the errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: The report's note when no held-out inputs were given (the CLI's option named beside the API's).
HELD_OUT_NOTE = (
    "errors measured (and the accuracy gate held) on the calibration samples, not on held-out inputs "
    "(pass eval_inputs=, CLI: --eval, for held-out ones)"
)


@dataclass
class LayerError:
    """One tensor of the float model against the same tensor of the quantized one, worst over the evaluation inputs.

    ``cosine``: the smallest cosine similarity of the flattened tensors; ``max_abs``:
    the largest absolute difference; ``rel_rms``: the largest RMS of the difference
    over the RMS of the float tensor (each over the inputs).
    """

    tensor: str
    node: str
    op: str
    role: str
    cosine: float
    max_abs: float
    rel_rms: float


@dataclass
class OutputAccuracy:
    """One graph output of the INT8 file against the float model, worst over the evaluation inputs.

    Attributes:
        name: the output's name.
        cosine: the smallest cosine similarity (flattened tensors) over the inputs; ``cosine_input``: its
            input (0-based, in evaluation order).
        max_error: the largest ``max|int8 - float| / max|float|`` over the inputs (the error relative to the
            output's scale on that input); ``error_input``: its input.
        max_abs, scale: ``max|int8 - float|`` and ``max|float|`` on ``error_input``.
    """

    name: str
    cosine: float
    cosine_input: int
    max_error: float
    error_input: int
    max_abs: float
    scale: float


@dataclass
class QuantizeReport:
    """The result of :func:`deform_onnx.quantize`.

    Attributes:
        src, dst: the float input (a path, or the PyTorch model's class and the form it was exported in)
            and the written quantized file.
        target: ``"onnxruntime"``, ``"tensorrt"`` or ``"openvino"``.
        quantizer: the library that placed the Q/DQ (``onnxruntime.quantization`` or ``nncf``).
        method: the lowering the deformable nodes were lowered with (``None``: none lowered).
        samples: the number of calibration samples.
        quantized: ``(node, op, why)`` of each quantized node.
        kept_float: ``(node, op, why)`` of each node deliberately left float.
        layers: per-layer errors (:class:`LayerError`), worst over the evaluation inputs.
        outputs: each graph output's accuracy against the float model (:class:`OutputAccuracy`), worst over
            the evaluation inputs: what the accuracy gate holds (:mod:`deform_onnx.quantize.gate`).
        eval_samples: how many evaluation inputs the errors cover (``eval_inputs``, else every calibration sample).
        bound: the accuracy bound the file was held to, in words.
        accepted: the file is below that bound and was written because ``accept=True`` was given (a note says
            by how much).
        output_cosine: the smallest cosine of a graph output to the float model's, over the evaluation inputs.
        sample_shift_px: the largest change of a sampling coordinate, in pixels
            over the evaluation inputs; with the offset path float this is what the
            quantized layers upstream pass on to the predictors (``None``: not measured).
        mean_sample_shift_px: the mean change of a sampling coordinate, in pixels.
        fused: integer kernels ONNX Runtime's optimizer made of the file
            (``QLinearConv``, ``MatMulIntegerToFloat`` ... -> count), for the onnxruntime target.
        float_ms, int8_ms: median milliseconds per call of the float file (``src``, or the lowered
            float model where ONNX Runtime cannot run ``src``) and of the written file on this
            machine (ONNX Runtime CPU, default session options; onnxruntime target only;
            indicative: one-off timings are load-sensitive). ``None``: not timed.
        form: the form of the INT8 file's deformable layers, read from the graph quantized
            (:func:`form_written`), e.g. ``"DeformConv sampler, weight-first integer contraction"``.
        rebuilt: deformable convolutions of an already-lowered ``src`` rebuilt from its export's record
            before lowering (:mod:`deform_onnx.quantize.rebuild`); 0 for a native file.
        notes: anything the caller should know (one line each).
    """

    src: Path | str
    dst: Path
    target: str
    quantizer: str
    method: str | None
    samples: int
    quantized: list[tuple[str, str, str]] = field(default_factory=list)
    kept_float: list[tuple[str, str, str]] = field(default_factory=list)
    layers: list[LayerError] = field(default_factory=list)
    outputs: list[OutputAccuracy] = field(default_factory=list)
    eval_samples: int = 0
    bound: str = ""
    accepted: bool = False
    output_cosine: float = float("nan")
    sample_shift_px: float | None = None
    mean_sample_shift_px: float | None = None
    fused: dict[str, int] = field(default_factory=dict)
    float_ms: float | None = None
    int8_ms: float | None = None
    notes: list[str] = field(default_factory=list)
    form: str = ""
    rebuilt: int = 0

    def reasons(self) -> dict[str, int]:
        """``{why: count}`` over quantized and kept-float nodes (what the placement decided, in short)."""
        counts: dict[str, int] = {}
        for _, op, why in self.quantized:
            key = f"quantized {op}: {why}"
            counts[key] = counts.get(key, 0) + 1
        for _, op, why in self.kept_float:
            key = f"float {op}: {why}"
            counts[key] = counts.get(key, 0) + 1
        return counts

    def table(self) -> str:
        """The per-layer error table as Markdown."""
        lines = ["| tensor | op | role | cosine | max abs err | rel RMS err |", "|---|---|---|---|---|---|"]
        for e in self.layers:
            lines.append(f"| {e.tensor} | {e.op} | {e.role} | {e.cosine:.5f} | {e.max_abs:.3g} | {e.rel_rms:.3g} |")
        return "\n".join(lines)

    def __str__(self) -> str:
        shift = (
            "not measured"
            if self.sample_shift_px is None
            else f"{self.sample_shift_px:.3g} px (mean {self.mean_sample_shift_px:.3g} px)"
        )
        head = [
            (
                f"{self.src} -> {self.dst} ({self.target}, {self.quantizer}; lowering: {self.method or 'none'}; "
                f"{self.samples} calibration sample(s))"
            ),
            f"form: {self.form}",
            (
                f"quantized {len(self.quantized)} node(s), kept {len(self.kept_float)} float; "
                f"output cosine {self.output_cosine:.5f}; largest sample shift {shift}"
            ),
        ]
        head += [f"  {n} x {why}" for why, n in self.reasons().items()]
        if self.outputs:
            worst = max(self.outputs, key=lambda a: a.max_error)
            head.append(
                f"accuracy on {self.eval_samples} evaluation input(s), worst output: cosine {self.output_cosine:.5f}, "
                f"max abs error {worst.max_abs:.3g} = {worst.max_error:.3g} x max|{worst.name}|; "
                + ("BELOW the bound " if self.accepted else "bound ")
                + f"{self.bound}"
            )
        if self.fused:
            head.append(
                "ONNX Runtime integer kernels: " + ", ".join(f"{k} x{v}" for k, v in sorted(self.fused.items()))
            )
        if self.float_ms is not None and self.int8_ms is not None:
            head.append(
                f"time here (ONNX Runtime CPU, one-off): float {self.float_ms:.3g} ms, int8 {self.int8_ms:.3g} ms "
                f"({self.int8_ms / self.float_ms:.2f}x)"
            )
        head += [f"note: {n}" for n in self.notes]
        return "\n".join(head + ["", self.table()])


def compare(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """``(cosine, max_abs, rel_rms)`` of ``b`` against the reference ``a``."""
    a64, b64 = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    na, nb = np.linalg.norm(a64), np.linalg.norm(b64)
    cosine = 1.0 if na == nb == 0 else float(a64 @ b64 / (na * nb)) if na and nb else 0.0
    diff = a64 - b64
    max_abs = float(np.abs(diff).max()) if diff.size else 0.0
    rms = float(np.sqrt(np.mean(a64**2))) if a64.size else 0.0
    rel = float(np.sqrt(np.mean(diff**2)) / rms) if rms else float(np.sqrt(np.mean(diff**2))) if diff.size else 0.0
    return cosine, max_abs, rel


def form_written(lowered, placement, method: str | None) -> str:
    """The form of the deformable layers in the float graph that was quantized (``lowered``), in words.

    Samplers by op: a ``DeformConv`` is ONNX Runtime's kernel sampling the columns when quantize lowered
    the layer (``method`` set), else a layer kept native (float); ``GridSample``; ``gather`` otherwise.
    Contractions by the placement's reasons: weight-first integer, integer (weight second), or float.
    """
    ops = {n.op_type for n in lowered.graph.node}
    if method is None:
        if "DeformConv" in ops:
            return "native DeformConv (float)"
        if not placement.samplers:
            return "no deformable layer"
    samplers = [
        name
        for name, present in (
            ("DeformConv", "DeformConv" in ops),  # here a sampler: quantize lowered the layer around it
            ("GridSample", "GridSample" in ops),
            ("gather", not ops & {"DeformConv", "GridSample"}),
        )
        if present
    ]
    why = list(placement.why_quantized.values())
    contraction = [
        name
        for name, present in (
            ("weight-first integer", any("weight first" in w for w in why)),
            ("integer", "contraction of sampled columns" in why),
            (
                "float",
                any(
                    w.startswith(("Gemm with a computed C", "weight is MatMul's first"))
                    for w in placement.keep_float.values()
                ),
            ),
        )
        if present
    ]
    return f"{' and '.join(samplers) or 'no'} sampler, {' and '.join(contraction) or 'float'} contraction"
