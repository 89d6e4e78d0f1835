"""Layer zoo (issue 9 item 1, case c14's kind): ordinary layers in front of a DCNv2 "pack" layer,
exported by ``deform_onnx.export`` through the dynamo path below its opset-18 build, static and dynamic.

The dynamo exporter builds at opset 18; every op it writes for these layers must come out valid
(``onnx.checker`` with ``full_check``) and equal to PyTorch at 14-17, by onnx's version converter or
by an adapter of :mod:`deform_onnx.conversion` (reported in ``report.repairs``). Each group module
ends in the DCN pack (offset and mask from one conv, ``torch.chunk(out, 3)``, then
``torchvision.ops.DeformConv2d``). The reference is the module itself evaluated in PyTorch on the
same tensors (``torchvision.ops.deform_conv2d`` inside). One export per (group, opset, static or
dynamic), shared by the tests through a module-scoped cache.

Opsets: 14 and 17, the two ends of the down-conversion. ``convert_down`` applies an adapter when the op's
schema changes between 18 and the target, and no adapter reads the target: opset 14 takes every step
(18->17 Split, Pad and the reductions, 17->16 LayerNormalization, 16->15 Identity, 15->14 Shape and
BatchNormalization), a superset of what 15 and 16 take, through the same branches; 17 takes the 18->17 step
alone and keeps LayerNormalization. Static and dynamic at 14 (Split's sizes as constants or computed at
run time); dynamic at 17 (the static 18->17 step is the same as at 14's).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch.export import Dim

import deform_onnx

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")]

C = 8
OPSETS = (14, 17)
#: float32 rule of the project; the zoo's outputs are unit-scale.
ATOL = 1e-4


class _DcnPack(torch.nn.Module):
    """A layer group followed by DCNv2 whose offset and mask come from ``torch.chunk(conv(x), 3)``."""

    def __init__(self):
        super().__init__()
        self.offset_mask = torch.nn.Conv2d(C, 27, 3, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(C, C, 3, padding=1)
        gen = torch.Generator().manual_seed(9)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(max(p[0].numel(), 1)))
            self.offset_mask.weight.mul_(2.0)  # offsets of a few pixels: real sampling, borders included

    def deform(self, x):
        o1, o2, m = torch.chunk(self.offset_mask(x), 3, dim=1)
        return self.dcn(x, torch.cat((o1, o2), dim=1), torch.sigmoid(m))


class SplitReduce(_DcnPack):
    """chunk/split (equal and unequal) and reductions with and without keepdim."""

    def forward(self, x):
        a, b = torch.split(x, [3, 5], dim=1)  # unequal sizes
        c, d = torch.chunk(x, 2, dim=1)  # equal
        e, f, g = torch.chunk(x, 3, dim=1)  # 8 into 3, 3, 2: last part smaller
        y = torch.cat((b, a), 1) + torch.cat((d, c), 1) + torch.cat((g, f, e), 1)
        y = y - y.mean(dim=(2, 3), keepdim=True) + 0.1 * y.sum(1, keepdim=True)
        y = y + y.amax(dim=1, keepdim=True) + y.max(dim=1, keepdim=True)[0]
        y = y / (torch.norm(y, dim=1, keepdim=True) + 1.0)
        z = y.mean(dim=(2, 3)) + 0.01 * y.sum(dim=(2, 3)) + y.amax(dim=(2, 3)) + 0.1 * torch.norm(y, dim=(2, 3))
        z = z + y.max(dim=3)[0].max(dim=2)[0]  # without keepdim
        return self.deform(y) + z[:, :, None, None]


class PadResize(_DcnPack):
    """pad (constant, reflect, replicate) and interpolate (nearest, bilinear both corners, scale and size)."""

    def forward(self, x):
        h, w = x.shape[2], x.shape[3]
        y = F.pad(x, (1, 2, 0, 1), value=0.5)[:, :, :-1, 1:-2]
        y = y + F.pad(x, (2, 2, 1, 1), mode="reflect")[:, :, 1:-1, 2:-2]
        y = y + F.pad(x, (1, 1, 1, 1), mode="replicate")[:, :, 1:-1, 1:-1]
        a = F.interpolate(y, scale_factor=2, mode="nearest")
        b = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        c = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=True)
        d = F.interpolate(a + b + c, size=(h, w), mode="bilinear", align_corners=False)
        e = F.interpolate(
            F.interpolate(y, size=(2 * h, 2 * w), mode="nearest"), size=(h, w), mode="bilinear", align_corners=True
        )
        return self.deform(d + e)


class Norms(_DcnPack):
    """layer_norm, group_norm, batch_norm, instance_norm, softmax, gelu, silu, clamp, where."""

    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm(C)
        self.gn = torch.nn.GroupNorm(2, C)
        self.bn = torch.nn.BatchNorm2d(C)
        self.inorm = torch.nn.InstanceNorm2d(C, affine=True)
        gen = torch.Generator().manual_seed(10)
        with torch.no_grad():  # non-trivial statistics and affine terms
            self.bn.running_mean.copy_(torch.rand(C, generator=gen) - 0.5)
            self.bn.running_var.copy_(torch.rand(C, generator=gen) + 0.5)
            for p in (self.ln.weight, self.gn.weight, self.bn.weight, self.inorm.weight):
                p.copy_(1 + 0.2 * torch.randn(C, generator=gen))

    def forward(self, x):
        y = self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        y = self.gn(y) + self.bn(x) + self.inorm(x)
        y = F.gelu(y) + F.silu(y) + torch.softmax(y, dim=1) + y.clamp(-0.5, 0.5)
        return self.deform(torch.where(x > 0, y, 0.1 * x))


class ShapeOps(_DcnPack):
    """pixel_shuffle, conv_transpose, max_pool, adaptive_avg_pool, cat, expand, einsum, flatten."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(C, C, 2, stride=2)
        self.expand4 = torch.nn.Conv2d(C, 4 * C, 1)

    def forward(self, x):
        n, c, h, w = x.shape
        u = F.max_pool2d(self.up(x), 2) + F.max_pool2d(F.pixel_shuffle(self.expand4(x), 2), 3, stride=2, padding=1)
        gram = torch.einsum("nchw,nkhw->nck", x, x) / (h * w)
        y = u + torch.einsum("nck,nkhw->nchw", gram, x)
        flat = torch.flatten(x, 2).mean(-1)
        y = y + flat[:, :, None, None].expand(n, c, h, w)
        y = torch.cat((y[:, : c // 2], y[:, c // 2 :]), dim=1)
        return self.deform(y) + F.adaptive_avg_pool2d(x, 1)


GROUPS = {cls.__name__: cls for cls in (SplitReduce, PadResize, Norms, ShapeOps)}
#: Adapters each group needs below opset 18 (besides split_18_17, which the DCN pack needs everywhere).
EXPECTED_REPAIRS = {
    "SplitReduce": {"reducemean_18_17", "reducemax_18_17", "reducel2_18_17"},
    "PadResize": {"pad_18_17"},
    "Norms": set(),
    "ShapeOps": set(),
}


def _input(n=2, h=10, w=12, seed=0):
    return torch.randn(n, C, h, w, generator=torch.Generator().manual_seed(seed))


_CACHE: dict = {}


@pytest.fixture(scope="module")
def zoo_export(tmp_path_factory):
    """``get(group, opset, dynamic) -> (model, report, bytes)``: one export per key, shared by the tests."""
    folder = tmp_path_factory.mktemp("zoo")

    def get(group: str, opset: int, dynamic: bool):
        key = (group, opset, dynamic)
        if key not in _CACHE:
            model = GROUPS[group]().eval()
            kwargs = {"dynamic_shapes": ({0: Dim("N"), 2: Dim("H", min=6), 3: Dim("W", min=6)},)} if dynamic else {}
            path = folder / f"{group}_{opset}_{'dyn' if dynamic else 'static'}.onnx"
            report = deform_onnx.export(model, (_input(),), path, opset_version=opset, input_names=["x"], **kwargs)
            _CACHE[key] = (model, report, path.read_bytes())
        return _CACHE[key]

    yield get
    _CACHE.clear()


RUNS = [(g, o, d) for g in GROUPS for d in (False, True) for o in OPSETS if d or o == 14]
IDS = [f"{g}-op{o}-{'dynamic' if d else 'static'}" for g, o, d in RUNS]


def _run(data: bytes, x: torch.Tensor) -> np.ndarray:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x.numpy()})[0]


@pytest.mark.parametrize("group, opset, dynamic", RUNS, ids=IDS)
def test_zoo_valid_from_dynamo_with_repairs(zoo_export, group, opset, dynamic):
    _, report, data = zoo_export(group, opset, dynamic)
    proto = onnx.load_from_string(data)
    assert next(o.version for o in proto.opset_import if o.domain == "") == opset
    onnx.checker.check_model(proto, full_check=True)
    # Written by the dynamo exporter (no fallback), with the down-conversion repairs named.
    assert report.exporter == "dynamo" and report.fallback_reason is None, report.fallback_reason
    names = {r.split(" ")[0] for r in report.repairs}
    assert "split_18_17" in names and EXPECTED_REPAIRS[group] <= names, report.repairs
    if group == "Norms" and opset < 17:  # LayerNormalization exists from 17 only
        assert "layernormalization_17_16" in names
    if group == "Norms" and opset < 15:  # scale and bias of their own float type from 15 only
        assert "batchnormalization_15_14" in names
    if dynamic and opset < 15:  # the run-time sizes read through Shape with start/end (15 on)
        assert "shape_15_14" in names
    assert all(int(name.rsplit("_", 1)[1]) >= opset for name in names), report.repairs  # no step below the target
    # No opset-18 attribute survives (the converter's old fault) and no node is left aside.
    for node in proto.graph.node:
        assert node.domain in ("", "ai.onnx"), node
        assert node.op_type != "Split" or all(a.name != "num_outputs" for a in node.attribute)
        assert all(a.name != "noop_with_empty_axes" for a in node.attribute) or node.op_type == "ReduceSum"
    assert "DeformConv" not in {n.op_type for n in proto.graph.node}


@pytest.mark.parametrize("group, opset, dynamic", RUNS, ids=IDS)
def test_zoo_matches_pytorch(zoo_export, group, opset, dynamic):
    model, report, data = zoo_export(group, opset, dynamic)
    x = _input()
    with torch.no_grad():
        want = model(x).numpy()
    got = _run(data, x)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= ATOL, f"{group}@{opset}: {np.abs(got - want).max()}"
    assert report.max_error <= ATOL


@pytest.mark.parametrize("group, opset", [(g, o) for g in GROUPS for o in OPSETS], ids=lambda v: str(v))
def test_zoo_dynamic_runs_at_a_new_size(zoo_export, group, opset):
    model, _, data = zoo_export(group, opset, True)
    x = _input(n=3, h=14, w=9, seed=1)
    with torch.no_grad():
        want = model(x).numpy()
    got = _run(data, x)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= ATOL, f"{group}@{opset} at 3x14x9: {np.abs(got - want).max()}"
