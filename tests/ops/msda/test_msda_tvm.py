"""The fused ``ms_deform_attn`` op through ``target="tvm"`` at a dynamic batch (TVM 0.27's relax ONNX frontend).

The op's gather lowering indexed one flat ``[N*M*S, D]`` table of rows with ``Range(0, N*M)`` reshaped to
``[N, 1, M, 1, 1]``; TVM loses the batch through that Range and refused the file at any dynamic batch ("Reshape
requires the input new shape to be Shape. However, the given one is relax.TensorType"). The tvm target's form
``"rows per image"`` gathers each image's ``[M*S, D]`` rows with ``GatherND`` (``batch_dims=1``): no Range over the
batch. One module-scoped export (a Deformable-DETR-style encoder, tests/real_code/deformable_detr_style.py, on the
fused op, dynamic batch, the target's defaults: run in TVM at batch 1 before it is written), then run in TVM at
batch 2 against PyTorch on the same tensors.
"""

from __future__ import annotations

import os

import onnx
import pytest
import torch

import deform_onnx
from real_code.deformable_detr_style import Encoder

NO_RUNTIMES = os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES") == "1"


@pytest.fixture(scope="module")
def tvm_encoder(tmp_path_factory):
    torch.manual_seed(0)
    model = Encoder(d_model=16, nhead=2, n_levels=2, n_points=2, layers=1).eval()
    for module in model.modules():
        if hasattr(module, "fused"):
            module.fused = True  # deform_onnx's ms_deform_attn, called with the CUDA op's arguments
    path = tmp_path_factory.mktemp("msda_tvm") / "encoder.onnx"
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    report = deform_onnx.export(
        model, (x,), path, target="tvm", input_names=["x"], dynamic_axes={"x": {0: "N"}}, **opt_out
    )
    return model, path, report


def test_no_range_over_the_batch(tvm_encoder):
    """Rule "rows per image": the file gathers rows per image and has no Range (the plain form's Range(0, N*M))."""
    _, path, _ = tvm_encoder
    nodes = onnx.load(str(path)).graph.node
    assert not [n for n in nodes if n.op_type == "Range"]
    gathers = [n for n in nodes if n.op_type == "GatherND"]
    assert gathers and all(a.i == 1 for n in gathers for a in n.attribute if a.name == "batch_dims")


@pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES=1")
@pytest.mark.slow
def test_runs_in_tvm_at_two_batch_sizes(tvm_encoder):
    model, path, report = tvm_encoder
    assert report.runtimes and report.runtimes[0].startswith("tvm "), report.runtimes  # batch 1, during export
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    (row,) = deform_onnx.check_runtimes(path, ["tvm"], model=model, args=(x,), repeats=1)
    assert row.ok, row.failure or row.error
    assert [a.shape[0] for _, a in row.outputs] == [2]
