"""Target repairs (``deform_onnx.targets.repairs``): onnx2torch's ``Reshape allowzero 0``, tflite's
``stack flatten as Concat``.

torch's dynamo exporter writes ``view``/``reshape`` as ``Reshape(allowzero=1)``,
which onnx2torch 1.5.15 refuses ("allowzero=1" is not implemented; measured with
scripts/op_matrix.py). The target drops the attribute where the shape is a
constant without a 0 (the same values by ONNX's Reshape-14 definition) and its
rule names any ``allowzero=1`` left; the control is the same export for
another target, which keeps the attribute.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
import torch
import torchvision
from onnx import TensorProto, helper, numpy_helper

import deform_onnx
from deform_onnx.targets import resolve_target
from deform_onnx.targets.repair_stack import stack_flatten_as_concat
from deform_onnx.targets.repairs import reshape_allowzero_0
from deform_onnx.targets.rules import violations
from util import run_ort


class _Views(torch.nn.Module):
    def forward(self, x):
        return (x.view(2, 3, 20) * 2).view(2, 60).sum(-1, keepdim=True) + x.reshape(2, 60)


def _allowzero(proto: onnx.ModelProto) -> list[int]:
    return [
        next((a.i for a in n.attribute if a.name == "allowzero"), 0) for n in proto.graph.node if n.op_type == "Reshape"
    ]


def _export(**kw) -> onnx.ModelProto:
    buf = io.BytesIO()
    kw.setdefault("verify_runtimes", ())  # a target's runtime (tflite, ...) does not convert the file here (issue 35)
    deform_onnx.export(_Views(), (torch.randn(2, 3, 4, 5),), buf, input_names=["x"], **kw)
    return onnx.load_from_string(buf.getvalue())


def test_onnx2torch_names_the_repair_and_rule():
    target = resolve_target("onnx2torch")
    assert "Reshape allowzero 0" in target.repairs and "no Reshape allowzero" in target.rules


def test_onnx2torch_export_drops_allowzero_and_matches():
    control = _export(target="generic", opset_version=17)  # the dynamo path, as onnx2torch's 17
    assert 1 in _allowzero(control)
    proto = _export(target="onnx2torch")
    assert _allowzero(proto) and set(_allowzero(proto)) == {0}
    x = torch.randn(2, 3, 4, 5)
    np.testing.assert_allclose(run_ort(proto.SerializeToString(), {"x": x}), _Views()(x).numpy(), rtol=0, atol=1e-5)
    assert not violations(proto, resolve_target("onnx2torch").rules)


def test_a_shape_with_zero_or_computed_keeps_allowzero():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 0, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Reshape", ["x", "zero_shape"], ["y"], allowzero=1, name="with_zero"),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Reshape", ["x", "s"], ["z"], allowzero=1, name="computed"),
    ]
    init = [numpy_helper.from_array(np.array([2, 0, 3], dtype=np.int64), "zero_shape")]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y, z], init), opset_imports=[helper.make_opsetid("", 17)]
    )
    assert reshape_allowzero_0(model) == []
    assert _allowzero(model) == [1, 1]
    found = violations(model, resolve_target("onnx2torch").rules)
    assert any(v.startswith("no Reshape allowzero") and "with_zero" in v for v in found), found


def test_onnx2torch_refuses_opset_18_and_up():
    """onnx2torch 1.5.15 has no Pad-18 / Reshape-19 / Equal-19 converter (measured): a fault from opset 18."""
    with pytest.raises(ValueError, match="onnx2torch.*opset >= 18"):
        _export(target="onnx2torch", opset_version=18)
    assert _export(target="onnx2torch", opset_version=17).opset_import[0].version == 17


# -- tflite: torch.stack(xs, dim=a).flatten(a, a + 1) as one Concat --------------------------------------------
# onnx2tf 1.29.24 misconverts the Unsqueeze / 5-D Concat / Reshape of Deformable DETR's per-level MSDA core
# (1.0 off in LiteRT, measured: scripts/repro/onnx2tf_stack_flatten.py); one Concat of the same values converts.
class _StackFlatten(torch.nn.Module):
    def __init__(self, start: int = -2):
        super().__init__()
        self.start = start

    def forward(self, a, b):
        return torch.stack([a * 2, b - 1], dim=-2).flatten(self.start, self.start + 1)


def _stack_export(module: torch.nn.Module, args: tuple, **kw) -> onnx.ModelProto:
    buf = io.BytesIO()
    kw.setdefault("verify_runtimes", ())  # a target's runtime (tflite, ...) does not convert the file here (issue 35)
    deform_onnx.export(module, args, buf, input_names=[f"i{k}" for k in range(len(args))], **kw)
    return onnx.load_from_string(buf.getvalue())


def test_tflite_writes_stack_flatten_as_one_concat():
    """target tflite: no Unsqueeze left, the values PyTorch's; another target's file keeps the stack (the control)."""
    assert "stack flatten as Concat" in resolve_target("tflite").repairs
    args = (torch.randn(1, 4, 7, 3), torch.randn(1, 4, 7, 3))
    control = _stack_export(_StackFlatten(), args, target="generic")
    assert "Unsqueeze" in {n.op_type for n in control.graph.node}
    proto = _stack_export(_StackFlatten(), args, target="tflite")
    assert "Unsqueeze" not in {n.op_type for n in proto.graph.node}
    got = run_ort(proto.SerializeToString(), {"i0": args[0], "i1": args[1]})
    np.testing.assert_array_equal(got, _StackFlatten()(*args).numpy())


def test_a_reshape_that_merges_other_axes_is_left():
    """Planted: flatten(-3, -2) merges the axis before the stacked one: not a Concat, so the repair leaves it."""
    args = (torch.randn(1, 4, 7, 3), torch.randn(1, 4, 7, 3))
    proto = _stack_export(_StackFlatten(start=-3), args, target="generic")
    before = [n.op_type for n in proto.graph.node]
    assert stack_flatten_as_concat(proto) == [] and [n.op_type for n in proto.graph.node] == before


def test_tflite_msda_per_level_core_is_repaired_and_matches():
    """Deformable DETR's PyTorch core (one grid_sample per level) for target tflite: repaired, PyTorch's values."""
    from deform_onnx.ops import MSDeformAttnReference

    levels = [(4, 5), (2, 3)]
    g = torch.Generator().manual_seed(23)
    value = torch.randn(1, 26, 2, 4, generator=g)
    locations = torch.rand(1, 6, 2, 2, 3, 2, generator=g) * 1.2 - 0.1
    weights = torch.randn(1, 6, 2, 6, generator=g).softmax(-1).view(1, 6, 2, 2, 3)
    module = MSDeformAttnReference(levels)
    proto = _stack_export(module, (value, locations, weights), target="tflite")
    assert "Unsqueeze" not in {n.op_type for n in proto.graph.node}
    got = run_ort(proto.SerializeToString(), {"i0": value, "i1": locations, "i2": weights})
    np.testing.assert_allclose(got, module(value, locations, weights).numpy(), rtol=0, atol=1e-5)


class _ChunkDeform(torch.nn.Module):
    """A DCNv2 block as model code writes it: one conv's output chunked into the offset halves and the mask."""

    def __init__(self, c: int = 4):
        super().__init__()
        self.off = torch.nn.Conv2d(c, 27, 3, padding=1)
        self.weight = torch.nn.Parameter(torch.randn(c, c, 3, 3) * 0.2)

    def forward(self, x):
        from torchvision.ops import deform_conv2d

        o1, o2, m = torch.chunk(self.off(x), 3, dim=1)
        return deform_conv2d(x, torch.cat((o1, o2), 1), self.weight, padding=(1, 1), mask=m.sigmoid())


