"""``target="tflite"`` (onnx2tf, then LiteRT) on an RT-DETR-style multi-scale deformable attention encoder.

onnx2tf 1.29.24 cannot tell NCHW from NHWC when a 4-D value's C == H == W: the gather sampler's zero blocks
concatenated to such a map (one ``F.grid_sample`` per level; RT-DETR's 8x8 level of 8 channels per head) went
along the wrong axis, and LiteRT's output was 0.33 to 0.48 off PyTorch (the export refused it: nothing was
written). The target's form ``"table padded flat"`` pads on 2-D views instead. One module-scoped export with
the target's defaults (the model as lyuwenyu/RT-DETR writes it: tests/real_code/rtdetr_style.py) runs in LiteRT;
the rule check runs on ONNX Runtime. Expected values are PyTorch's on the same tensors.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import deform_onnx
from real_code.rtdetr_style import Encoder
from util import ATOL

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    return Encoder().eval(), (torch.randn(1, 3, 16, 16),)  # levels 8x8 and 4x4, 8 channels per head


@pytest.fixture(scope="module")
def tflite_encoder(encoder, tmp_path_factory):
    """The encoder exported with ``target="tflite"``: by default the target runs the file in LiteRT first."""
    model, args = encoder
    path = tmp_path_factory.mktemp("rtdetr") / "encoder.onnx"
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    return path, deform_onnx.export(model, args, path, target="tflite", **opt_out)


def _square_maps_concatenated(model: onnx.ModelProto) -> list[str]:
    """4-D values with C == H == W > 1 that a Concat reads (what onnx2tf concatenates along the wrong axis)."""
    g = onnx.shape_inference.infer_shapes(model).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in (*g.value_info, *g.input)}
    return [
        name
        for n in g.node
        if n.op_type == "Concat"
        for name in n.input
        if len(shapes.get(name, [])) == 4 and len(set(shapes[name][1:])) == 1 and shapes[name][1] > 1
    ]


def test_encoder_matches_pytorch_on_onnxruntime(encoder, tflite_encoder):
    (model, args), (path, _) = encoder, tflite_encoder
    with torch.no_grad():
        want = model(*args).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: args[0].numpy()})[0]
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_table_padded_flat_concatenates_no_square_map(encoder, tflite_encoder, tmp_path):
    """Rule "table padded flat": under the tflite target no ``[N, S, S, S]`` map reaches a Concat; the plain
    gather form (the fault) pads the 8x8 level of 8 channels as a 4-D map."""
    (model, args), (path, _) = encoder, tflite_encoder
    assert _square_maps_concatenated(onnx.load(str(path))) == []
    plain = tmp_path / "plain.onnx"
    deform_onnx.export(model, args, plain, method="gather", opset_version=13, dynamo=False)
    assert _square_maps_concatenated(onnx.load(str(plain)))


@pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")
def test_encoder_runs_in_litert(tflite_encoder):
    """The target's file ran in LiteRT within the float32 rule (the export refuses otherwise: a wrong file is
    never written; without the form it was 0.33 off and refused)."""
    path, report = tflite_encoder
    assert path.is_file() and any(line.startswith("tflite") for line in report.runtimes), report.runtimes
