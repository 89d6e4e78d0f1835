"""Case c35: RIFE (hzwer/ECCV2022-RIFE#33) exports with its forward defaults and leaves its caches as it found them.

``IFNet.forward(x, scale=[4, 2, 1])`` (``tests/real_code/rife_ifnet.py``) warps through ``warp()``
(``tests/real_code/rife_warplayer.py``), which caches one base grid per ``(device, flow size)`` in the
module-level dict ``backwarp_tenGrid``. Before: the TorchScript path traced the list default as tensors
("upsample_bilinear2d() received an invalid combination of arguments"), and a dynamic export left a
``FakeTensor`` in that dict ("We found a fake tensor in the exported program constant's list"), and the
fallback's error hid the dynamo reason. Each file is run here at the export size and (dynamic) at
1x6x96x64 against PyTorch on the same tensors; the cache is compared entry by entry (same keys, the same
tensor objects) before and after.
"""

from __future__ import annotations

import inspect
import io
import warnings

import numpy as np
import pytest
import torch

import deform_onnx
from deform_onnx.core.errors import ExportError
from deform_onnx.exporters.forward_defaults import bound
from deform_onnx.exporters.module_state import Snapshot, reached_containers
from real_code import rife_warplayer
from real_code.rife_ifnet import IFNet
from util import ATOL, load_cases

#: Case c35's exports: default arguments; dynamo=False at 16; opset 11; dynamic H/W.
EXPORTS = {
    "default": {},
    "torchscript-16": {"dynamo": False, "opset_version": 16},
    "opset-11": {"opset_version": 11},
    "dynamic": {"dynamic_axes": {"x": {2: "H", 3: "W"}}},
}


def _sizes():
    case = load_cases()["c35"]
    assert case["input"]["x"].startswith("1x6x64x96") and "1x6x96x64" in case["expect"]
    return (1, 6, 64, 96), (1, 6, 96, 64)


@pytest.fixture(scope="module")
def rife():
    torch.manual_seed(0)
    return IFNet().eval()


def _leaves(out) -> list[np.ndarray]:
    return [t.numpy() for t in torch.utils._pytree.tree_leaves(out)]


@pytest.fixture(
    scope="module", params=[pytest.param(n, marks=[pytest.mark.slow] if n == "dynamic" else []) for n in EXPORTS]
)
def exported(request, rife):
    """``(name, file bytes, report, cache before, cache after)``. Before the dynamic export the cache is empty
    (a fresh process); before the others it holds the grid of the user's own call at the export size."""
    shape, _ = _sizes()
    x = torch.rand(shape, generator=torch.Generator().manual_seed(1))
    rife_warplayer.backwarp_tenGrid.clear()
    if request.param != "dynamic":
        with torch.no_grad():
            rife(x)  # the user ran the model once: the cache holds real grids
    before = dict(rife_warplayer.backwarp_tenGrid)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(rife, (x,), f, input_names=["x"], **EXPORTS[request.param])
    return request.param, f.getvalue(), report, before, dict(rife_warplayer.backwarp_tenGrid)


def test_c35_cache_is_the_same_after_export(exported):
    name, _, _, before, after = exported
    assert list(after) == list(before), f"{name}: cache keys changed: {list(after)}"
    assert all(after[k] is before[k] for k in before), f"{name}: a cached grid was replaced"
    assert not any(type(v).__name__ == "FakeTensor" for v in after.values())
    if name == "dynamic":
        assert after == {}  # several captures (the guard check, torch's exporter) left nothing behind


def test_c35_file_matches_pytorch(exported, rife):
    import onnxruntime as ort

    name, data, report, _, _ = exported
    assert report.exporter == ("dynamo" if name in ("default", "dynamic") else "torchscript"), report.fallback_reason
    shape, second = _sizes()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    sizes = [shape, second] if name == "dynamic" else [shape]
    for size in sizes:
        x = torch.rand(size, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            want = _leaves(rife(x))  # flow_list (3), mask, merged (3)
        got = session.run(None, {"x": x.numpy()})
        assert len(got) == len(want) == 7
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=ATOL, atol=ATOL, err_msg=f"{name} at {size}")


def test_the_list_default_stays_a_python_value_for_the_tracer(rife):
    """Inside :func:`bound`, ``forward`` takes the example tensors only (what torch's TorchScript exporter reads to
    append defaults); outside, the signature is the model's own."""
    x = torch.rand(1, 6, 32, 32)
    with bound(rife, (x,)):
        assert list(inspect.signature(rife.forward).parameters) == ["x"]
        with torch.no_grad():
            torch.testing.assert_close(rife(x)[1], rife.__class__.forward(rife, x)[1])
    assert "forward" not in vars(rife)
    assert list(inspect.signature(rife.forward).parameters) == ["x", "scale", "timestep"]


def test_the_walk_finds_the_cache_in_the_warp_layers_module(rife):
    """``IFNet``'s module imports ``warp``; the walk follows it to ``rife_warplayer``'s globals."""
    found = {(scope.get("__name__"), name) for scope, name in reached_containers(rife)}
    assert ("real_code.rife_warplayer", "backwarp_tenGrid") in found


def test_a_cache_attribute_and_buffer_are_restored():
    """Module attributes holding tensors, a dict cache attribute and a replaced buffer go back; the registry of a
    library (a dict of types, no tensors) is left as the model's run made it."""
    registry: dict = {}

    class Cached(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.ones(1))
            self.grids: dict = {}

        def forward(self, x):
            self.grids[x.shape[-1]] = torch.zeros(x.shape[-1])
            self.last = x * 2
            self.scale = self.scale + 1
            registry[type(x)] = True
            return x + self.grids[x.shape[-1]]

    model = Cached()
    snap = Snapshot.take(model)
    scale = model.scale
    model(torch.ones(3))
    snap.restore()
    assert model.grids == {} and not hasattr(model, "last") and model.scale is scale
    assert registry == {torch.Tensor: True}


class _BothFail(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent: torch.export cannot capture it
            return torch.fft.fft(x).abs()  # no TorchScript symbolic
        return x


def test_when_no_path_works_the_error_names_dynamo_first():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ExportError) as err:
            deform_onnx.export(_BothFail(), (torch.rand(1, 4),), io.BytesIO())
    message = str(err.value)
    dynamo, torchscript = message.find("data-dependent"), message.find("aten::fft_fft")
    assert 0 <= dynamo < torchscript, message
    assert message.startswith("no exporter wrote a file: the dynamo exporter was abandoned first")
