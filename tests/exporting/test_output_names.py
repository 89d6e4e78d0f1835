"""Output names: the model's own (ModelOutput fields, dict keys, namedtuple fields) on both exporters, unless
``output_names`` is given; plain tensors and tuples keep the exporters' names.

The expected names are written from the model's output as a user reads it (``out.keys()``, the namedtuple's
``_fields``), not from deform-onnx's own flattening; each file is also run and compared output by output.
"""

from __future__ import annotations

import collections
import io
import warnings
from dataclasses import dataclass

import numpy as np
import onnx
import pytest
import torch

import deform_onnx
from util import ATOL

transformers = pytest.importorskip("transformers")

Pair = collections.namedtuple("Pair", ["boxes", "scores"])


@dataclass
class Detection(transformers.utils.ModelOutput):
    logits: torch.Tensor | None = None
    aux: torch.Tensor | None = None  # left None: not an output
    pred_boxes: torch.Tensor | None = None
    levels: tuple | None = None


class ReturnsModelOutput(torch.nn.Module):
    def forward(self, x):
        logits = x * 2  # a value of the graph named like an output (dynamo names values after variables)
        return Detection(logits=logits.sigmoid(), pred_boxes=x + 1, levels=(x - 1, x * 3))


class ReturnsDict(torch.nn.Module):
    def forward(self, x):
        return {"zeta": x * 2, "alpha": x + 1}


class ReturnsNamedTuple(torch.nn.Module):
    def forward(self, x):
        return Pair(x * 2, x + 1)


class ReturnsTuple(torch.nn.Module):
    def forward(self, x):
        return x * 2, x + 1


def _export(model, **kwargs):
    f = io.BytesIO()
    x = torch.rand(2, 3, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(model, (x,), f, **kwargs)
    proto = onnx.load_from_string(f.getvalue())
    return [o.name for o in proto.graph.output], report, f.getvalue(), x


MODELS = {
    "ModelOutput": (ReturnsModelOutput, ["logits", "pred_boxes", "levels.0", "levels.1"]),
    "dict": (ReturnsDict, ["zeta", "alpha"]),
    "namedtuple": (ReturnsNamedTuple, list(Pair._fields)),
}


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("kind", list(MODELS))
def test_outputs_take_the_models_names(kind, dynamo):
    import onnxruntime as ort

    cls, want = MODELS[kind]
    model = cls()
    names, report, data, x = _export(model, dynamo=dynamo)
    assert names == want
    assert set(report.checks) == set(want)  # verification names them the same way
    got = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    leaves = torch.utils._pytree.tree_leaves(model(x))
    for name, g, w in zip(names, got, leaves):
        np.testing.assert_allclose(g, w.numpy(), rtol=ATOL, atol=ATOL, err_msg=name)


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_given_output_names_win_and_plain_tuples_keep_the_exporters_names(dynamo):
    names, _, _, _ = _export(ReturnsDict(), dynamo=dynamo, output_names=["a", "b"])
    assert names == ["a", "b"]
    names, _, _, _ = _export(ReturnsTuple(), dynamo=dynamo)
    assert names == (["mul", "add"] if dynamo else ["2", "4"])  # as torch names them (unchanged)


@pytest.mark.slow
def test_a_hugging_face_detector_file_names_its_fields():
    """RT-DETR (tiny config, random weights) returned as is: the file's outputs are the
    ``RTDetrObjectDetectionOutput`` fields (``encoder_last_hidden_state``, a list of three maps, as ``.0``-``.2``).

    ``verify=False``: random weights give near-tied class scores, so PyTorch float32 and float64 may pick other
    queries at ``torch.max``/``topk`` on some CPUs, and the float64 rule then cannot prove the file (refused by
    design: tests/exporting/test_reference_ties.py); the names are this test's subject.
    """
    from tiny_detectors import rt_detr_config

    torch.manual_seed(0)
    model = transformers.RTDetrForObjectDetection(rt_detr_config(decoder_layers=1)).eval()
    x = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(pixel_values=x)
    want = []
    for key, value in out.items():
        want += [key] if isinstance(value, torch.Tensor) else [f"{key}.{i}" for i in range(len(value))]
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(model, (x,), f, verify=False)
    assert report.exporter == "dynamo", report.fallback_reason
    assert [o.name for o in onnx.load_from_string(f.getvalue()).graph.output] == want
    assert "logits" in want and "pred_boxes" in want
