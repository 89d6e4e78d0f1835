"""The "DeformConv sampler" form (ops.deform_conv.sampler_columns): torchvision's numbers, in row bands too.

ONNX Runtime's INT8 form samples the columns with a depthwise one-hot
``DeformConv`` and contracts them with the weight-first ``MatMul``. A band is
a ``DeformConv`` over the whole input with a row stride chosen for the band's
row count and an offset shift that moves its base rows: where an off-by-one
would hide, so tiny maps are cut into many bands (``BAND_PIXELS`` lowered)
across stride, padding, dilation, offset groups, kernel shape and no mask.
Compared in float32 with torchvision on the same tensors.
"""

from __future__ import annotations

import io

import onnx
import pytest

import deform_onnx
from deform_onnx.builder.forms import graph_forms
from deform_onnx.ops.deform_conv import common
from deform_onnx.ops.deform_conv.sampler_columns import band_stride
from deform_onnx.ops.deform_conv.spec import DeformConvSpec
from util import Config, DeformLayer, assert_close, make_inputs, reference, run_ort

FORMS = ["integer contraction", "weight first", "DeformConv sampler"]
GRID = [
    Config(H=13, W=11),
    Config(C_in=4, C_out=6, H=14, W=9, stride=2, padding=2, offset_groups=2),
    Config(C_in=4, C_out=4, H=12, W=10, dilation=2, padding=0, offset_groups=2, mask=False, bias=False),
    Config(C_in=4, C_out=4, H=9, W=16, kernel=(3, 1), padding=(1, 0)),
    Config(C_in=3, C_out=4, H=12, W=9, stride=(2, 1)),  # odd channels, a row stride
]


def _lowered(cfg: Config, monkeypatch, bands: bool = True) -> tuple[onnx.ModelProto, dict]:
    model, inputs = DeformLayer(cfg), make_inputs(cfg)
    buf = io.BytesIO()
    deform_onnx.export(model, tuple(inputs.values()), buf, method="native", opset_version=19,
                       input_names=list(inputs), output_names=["y"])  # fmt: skip
    if bands:
        monkeypatch.setattr(common, "SAMPLER_BAND_PIXELS", 20)
    with graph_forms(FORMS):
        lowered = deform_onnx.lower(onnx.load_from_string(buf.getvalue()), method="grid_sample")
    return lowered, inputs


@pytest.mark.parametrize("cfg", GRID, ids=lambda c: c.id)
def test_sampler_form_in_bands_matches_torchvision(cfg, monkeypatch):
    lowered, inputs = _lowered(cfg, monkeypatch)
    samplers = [n for n in lowered.graph.node if n.op_type == "DeformConv"]
    bands = common.row_bands(*cfg.out_hw(), sampler=True)
    assert len(bands) > 1 and len(samplers) == len(bands)  # one depthwise DeformConv per band
    assert all(next(a.i for a in n.attribute if a.name == "group") == cfg.C_in for n in samplers)  # depthwise
    assert "GridSample" not in {n.op_type for n in lowered.graph.node}
    model = DeformLayer(cfg)
    assert_close(run_ort(lowered.SerializeToString(), inputs), reference(model, inputs), what="DeformConv sampler")


def test_sampler_form_in_one_piece_and_where_it_does_not_apply(monkeypatch):
    lowered, inputs = _lowered(Config(H=8, W=8), monkeypatch, bands=False)
    assert [n.op_type for n in lowered.graph.node].count("DeformConv") == 1
    assert_close(run_ort(lowered.SerializeToString(), inputs), reference(DeformLayer(Config(H=8, W=8)), inputs))
    # groups == 2: the weight-first contraction needs one weight, so GridSample samples (and no DeformConv is left)
    cfg = Config(C_in=4, C_out=4, H=8, W=8, groups=2)
    lowered, inputs = _lowered(cfg, monkeypatch, bands=False)
    ops = {n.op_type for n in lowered.graph.node}
    assert "DeformConv" not in ops and "GridSample" in ops
    assert_close(run_ort(lowered.SerializeToString(), inputs), reference(DeformLayer(cfg), inputs))


@pytest.mark.parametrize("H", [1, 2, 7, 50, 193])
def test_band_stride_gives_the_band_its_rows(H):
    for spec in (
        DeformConvSpec(4, 4, (3, 3), padding=(1, 1)),
        DeformConvSpec(4, 4, (3, 3), stride=(2, 2), padding=(0, 0), dilation=(2, 2)),
        DeformConvSpec(4, 4, (5, 1), padding=(2, 0)),
    ):
        top, _, bottom, _ = spec.pads
        reach = spec.dilation[0] * (spec.kernel[0] - 1) + 1
        for rows in range(1, max(1, spec.out_len(0, H)) + 1):
            stride, pad = band_stride(spec, H, rows)
            assert pad >= bottom and stride >= 1
            assert (H + top + pad - reach) // stride + 1 == rows


def test_sampler_form_per_image_batch(monkeypatch):
    """A static batch of 2 images of 64x64 output pixels: sampled and contracted image by image, in bands."""
    monkeypatch.setattr(common, "PER_IMAGE_MIN_PIXELS", 16)
    cfg = Config(N=2, C_in=2, C_out=3, H=6, W=5)
    assert common.per_image(cfg.N, 6 * 5) == [0, 1]
    lowered, inputs = _lowered(cfg, monkeypatch)
    bands = common.row_bands(*cfg.out_hw(), sampler=True)
    assert [n.op_type for n in lowered.graph.node].count("DeformConv") == len(bands) * cfg.N
    assert_close(run_ort(lowered.SerializeToString(), inputs), reference(DeformLayer(cfg), inputs), what="per image")
