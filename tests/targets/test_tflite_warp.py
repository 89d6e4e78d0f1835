"""Issue 37 item 4: optical-flow warps through ``target="tflite"`` (onnx2tf, then LiteRT) on square images.

onnx2tf 1.29.24 takes a value whose non-batch axes are all equal (``[1, 8, 8]``) for a transposed one: a
plain flow warp on a square image came out 3.6 off PyTorch in LiteRT (measured here). The target's form
``"flat sampling grid"`` (ops/grid_sample/flat.py) keeps the sampler's per-point values 1-D, and its repair
``"constant operand last"`` (targets/repair_tflite.py) writes the model's base-grid arithmetic
(``xs + flow[:, 0]``) the way onnx2tf converts right; its repair ``"GELU divisor as [1]"`` lets onnx2tf fuse
exact GELU into TFLite's own op (InternImage's GELUs were a Select TensorFlow ``Erf`` that LiteRT refused). The
rule checks run on ONNX Runtime; one module-scoped export runs each padding mode, both ``align_corners``, 4-D /
5-D warps and a GELU in LiteRT (one onnx2tf conversion).
Expected values are PyTorch's on the same tensors.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper

import deform_onnx
from deform_onnx.targets.repair_tflite import constant_operand_last, gelu_divisor_1d
from util import ATOL

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))


def warp(x: torch.Tensor, flow: torch.Tensor, padding: str, align: bool) -> torch.Tensor:
    """A flow warp as optical-flow code writes it: base grid from aranges, plus the flow, normalised."""
    grids = torch.meshgrid(*(torch.arange(s, dtype=x.dtype) for s in x.shape[2:]), indexing="ij")
    sizes = x.shape[2:]
    coords = []
    for k in range(len(sizes)):  # x first: the last spatial axis
        axis = len(sizes) - 1 - k
        p = grids[axis] + flow[:, k]
        coords.append(2 * p / max(sizes[axis] - 1, 1) - 1 if align else (2 * p + 1) / sizes[axis] - 1)
    return F.grid_sample(x, torch.stack(coords, dim=-1), padding_mode=padding, align_corners=align)


#: (rank, padding, align_corners) of each output: each padding mode once, both align_corners, 4-D and 5-D (one
#: conversion; every combination, 4-D and 5-D, ran in LiteRT within 3.1e-6 with scripts/repro/tflite_warps.py).
WARPS = [(4, "border", True), (4, "zeros", False), (5, "reflection", True)]


class Warps(torch.nn.Module):
    """The :data:`WARPS`, then ``nn.GELU()`` of the flow (exact GELU: ``Erf``)."""

    def forward(self, x, flow, volume, flow3):
        warps = tuple(warp(x, flow, p, a) if rank == 4 else warp(volume, flow3, p, a) for rank, p, a in WARPS)
        return *warps, F.gelu(flow)


def _inputs():
    g = torch.Generator().manual_seed(37)
    return (torch.randn(1, 2, 6, 6, generator=g), torch.randn(1, 2, 6, 6, generator=g) * 2,
            torch.randn(1, 2, 4, 4, 4, generator=g), torch.randn(1, 3, 4, 4, 4, generator=g) * 1.5)  # fmt: skip


@pytest.fixture(scope="module")
def tflite_warps(tmp_path_factory):
    """The warps exported with ``target="tflite"``: by default the target runs the file in LiteRT first."""
    args = _inputs()
    path = tmp_path_factory.mktemp("warps") / "warps.onnx"
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    return args, path, deform_onnx.export(Warps().eval(), args, path, target="tflite", **opt_out)


def _square_values_reshaped(model: onnx.ModelProto) -> list[str]:
    """Values of 3+ axes whose non-batch axes are all equal that a Reshape reads (what onnx2tf re-lays out)."""
    g = onnx.shape_inference.infer_shapes(model).graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in (*g.value_info, *g.input)}
    return [
        n.input[0]
        for n in g.node
        if n.op_type == "Reshape"
        and len(shapes.get(n.input[0], [])) >= 3
        and len(set(shapes[n.input[0]][1:])) == 1
        and shapes[n.input[0]][1] > 1
    ]


def test_warps_match_pytorch_on_onnxruntime(tflite_warps):
    args, path, _ = tflite_warps
    with torch.no_grad():
        want = [w.numpy() for w in Warps()(*args)]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})
    for g, w, case in zip(got, want, [*WARPS, "gelu"], strict=True):
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=0, err_msg=str(case))


def test_flat_sampling_grid_reshapes_no_square_value(tflite_warps, tmp_path):
    """Rule "flat sampling grid": under the tflite target no ``[N, S, S]``-like value reaches a Reshape; the
    plain gather form (the fault) flattens its square index tensors."""
    args, path, _ = tflite_warps
    assert _square_values_reshaped(onnx.load(str(path))) == []
    plain = tmp_path / "plain.onnx"
    deform_onnx.export(Warps().eval(), args, plain, method="gather", opset_version=13, dynamo=False)
    assert _square_values_reshaped(onnx.load(str(plain)))


@pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")
def test_warps_run_in_litert(tflite_warps):
    """Each padding mode, both align_corners, 4-D and 5-D, and a GELU: the target's file ran in LiteRT within the
    float32 rule (the export refuses otherwise: a wrong file is never written)."""
    *_, report = tflite_warps
    assert any(line.startswith("tflite") for line in report.runtimes), report.runtimes


def _model(nodes, inits, shape):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, None) for n in nodes[-1:]],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Div"])
def test_constant_operand_last_keeps_values(op):
    """Repair "constant operand last": a base grid ``[1, 4, 4]`` (from Expand, as torch writes it) first becomes
    its broadcast core ``[4]`` after the value (``Sub(c, v)`` as ``Add(Neg(v), c)``); the same values."""
    xs = np.tile(np.arange(4, dtype=np.float32) + 1, (1, 4, 1))
    nodes = [
        helper.make_node("Expand", ["row", "shape"], ["grid"]),
        helper.make_node(op, ["grid", "v"], ["y"]),
    ]
    inits = [numpy_helper.from_array(xs[0, :1], "row"), numpy_helper.from_array(np.array([1, 4, 4]), "shape")]
    model = _model(nodes, inits, [1, 4, 4])
    v = np.random.default_rng(0).standard_normal((1, 4, 4)).astype(np.float32) + 3
    before = _run(model, {"v": v})
    assert constant_operand_last(model)
    after = _run(model, {"v": v})
    np.testing.assert_array_equal(after, before)
    node = next(n for n in model.graph.node if n.output[0] == "y")
    core = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    constant = [i for i in node.input if i in core]
    assert len(constant) == 1 and core[constant[0]].shape == (4,)
    assert node.input[1] == constant[0] or op == "Div"  # Div keeps its order (no exact rewrite)


def test_gelu_divisor_1d_keeps_values(tflite_warps):
    """Repair "GELU divisor as [1]": the exporter's 0-d ``sqrt(2)`` of exact GELU becomes a ``[1]`` divisor (what
    onnx2tf's GELU fusion recognises), the same values; a ``Div`` that feeds no ``Erf`` keeps its divisor."""
    *_, path, _ = tflite_warps
    written = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in written.graph.initializer}
    producer = {o: n for n in written.graph.node for o in n.output}
    erf = [producer[n.input[0]] for n in written.graph.node if n.op_type == "Erf"]
    assert [inits[d.input[1]].shape for d in erf] == [(1,)]  # the target's file carries it
    nodes = [
        helper.make_node("Div", ["v", "root2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Div", ["e", "root2"], ["y"]),
    ]
    model = _model(nodes, [numpy_helper.from_array(np.array(np.sqrt(2), np.float32), "root2")], [1, 4, 4])
    v = np.random.default_rng(1).standard_normal((1, 4, 4)).astype(np.float32)
    before = _run(model, {"v": v})
    assert gelu_divisor_1d(model)
    np.testing.assert_array_equal(_run(model, {"v": v}), before)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert [inits[n.input[1]].shape for n in model.graph.node if n.op_type == "Div"] == [(1,), ()]
