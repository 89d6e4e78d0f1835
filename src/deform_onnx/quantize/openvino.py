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

import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx

from .placement import place
from .report import HELD_OUT_NOTE, LayerError, QuantizeReport, compare


def quantize_openvino(
    src: Path, dst: Path, model: onnx.ModelProto, samples: list[dict], evaluation: dict, step, eval_given: bool
) -> QuantizeReport:
    """Quantize ``src`` for OpenVINO with nncf, writing ``dst`` (``.xml``, with its ``.bin``) atomically."""
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
    feed = [evaluation[n] for n in order]
    ref = ov_compile(ov_model)(feed)
    got = ov.Core().compile_model(quantized, "CPU")(feed)
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
    cosines = []
    for k, out in enumerate(ov_model.outputs):
        a, b = np.asarray(ref[k]), np.asarray(got[k])
        c = compare(a, b)
        cosines.append(c[0])
        report.layers.append(LayerError(out.get_any_name(), "", "output", "graph output", *c))
    report.output_cosine = min(cosines)
    with tempfile.TemporaryDirectory(prefix=".deform_onnx_ov_", dir=dst.parent) as tmp:
        xml = os.path.join(tmp, dst.name)
        ov.save_model(quantized, xml, compress_to_fp16=False)
        shutil.move(os.path.splitext(xml)[0] + ".bin", dst.with_suffix(".bin"))  # .bin first: .xml names it
        os.replace(xml, dst)
    step("done", 1, 1)
    return report
