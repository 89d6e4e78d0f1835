"""A static output map is lowered in bands of output rows (ops.deform_conv.common.row_bands): same numbers.

Each band samples its rows' taps from the whole input and contracts them on
its own (one GridSample of all K taps per band in the grid_sample lowering;
its own index math in the gather lowering). The band edges are where an
off-by-one would hide (a band's first output row, its base coordinates, its
slice of offset and mask), so the parity grid cuts tiny maps into many bands
(``BAND_PIXELS`` lowered for the test: three bands) across stride, padding, dilation,
groups, offset groups, batch (per image) and no mask; one map above the real
threshold is exported with default arguments. Dynamic sizes stay in one piece.
"""

from __future__ import annotations

import copy
import io
import itertools

import onnx
import pytest
import torch

import deform_onnx
from deform_onnx.ops.deform_conv import common
from util import Config, DeformLayer, assert_close, make_inputs, reference, run_ort

#: Configs whose maps the lowered threshold cuts into three bands (a first, an inner and a last band: every
#: kind of band edge; heights unequal where the rows do not divide). More bands repeat the inner band's code
#: and grow the file (the gather lowering writes its index math per band: 8 bands took 20 s through dynamo).
GRID = [
    Config(H=13, W=11),
    Config(N=2, C_in=4, C_out=6, H=14, W=9, stride=2, padding=2, groups=2, offset_groups=2),
    Config(C_in=4, C_out=4, H=12, W=10, dilation=2, padding=0, offset_groups=2, mask=False, bias=False),
    Config(N=3, C_in=4, C_out=4, H=9, W=16, kernel=(3, 1), padding=(1, 0)),
]


def _export(model, inputs, method, **kw) -> onnx.ModelProto:
    buf = io.BytesIO()
    deform_onnx.export(
        model,
        tuple(inputs.values()),
        buf,
        opset_version=17,
        method=method,
        input_names=list(inputs),
        output_names=["y"],
        **kw,
    )
    return onnx.load_from_string(buf.getvalue())


def test_row_bands_rule():
    P = common.BAND_PIXELS
    assert common.row_bands(8, 8) == [None]
    assert common.row_bands(10, P // 10) == [None]  # at the threshold: one piece
    assert common.row_bands(None, 64) == [None]  # dynamic rows
    for Ho, Wo in [(49, 48), (192, 192), (3000, 4000), (2, P), (7, P * 3)]:
        bands = common.row_bands(Ho, Wo)
        count = min(Ho, common.MAX_BANDS, -(-Ho * Wo // P))
        assert len(bands) == count
        assert bands[0][0] == 0 and bands[-1][1] == Ho
        assert all(a[1] == b[0] for a, b in itertools.pairwise(bands)), "bands must be consecutive"
        assert all(e > s for s, e in bands), "no empty band"
        heights = [e - s for s, e in bands]
        assert max(heights) - min(heights) <= 1, "near-equal heights"


@pytest.mark.parametrize("method", ["grid_sample", "gather"])
@pytest.mark.parametrize("cfg", GRID, ids=[c.id for c in GRID])
def test_bands_match_torchvision(cfg, method, monkeypatch):
    Ho, Wo = cfg.out_hw()
    monkeypatch.setattr(common, "BAND_PIXELS", -(-Ho * Wo // 3))
    assert len(common.row_bands(Ho, Wo)) == 3
    model, inputs = DeformLayer(cfg), make_inputs(cfg)
    proto = _export(model, inputs, method, verify=False)
    if method == "grid_sample":  # one GridSample per band and image, each of all K taps
        images = cfg.N if common.per_image(cfg.N, Ho * Wo) != [None] else 1
        assert [n.op_type for n in proto.graph.node].count("GridSample") == len(common.row_bands(Ho, Wo)) * images
    assert_close(run_ort(proto.SerializeToString(), inputs), reference(model, inputs), what=f"{method} in bands")


def test_default_export_of_a_large_map_is_banded():
    """50x50 output pixels (> BAND_PIXELS): default arguments, two bands, torchvision's numbers."""
    cfg = Config(C_in=2, C_out=3, H=50, W=50)
    assert common.BAND_PIXELS < 50 * 50
    model, inputs = DeformLayer(cfg), make_inputs(cfg)
    buf = io.BytesIO()
    deform_onnx.export(model, tuple(inputs.values()), buf, input_names=list(inputs), output_names=["y"])
    proto = onnx.load_from_string(buf.getvalue())
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count("GridSample") == len(common.row_bands(50, 50)) == 2  # the default: grid_sample, in bands
    assert_close(run_ort(buf.getvalue(), inputs), reference(model, inputs), what="default export, bands")


@pytest.mark.parametrize("method", ["grid_sample", "gather"])
def test_dynamic_map_stays_one_piece(method, monkeypatch):
    monkeypatch.setattr(common, "BAND_PIXELS", 20)
    cfg = Config(H=12, W=12)
    model, inputs = DeformLayer(cfg), make_inputs(cfg)
    axes = {n: {2: "H", 3: "W"} for n in (*inputs, "y")}
    proto = _export(model, inputs, method, dynamo=False, dynamic_axes=axes, verify=False)
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count("GridSample") <= 3, "a dynamic map must not be banded"
    other = make_inputs(cfg, seed=4, H=15, W=9)
    assert_close(run_ort(proto.SerializeToString(), other), reference(model, other), what=f"{method} dynamic")


def test_float16_bands(monkeypatch):
    monkeypatch.setattr(common, "BAND_PIXELS", 20)
    cfg = Config(H=10, W=9, dtype=torch.float16)
    assert len(common.row_bands(*cfg.out_hw())) > 1
    model, inputs = DeformLayer(cfg), make_inputs(cfg)
    # verify=True: the project's float16 rule against the upcast float32 model (a miss raises)
    buf = io.BytesIO()
    report = deform_onnx.export(model, tuple(inputs.values()), buf, input_names=list(inputs),
                                output_names=["y"])  # fmt: skip
    assert report.checks, "the file was checked"
    ops = [n.op_type for n in onnx.load_from_string(buf.getvalue()).graph.node]
    assert ops.count("GridSample") > 3, "premise: the file is banded"
    # The file here, against the float32 copy of the layer on the upcast inputs (torchvision has float16 on CPU,
    # but its own float16 output is not the reference): measured 1.0e-3 on outputs of scale 2.8, half a float16
    # ulp (1.95e-3) there, the output's own rounding
    got = run_ort(buf.getvalue(), inputs)
    want = reference(copy.deepcopy(model).float(), {k: v.float() for k, v in inputs.items()})
    assert_close(got.astype("float32"), want, atol=3e-3, what="float16 bands")
