"""The ncnn target writes ``Reduce*`` nodes as pooling, ``Conv`` and elementwise ops (targets/repair_reduce.py).

pnnx writes every ONNX ``Reduce*`` as an ncnn ``Reduction`` over the ONNX axes not shifted for ncnn's missing batch
axis: an SE block's ``x.mean((2, 3), keepdim=True)``, CBAM's channel mean and max and SuperPoint's
``F.normalize`` of its sampled descriptors were refused by the target's run in ncnn. The repair's ops keep ONNX's
values (checked here in ONNX Runtime against the original node, and the exported models against PyTorch on the
same tensors) and run right in ncnn.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper

import deform_onnx
from deform_onnx.runtimes.deployed.check import check_runtimes
from deform_onnx.targets import resolve_target
from deform_onnx.targets.repair_reduce import REDUCTIONS, reductions_as_pooling_and_conv
from real_code.lightglue_superpoint_style import SuperPointDescriptors
from util import ATOL

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))
NEEDS_NCNN = pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")
SHAPES = {2: [1, 16], 3: [1, 16, 20], 4: [1, 16, 8, 6]}


def _reduced(shape: list[int], axes: list[int] | None, keep: int) -> list[int]:
    axes = list(range(len(shape))) if axes is None else [a % len(shape) for a in axes]
    if keep:
        return [1 if i in axes else d for i, d in enumerate(shape)]
    return [d for i, d in enumerate(shape) if i not in axes]


def _graph(cases: list[tuple[str, list[int], list[int] | None, int]], opset: int = 17) -> onnx.ModelProto:
    """One graph input per distinct shape, one output per case ``(op, shape, axes, keepdims)``; from opset 18 (and
    ``ReduceSum`` from 13) the axes are a constant input."""
    inputs = {tuple(shape): f"x{len(shape)}d" for _, shape, _, _ in cases}
    nodes, inits, outputs = [], [], []
    for k, (op, shape, axes, keep) in enumerate(cases):
        ins, attrs = [inputs[tuple(shape)]], {"keepdims": keep}
        if axes is not None and (opset >= 18 or op == "ReduceSum"):
            inits.append(helper.make_tensor(f"axes{k}", TensorProto.INT64, [len(axes)], axes))
            ins.append(f"axes{k}")
        elif axes is not None:
            attrs["axes"] = axes
        nodes.append(helper.make_node(op, ins, [f"y{k}"], name=f"r{k}", **attrs))
        outputs.append(helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, _reduced(shape, axes, keep)))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(s)) for s, name in inputs.items()],
        outputs,
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        v.name: rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim]).astype(np.float32)
        for v in model.graph.input
    }


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {k: v for k, v in feeds.items() if k in {i.name for i in session.get_inputs()}})


def _every_case(keeps=(1, 0)) -> list[tuple[str, list[int], list[int] | None, int]]:
    """Every op, rank and set of non-batch axes, keepdims 1 and 0, and (keepdims 1) every axis, batch of 1 included."""
    cases = []
    for op, (rank, shape), keep in itertools.product(REDUCTIONS, SHAPES.items(), keeps):
        sets = [list(c) for r in range(1, rank) for c in itertools.combinations(range(1, rank), r)]
        for axes in [*sets, [-1]] + ([list(range(rank)), None] if keep else []):  # keepdims=0 of all: 0-d, left
            cases.append((op, shape, axes, keep))
    return cases


@pytest.mark.parametrize("opset", [17, 18])
def test_rewrite_keeps_the_onnx_values(opset):
    """Each rewritten node gives the original node's values and shape in ONNX Runtime, and no ``Reduce*`` is left."""
    model = _graph(_every_case(), opset)
    feeds = _feeds(model)
    want = _ort(model, feeds)
    done = reductions_as_pooling_and_conv(model)
    assert done == [f"Reduce* written as pooling, Conv and elementwise ops on {len(want)} node(s)"], done
    onnx.checker.check_model(model, full_check=True)
    assert not [n.op_type for n in model.graph.node if n.op_type.startswith("Reduce")]
    assert not [t.name for t in model.graph.initializer if t.name.startswith("axes")]  # the axes inputs went too
    for k, (g, w) in enumerate(zip(_ort(model, feeds), want, strict=True)):
        assert g.shape == w.shape, (k, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=str(k))


