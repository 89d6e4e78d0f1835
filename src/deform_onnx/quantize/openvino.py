"""OpenVINO INT8 through nncf: the float ONNX file read with the deform-onnx extension, quantized by ``nncf.quantize``.

nncf places FakeQuantize nodes by its own hardware patterns for the CPU
plugin; this module only tells it what to leave float: the offset path, the
samplers and the mask product, found by :func:`.placement.place` on the
ONNX graph and handed over as an ``nncf.IgnoredScope`` (by node and output
names, which OpenVINO's ONNX frontend carries over as friendly names, and
``<name>/...`` for the parts it splits a node into).

nncf leaves OpenVINO's ``DeformableConvolution`` (the extension's
conversion of ``DeformConv``) float: it quantizes the model's convolutions.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import numpy as np
import onnx

from ..core.atomic_io import commit_copies
from .gate import Bound, enforce, output_accuracy
from .placement import place
from .report import HELD_OUT_NOTE, LayerError, QuantizeReport, compare


def quantize_openvino(
    src: Path,
    dst: Path,
    model: onnx.ModelProto,
    samples: list[dict],
    evaluations: list[dict],
    step,
    bound: Bound,
    eval_given: bool,
) -> QuantizeReport:
    """Quantize ``src`` for OpenVINO with nncf, writing ``dst`` (``.xml``, with its ``.bin``) atomically.

    The INT8 model is measured against the float one on every input of ``evaluations`` and held to ``bound``
    (:func:`~.gate.enforce`) before anything is written.
    """
    try:
        import nncf  # type: ignore[import-untyped]
    except ImportError as exc:
        raise ImportError(
            "target 'openvino' needs nncf: pip install 'deform-onnx[quantize]' (or pip install nncf)"
        ) from exc
    import openvino as ov

    from ..runtimes.openvino import compile as ov_compile
    from ..runtimes.openvino import read_model

    step("read", 0, 1)
    for i, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{i}"
    placement = place(model)
    keep = set(placement.keep_float) | placement.offset_path
    names = sorted(keep | {o for n in model.graph.node if n.name in keep for o in n.output})
    ov_model = read_model(model)
    order = [p.get_any_name() for p in ov_model.inputs]
    total = len(samples)

    def transform(sample, i=[0]):  # noqa: B006  (a counter for the progress bar)
        i[0] += 1
        step("calibrate", min(i[0], total), total)
        return [sample[n] for n in order]

    quantized = nncf.quantize(
        ov_model,
        nncf.Dataset(samples, transform),
        subset_size=len(samples),
        # OpenVINO splits a node into parts named "<node>/<part>" (a Conv with bias: "<node>/WithoutBiases").
        ignored_scope=nncf.IgnoredScope(names=names, patterns=[f"^{re.escape(n)}/.*$" for n in names], validate=False),
    )
    step("measure", 0, 1)
    float_model, int8_model = ov_compile(ov_model), ov.Core().compile_model(quantized, "CPU")
    reference, got = [], []
    for evaluation in evaluations:
        feed = [evaluation[n] for n in order]
        ref, out = float_model(feed), int8_model(feed)
        reference.append([np.asarray(ref[k]) for k in range(len(ov_model.outputs))])
        got.append([np.asarray(out[k]) for k in range(len(ov_model.outputs))])
    report = QuantizeReport(
        src=src, dst=dst, target="openvino", quantizer=f"nncf {nncf.__version__}", method=None, samples=total
    )
    if not eval_given:
        report.notes.append(HELD_OUT_NOTE)
    fq = [op for op in quantized.get_ops() if op.get_type_name() == "FakeQuantize"]
    report.quantized = [(op.get_friendly_name(), "FakeQuantize", "placed by nncf") for op in fq]
    ops = {n.name: n.op_type for n in model.graph.node}
    report.kept_float = [(n, ops.get(n, "?"), why) for n, why in placement.keep_float.items()]
    report.kept_float += [
        (n, ops.get(n, "?"), "offset path / weight side: ignored scope")
        for n in sorted(placement.offset_path)
        if n not in placement.keep_float
    ]
    names = [out.get_any_name() for out in ov_model.outputs]
    for k, name in enumerate(names):
        found = [compare(r[k], g[k]) for r, g in zip(reference, got)]
        cosines, max_abs, rel = zip(*found)
        report.layers.append(LayerError(name, "", "output", "graph output", min(cosines), max(max_abs), max(rel)))
    report.outputs = output_accuracy(names, reference, got)
    report.eval_samples, report.bound = len(evaluations), str(bound)
    report.output_cosine = min(a.cosine for a in report.outputs)
    note = enforce(report.outputs, bound, len(evaluations), eval_given, dst)
    if note is not None:  # below the bound, written on request (accept=True)
        report.accepted = True
        report.notes.append(note)
    with tempfile.TemporaryDirectory(prefix="deform_onnx_ov_") as tmp:
        xml = Path(tmp) / dst.name
        ov.save_model(quantized, str(xml), compress_to_fp16=False)
        commit_copies([(xml.with_suffix(".bin"), dst.with_suffix(".bin")), (xml, dst)])  # .bin first: .xml names it
    step("done", 1, 1)
    return report
