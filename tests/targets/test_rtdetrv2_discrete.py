"""RT-DETRv2's ``cross_attn_method='discrete'`` (tests/real_code/rtdetrv2_dfine_style.py) for onnx2torch.

The discrete core rounds its sampling locations to int64, clamps them (``sampling_coord.clamp(0, h - 1)``) and
indexes the value map with them (``GatherND``). onnx2torch 1.5.15 clamps with float bounds, so the coordinates
came out float32 and its ``GatherND`` failed ("IndexError: tensors used as indices must be long, int, byte or
bool tensors"); targets ``onnx2torch`` and ``onnx2torch-native`` write an integer ``Clip`` as ``Max`` + ``Min``
(repair ``integer Clip as Max/Min``). Expected values are PyTorch's on the same tensors.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from deform_onnx.targets.repairs import REPAIRS
from real_code.rtdetrv2_dfine_style import TinyDecoderLayer, example

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))


def _file(tmp_path):
    torch.manual_seed(0)
    model = TinyDecoderLayer("discrete").eval()
    args = example(h=64, w=64)
    path = tmp_path / "discrete.onnx"
    torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17)
    return model, args, onnx.load(str(path))


def test_integer_clip_as_max_min_keeps_values(tmp_path):
    model, args, proto = _file(tmp_path)
    assert any(n.op_type == "Clip" for n in proto.graph.node)
    assert REPAIRS["integer Clip as Max/Min"](proto)
    assert not any(n.op_type == "Clip" for n in proto.graph.node)
    onnx.checker.check_model(proto)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {session.get_inputs()[0].name: args[0].numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got, model(*args).numpy(), rtol=0, atol=1e-5)


def test_float_clip_left(tmp_path):
    class Clamp(torch.nn.Module):
        def forward(self, x):
            return x.clamp(0, 1)

    path = tmp_path / "clamp.onnx"
    torch.onnx.export(Clamp(), (torch.randn(2, 3),), str(path), dynamo=False, opset_version=17)
    assert REPAIRS["integer Clip as Max/Min"](onnx.load(str(path))) == []


@pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")
def test_onnx2torch_runs_the_repaired_file(tmp_path):
    """The repaired file in onnx2torch (its cached venv) within the float32 rule (as torch wrote it, onnx2torch
    failed: "Expected types of indices: (torch.int8, ...), got torch.float32 instead", measured here)."""
    import deform_onnx

    model, args, proto = _file(tmp_path)
    REPAIRS["integer Clip as Max/Min"](proto)
    repaired = tmp_path / "repaired.onnx"
    onnx.save(proto, str(repaired))
    (row,) = deform_onnx.check_runtimes(repaired, ["onnx2torch"], model=model, args=args)
    assert row.ok, row


def test_ncnn_refusal_of_heads_in_the_batch_names_the_fix(tmp_path):
    """D-FINE's core folds its heads into GridSample's batch (``value_l.reshape(bs * n_head, c, h, w)``): the ncnn
    refusal pointed at InternImage's DCNv3 only; it now names this case and the targets that take it."""
    from deform_onnx.ops.grid_sample.rules import gridsample_batch_1

    torch.manual_seed(0)
    path = tmp_path / "dfine.onnx"
    torch.onnx.export(TinyDecoderLayer("default", dfine=True).eval(), example(h=64, w=64), str(path), dynamo=False,
                      opset_version=17)  # fmt: skip
    (line,) = gridsample_batch_1(onnx.load(str(path)))
    assert "bs * n_heads" in line and "target 'mnn'" in line, line