def test_left_as_written():
    """What the repair cannot write with ncnn's right ops stays: the target's run in ncnn judges it."""
    cases = [
        helper.make_node("ReduceProd", ["x"], ["a"], axes=[1]),
        helper.make_node("ReduceLogSumExp", ["x"], ["b"], axes=[1]),
        helper.make_node("ReduceMean", ["x"], ["c"], keepdims=0),  # every axis to a 0-d value
        helper.make_node("ReduceMean", ["b2"], ["d"], axes=[1]),  # a leading axis of 2 (no ncnn blob)
        helper.make_node("ReduceMean", ["dyn"], ["e"], axes=[1]),  # a dynamic axis
        helper.make_node("ReduceMean", ["v5"], ["f"], axes=[1]),  # 5-D
        helper.make_node("ReduceL2", ["x"], ["n"], axes=[1]),  # F.normalize(x, dim=1) on 4-D: ncnn's Normalize
        helper.make_node("Clip", ["n", "eps"], ["nc"]),
        helper.make_node("Expand", ["nc", "shape"], ["ne"]),
        helper.make_node("Div", ["x", "ne"], ["g"]),
    ]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        cases,
        "g",
        [
            value("x", TensorProto.FLOAT, [1, 4, 3, 5]),
            value("b2", TensorProto.FLOAT, [2, 4, 3]),
            value("dyn", TensorProto.FLOAT, [1, 4, "L"]),
            value("v5", TensorProto.FLOAT, [1, 4, 2, 3, 5]),
        ],
        [value(n, TensorProto.FLOAT, None) for n in "abcdefg"],
        [helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-12]), helper.make_tensor("shape", 7, [4], [1, 4, 3, 5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    before = [n.op_type for n in model.graph.node]
    assert reductions_as_pooling_and_conv(model) == []
    assert [n.op_type for n in model.graph.node] == before


class _Blocks(torch.nn.Module):
    """An SE block's squeeze, CBAM's channel pooling, ``F.normalize(dim=1)`` on a map and on its 3-D reshape."""

    def forward(self, x):
        se = x * torch.sigmoid(x.mean((2, 3), keepdim=True))
        cbam = torch.cat([x.mean(1, keepdim=True), x.max(1, keepdim=True)[0]], 1)
        return se, cbam, F.normalize(x, dim=1), F.normalize(x.reshape(1, 16, -1), dim=1)


@pytest.fixture(scope="module")
def blocks_ncnn(tmp_path_factory):
    """``_Blocks`` exported with ``target="ncnn"``: by default the export runs the file in ncnn first."""
    torch.manual_seed(0)
    model, x = _Blocks().eval(), torch.randn(1, 16, 8, 6)
    path = tmp_path_factory.mktemp("blocks") / "blocks.onnx"
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    return model, x, path, deform_onnx.export(model, (x,), path, target="ncnn", **opt_out)


def test_blocks_are_repaired_and_keep_pytorch_values(blocks_ncnn):
    model, x, path, report = blocks_ncnn
    assert "reductions as pooling and Conv" in resolve_target("ncnn").repairs
    # SE mean, CBAM mean and max, the 3-D normalize; the 4-D normalize is pnnx's Normalize, left
    assert "target 'ncnn': Reduce* written as pooling, Conv and elementwise ops on 4 node(s)" in report.repairs
    proto = onnx.load(str(path))
    assert [n.op_type for n in proto.graph.node if n.op_type.startswith("Reduce")] == ["ReduceL2"]
    got = _ort(proto, {proto.graph.input[0].name: x.numpy()})
    with torch.no_grad():
        want = [y.numpy() for y in model(x)]
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=0)


@NEEDS_NCNN
def test_blocks_run_in_ncnn(blocks_ncnn):
    """The target's file was run in ncnn (pnnx, its cached venv) against PyTorch before it was written."""
    *_, report = blocks_ncnn
    assert any(line.startswith("ncnn") for line in report.runtimes), report.runtimes


@NEEDS_NCNN
def test_without_the_repair_ncnn_refuses_the_blocks(tmp_path, monkeypatch):
    """The planted fault: the repair does nothing, and the export's run in ncnn refuses the file (none written)."""
    from deform_onnx.targets import repairs

    monkeypatch.setitem(repairs.REPAIRS, "reductions as pooling and Conv", lambda model: [])
    torch.manual_seed(0)
    with pytest.raises(deform_onnx.VerificationError, match=r"ncnn .* misses the reference"):
        deform_onnx.export(_Blocks().eval(), (torch.randn(1, 16, 8, 6),), tmp_path / "bad.onnx", target="ncnn")
    assert not (tmp_path / "bad.onnx").exists()


def test_superpoint_descriptors_export_for_ncnn(tmp_path):
    """SuperPoint's descriptor head and ``sample_descriptors`` (grid_sample, then ``F.normalize`` of the 3-D
    samples) are written for ncnn, checked there, and give PyTorch's values in ONNX Runtime."""
    torch.manual_seed(1)
    model = SuperPointDescriptors().eval()
    args = (torch.randn(1, 1, 32, 24), torch.rand(1, 5, 2) * torch.tensor([24.0, 32.0]))
    path = tmp_path / "superpoint.onnx"
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    report = deform_onnx.export(model, args, path, target="ncnn", **opt_out)
    assert any("Reduce* written as pooling" in r for r in report.repairs), report.repairs
    if not NO_RUNTIMES:
        assert any(line.startswith("ncnn") for line in report.runtimes), report.runtimes
    proto = onnx.load(str(path))
    names = [i.name for i in proto.graph.input]
    got = _ort(proto, {n: a.numpy() for n, a in zip(names, args, strict=True)})[0]
    with torch.no_grad():
        want = model(*args).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


@NEEDS_NCNN
def test_every_rewrite_runs_right_in_ncnn_and_the_nodes_did_not(tmp_path):
    """Each op over each set of non-batch axes of 2-D..4-D values (keepdims 1; 0 on axis 1): wrong in ncnn as
    written, right rewritten (one file of many outputs each)."""
    cases = _every_case(keeps=(1,)) + [(op, s, [1], 0) for op in REDUCTIONS for s in SHAPES.values()]
    cases = [c for c in cases if c[2] is not None and len(c[2]) < len(c[1])]  # pnnx's reduce-all ran right
    model = _graph(cases)
    feeds = _feeds(model)
    onnx.save(model, str(tmp_path / "as_written.onnx"))
    reductions_as_pooling_and_conv(model)
    onnx.save(model, str(tmp_path / "repaired.onnx"))
    (before,) = check_runtimes(tmp_path / "as_written.onnx", ["ncnn"], inputs=feeds, repeats=1)
    assert not before.ok
    (after,) = check_runtimes(tmp_path / "repaired.onnx", ["ncnn"], inputs=feeds, repeats=1)
    assert after.ok, after.failure or after.error


@NEEDS_NCNN
def test_a_reduction_left_is_named_in_the_refusal(tmp_path):
    """``torch.prod`` over the channels (``ReduceProd``: no rewrite) is refused by the target's run in ncnn, and the
    message names the node and what to do, not only the values that missed."""

    class Prod(torch.nn.Module):
        def forward(self, x):
            return torch.prod(x, 1, keepdim=True)

    torch.manual_seed(0)
    with pytest.raises(deform_onnx.VerificationError) as refused:
        deform_onnx.export(Prod().eval(), (torch.rand(1, 4, 5, 6) + 0.5,), tmp_path / "prod.onnx", target="ncnn")
    message = str(refused.value)
    assert "Reduce* node(s) the ncnn target could not rewrite" in message and "ReduceProd" in message, message
    assert "(no rewrite of this op)" in message and "export for another target" in message, message
    assert not (tmp_path / "prod.onnx").exists()


def test_check_on_ncnn_names_the_lower_that_repairs_a_reduction(tmp_path, monkeypatch):
    """``check --runtime ncnn`` of a file no ncnn rule refuses but with a channel mean (wrong in ncnn as written) names
    the target's repair and the ``lower --target ncnn`` that writes it (ncnn's own run is planted here)."""
    from typer.testing import CliRunner

    from deform_onnx.cli import app
    from deform_onnx.runtimes.deployed import check as deployed_check
    from deform_onnx.runtimes.deployed.check import RuntimeRow

    path = tmp_path / "cbam.onnx"
    onnx.save(_graph([("ReduceMean", [1, 16, 8, 6], [1], 1)]), str(path))
    row = RuntimeRow(runtime="ncnn", title="ncnn", error="planted: the values missed")
    monkeypatch.setattr(deployed_check, "check_runtimes", lambda *a, **k: [row])
    result = CliRunner().invoke(app, ["check", str(path), "--runtime", "ncnn"])
    text = " ".join(result.output.split())
    assert result.exit_code == 1, text
    assert "target ncnn's repairs rewrite this file (Reduce* written as pooling" in text, text
    assert "deform-onnx lower cbam.onnx --target ncnn -o OUT.onnx" in text, text
