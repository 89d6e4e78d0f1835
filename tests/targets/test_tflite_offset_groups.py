"""Issue 38: the ``tflite`` target's gather form with offset groups (``flat offset groups``) runs right in LiteRT.

onnx2tf (1.29.24) guesses each value's layout from its shape: it misplaced the offset-group axis of the default
gather form's 5-D index values (the bundled example 1.8 off in LiteRT). It also makes every 4-D graph input
channels-last but records one whose non-batch axes are all equal (C == H == W) as untransposed (ops/Input.py
compares shapes), so the Reshape that starts the gather table read the channels-last data as channels-first (2.2
off at 8x8x8, 3.1 at 64x64x64, measured here); the target's repair ``"square input read by Max"`` has such an input
read through ``Max(x, x)``, whose output onnx2tf records as transposed. One export (one onnx2tf conversion) holds
three DCNv2 layers: two with 2 offset groups, on a non-square 8x10 map and with C == H == W (8x8x8), and a 1x1 one
with one offset group and C == H == W; ``export(target="tflite")`` runs the file in LiteRT against PyTorch before it writes it
(every output) and refuses a file that misses. Expected values are PyTorch's on the same tensors.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torchvision
from onnx import TensorProto, helper

import deform_onnx
from deform_onnx.targets.repair_tflite import square_input_read_by_max

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))
G = 2  # offset groups


class ThreeLayers(torch.nn.Module):
    """Two ``DeformConv2d(8, 4, 3, padding=1)`` with 2 offset groups and a ``DeformConv2d(8, 4, 1)`` with one, offsets
    and masks as inputs, and a ``DeformConv2d(32, 4, 3, padding=1)`` with one (32-channel rows, which the other forms
    gather with one batched MatMul) (no output is C == H == W)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.wide = torchvision.ops.DeformConv2d(8, 4, 3, padding=1)
        self.cube = torchvision.ops.DeformConv2d(8, 4, 3, padding=1)
        self.plain = torchvision.ops.DeformConv2d(8, 4, 1)  # one tap: the table is what a square input breaks
        self.rows32 = torchvision.ops.DeformConv2d(32, 4, 3, padding=1)

    def forward(self, x1, off1, m1, x2, off2, m2, x3, off3, m3, x4, off4, m4):
        return self.wide(x1, off1, m1), self.cube(x2, off2, m2), self.plain(x3, off3, m3), self.rows32(x4, off4, m4)


def _inputs(h: int, w: int, groups: int = G, taps: int = 9, channels: int = 8) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(h * 100 + w + groups)
    return (torch.randn(1, channels, h, w, generator=g), torch.randn(1, 2 * groups * taps, h, w, generator=g) * 2,
            torch.rand(1, groups * taps, h, w, generator=g))  # fmt: skip


@pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")
def test_offset_groups_run_in_litert(tmp_path):
    """Every layer's outputs matched PyTorch in LiteRT within the float32 rule (the export refuses otherwise), in the
    target's form: every offset-group sample coordinate 2-D; the square inputs (only those) read through Max; every
    table row gathered by int32 indices (``int32 row index``), by one ``Gather`` of ``[4, M]`` corners per tap
    summed by ``ReduceSum`` (``corner-major gather``), no batched ``MatMul`` of 1x4 corner weights."""
    args = (*_inputs(8, 10), *_inputs(8, 8), *_inputs(8, 8, groups=1, taps=1), *_inputs(5, 6, groups=1, channels=32))
    path = tmp_path / "og2.onnx"
    names = ["x1", "off1", "m1", "x2", "off2", "m2", "x3", "off3", "m3", "x4", "off4", "m4"]
    report = deform_onnx.export(ThreeLayers().eval(), args, path, target="tflite", input_names=names)
    assert any(line.startswith("tflite") for line in report.runtimes), report.runtimes
    read = [line for line in report.repairs if "read through Max" in line]
    assert len(read) == 1 and "input(s) x2, x3 read" in read[0], report.repairs  # x1 (8x8x10) is left alone
    g = onnx.shape_inference.infer_shapes(onnx.load(str(path))).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in g.value_info}
    floors = [ranks[n.input[0]] for n in g.node if n.op_type == "Floor"]
    assert floors[:4] == [2] * 4  # y and x of each offset-grouped layer (the one-group layers' follow)
    types = {v.name: v.type.tensor_type for v in [*g.value_info, *g.input]}
    types.update({t.name: onnx.helper.make_tensor_type_proto(t.data_type, t.dims).tensor_type for t in g.initializer})
    # the row gathers: a 2-D float table read at computed indices (the taps' slices read constant scalars)
    constants = {t.name for t in g.initializer} | {n.output[0] for n in g.node if n.op_type == "Constant"}
    rows = [n for n in g.node if n.op_type == "Gather" and len(types[n.input[0]].shape.dim) == 2
            and types[n.input[0]].elem_type == TensorProto.FLOAT and n.input[1] not in constants]  # fmt: skip
    assert rows and all(types[n.input[1]].elem_type == TensorProto.INT32 for n in rows)
    # one Gather of [4, M] corner rows per tap (and layer), summed by ReduceSum: 9 + 9 + 1 + 9
    assert len(rows) == 28 and all(types[n.input[1]].shape.dim[0].dim_value == 4 for n in rows)
    assert sum(n.op_type == "ReduceSum" for n in g.node) == 28
    assert not [n for n in g.node if n.op_type == "MatMul" and len(types[n.input[0]].shape.dim) > 2]


def _graph(shapes: dict[str, list[int]]) -> onnx.ModelProto:
    """Each input ``name`` flattened to 2-D as ``y_name`` (a Reshape, as the gather table starts)."""
    nodes = [helper.make_node("Reshape", [n, "two"], [f"y_{n}"]) for n in shapes]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info(f"y_{n}", TensorProto.FLOAT, ["rows", 4]) for n in shapes],
        [onnx.numpy_helper.from_array(np.array([-1, 4], np.int64), "two")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_square_input_read_by_max_only_square_inputs() -> None:
    """Repair "square input read by Max": the square 4-D and 3-D inputs' readers read ``Max(x, x)`` (the same values,
    NaN included); a graph without a square 3-D..5-D input is left byte for byte."""
    shapes = {"a": [1, 4, 4, 4], "b": [1, 4, 4, 8], "c": [1, 4, 4], "d": [4, 4]}
    model = _graph(shapes)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    feeds["a"][0, 1, 2, 3] = np.nan
    before = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    assert square_input_read_by_max(model) == ["square input(s) a, c read through Max(x, x) (onnx2tf records them "
                                               "channels-first)"]  # fmt: skip
    onnx.checker.check_model(model)
    maxes = [n for n in model.graph.node if n.op_type == "Max"]
    assert [list(n.input) for n in maxes] == [["a", "a"], ["c", "c"]]
    readers = {n.output[0]: n.input[0] for n in model.graph.node if n.op_type == "Reshape"}
    assert readers == {"y_a": maxes[0].output[0], "y_b": "b", "y_c": maxes[1].output[0], "y_d": "d"}
    after = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for x, y in zip(before, after):
        np.testing.assert_array_equal(y, x)
    plain = _graph({"b": [1, 4, 4, 8], "d": [4, 4]})
    kept = plain.SerializeToString()
    assert square_input_read_by_max(plain) == [] and plain.SerializeToString() == kept
