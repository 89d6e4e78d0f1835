"""Graph form ``"quad table"`` (issue 38): the four corners of every table row side by side, one Gather a sample.

The gather samplers (:class:`deform_onnx.sampler.gather.BilinearCorners`) read ``[M, 4*C/G]`` rows of a table built
once per layer (:func:`deform_onnx.sampler.gather.quad_table`) at the top-left corner alone, instead of four corner
rows. Compared with torchvision on the same tensors in ONNX Runtime: the default gather form and the ``tflite``
target's forms (``flat offset groups``: step = the offset groups), in row bands (the table shared by every band),
with offset groups apart, at a dynamic batch and size, and through ``F.grid_sample``'s gather form; each graph is
read for one table ``Gather`` per tap (the control: the same layer without the form gathers four corner rows).
No target asks for the form (measured slower or within the noise: BENCHMARKS.md), so the tests are few.
"""

from __future__ import annotations

import io

import onnx
import pytest
import torch
import torch.nn.functional as F

import deform_onnx
from deform_onnx.builder.forms import graph_forms
from deform_onnx.ops.deform_conv import common
from util import Config, DeformLayer, assert_close, make_inputs, reference, run_ort

TFLITE = ["flat offset groups", "flat sampling grid", "table padded flat", "corner-major gather", "float row index",
          "int32 row index"]  # fmt: skip
GRID = [  # trimmed to what tells the form apart: one group, the tflite forms with groups and stride, groups apart
    (Config(H=9, W=7), []),
    (Config(N=2, C_in=16, C_out=6, H=11, W=9, offset_groups=8, stride=2, dilation=2, padding=2), TFLITE),
    (
        Config(N=2, C_in=4, C_out=4, H=6, W=5, offset_groups=2, groups=2, mask=False, bias=False),
        ["offset groups apart"],
    ),
]


def _export(cfg: Config, forms: list[str], **kw) -> tuple[onnx.ModelProto, dict]:
    module, inputs = DeformLayer(cfg).eval(), make_inputs(cfg)
    buf = io.BytesIO()
    with graph_forms(forms):
        deform_onnx.export(module, tuple(inputs.values()), buf, method="gather", opset_version=13, dynamo=False,
                           input_names=list(inputs), output_names=["y"], verify=False, **kw)  # fmt: skip
    return onnx.load_from_string(buf.getvalue()), inputs


def _table_gathers(proto: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The Gathers of computed rows (indices produced by a node, not a constant) of a 2-D table."""
    g = onnx.shape_inference.infer_shapes(proto).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in (*g.value_info, *g.input)}
    constants = {t.name for t in g.initializer} | {n.output[0] for n in g.node if n.op_type == "Constant"}
    return [n for n in g.node if n.op_type == "Gather" and ranks.get(n.input[0]) == 2 and n.input[1] not in constants]


@pytest.mark.parametrize("cfg, forms", GRID, ids=lambda v: v.id if isinstance(v, Config) else "+".join(v) or "default")
def test_quad_table_matches_torchvision(cfg: Config, forms: list[str], monkeypatch):
    """One quad ``Gather`` per tap (and group apart) instead of four corner rows, torchvision's numbers, in bands."""
    monkeypatch.setattr(common, "BAND_PIXELS", 24)  # several row bands: one quad table serves them all
    bands = len(common.row_bands(*cfg.out_hw()))
    assert bands > 1
    quad, inputs = _export(cfg, [*forms, "quad table"])
    want = reference(DeformLayer(cfg).eval(), inputs)
    assert_close(run_ort(quad.SerializeToString(), inputs), want, what="quad table")
    taps = cfg.kernel[0] * cfg.kernel[1]
    apart = cfg.offset_groups if "offset groups apart" in forms else 1
    gathers = _table_gathers(quad)
    assert len(gathers) == taps * bands * apart
    tables = {n.input[0] for n in gathers}
    assert len(tables) == apart and all(t in {n.output[0] for n in quad.graph.node if n.op_type == "Concat"}
                                        for t in tables)  # fmt: skip
    plain, _ = _export(cfg, forms)  # the control: four corner rows a tap
    per_tap = 1 if "corner-major gather" in forms else 4  # rows narrower than 32: four corner Gathers otherwise
    assert len(_table_gathers(plain)) == per_tap * taps * bands * apart


def test_quad_table_at_a_dynamic_size():
    """The quad table's shifts from its own shape, at a dynamic batch and size: the same file at another size."""
    cfg = Config(N=2, C_in=8, C_out=4, H=7, W=9, offset_groups=2)
    axes = {n: {0: "n", 2: "h", 3: "w"} for n in ("x", "offset", "mask")}
    quad, inputs = _export(cfg, ["quad table"], dynamic_axes=axes)
    assert any(n.op_type == "ReduceSum" for n in quad.graph.node)
    model = DeformLayer(cfg).eval()
    assert_close(run_ort(quad.SerializeToString(), inputs), reference(model, inputs), what="quad table")
    small = make_inputs(cfg, N=1, H=5, W=6)  # another size, the same file
    assert_close(run_ort(quad.SerializeToString(), small), reference(model, small), what="5x6")


def test_quad_table_in_grid_sample_gather_form():
    """``F.grid_sample``'s gather form (4-D and 5-D) under the form: ATen's numbers, points outside the map too."""

    class Warp(torch.nn.Module):
        def forward(self, x, grid):
            return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)

    gen = torch.Generator().manual_seed(0)
    for x, grid in (
        (torch.randn(2, 5, 6, 7, generator=gen), torch.rand(2, 4, 3, 2, generator=gen) * 2.6 - 1.3),
        (torch.randn(1, 3, 4, 5, 6, generator=gen), torch.rand(1, 2, 3, 4, 3, generator=gen) * 2.6 - 1.3),
    ):
        buf = io.BytesIO()
        with graph_forms(["quad table"]):
            deform_onnx.export(Warp(), (x, grid), buf, method="gather", opset_version=13, dynamo=False,
                               input_names=["x", "grid"], output_names=["y"], verify=False)  # fmt: skip
        proto = onnx.load_from_string(buf.getvalue())
        assert len(_table_gathers(proto)) == x.dim() - 3  # one per depth plane
        got = run_ort(proto.SerializeToString(), {"x": x, "grid": grid})
        assert_close(got, Warp()(x, grid).numpy(), what=f"{x.dim()}-D")