def _torchscript_chunk(model: torch.nn.Module, dynamic: bool) -> onnx.ModelProto:
    kw = {"dynamic_axes": {"x": {0: "n"}}} if dynamic else {}
    buf = io.BytesIO()
    torch.onnx.export(model, (torch.randn(1, 4, 6, 5),), buf, input_names=["x"], dynamo=False, opset_version=17, **kw)
    return onnx.load_from_string(buf.getvalue())


class _Chunk(torch.nn.Module):
    def forward(self, o):
        o1, o2, m = torch.chunk(o, 3, dim=1)
        return torch.cat((o1, o2), 1).reshape(o.shape[0], 9, 2, 6, 5) * m.sigmoid().unsqueeze(2)


def test_static_shape_arithmetic_folds_torch_chunk_and_keeps_values():
    """TorchScript writes torch.chunk's split points as Shape arithmetic: no shape is inferred after its Slices;
    folded, every value is typed and the outputs are the same; a dynamic batch keeps its Shape."""
    from deform_onnx.targets.repairs import REPAIRS

    fold = REPAIRS["static shape arithmetic folded"]
    module = torch.nn.Sequential(_ChunkDeform().off, _Chunk())
    model = _torchscript_chunk(module, dynamic=False)

    def shapes(m):
        inferred = onnx.shape_inference.infer_shapes(m).graph.value_info
        return {v.name: [d.dim_value or None for d in v.type.tensor_type.shape.dim] for v in inferred}

    slices = [n.output[0] for n in model.graph.node if n.op_type == "Slice"]
    assert slices and all(shapes(model).get(s) != [1, 9, 6, 5] for s in slices)  # the frontends' trouble
    x = torch.randn(1, 4, 6, 5)
    want = run_ort(model.SerializeToString(), {"x": x})
    assert fold(model) and "Shape" not in {n.op_type for n in model.graph.node}
    assert all(shapes(model).get(s) == [1, 9, 6, 5] for s in slices)
    np.testing.assert_array_equal(run_ort(model.SerializeToString(), {"x": x}), want)
    dynamic = _torchscript_chunk(module, dynamic=True)
    fold(dynamic)
    assert "Shape" in {n.op_type for n in dynamic.graph.node}  # the batch is read at run time
    constants = [n for n in dynamic.graph.node if n.op_type == "Constant"]
    assert constants and all([a.name for a in n.attribute] == ["value"] for n in constants)  # TVM reads `value` only
    x2 = torch.cat([x, x])
    np.testing.assert_array_equal(run_ort(dynamic.SerializeToString(), {"x": x2})[:1], want)


