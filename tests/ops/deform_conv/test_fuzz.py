"""Property-based parity: random valid layers, every method, a random opset it allows, vs torchvision.

Each example draws one deformable convolution (N 1-3, groups and offset groups
1-3, kernel 1-5 per side, stride 1-3, padding 0-3, dilation 1-3, H and W 1-24
such that the kernel fits, mask and bias on/off, offset scale 0-8 px), exports
it with the TorchScript exporter at a random opset the method allows (11..20),
static or with dynamic N/H/W, and compares ONNX Runtime with
``torchvision.ops.deform_conv2d`` on the same tensors (max abs error <= 1e-4,
weights scaled by 1/sqrt(fan_in) so outputs are of magnitude ~1). A dynamic
export is also run at a second size.

Profiles (tests/conftest.py): ``ci`` (default: derandomized, 50 examples per
method) and ``long`` (>= 2,000 fresh examples per method):
``DEFORM_ONNX_FUZZ=long pytest tests/test_fuzz.py`` or ``pytest --fuzz long``.
Every counterexample found becomes an entry of :data:`REGRESSIONS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

import deform_onnx
from deform_onnx.exporters.torchscript import MAX_OPSET
from util import Config, DeformLayer, assert_close, check, default_opset, export, make_inputs, reference, run_ort

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")

#: Opsets each method is fuzzed at (the TorchScript exporter reaches 11..MAX_OPSET).
METHOD_OPSETS = {
    "native": (19, MAX_OPSET),
    "grid_sample": (16, MAX_OPSET),
    "gather": (11, MAX_OPSET),
    "auto": (11, MAX_OPSET),
}


@dataclass(frozen=True)
class FuzzCase:
    """One drawn example; its repr is what a regression entry copies."""

    cfg: Config
    opset: int
    dynamic: bool = False
    seed: int = 0
    #: (N, H, W) of the second run of a dynamic export.
    resize: tuple[int, int, int] | None = None


def _min_size(kernel: int, padding: int, dilation: int) -> int:
    """Smallest input size that leaves one output pixel."""
    return max(1, dilation * (kernel - 1) + 1 - 2 * padding)


@st.composite
def cases(draw, method: str) -> FuzzCase:
    groups = draw(st.integers(1, 3))
    offset_groups = draw(st.integers(1, 3))
    unit = math.lcm(groups, offset_groups)
    C_in = unit * draw(st.integers(1, max(1, 12 // unit)))
    C_out = groups * draw(st.integers(1, 3))
    kernel = (draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = (draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    lo_h = _min_size(kernel[0], padding[0], dilation[0])
    lo_w = _min_size(kernel[1], padding[1], dilation[1])
    cfg = Config(
        N=draw(st.integers(1, 3)),
        C_in=C_in,
        C_out=C_out,
        H=draw(st.integers(lo_h, 24)),
        W=draw(st.integers(lo_w, 24)),
        kernel=kernel,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        offset_groups=offset_groups,
        mask=draw(st.booleans()),
        bias=draw(st.sampled_from([True, False, "zeros"])),
        offset_scale=draw(st.sampled_from([0.0, 0.5, 8.0]) | st.floats(0.0, 8.0, allow_nan=False)),
    )
    assert cfg.fits()
    dynamic = draw(st.booleans())
    resize = None
    if dynamic:
        resize = (draw(st.integers(1, 3)), draw(st.integers(lo_h, 24)), draw(st.integers(lo_w, 24)))
    return FuzzCase(
        cfg=cfg,
        opset=draw(st.integers(*METHOD_OPSETS[method])),
        dynamic=dynamic,
        seed=draw(st.integers(0, 2**16)),
        resize=resize,
    )


def check_case(method: str, case: FuzzCase) -> None:
    """Export ``case`` with ``method`` and compare ONNX Runtime with torchvision (raises on mismatch)."""
    cfg = case.cfg
    model = DeformLayer(cfg, seed=case.seed)
    inputs = make_inputs(cfg, seed=case.seed + 1)
    deform_onnx.register(method)
    try:
        data = export(model, inputs, case.opset, dynamic=case.dynamic)
    finally:
        deform_onnx.unregister()
    proto = check(data)
    assert default_opset(proto) == case.opset
    what = f"{method}@{case.opset} {cfg.id} {'dynamic' if case.dynamic else 'static'}"
    assert_close(run_ort(data, inputs), reference(model, inputs), what=what)
    if case.resize is not None:
        n, h, w = case.resize
        other = make_inputs(cfg, seed=case.seed + 2, N=n, H=h, W=w)
        assert_close(run_ort(data, other), reference(model, other), what=f"{what}, run at N={n} {h}x{w}")


def _fuzz(method: str):
    @given(case=cases(method))
    def test(case):
        check_case(method, case)

    test.__name__ = f"test_{method}_matches_torchvision"
    test.__doc__ = f"Random valid layers exported with method={method!r} match torchvision within 1e-4."
    return test


test_native_matches_torchvision = _fuzz("native")
test_grid_sample_matches_torchvision = _fuzz("grid_sample")
test_gather_matches_torchvision = _fuzz("gather")
test_auto_matches_torchvision = _fuzz("auto")


# -- counterexamples found by the fuzzer, kept as fixed tests ------------------------

#: (method, case, what was wrong before the fix). Besides the fuzzer's own finds, the
#: layers of earlier fixes that lie inside the fuzzed ranges.
REGRESSIONS: list[tuple[str, FuzzCase, str]] = [
    (
        "gather",
        FuzzCase(Config(N=1, C_in=4, C_out=4, H=5, W=5, kernel=(3, 3), padding=(1, 1), groups=2, mask=False), opset=11),
        "dac086a static groups>1 gather export failed in TorchScript shape inference",
    ),
]


@pytest.mark.parametrize("method, case", [(m, c) for m, c, _ in REGRESSIONS], ids=[why for _, _, why in REGRESSIONS])
def test_regression(method, case):
    check_case(method, case)


def test_strategy_draws_valid_layers_across_the_ranges():
    """The strategy reaches the ends of every range (so the fuzz covers what the docstring says)."""
    from hypothesis import find, settings

    strategy = cases("gather")
    quick = settings(max_examples=2000, database=None, derandomize=True)
    assert find(strategy, lambda c: c.cfg.kernel == (5, 5) and c.cfg.dilation[0] == 3, settings=quick)
    assert find(strategy, lambda c: c.cfg.H == 1 or c.cfg.W == 1, settings=quick)
    assert find(strategy, lambda c: c.cfg.offset_scale == 0.0 and c.cfg.stride == (3, 3), settings=quick)
    assert find(strategy, lambda c: c.cfg.groups == 3 and c.cfg.offset_groups == 2 and c.opset == 11, settings=quick)
    assert find(strategy, lambda c: c.dynamic and c.cfg.N == 3 and not c.cfg.mask, settings=quick)
