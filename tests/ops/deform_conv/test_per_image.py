"""A static batch is lowered image by image (ops.deform_conv.common.per_image): same numbers, one image's columns alive.

Each image of 64x64 output pixels or more gets its own sampling and contraction
(the memory of ONNX Runtime's DeformConv, which works one image at a time); a
dynamic batch, a batch above PER_IMAGE_MAX_BATCH and smaller maps stay batched.
Both exporters, both standard-op lowerings, offset groups and conv groups.
"""

from __future__ import annotations

import io

import onnx
import pytest
import torch

import deform_onnx
from deform_onnx.ops.deform_conv import common
from util import Config, DeformLayer, assert_close, make_inputs, reference, run_ort

#: 8x8 output maps with the thresholds lowered to them (``PER_IMAGE_MIN_PIXELS`` to 8x8, ``BAND_PIXELS`` to
#: two bands): the branches a 64x64 map takes at the real thresholds (test_per_image_rule checks those), at
#: a 64th of the pixels. Two images: the file's size (and the dynamo export's time) grows with images x bands.
CFG = Config(N=2, C_in=4, C_out=4, H=8, W=8, groups=2, offset_groups=2)


@pytest.fixture(autouse=True)
def _small_thresholds(monkeypatch):
    monkeypatch.setattr(common, "PER_IMAGE_MIN_PIXELS", CFG.H * CFG.W)
    monkeypatch.setattr(common, "BAND_PIXELS", CFG.H * CFG.W // 2)


def _export(cfg: Config, method: str, dynamo: bool, dynamic_batch: bool = False):
    model, inputs = DeformLayer(cfg), make_inputs(cfg)
    axes = {name: {0: "N"} for name in (*inputs, "y")} if dynamic_batch else None
    buf = io.BytesIO()
    deform_onnx.export(
        model,
        tuple(inputs.values()),
        buf,
        opset_version=17,
        method=method,
        dynamo=dynamo,
        input_names=list(inputs),
        output_names=["y"],
        dynamic_axes=axes,
        verify=False,
    )
    return onnx.load_from_string(buf.getvalue()), model, inputs


def _images(proto: onnx.ModelProto, method: str, bands: int = 1) -> int:
    """Sampling passes per tap: GridSample nodes / 3 (one per band with ``bands``), or corner Gathers / 9."""
    ops = [n.op_type for n in proto.graph.node]
    if method == "grid_sample":  # a kernel row per GridSample; every tap of a band when banded
        return ops.count("GridSample") // (3 if bands == 1 else bands)
    # Four Gathers of the row table per tap (rows of 2 channels: the narrow form), band and image.
    table_reads = sum(1 for n in proto.graph.node if n.op_type == "Gather" and n.input[0] == _table(proto))
    return table_reads // (9 * 4 * bands)


def _table(proto: onnx.ModelProto) -> str:
    """The padded row table: the first input of the Gather read most often."""
    counts: dict[str, int] = {}
    for n in proto.graph.node:
        if n.op_type == "Gather":
            counts[n.input[0]] = counts.get(n.input[0], 0) + 1
    return max(counts, key=counts.get)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("method", ["grid_sample", "gather"])
def test_static_batch_is_lowered_per_image(method, dynamo):
    proto, model, inputs = _export(CFG, method, dynamo)
    # also cut into row bands (common.row_bands), each image's apart
    assert len(common.row_bands(CFG.H, CFG.W)) == 2
    assert _images(proto, method, bands=len(common.row_bands(CFG.H, CFG.W))) == CFG.N
    assert_close(run_ort(proto.SerializeToString(), inputs), reference(model, inputs), what=f"{method} per image")


@pytest.mark.parametrize("method", ["grid_sample", "gather"])
def test_dynamic_batch_stays_batched(method):
    proto, model, _ = _export(CFG, method, dynamo=False, dynamic_batch=True)
    assert _images(proto, method, bands=len(common.row_bands(CFG.H, CFG.W))) == 1
    # And it runs at another batch size.
    other = make_inputs(CFG, seed=3, N=3)
    assert_close(run_ort(proto.SerializeToString(), other), reference(model, other), what=f"{method} batch 3")


def test_per_image_rule(monkeypatch):
    monkeypatch.undo()  # the real thresholds
    assert common.PER_IMAGE_MIN_PIXELS == 64 * 64
    big = common.PER_IMAGE_MIN_PIXELS
    assert common.per_image(3, big) == [0, 1, 2]
    assert common.per_image(1, big) == [None]
    assert common.per_image(common.PER_IMAGE_MAX_BATCH + 1, big) == [None]
    assert common.per_image(3, big - 1) == [None]
    assert common.per_image(torch.tensor([3]), big) == [None]  # any non-int: a dynamic size