def test_tvm_torchscript_export_of_torch_chunk_runs_on_tvm():
    """target tvm, TorchScript exporter, torch.chunk in the model: the file converts in TVM and matches PyTorch
    (before the repair TVM's frontend refused the lowering's Reshape of the unshaped Slice output)."""
    assert "static shape arithmetic folded" in resolve_target("tvm").repairs
    module, x = _ChunkDeform().eval(), torch.randn(1, 4, 7, 6)
    buf = io.BytesIO()
    deform_onnx.export(module, (x,), buf, input_names=["x"], target="tvm", dynamo=False)  # verified in TVM
    proto = onnx.load_from_string(buf.getvalue())
    assert "Shape" not in {n.op_type for n in proto.graph.node}
    got = run_ort(proto.SerializeToString(), {"x": x})
    np.testing.assert_allclose(got, module(x).detach().numpy(), rtol=1e-4, atol=1e-4)


class _Two(torch.nn.Module):
    def __init__(self):
        from torchvision.ops import DeformConv2d

        super().__init__()
        self.off1, self.dcn1 = torch.nn.Conv2d(3, 18, 3, padding=1), DeformConv2d(3, 4, 3, padding=1)
        self.off2, self.dcn2 = torch.nn.Conv2d(4, 18, 3, padding=1), DeformConv2d(4, 4, 3, padding=1)

    def forward(self, x):
        x = torch.relu(self.dcn1(x, self.off1(x)))
        return self.dcn2(x, self.off2(x))


