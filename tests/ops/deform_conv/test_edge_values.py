"""Edge values: samples on pixel borders and floor boundaries, huge and non-finite offsets,
one-pixel inputs, kernels that do not fit, and an empty batch.

What comes out (docs/guides/deform-conv.md, "Edge values"):

* integer offsets, samples exactly on -1, 0, H-1, H (and just inside): torchvision's numbers;
* huge offsets (1e6 .. 3e38): the sample is 0, as in torchvision;
* +-inf offsets: the sample is 0, as in torchvision;
* NaN offsets: the sample is 0 (as ONNX Runtime's DeformConv does); torchvision
  0.29.1's CPU kernel crashes the process, so it has no answer to compare with;
* kernel larger than the padded input: a ValueError at export time naming the sizes;
* N = 0: an empty ``[0, Co, Ho, Wo]`` output, as torchvision returns.

The reference is always torchvision on the same tensors (for NaN: with each NaN
replaced by 1e6, i.e. "this sample is 0").
"""

from __future__ import annotations

import functools
import io
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
import torch
import torchvision
from onnx import helper, numpy_helper

import deform_onnx
from util import DCNV2_ASYMMETRIC, Config, DeformLayer, assert_close, check, export, make_inputs, reference, run_ort

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")

#: (method, opset): every lowering, at the opsets where its graph changes
#: (GridSample is "bilinear" below 20, "linear" from 20).
TARGETS = [("native", 19), ("grid_sample", 16), ("grid_sample", 20), ("gather", 11), ("gather", 17)]
TARGET_IDS = [f"{m}-op{o}" for m, o in TARGETS]

CONFIGS = {
    # DCNv2 with groups, offset groups, asymmetric kernel/stride/dilation.
    "dcnv2": DCNV2_ASYMMETRIC,
    # One pixel high / wide (case c11), DCNv1.
    "H1": Config(N=1, C_in=4, C_out=3, H=1, W=5, kernel=(1, 3), padding=(0, 1), mask=False, bias=True),
    "W1": Config(N=1, C_in=4, C_out=3, H=4, W=1, kernel=(3, 1), padding=(1, 0), offset_groups=2, mask=True, bias=False),
}


@functools.cache
def _exported(method: str, opset: int, name: str, dynamic: bool) -> tuple[DeformLayer, bytes]:
    cfg = CONFIGS[name]
    model = DeformLayer(cfg)
    deform_onnx.register(method)
    try:
        data = export(model, make_inputs(cfg), opset, dynamic=dynamic)
    finally:
        deform_onnx.unregister()
    check(data)
    return model, data


def _base(cfg: Config, axis: int) -> torch.Tensor:
    """``[K, Ho or Wo]``: each tap's sampling position before the offset (torchvision)."""
    ho, wo = cfg.out_hw()
    kh, kw = cfg.kernel
    i = torch.arange(kh).repeat_interleave(kw) if axis == 0 else torch.arange(kw).repeat(kh)
    o = torch.arange(ho if axis == 0 else wo)
    return (o * cfg.stride[axis] - cfg.padding[axis])[None, :] + (i * cfg.dilation[axis])[:, None]


def offsets_to(cfg: Config, py: torch.Tensor, px: torch.Tensor) -> torch.Tensor:
    """The offset tensor whose samples land exactly at ``py``, ``px`` (each ``[N, G, K, Ho, Wo]``)."""
    by = _base(cfg, 0)[None, None, :, :, None]
    bx = _base(cfg, 1)[None, None, :, None, :]
    dy, dx = py - by, px - bx
    n, g, k, ho, wo = py.shape
    return torch.stack([dy, dx], dim=3).reshape(n, 2 * g * k, ho, wo).to(torch.float32)


