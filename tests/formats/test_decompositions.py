"""deform_onnx.decompositions(): the ONNX lowerings run as core ATen ops inside run_decompositions.

The expected values are torchvision's / PyTorch's own outputs on the same tensors. Measured
(torch 2.14.1, CPU): deformable convolution <= 1.2e-6 (both forms), 5-D grid_sample <= 2.4e-7, fused
MSDA <= 6e-7; bound 1e-4 (float32).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._prims_common import make_contiguous_strides_for

import deform_onnx
from deform_onnx.ops import ms_deform_attn
from deform_onnx.ops.msda.op import MSDeformAttnCore
from util import DCNV2_ASYMMETRIC, DCNV2_GROUPED, SMALL, UNEVEN, Config, DeformLayer, make_inputs

ATOL = 1e-4
CONFIGS = [
    SMALL,
    DCNV2_GROUPED,
    DCNV2_ASYMMETRIC,
    UNEVEN,
    UNEVEN.at(mask=False, bias=False),
    Config(N=2, C_in=4, C_out=4, H=7, W=6, kernel=(1, 3), padding=(0, 1), mask=False),
]


def _ops(ep) -> set[str]:
    return {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}


def _decomposed(model, args, method, dynamic_shapes=None):
    ep = torch.export.export(model, args, dynamic_shapes=dynamic_shapes, strict=False)
    return ep.run_decompositions(deform_onnx.decompositions(method))


@pytest.mark.parametrize("method", ["grid_sample", "gather"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.id)
def test_deform_conv_every_attribute(cfg, method):
    model, inputs = DeformLayer(cfg), make_inputs(cfg)
    args = tuple(inputs.values())
    ep = _decomposed(model, args, method)
    assert not any("torchvision" in op for op in _ops(ep))
    assert ("aten.grid_sampler_2d.default" in _ops(ep)) == (method == "grid_sample")
    with torch.no_grad():
        err = (ep.module()(*args) - model(*args)).abs().max().item()
    assert err <= ATOL, err


def _int64_casts(ep) -> int:
    return sum(
        n.target is torch.ops.aten._to_copy.default and n.meta["val"].dtype == torch.int64 for n in ep.graph.nodes
    )


@pytest.mark.parametrize("cfg", [SMALL, DCNV2_GROUPED, UNEVEN], ids=lambda c: c.id)
def test_deform_conv_float_row_index(cfg, monkeypatch):
    """The ``"float row index"`` form (the .pte's): corner rows computed in float32, cast to int64 once, the
    same values as torchvision (offset groups, batch 2, groups, mask); where the table holds more rows than
    float32 counts exactly (the limit planted below this layer's table) the int64 computation (two casts)."""
    from deform_onnx.builder.forms import graph_forms
    from deform_onnx.ops.deform_conv import lower_gather

    model, inputs = DeformLayer(cfg), make_inputs(cfg)
    args = tuple(inputs.values())
    rows = cfg.N * (cfg.H + 3) * (cfg.W + 3) * cfg.offset_groups
    for limit, casts in ((rows, 1), (rows - 1, 2)):
        monkeypatch.setitem(lower_gather.FLOAT_ROWS_MAX, "float32", limit)
        with graph_forms(["float row index"]):
            ep = _decomposed(model, args, "gather")
        assert _int64_casts(ep) == casts
        with torch.no_grad():
            err = (ep.module()(*args) - model(*args)).abs().max().item()
        assert err <= ATOL, err


def test_deform_conv_dynamic_sizes():
    """Dynamic H/W: "auto" takes the grid_sample lowering, which hands a map of unknown size to the gather
    lowering's exact sampler (no grid_sampler op left); method "gather" calls that lowering directly, the
    same code on the same arguments, so it is not run again."""
    cfg = SMALL.at(stride=(1, 1), padding=(1, 1), dilation=(1, 1))
    model = DeformLayer(cfg)
    H, W = torch.export.Dim("H", min=4, max=32), torch.export.Dim("W", min=4, max=32)
    spatial = {2: H, 3: W}
    ep = _decomposed(model, tuple(make_inputs(cfg).values()), "auto", (spatial,) * 3)
    assert "aten.grid_sampler_2d.default" not in _ops(ep)
    other = tuple(make_inputs(cfg, H=13, W=6).values())
    with torch.no_grad():
        err = (ep.module()(*other) - model(*other)).abs().max().item()
    assert err <= ATOL, err


#: Every 5-D grid_sample setting: (mode, padding_mode, align_corners).
WARPS_5D = [
    (m, p, a) for m in ("bilinear", "nearest") for p in ("zeros", "border", "reflection") for a in (False, True)
]


class _Warps5d(torch.nn.Module):
    """One 5-D ``grid_sample`` per :data:`WARPS_5D` setting, on the same volume and grid (one export for all)."""

    def forward(self, v, g):
        return tuple(F.grid_sample(v, g, mode=m, padding_mode=p, align_corners=a) for m, p, a in WARPS_5D)


@pytest.fixture(scope="module")
def warps_5d():
    """The :class:`_Warps5d` program decomposed by "auto", its outputs, and the volume and grid it ran on."""
    gen = torch.Generator().manual_seed(0)
    v = torch.randn(2, 3, 4, 5, 6, generator=gen)
    g = torch.rand(2, 3, 4, 5, 3, generator=gen) * 2.6 - 1.3
    ep = _decomposed(_Warps5d(), (v, g), "auto")
    return ep, ep.module()(v, g), v, g


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_5d(warps_5d, mode, padding_mode, align_corners):
    ep, outputs, v, g = warps_5d
    assert "aten.grid_sampler_3d.default" not in _ops(ep)
    got = outputs[WARPS_5D.index((mode, padding_mode, align_corners))]
    want = F.grid_sample(v, g, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    err = (got - want).abs().max().item()
    assert err <= ATOL, err


def test_grid_sample_4d_kept_or_gathered():
    class Warp(torch.nn.Module):
        def forward(self, v, g):
            return F.grid_sample(v, g, padding_mode="border", align_corners=False)

    v, g = torch.randn(1, 2, 6, 7), torch.rand(1, 5, 4, 2) * 2.4 - 1.2
    assert "aten.grid_sampler_2d.default" in _ops(_decomposed(Warp(), (v, g), "auto"))
    ep = _decomposed(Warp(), (v, g), "gather")
    assert "aten.grid_sampler_2d.default" not in _ops(ep)
    assert (ep.module()(v, g) - Warp()(v, g)).abs().max().item() <= ATOL


def test_msda_fused_op():
    shapes = [(6, 5), (3, 3)]
    model = MSDeformAttnCore(shapes).eval()
    gen = torch.Generator().manual_seed(0)
    value = torch.randn(2, sum(h * w for h, w in shapes), 2, 4, generator=gen)
    loc = torch.rand(2, 7, 2, len(shapes), 3, 2, generator=gen) * 1.2 - 0.1
    attn = torch.rand(2, 7, 2, len(shapes), 3, generator=gen)
    ep = _decomposed(model, (value, loc, attn), "auto")
    assert not any("deform_onnx" in op for op in _ops(ep))
    err = (ep.module()(value, loc, attn) - model(value, loc, attn)).abs().max().item()
    assert err <= ATOL, err
    assert ms_deform_attn is not None


def test_native_and_unknown_methods_are_refused():
    with pytest.raises(ValueError, match="method 'native' keeps torchvision::deform_conv2d"):
        deform_onnx.decompositions("native")
    with pytest.raises(ValueError, match="unknown method 'fast'"):
        deform_onnx.decompositions("fast")


def test_family_only_table():
    table = deform_onnx.decompositions(core=False)
    names = {str(op) for op in table}
    assert names == {"torchvision.deform_conv2d.default", "aten.grid_sampler_3d.default", "aten.grid_sampler.default",
                     "deform_onnx.ms_deform_attn.default", "aten.meshgrid.default", "aten.meshgrid.indexing"}  # fmt: skip


def test_pte_forms_one_band_four_gathers_per_tap_and_the_same_numbers():
    """The .pte writer's forms (``"four corner gathers"``, ``"whole map"``, ``"float row index"``, ``"table by one Pad"``):
    a map the gather form cuts in row bands
    is one piece, each tap samples its four corners by four gathers (no batched MatMul: XNNPACK takes the Mul/Add),
    a tap picked by a constant index is a slice (no index_select, which XNNPACK has no kernel for), no reshape to the
    same shape and no product with 1 (XNNPACK copies / multiplies the columns for each); same outputs."""
    from deform_onnx.builder.forms import graph_forms
    from deform_onnx.formats.executorch import FORMS
    from deform_onnx.ops.deform_conv.common import row_bands

    cfg = SMALL.at(N=1, C_in=32, C_out=8, H=50, W=50, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1,
                   offset_groups=1)  # fmt: skip
    assert len(row_bands(cfg.H, cfg.W)) > 1  # banded without the forms
    model, inputs = DeformLayer(cfg), make_inputs(cfg)
    args = tuple(inputs.values())
    plain = _decomposed(model, args, "gather")
    with graph_forms(FORMS):
        pte = _decomposed(model, args, "gather")
    gathers = [n for n in pte.graph.nodes if n.target == torch.ops.aten.index_select.default]
    taps = cfg.kernel[0] * cfg.kernel[1]
    assert len(gathers) == 4 * taps  # one band, four corners a tap, no per-tap pick by index_select
    assert "aten.bmm.default" not in _ops(pte)
    assert "aten.bmm.default" in _ops(plain)  # without the forms: the stacked corners' batched MatMul
    # "table by one Pad": the row table padded by one constant_pad_nd, not zero blocks concatenated twice
    pads = [n for n in pte.graph.nodes if n.target == torch.ops.aten.constant_pad_nd.default]
    assert len(pads) == 1 and list(pads[0].args[1]) == [1, 2, 1, 2, 0, 0, 0, 0]  # W, H, C, N
    assert "aten.constant_pad_nd.default" not in _ops(plain) and "aten.cat.default" in _ops(plain)
    # No view to the shape it already has and no product with 1 (XNNPACK runs each as a pass over the columns)
    views = [n for n in pte.graph.nodes if n.target == torch.ops.aten.view.default]
    assert views and all(n.meta["val"].shape != n.args[0].meta["val"].shape for n in views)
    assert not [n for n in pte.graph.nodes if n.target == torch.ops.aten.mul.Tensor and 1 in n.args[1:]]
    # "float row index": the corner rows cast to int64 once (without the forms: two casts per band)
    assert (_int64_casts(pte), _int64_casts(plain)) == (1, 2 * len(row_bands(cfg.H, cfg.W)))
    with torch.no_grad():
        want = model(*args)
        assert (pte.module()(*args) - want).abs().max().item() <= ATOL


def test_family_only_table_takes_meshgrid_without_indexing():
    """InternImage's ``_get_reference_points``: ``torch.meshgrid(torch.linspace(..., H), ...)`` without
    ``indexing=``, over sizes that stay symbolic (``-o m.pte --dynamic``): torch.export keeps
    ``aten.meshgrid.default``, and ``run_decompositions`` with the family-only table (``core=False``, the
    ``.pte``'s) failed: "meshgrid() missing 1 required keyword-only argument: 'indexing'" (new-user trial)."""
    from deform_onnx.formats.torch_export import exported

    class Grid(torch.nn.Module):
        def forward(self, x):
            H, W = x.shape[-2:]
            ys, xs = torch.meshgrid(torch.linspace(0.5, H - 0.5, H), torch.linspace(0.5, W - 0.5, W))
            return x + ys / H + xs / W

    dims = ({2: torch.export.Dim("H", min=2, max=16), 3: torch.export.Dim("W", min=2, max=16)},)
    ep = exported(Grid(), (torch.randn(1, 2, 4, 6),), dims, "gather", "ExecuTorch", core=False)
    x = torch.randn(1, 2, 7, 5)  # another size: the grid follows it
    torch.testing.assert_close(ep.module()(x), Grid()(x), rtol=0, atol=0)


def test_outputs_keep_the_eager_ops_strides():
    """A decomposed op returns row-major strides, as the eager op does: the lowerings end in a permuted view.

    The Spatial Transformer tutorial's net (``tests/real_code/stn_style.py``) views ``conv1``'s pooled output
    with ``x.view(-1, 4 * 12 * 12)``: after a channels-last grid_sample output, conv and max_pool are
    channels-last too (one channel in), and the view failed in run_decompositions ("Cannot view a tensor with
    shape [1, 4, 12, 12] and strides (576, 1, 48, 4)"), so the .pte and .tflite exports of the model failed.
    """
    from real_code.stn_style import Net

    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(2, 1, 28, 28)
    ep = _decomposed(model, (x,), "gather")
    assert "aten.grid_sampler_2d.default" not in _ops(ep)
    with torch.no_grad():
        got, want = ep.module()(x), model(x)
    assert all((g - w).abs().max().item() <= ATOL for g, w in zip(got, want))
    table = deform_onnx.decompositions("gather", core=False)
    x, weight, offset, mask = (
        torch.randn(1, 4, 8, 8),
        torch.randn(6, 4, 3, 3),
        torch.randn(1, 18, 8, 8),
        torch.rand(1, 9, 8, 8),
    )
    dcn = table[torch.ops.torchvision.deform_conv2d.default](
        x, weight, offset, mask, torch.zeros(6), 1, 1, 1, 1, 1, 1, 1, 1, True
    )
    sampled = table[torch.ops.aten.grid_sampler_2d.default](
        torch.randn(1, 3, 5, 6), torch.rand(1, 4, 7, 2), 0, 0, False
    )
    for out in (dcn, sampled):
        assert out.stride() == make_contiguous_strides_for(out.shape)
