"""OpenVINO runs the standard-op lowerings at every opset the TorchScript exporter writes.

The runtime table of docs/targets.md ("grid_sample 16 to 20, gather 11 to 20" on OpenVINO)
rests on this sweep: case c04 lowered at each opset, compiled at f32, compared
with torchvision's ``deform_conv2d`` on the same tensors.
"""

from __future__ import annotations

import pytest

pytest.importorskip("openvino", reason="OpenVINO tests need `pip install openvino`")

import deform_onnx
from deform_onnx.exporters.torchscript import MAX_OPSET
from deform_onnx.ops.deform_conv.register import LOWERINGS
from util import assert_close, reference, run_ov

SWEEP = [(m, o) for m in ("grid_sample", "gather") for o in range(LOWERINGS[m].min_opset, MAX_OPSET + 1)]


@pytest.mark.parametrize("method,opset", SWEEP, ids=[f"{m}-{o}" for m, o in SWEEP])
def test_lowered_c04_on_openvino(c04_native, method, opset):
    path, layer, inputs = c04_native
    model = deform_onnx.lower(path, method=method, opset=opset)
    assert_close(run_ov(model, inputs), reference(layer, inputs), what=f"OpenVINO {method}@{opset}")