def _positions(cfg: Config, values: list[float], seed: int, axis: int) -> torch.Tensor:
    """``[N, G, K, Ho, Wo]`` sample positions drawn (seeded) from ``values``."""
    n, g, k = cfg.N, cfg.offset_groups, cfg.kernel[0] * cfg.kernel[1]
    ho, wo = cfg.out_hw()
    gen = torch.Generator().manual_seed(seed + axis)
    table = torch.tensor(values, dtype=torch.float64)
    return table[torch.randint(len(values), (n, g, k, ho, wo), generator=gen)]


def border_positions(size: int) -> list[float]:
    """Sample positions on and around the zero-padding border along an axis of ``size`` pixels."""
    eps = 2.0**-8  # exact in float32, so the sample lands exactly there in every implementation
    return [
        -2.0,
        -1.0 - eps,
        -1.0,
        -1.0 + eps,
        -0.5,
        0.0,
        eps,
        size - 1.0,
        size - 1.0 + eps,
        size - 0.5,
        size - eps,
        float(size),
        size + eps,
        size + 1.0,
    ]


def _run(method, opset, name, dynamic, offset, mask=None):
    model, data = _exported(method, opset, name, dynamic)
    cfg = CONFIGS[name]
    inputs = make_inputs(cfg, seed=3)
    inputs["offset"] = offset
    if mask is not None:
        inputs["mask"] = mask
    return model, inputs, run_ort(data, inputs)


# -- exact positions -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("method, opset", TARGETS, ids=TARGET_IDS)
def test_samples_on_the_border(method, opset, name):
    """Every sample exactly on -1, 0, H-1, H (and one step of 2^-8 either side): torchvision's numbers."""
    cfg = CONFIGS[name]
    py = _positions(cfg, border_positions(cfg.H), seed=0, axis=0)
    px = _positions(cfg, border_positions(cfg.W), seed=0, axis=1)
    model, inputs, got = _run(method, opset, name, False, offsets_to(cfg, py, px))
    assert_close(got, reference(model, inputs), what=f"{method}@{opset} {name} border samples")


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("method, opset", TARGETS, ids=TARGET_IDS)
def test_integer_offsets(method, opset, name, dynamic):
    """Integer offsets (every sample on a floor boundary), reaching one pixel beyond each side."""
    cfg = CONFIGS[name]
    ho, wo = cfg.out_hw()
    gen = torch.Generator().manual_seed(1)
    reach = max(cfg.H, cfg.W) + 2
    offset = torch.randint(
        -reach, reach + 1, (cfg.N, 2 * cfg.offset_groups * cfg.kernel[0] * cfg.kernel[1], ho, wo), generator=gen
    ).to(torch.float32)
    model, inputs, got = _run(method, opset, name, dynamic, offset)
    assert_close(got, reference(model, inputs), what=f"{method}@{opset} {name} integer offsets")


# -- huge and non-finite offsets -------------------------------------------------------------------


def _sprinkle(offset: torch.Tensor, value: float, fraction: float, seed: int) -> torch.Tensor:
    """``offset`` with a seeded ``fraction`` of its entries (dy and dx alike) set to ``value``."""
    gen = torch.Generator().manual_seed(seed)
    hit = torch.rand(offset.shape, generator=gen) < fraction
    return torch.where(hit, torch.tensor(value, dtype=offset.dtype), offset)


def _zero_sample_output(model: DeformLayer, inputs: dict) -> np.ndarray:
    """What every-sample-zero gives: the bias (or 0) at every output pixel."""
    shape = reference(model, inputs).shape
    bias = model.conv.bias
    if bias is None:
        return np.zeros(shape, np.float32)
    return np.broadcast_to(bias.detach().numpy()[None, :, None, None], shape)


@pytest.mark.parametrize("value", [1e6, -1e6, 1e30, -3e38, float("inf"), float("-inf")])
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("method, opset", TARGETS, ids=TARGET_IDS)
def test_huge_and_infinite_offsets_sample_zero(method, opset, dynamic, value):
    """Some offsets huge or infinite: those samples are 0, the rest unchanged (torchvision's numbers)."""
    cfg = CONFIGS["dcnv2"]
    offset = _sprinkle(make_inputs(cfg, seed=3)["offset"], value, 0.2, seed=4)
    model, inputs, got = _run(method, opset, "dcnv2", dynamic, offset)
    assert_close(got, reference(model, inputs), what=f"{method}@{opset} offsets {value}")


