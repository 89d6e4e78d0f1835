"""Case c37: MaskDINO's pixel-decoder encoder (``tests/real_code/maskdino_style.py``) to ONNX, static (issue 37).

Before: at opset 16 with static shapes the dynamo path stopped on a data-dependent guard (the size rewrites
acted only on symbolic sizes: ``torch.linspace(0.5, H_ - 0.5, H_)`` over a ``torch.as_tensor`` of the maps'
sizes), and the TorchScript fallback on torch's "required keyword attribute 'Subgraph' is undefined", left by
the model's ``try: MSDeformAttnFunction.apply(...) except:`` CPU fallback. Now static sizes are recorded too
(the dynamo file at 16), and the trace drops the failed ``apply``'s node (the TorchScript file). Each file is
run here in ONNX Runtime on new inputs against PyTorch.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import deform_onnx
from real_code.maskdino_style import MSDeformAttnTransformerEncoderOnly, example
from util import load_cases

ATOL = 1e-4
#: c37's exports: static opset 16 (dynamo), and the TorchScript exporter (the fallback's path).
EXPORTS = {"opset-16": {"opset_version": 16}, "torchscript": {"dynamo": False}}


@pytest.fixture(scope="module")
def encoder():
    return MSDeformAttnTransformerEncoderOnly().eval()


@pytest.fixture(scope="module", params=list(EXPORTS))
def exported(request, encoder):
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(encoder, example(), f, **EXPORTS[request.param])
    return request.param, f.getvalue(), report


def test_c37_case_is_the_encoder_here():
    case = load_cases()["c37"]
    assert "try/except" in case["input"]["model"] and "opset_version=16" in case["do"]


def test_c37_file_matches_pytorch(exported, encoder):
    name, data, report = exported
    assert report.max_error is not None and report.max_error <= ATOL
    if name == "opset-16":
        assert report.exporter == "dynamo" and report.fallback_reason is None and report.opset == 16
    else:
        assert report.exporter == "torchscript"
    assert not any(n.op_type == "PythonOp" for n in onnx.load_from_string(data).graph.node)
    gen = torch.Generator().manual_seed(5)
    args = tuple(torch.randn(t.shape, generator=gen) for t in example())
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args, strict=True)})
    with torch.no_grad():
        want = encoder(*args).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


def test_function_apply_is_restored():
    from torch.autograd import Function

    from deform_onnx.exporters.function_fallbacks import dead_nodes_dropped

    before = vars(Function)["apply"]
    with dead_nodes_dropped():
        assert vars(Function)["apply"] is not before
    assert vars(Function)["apply"] is before