def test_tvm_torchscript_dynamic_batch_two_layers():
    """target tvm, TorchScript, dynamic batch, two DCN layers with a ReLU between: TorchScript's shape inference
    lost the first lowering's output sizes, so the second layer took the dynamic-map sampler, which TVM refused
    ("Reshape expects the input tensor to have known shape"). The lowering types its output: both layers take
    grid_sample, the file holds no typing Identity, and it runs in TVM at a second batch (export's check) and in
    ONNX Runtime."""
    module, x = _Two().eval(), torch.randn(1, 3, 8, 7)
    buf = io.BytesIO()
    report = deform_onnx.export(module, (x,), buf, input_names=["x"], target="tvm", dynamo=False,
                                dynamic_axes={"x": {0: "n"}})  # fmt: skip
    assert report.method == "grid_sample"
    assert "Identity" not in {n.op_type for n in onnx.load_from_string(buf.getvalue()).graph.node}  # typing copies
    x2 = torch.randn(2, 3, 8, 7)
    got = run_ort(buf.getvalue(), {"x": x2})
    np.testing.assert_allclose(got, module(x2).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_partly_static_shapes_fold_to_constants_tvm_reads():
    """onnxscript's folder writes a partly static shape (static axes of a ``Shape`` whose batch is dynamic) as
    ``Constant(value_ints)``, which TVM's frontend cannot read ("no value in Constant"): every numeric Constant
    of the repaired model carries ``value``, with the same numbers (a ``value_ints`` Constant planted in a
    dynamic-batch torch.chunk graph)."""
    from deform_onnx.targets.repairs import REPAIRS

    module = torch.nn.Sequential(_ChunkDeform().off, _Chunk())
    model = _torchscript_chunk(module, dynamic=True)
    x2 = torch.randn(2, 4, 6, 5)
    want = run_ort(model.SerializeToString(), {"x": x2})
    vectors = [n for n in model.graph.node if n.op_type == "Constant" and len(n.attribute[0].t.dims) == 1]
    planted = vectors[0]
    ints = numpy_helper.to_array(planted.attribute[0].t)
    assert ints.dtype == np.int64
    planted.ClearField("attribute")
    planted.attribute.append(helper.make_attribute("value_ints", ints.tolist()))
    assert REPAIRS["static shape arithmetic folded"](model)
    constants = [n for n in model.graph.node if n.op_type == "Constant"]
    assert constants and all([a.name for a in n.attribute] == ["value"] for n in constants)
    np.testing.assert_array_equal(run_ort(model.SerializeToString(), {"x": x2}), want)


def _split_file(n: str = "5", split: list[int] | None = None, opset: int = 19) -> onnx.ModelProto:
    """``x [1, n, 3]`` split on axis 1: by ``num_outputs=3`` (Split-18), or by a ``split`` input (``split`` given)."""
    dim = int(n) if n.isdigit() else n
    outs = [f"y{i}" for i in range(3)]
    inputs, inits, attrs = ["x"], [], {"axis": 1}
    if split is None:
        attrs["num_outputs"] = 3
    else:
        inputs.append("split")
        inits.append(numpy_helper.from_array(np.array(split, np.int64), "split"))
    graph = helper.make_graph(
        [helper.make_node("Split", inputs, outs, **attrs)], "split",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, dim, 3])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, f"p{o}", 3]) for o in outs], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run_all(proto: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})


@pytest.mark.parametrize("split", [None, [1, 3, 1]])
def test_split_as_slice_gives_the_same_pieces(split):
    """onnx2torch has no Split-18 (every Split at opset 19); the repair writes Slice-13 pieces, torch.chunk's too:
    5 in 3 pieces is 2, 2, 1 (ONNX Split-18's num_outputs rule)."""
    from deform_onnx.targets.repair_split import split_as_slice

    proto = _split_file(split=split)
    x = np.arange(15, dtype=np.float32).reshape(1, 5, 3)
    want = _run_all(proto, x)
    assert split_as_slice(proto) == ["Split written as Slice on 1 node(s)"]
    assert {n.op_type for n in proto.graph.node} == {"Slice"}
    onnx.checker.check_model(proto)
    got = _run_all(proto, x)
    assert [g.shape for g in got] == [w.shape for w in want] == [(1, s, 3) for s in (split or [2, 2, 1])]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_split_of_a_dynamic_size_is_left():
    from deform_onnx.targets.repair_split import split_as_slice

    proto = _split_file(n="C")
    assert split_as_slice(proto) == [] and [n.op_type for n in proto.graph.node] == ["Split"]