@pytest.mark.parametrize("value", [1e6, float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("method, opset", TARGETS, ids=TARGET_IDS)
def test_every_offset_out_of_reach_gives_the_bias(method, opset, value):
    """All offsets huge, infinite or NaN: every sample is 0, the output is the bias."""
    cfg = CONFIGS["dcnv2"]
    offset = torch.full_like(make_inputs(cfg)["offset"], value)
    model, inputs, got = _run(method, opset, "dcnv2", False, offset)
    if not np.isnan(value):
        assert_close(got, reference(model, inputs), what=f"{method}@{opset} all offsets {value}")
    assert_close(got, _zero_sample_output(model, inputs), atol=1e-6, what=f"{method}@{opset} all offsets {value}")


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", ["dcnv2", "H1"])
@pytest.mark.parametrize("method, opset", TARGETS, ids=TARGET_IDS)
def test_nan_offsets_sample_zero(method, opset, name, dynamic):
    """NaN offsets run (no error, no NaN out) and those samples are 0: torchvision with 1e6 there."""
    cfg = CONFIGS[name]
    offset = _sprinkle(make_inputs(cfg, seed=3)["offset"], float("nan"), 0.2, seed=5)
    model, inputs, got = _run(method, opset, name, dynamic, offset)
    inputs["offset"] = torch.nan_to_num(offset, nan=1e6)
    assert_close(got, reference(model, inputs), what=f"{method}@{opset} {name} NaN offsets")


def _no_core() -> None:
    """No core file for the crash: where core dumps are on, it would write a torch process's (hundreds of MB)."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def test_torchvision_crashes_on_nan_offsets():
    """Why NaN has no torchvision reference: its CPU kernel kills the process (torchvision 0.29.1).

    If this starts passing through, torchvision gives NaN offsets a meaning:
    compare with it and update docs/guides/deform-conv.md's "Edge values".
    """
    code = textwrap.dedent(
        """
        import torch, torchvision
        x = torch.randn(1, 2, 5, 5)
        offset = torch.zeros(1, 18, 5, 5)
        offset[0, 0, 2, 2] = float("nan")
        torchvision.ops.deform_conv2d(x, offset, torch.randn(3, 2, 3, 3), padding=1)
        print("returned")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, preexec_fn=_no_core
    )
    assert proc.returncode < 0 and "returned" not in proc.stdout, (proc.returncode, proc.stdout, proc.stderr[-500:])


# -- kernel larger than the padded input ---------------------------------------------------------

#: kernel 5x3, padding 1: needs H >= 3; H = 2 leaves no output row.
TOO_SMALL = Config(N=1, C_in=2, C_out=2, H=2, W=6, kernel=(5, 3), padding=(1, 1), mask=False)
FIT_MESSAGE = r"kernel \(5, 3\) with dilation \(1, 1\) does not fit the padded input 2x6 \(padding \(1, 1\)\)"


def _too_small_inputs():
    x = torch.randn(1, 2, 2, 6)
    offset = torch.zeros(1, 30, 1, 6)  # what a predictor with the output's 1x6 grid would give
    return x, offset


def test_torchvision_rejects_a_kernel_larger_than_the_input():
    """torchvision errors too, so a traced (TorchScript) export fails in the model's own forward."""
    with pytest.raises(RuntimeError, match="output"):
        DeformLayer(TOO_SMALL)(*_too_small_inputs())


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_export_kernel_larger_than_input_is_a_value_error(tmp_path, dynamo):
    path = tmp_path / "m.onnx"
    with pytest.raises(ValueError, match=FIT_MESSAGE):
        deform_onnx.export(DeformLayer(TOO_SMALL), _too_small_inputs(), path, dynamo=dynamo, opset_version=17)
    assert list(tmp_path.iterdir()) == []


def test_functional_call_through_dynamo_is_a_value_error(tmp_path):
    """``deform_conv2d`` called directly (no module to check): the lowering's own check, unwrapped."""

    class Functional(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(2, 2, 5, 3))

        def forward(self, x, offset):
            return torchvision.ops.deform_conv2d(x, offset, self.weight, padding=(1, 1))

    with pytest.raises(ValueError, match=FIT_MESSAGE):
        deform_onnx.export(Functional(), _too_small_inputs(), tmp_path / "m.onnx", dynamo=True, opset_version=17)
    assert list(tmp_path.iterdir()) == []


def test_translation_table_names_the_problem():
    """Plain ``torch.onnx.export(dynamo=True)`` with our table: torch wraps the error, the text is ours."""
    table = deform_onnx.translation_table("grid_sample")
    with pytest.raises(Exception, match=FIT_MESSAGE):
        torch.onnx.export(DeformLayer(TOO_SMALL), _too_small_inputs(), dynamo=True, custom_translation_table=table)


def test_spec_rejects_kernel_larger_than_input():
    with pytest.raises(ValueError, match=FIT_MESSAGE):
        deform_onnx.DeformConvSpec.from_shapes([1, 2, 2, 6], [2, 2, 5, 3], [1, 30, 1, 6], padding=(1, 1))


def test_lower_file_with_kernel_larger_than_input():
    """An ONNX file with a static input too small for its DeformConv: lower() names the node and sizes."""
    f = onnx.TensorProto.FLOAT
    node = helper.make_node(
        "DeformConv", ["x", "w", "offset"], ["y"], name="dcn", kernel_shape=[5, 3], pads=[1, 1, 1, 1]
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", f, [1, 2, 2, 6]),
            helper.make_tensor_value_info("offset", f, [1, 30, 1, 6]),
        ],
        [helper.make_tensor_value_info("y", f, [1, 2, 1, 6])],
        [numpy_helper.from_array(np.zeros((2, 2, 5, 3), np.float32), "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(ValueError, match="dcn.*" + FIT_MESSAGE):
        deform_onnx.lower(model, method="gather")


# -- empty batch ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dynamic", [False, True], ids=["static N=0", "dynamic N, run at 0"])
@pytest.mark.parametrize("method, opset", TARGETS, ids=TARGET_IDS)
def test_empty_batch(method, opset, dynamic):
    """N = 0: an empty [0, Co, Ho, Wo] output, as torchvision returns (grouped DCNv2 and DCNv1)."""
    for cfg in (CONFIGS["dcnv2"], Config(C_in=4, C_out=3, offset_groups=2, mask=False)):
        model = DeformLayer(cfg)
        empty = make_inputs(cfg, N=0)
        deform_onnx.register(method)
        try:
            data = export(model, make_inputs(cfg) if dynamic else empty, opset, dynamic=dynamic)
        finally:
            deform_onnx.unregister()
        check(data)
        want = reference(model, empty)
        assert want.shape == (0, cfg.C_out, *cfg.out_hw())
        assert_close(run_ort(data, empty), want, what=f"{method}@{opset} N=0")


@pytest.mark.parametrize("method", ["grid_sample", "gather", "native"])
def test_empty_batch_dynamo(tmp_path, method):
    """The dynamo path with an N = 0 example (static): an empty output too."""
    cfg = CONFIGS["dcnv2"]
    model = DeformLayer(cfg)
    empty = make_inputs(cfg, N=0)
    buf = io.BytesIO()
    deform_onnx.export(model, tuple(empty.values()), buf, method=method, dynamo=True, opset_version=20)
    got = run_ort(buf.getvalue(), empty)
    assert_close(got, reference(model, empty), what=f"dynamo {method} N=0")
