"""Case c34: spatial transformers (``F.affine_grid`` + ``F.grid_sample``) export at every opset from 11.

pytorch/pytorch#96449: torch's TorchScript exporter has ``aten::affine_grid_generator`` only at opset 20, so
``dynamo=False`` below 20 and every default export at 11-13 stopped. deform-onnx lowers it from standard
ops (``exporters/aten_affine_grid.py``), and keeps its sizes symbolic on the dynamo path. Each file is run
here in ONNX Runtime at the export size and, when dynamic, at another size, against PyTorch on the same
tensors (float32 rule 1e-4).
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F

import deform_onnx
from deform_onnx.targets.rules import integer_shape_tensors
from util import ATOL, assert_close, graph_tensors, load_cases, op_types


def _c34():
    case = load_cases()["c34"]["input"]
    assert "28x28" in case["localisation"] and "align_corners=False" in case["grid"]  # the case this rebuilds
    return (1, 1, 28, 28)


class STN(torch.nn.Module):
    """Case c34's spatial transformer: a conv + linear localisation head predicting ``theta [N, 2, 3]``
    (initialised near the identity), ``F.affine_grid(theta, x.size())``, ``F.grid_sample`` (zeros, bilinear)."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.loc = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 5, stride=4), torch.nn.ReLU(), torch.nn.Flatten())
        self.fc = torch.nn.Linear(4 * 6 * 6, 6)
        with torch.no_grad():
            self.fc.weight.copy_(0.05 * torch.randn(self.fc.weight.shape, generator=gen))
            self.fc.bias.copy_(torch.tensor([1.0, 0.1, 0.05, -0.1, 0.9, 0.0]))

    def forward(self, x):
        theta = self.fc(self.loc(x)).view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class Warp(torch.nn.Module):
    """A learned affine warp of any size: ``theta`` (``[2, 3]`` or ``[3, 4]``) broadcast to the batch; 4-D or
    5-D, either ``align_corners``."""

    def __init__(self, volumetric: bool, align_corners: bool):
        super().__init__()
        k = 3 if volumetric else 2
        gen = torch.Generator().manual_seed(1)
        self.theta = torch.nn.Parameter(torch.eye(k, k + 1) + 0.2 * torch.randn(k, k + 1, generator=gen))
        self.align_corners = align_corners

    def forward(self, x):
        theta = self.theta.expand(x.shape[0], -1, -1)
        grid = F.affine_grid(theta, x.size(), align_corners=self.align_corners)
        return F.grid_sample(x, grid, align_corners=self.align_corners)


def _export(model, x, **kwargs) -> tuple[bytes, deform_onnx.ExportReport]:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback's warning below opset 14
        report = deform_onnx.export(model, (x,), f, input_names=["x"], **kwargs)
    return f.getvalue(), report


def _check(data: bytes, model, xs) -> list[float]:
    import onnxruntime as ort

    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    errors = []
    for x in xs:
        with torch.no_grad():
            want = model(x).numpy()
        got = session.run(None, {"x": x.numpy()})[0]
        assert_close(got, want, what=f"at {tuple(x.shape)}")
        errors.append(float(np.abs(got - want).max()))
    return errors


#: Case c34's exports with default arguments (opset and dynamic batch only), and ``dynamo=False`` at 14.
C34 = {
    "11": {"opset_version": 11},
    "11-dynamic": {"opset_version": 11, "dynamic_axes": {"x": {0: "N"}}},
    "12-dynamic": {"opset_version": 12, "dynamic_axes": {"x": {0: "N"}}},
    "13": {"opset_version": 13},
    "13-dynamic": {"opset_version": 13, "dynamic_axes": {"x": {0: "N"}}},
    "14": {"opset_version": 14},
    "14-dynamic": {"opset_version": 14, "dynamic_axes": {"x": {0: "N"}}},
    "14-dynamic-torchscript": {"opset_version": 14, "dynamic_axes": {"x": {0: "N"}}, "dynamo": False},
}


@pytest.fixture(scope="module")
def stn():
    return STN().eval()


@pytest.mark.parametrize("name", list(C34))
def test_c34_exports_and_matches_at_every_opset_from_11(stn, name):
    kwargs = C34[name]
    shape = _c34()
    x = torch.rand(shape, generator=torch.Generator().manual_seed(2))
    data, report = _export(stn, x, **kwargs)
    proto = onnx.load_from_string(data)
    opset = kwargs["opset_version"]
    dynamo = kwargs.get("dynamo", True) and opset >= 14
    assert report.exporter == ("dynamo" if dynamo else "torchscript"), report.fallback_reason
    assert report.opset == opset and "AffineGrid" not in op_types(proto)
    xs = [x]
    if "dynamic_axes" in kwargs:
        xs.append(torch.rand((3, *shape[1:]), generator=torch.Generator().manual_seed(3)))
    errors = _check(data, stn, xs)
    assert max(errors) <= ATOL  # measured: 4e-6 .. 1.1e-5 (the bilinear sample of a 28x28 image)


#: (volumetric, align_corners, export kwargs): dynamic N and every spatial axis; TorchScript at 11, dynamo at 17.
VARIANTS = {
    "2d-ac0-11": (False, False, {"opset_version": 11}),
    "2d-ac1-11": (False, True, {"opset_version": 11}),
    "3d-ac0-11": (True, False, {"opset_version": 11}),
    "3d-ac1-11": (True, True, {"opset_version": 11}),
    "2d-ac1-default": (False, True, {}),
    "3d-ac0-default": (True, False, {}),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_affine_grid_4d_5d_both_align_corners_dynamic_sizes(name):
    volumetric, align_corners, kwargs = VARIANTS[name]
    model = Warp(volumetric, align_corners).eval()
    gen = torch.Generator().manual_seed(4)
    shapes = [(1, 2, 3, 5, 7), (2, 2, 4, 6, 9)] if volumetric else [(1, 2, 5, 7), (2, 2, 6, 9)]
    axes = {0: "N", 2: "A", 3: "B", 4: "C"} if volumetric else {0: "N", 2: "H", 3: "W"}
    x, other = (torch.randn(s, generator=gen) for s in shapes)
    data, report = _export(model, x, dynamic_axes={"x": axes}, **kwargs)
    assert report.exporter == ("torchscript" if kwargs else "dynamo"), report.fallback_reason
    proto = onnx.load_from_string(data)
    # Sizes stay symbolic: the grid's coordinates come from an integer Range over Shape, never a constant grid.
    assert {"Range", "Shape"} <= set(op_types(proto))
    assert integer_shape_tensors(proto) == []
    assert max(a.size for a in graph_tensors(proto)) <= 12  # theta; nothing of the grid's size
    _check(data, model, [x, other])


@pytest.mark.parametrize("align_corners", [False, True])
def test_static_grid_holds_per_axis_constants_only_and_unit_axes(align_corners):
    """A static 28x28 grid is written as two 28-value axes (nothing grows with H*W); a unit axis (H = 1) gives
    0 there as ATen does (``linspace_from_neg_one``)."""
    model = Warp(False, align_corners).eval()
    for shape in [(2, 1, 28, 28), (1, 1, 1, 5)]:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(5))
        data, report = _export(model, x, opset_version=11)
        proto = onnx.load_from_string(data)
        assert "Range" not in op_types(proto)  # static: constants
        bound = max(*shape[2:], model.theta.numel())  # one axis' coordinates, or theta itself
        assert max(a.size for a in graph_tensors(proto)) <= bound, [a.shape for a in graph_tensors(proto)]
        _check(data, model, [x])