class _Pack(torch.nn.Module):
    """mmdet's ModulatedDeformConv2dPack on torchvision: the offset predictor's output split by torch.chunk."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv_offset = torch.nn.Conv2d(4, 27, 3, padding=1)
        self.weight = torch.nn.Parameter(torch.randn(6, 4, 3, 3) * 0.2)

    def forward(self, x):
        o1, o2, mask = torch.chunk(self.conv_offset(x), 3, dim=1)
        return torchvision.ops.deform_conv2d(x, torch.cat((o1, o2), 1), self.weight, padding=1, mask=mask.sigmoid())


def test_onnx2torch_native_takes_mmdets_dcnv2_pack():
    """It was refused ("Split-18 is not among the ops onnx2torch converts"): the layer the target is for."""
    target = resolve_target("onnx2torch-native")
    assert "Split as Slice" in target.repairs
    buf, x = io.BytesIO(), torch.randn(1, 4, 8, 8)
    deform_onnx.export(_Pack().eval(), (x,), buf, input_names=["x"], target="onnx2torch-native", verify_runtimes=())
    proto = onnx.load_from_string(buf.getvalue())
    ops = {n.op_type for n in proto.graph.node}
    assert "DeformConv" in ops and "Split" not in ops and "Slice" in ops, ops
    assert not violations(proto, target.rules)
    with torch.no_grad():
        want = _Pack().eval()(x).numpy()
    np.testing.assert_allclose(run_ort(buf.getvalue(), {"x": x}), want, rtol=0, atol=1e-4)


class _DCNv3Blocks(torch.nn.Module):
    """Two InternImage blocks (LN -> DCNv3 -> residual, LN -> MLP -> residual), channels last."""

    def __init__(self, c=8):
        from deform_onnx.ops.dcnv3 import DCNv3

        super().__init__()

        def block():
            mlp = torch.nn.Sequential(torch.nn.Linear(c, 2 * c), torch.nn.GELU(), torch.nn.Linear(2 * c, c))
            norms = torch.nn.LayerNorm(c), torch.nn.LayerNorm(c)
            return torch.nn.ModuleDict({"n1": norms[0], "dcn": DCNv3(c, group=2), "n2": norms[1], "mlp": mlp})

        self.blocks = torch.nn.ModuleList([block(), block()])

    def forward(self, x):
        for blk in self.blocks:
            x = x + blk["dcn"](blk["n1"](x))
            x = x + blk["mlp"](blk["n2"](x))
        return x


def test_tvm_torchscript_dcnv3_blocks_dynamic_batch():
    """target tvm, TorchScript, dynamic batch, two DCNv3 blocks: torch's F.pad symbolic wrote its pads as
    ``Concat(pads, ConstantOfShape(...))`` and more ("Dynamic pads are not supported yet" in TVM; now
    exporters/aten_pad.py writes a constant), and a Range of run-time length then stopped the TVM build's
    constant folding ("int() argument ... not 'Var'"). Every Pad's pads are constant, each block takes
    GridSample, and the file runs in TVM at a second batch (export's check) and matches PyTorch there in ONNX
    Runtime."""
    torch.manual_seed(0)
    module, x = _DCNv3Blocks().eval(), torch.randn(1, 5, 6, 8)
    buf = io.BytesIO()
    report = deform_onnx.export(module, (x,), buf, input_names=["x"], target="tvm", dynamo=False,
                                dynamic_axes={"x": {0: "n"}})  # fmt: skip
    assert report.forms == {"grid_sample": "grid_sample"} and [s[0][0] for s in report.checked_shapes] == [1, 2]
    assert any(r.startswith("tvm ") for r in report.runtimes), report.runtimes
    proto = onnx.load_from_string(buf.getvalue())
    made = {o: n.op_type for n in proto.graph.node for o in n.output}
    pads = [made.get(n.input[1], "initializer") for n in proto.graph.node if n.op_type == "Pad"]
    assert len(pads) == 2 and set(pads) <= {"Constant", "initializer"}, pads
    x2 = torch.randn(2, 5, 6, 8)
    np.testing.assert_allclose(run_ort(buf.getvalue(), {"x": x2}), module(x2).detach().numpy(), rtol=1e-4, atol=1e-4)


def test_static_shape_arithmetic_folds_small_constant_of_shape_only():
    """A ``ConstantOfShape`` of a constant shape folds when small (TorchScript's F.pad pads, in a graph with no
    ``Shape``), and stays when larger than the repair's limit (a fill the file would otherwise carry as a constant)."""
    from deform_onnx.targets.repair_shapes import LIMIT
    from deform_onnx.targets.repairs import REPAIRS

    def fill(name, n):
        shape = helper.make_node("Constant", [], [f"{name}_shape"], value=numpy_helper.from_array(np.array([n])))
        return [shape, helper.make_node("ConstantOfShape", [f"{name}_shape"], [name])]

    two = helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array([1, 3])))
    nodes = [
        two,
        *fill("small", 2),
        *fill("big", LIMIT + 1),
        helper.make_node("Concat", ["two", "small"], ["pads"], axis=0),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("pads", TensorProto.INT64, [4]),
         helper.make_tensor_value_info("big", TensorProto.FLOAT, [LIMIT + 1])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert REPAIRS["static shape arithmetic folded"](model)
    made = {o: n.op_type for n in model.graph.node for o in n.output}
    assert made.get("pads", "initializer") in ("Constant", "initializer") and made["big"] == "ConstantOfShape"
    from onnx.reference import ReferenceEvaluator

    pads, big = ReferenceEvaluator(model).run(None, {"x": np.zeros((1, 3), np.float32)})
    np.testing.assert_array_equal(pads, [1, 3, 0, 0])
    np.testing.assert_array_equal(big, np.zeros(LIMIT + 1))
