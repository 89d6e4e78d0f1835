"""An input the graph does not use is dropped by the exporters; the inputs after it must still get their own
tensors when export verifies the file (found on OmDet-Turbo, whose graph drops ``classes_attention_mask``:
verification fed the next input its neighbour's tensor and export failed with ONNX Runtime's
"Invalid rank for input")."""

from __future__ import annotations

import io

import numpy as np
import onnxruntime as ort
import pytest
import torch

import deform_onnx


class SkipsAnInput(torch.nn.Module):
    """``x [N, C, H, W]`` float, ``unused [N, 4]`` int64 (not read), ``bias [C]`` float: ``grid_sample`` of
    ``x`` at a grid drawn from its first two channels, plus ``bias`` per channel."""

    def forward(self, x, unused, bias):
        grid = x[:, :2].permute(0, 2, 3, 1).tanh()
        return torch.nn.functional.grid_sample(x, grid, align_corners=False) + bias[None, :, None, None]


@pytest.mark.parametrize("dynamic", [False, True])
def test_inputs_after_a_dropped_one_get_their_own_tensors(dynamic):
    """TorchScript (the fallback's exporter) drops ``unused``; export verifies the file and writes it."""
    torch.manual_seed(0)
    args = (torch.randn(1, 3, 16, 16), torch.arange(4).reshape(1, 4), torch.randn(3))
    names = ["x", "unused", "bias"]
    f = io.BytesIO()
    axes = {"x": {2: "H", 3: "W"}} if dynamic else None
    deform_onnx.export(SkipsAnInput(), args, f, input_names=names, dynamic_axes=axes, dynamo=False)
    session = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["x", "bias"]  # the exporter did drop it
    (got,) = session.run(None, {"x": args[0].numpy(), "bias": args[2].numpy()})
    np.testing.assert_allclose(got, SkipsAnInput()(*args).numpy(), rtol=1e-4, atol=1e-4)
