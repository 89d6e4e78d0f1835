"""A dynamic ``.pte``'s memory plan holds the declared ``Dim`` max (:mod:`deform_onnx.formats.plan_bounds`).

The model is the cause on its own, no deformable op: a float32 ``Conv2d`` (one image, one group, 3x3) whose
input ``16*H*32`` is at most 20480 at the example's H (32) and above it from H = 41. PyTorch's fake convolution
keeps that test as a guard when a backend pass retraces the program, and ExecuTorch planned H up to 40 of a
declared 128 (measured with torch 2.14.1, executorch 1.5.1). The CLI's dynamic DCN: tests/cli/test_cli_edge_formats.py.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import deform_onnx

pytestmark = pytest.mark.skipif(importlib.util.find_spec("executorch") is None, reason="executorch is not installed")

H_MAX = 128


class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(16, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan_bounds") / "conv.pte"
    model = ConvBN().eval()
    H = torch.export.Dim("H", min=16, max=H_MAX)  # four times the example's H
    report = deform_onnx.export(model, (torch.randn(1, 16, 32, 32),), path, dynamic_shapes=({2: H},))
    return path, model, report


def test_dim_max_well_above_the_example_is_planned_and_checked(written):
    from deform_onnx.formats.executorch import ExecuTorchSession

    path, _, report = written
    assert report.verified and path.is_file()
    assert (1, 16, H_MAX, 32) in [shapes[0] for shapes in report.checked_shapes]
    assert ExecuTorchSession(path.read_bytes()).planned == [[1, 16, H_MAX, 32]]


@pytest.mark.parametrize("H", [41, H_MAX])
def test_written_file_runs_beyond_the_example_kernel_test(written, H):
    """Sizes past the fake convolution's test (H > 40), in ExecuTorch's own runtime, against PyTorch."""
    from executorch.runtime import Runtime

    path, model, _ = written
    program = Runtime.get().load_program(path.read_bytes())  # kept: the method points into it (a freed one crashes)
    method = program.load_method("forward")
    x = torch.randn(1, 16, H, 32, generator=torch.Generator().manual_seed(H))
    (got,) = method.execute([x])
    with torch.no_grad():
        np.testing.assert_allclose(got.numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4)
