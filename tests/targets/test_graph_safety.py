"""Graphs that TensorRT, DirectML and older runtimes accept: shape tensors, op lists, op versions.

* TensorRT treats the shape inputs of Reshape, Expand, Tile, Slice,
  ConstantOfShape, Range, Pad, Resize, (Un)Squeeze, ... as *shape tensors*: they
  must be int32/int64 and computed without floating-point ops or casts from
  float (TensorRT's shape-tensor rules). :func:`shape_violations` walks every
  such input back to ``Shape`` nodes, constants and initializers and reports
  any float value, float graph input or value of unknown type on the way.
* Every op is in TensorRT's ONNX parser's list (:data:`TENSORRT_OPS`) and, for
  the standard-op lowerings, in ONNX Runtime's DirectML provider's kernel list
  (:data:`DIRECTML_OPS`), at a version the model's opset has
  (``onnx.defs.get_schema(op, max_inclusive_version=opset)``).

Graphs: every method at every opset the TorchScript exporter reaches
(static and dynamic N/H/W, two layer configurations), the dynamo exporter at
opset 17/18/20, and ``lower()`` of a native file.
"""

from __future__ import annotations

import functools
import io

import numpy as np
import onnx
import pytest

import deform_onnx
from deform_onnx.ops.deform_conv.register import LOWERINGS
from util import DCNV2_GROUPED, TENSORRT_OPS, Config, DeformLayer, check, export, make_inputs, method_opsets

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")

#: Inputs TensorRT treats as shape tensors, by op (index into node.input).
SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "Slice": (1, 2, 3, 4),
    "ConstantOfShape": (0,),
    "Range": (0, 1, 2),
    "Pad": (1, 3),
    "Resize": (3,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "Split": (1,),
    "TopK": (1,),
    "OneHot": (1,),
    "ReduceSum": (1,),
    "ReduceMax": (1,),
    "ReduceMin": (1,),
    "ReduceMean": (1,),
}
INT_TYPES = {onnx.TensorProto.INT32, onnx.TensorProto.INT64}
#: Types a value on a shape path may have: integers, and BOOL for comparisons of integer shape
#: values (the run-time offset-size check compares sizes; the walk still checks their inputs).
SHAPE_PATH_TYPES = INT_TYPES | {onnx.TensorProto.BOOL}


#: ONNX Runtime's DirectML provider (docs/OperatorKernels.md, "DmlExecutionProvider"):
#: op -> lowest registered op version. Its registrations are open-ended ("16+").
#: DeformConv has no DirectML kernel: the native lowering is not for DirectML.
DIRECTML_OPS: dict[str, int] = {
    "Add": 7, "And": 7, "Cast": 6, "CastLike": 15, "Ceil": 6, "Clip": 6, "Concat": 4, "Constant": 1,
    "ConstantOfShape": 9, "Conv": 1, "Div": 7, "Einsum": 12, "Equal": 7, "Expand": 8, "Flatten": 1,
    "Floor": 6, "Gather": 1, "GatherElements": 11, "GatherND": 11, "Gemm": 7, "Greater": 7,
    "GreaterOrEqual": 12, "GridSample": 16, "Identity": 1, "IsNaN": 9, "Less": 7, "LessOrEqual": 12,
    "MatMul": 1, "Max": 6, "Min": 6, "Mul": 7, "Neg": 6, "Not": 1, "Or": 7, "Pad": 2, "Range": 11,
    "Reciprocal": 6, "ReduceSum": 1, "Relu": 6, "Reshape": 5, "Resize": 10, "Round": 11,
    "ScatterND": 11, "Shape": 1, "Sigmoid": 6, "Sign": 9, "Slice": 1, "Split": 2, "Squeeze": 1,
    "Sub": 7, "Sum": 6, "Tile": 6, "Transpose": 1, "Unsqueeze": 1, "Where": 9, "Xor": 7,
}  # fmt: skip

CONFIGS = {
    "dcnv2-grouped": DCNV2_GROUPED,
    "dcnv1": Config(N=1, C_in=4, C_out=4, H=6, W=8, kernel=(3, 3), padding=(1, 0), mask=False, bias=False),
}
METHODS = ("native", "grid_sample", "gather")
TORCHSCRIPT = [(m, o) for m in METHODS for o in range(11, 21) if o >= LOWERINGS[m].min_opset]
assert set(TORCHSCRIPT) >= {(m, o) for m in METHODS for o in method_opsets(m)}


@functools.cache
def torchscript_graph(method: str, opset: int, name: str, dynamic: bool) -> onnx.ModelProto:
    cfg = CONFIGS[name]
    deform_onnx.register(method)
    try:
        return check(export(DeformLayer(cfg), make_inputs(cfg), opset, dynamic=dynamic))
    finally:
        deform_onnx.unregister()


@functools.cache
def dynamo_graph(method: str, opset: int, dynamic: bool) -> onnx.ModelProto:
    from torch.export import Dim

    cfg = CONFIGS["dcnv2-grouped"]
    inputs = make_inputs(cfg)
    shapes = None
    if dynamic:
        n, ho, wo = Dim("N"), Dim("Ho"), Dim("Wo")
        shapes = {"x": {0: n, 2: Dim("H"), 3: Dim("W")}, "offset": {0: n, 2: ho, 3: wo}, "mask": {0: n, 2: ho, 3: wo}}
    buf = io.BytesIO()
    deform_onnx.export(DeformLayer(cfg), tuple(inputs.values()), buf, method=method, opset_version=opset,
                       dynamo=True, input_names=list(inputs), dynamic_shapes=shapes, verify=False)  # fmt: skip
    return check(buf.getvalue())


@functools.cache
def lowered_file(method: str, dynamic: bool) -> onnx.ModelProto:
    """``lower()`` of a native DeformConv file (the rewrite path's adapter)."""
    native = torchscript_graph("native", 19, "dcnv2-grouped", dynamic)
    return check(deform_onnx.lower(native, method=method, opset=19).SerializeToString())


def _graphs():
    """(id, thunk) for every graph the tests walk."""
    out = []
    for method, opset in TORCHSCRIPT:
        for name in CONFIGS:
            for dynamic in (False, True):
                gid = f"ts-{method}-op{opset}-{name}-{'dyn' if dynamic else 'static'}"
                out.append((gid, functools.partial(torchscript_graph, method, opset, name, dynamic)))
    for method, opset in (("grid_sample", 17), ("gather", 17), ("gather", 18), ("native", 20)):
        for dynamic in (False, True):
            out.append((f"dynamo-{method}-op{opset}-{'dyn' if dynamic else 'static'}",
                        functools.partial(dynamo_graph, method, opset, dynamic)))  # fmt: skip
    for method in ("grid_sample", "gather"):
        for dynamic in (False, True):
            out.append(
                (
                    f"lower-{method}-op19-{'dyn' if dynamic else 'static'}",
                    functools.partial(lowered_file, method, dynamic),
                )
            )
    return out


GRAPHS = _graphs()


def _method_of(gid: str) -> str:
    return gid.split("-")[1]


# -- the shape-tensor walk ---------------------------------------------------------------------------


def shape_violations(proto: onnx.ModelProto) -> list[str]:
    """Every shape-tensor input not provably integer-only: ``"Reshape n7 input 1: <why>"``.

    Walks producers back from each shape input; stops at ``Shape``/``Size``
    (integer by definition, whatever their input), ``Constant`` nodes and
    initializers (which must be integer). Every value on the way must have an
    inferred int32/int64 type, so no float op and no Cast from float can be on
    the path (a Cast from float has a float input). A graph input on the path
    (data, not shape) is a violation too.
    """
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    g = inferred.graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in [*g.input, *g.output, *g.value_info]}
    inits = {t.name: t.data_type for t in g.initializer}
    producer = {out: node for node in g.node for out in node.output}
    graph_inputs = {i.name for i in g.input} - set(inits)
    problems = []

    def why_not_int(name: str, seen: set[str]) -> str | None:
        if name in seen:
            return None
        seen.add(name)
        if name in inits:
            return (
                None
                if inits[name] in INT_TYPES
                else f"initializer {name} is {onnx.TensorProto.DataType.Name(inits[name])}"
            )
        if name in graph_inputs:
            return f"reaches graph input {name}"
        node = producer.get(name)
        if node is None:
            return f"{name} has no producer"
        if node.op_type == "Constant":
            t = next(a.t for a in node.attribute if a.name == "value")
            return (
                None
                if t.data_type in INT_TYPES
                else f"Constant {name} is {onnx.TensorProto.DataType.Name(t.data_type)}"
            )
        if name not in types or types[name] == 0:
            return f"{name} ({node.op_type}) has no inferred type"
        if types[name] not in SHAPE_PATH_TYPES:
            return f"{name} is {onnx.TensorProto.DataType.Name(types[name])} (from {node.op_type})"
        if node.op_type in ("Shape", "Size"):
            return None
        for inp in node.input:
            if inp:
                reason = why_not_int(inp, seen)
                if reason:
                    return f"{reason} <- {node.op_type}"
        return None

    for node in g.node:
        for index in SHAPE_INPUTS.get(node.op_type, ()):
            if index < len(node.input) and node.input[index]:
                reason = why_not_int(node.input[index], set())
                if reason:
                    problems.append(f"{node.op_type} {node.name} input {index}: {reason}")
        if node.op_type == "Slice" and len(node.input) > 3 and node.input[3]:
            axes = node.input[3]
            if axes not in inits and getattr(producer.get(axes), "op_type", None) != "Constant":
                problems.append(f"Slice {node.name}: axes must be a constant (TensorRT)")
    return problems


@pytest.mark.parametrize("gid, graph", GRAPHS, ids=[gid for gid, _ in GRAPHS])
def test_shape_tensors_are_integer_only(gid, graph):
    proto = graph()
    assert shape_violations(proto) == []
    if gid.endswith("-dyn") and _method_of(gid) != "native":
        # The walk saw run-time shape paths (not only constants): it tested something.
        assert any(n.op_type == "Shape" for n in proto.graph.node), gid


def test_walk_finds_a_float_shape_path():
    """The walk is not blind: a Reshape whose shape goes through a float Cast is reported."""
    proto = onnx.ModelProto()
    proto.CopyFrom(torchscript_graph("gather", 17, "dcnv1", True))
    g = proto.graph
    reshape = next(n for n in g.node if n.op_type == "Reshape" and n.input[1] not in {i.name for i in g.initializer})
    shape = reshape.input[1]
    f = onnx.helper.make_node("Cast", [shape], ["shape_f"], to=onnx.TensorProto.FLOAT, name="to_float")
    i = onnx.helper.make_node("Cast", ["shape_f"], ["shape_i"], to=onnx.TensorProto.INT64, name="to_int")
    reshape.input[1] = "shape_i"
    index = list(g.node).index(reshape)
    g.node.insert(index, i)
    g.node.insert(index, f)
    problems = shape_violations(proto)
    assert len(problems) == 1 and "shape_f is FLOAT (from Cast)" in problems[0], problems


# -- op lists: TensorRT, DirectML, versions ---------------------------------------------------------


def _schema_problems(proto: onnx.ModelProto, opset: int) -> list[str]:
    out = []
    for node in proto.graph.node:
        try:
            schema = onnx.defs.get_schema(node.op_type, max_inclusive_version=opset, domain=node.domain)
        except onnx.defs.SchemaError:
            out.append(f"{node.op_type} does not exist at opset {opset}")
            continue
        if schema.since_version > opset or schema.deprecated:
            out.append(f"{node.op_type}-{schema.since_version} at opset {opset}")
    return out


def _since(op: str, opset: int) -> int:
    return onnx.defs.get_schema(op, max_inclusive_version=opset).since_version


@pytest.mark.parametrize("gid, graph", GRAPHS, ids=[gid for gid, _ in GRAPHS])
def test_ops_exist_at_the_model_opset_and_tensorrt_parses_them(gid, graph):
    proto = graph()
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    assert _schema_problems(proto, opset) == []
    ops = {n.op_type for n in proto.graph.node}
    assert ops <= TENSORRT_OPS, sorted(ops - TENSORRT_OPS)
    assert all(n.domain in ("", "ai.onnx") for n in proto.graph.node)


@pytest.mark.parametrize("gid, graph", [(g, t) for g, t in GRAPHS if _method_of(g) != "native"],
                         ids=[g for g, _ in GRAPHS if _method_of(g) != "native"])  # fmt: skip
def test_standard_lowerings_use_only_directml_ops(gid, graph):
    """Each op has a DirectML kernel registered at or below the node's op version."""
    proto = graph()
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    missing = sorted({n.op_type for n in proto.graph.node} - set(DIRECTML_OPS))
    assert missing == [], f"no DirectML kernel: {missing}"
    too_old = sorted({f"{n.op_type}-{_since(n.op_type, opset)}" for n in proto.graph.node
                      if _since(n.op_type, opset) < DIRECTML_OPS[n.op_type]})  # fmt: skip
    assert too_old == [], too_old


#: The ops the default export (method "auto" at opset 17 = grid_sample) and gather at 17
#: may use, as reviewed against DirectML and TensorRT. A new op must be checked against
#: both lists above (and the support tables of docs/targets.md) before it is added here.
_GRID_SAMPLE_OPS = {"Add", "And", "Cast", "Clip", "Concat", "Constant", "Div", "Equal", "Gather", "Gemm", "GridSample",
                    "MatMul", "Mul", "Range", "Reshape", "Shape", "Slice", "Sub", "Transpose", "Where"}  # fmt: skip
# Expand: the gather sampler's zero border (blocks of zeros concatenated to the input).
# Gemm: the per-tap / per-row products accumulated (ops.deform_conv.common.add_product).
_GATHER_OPS = {"Add", "And", "Cast", "Clip", "Concat", "Constant", "Div", "Equal", "Floor", "Gather", "Gemm", "Greater",
               "Less", "MatMul", "Mul", "Expand", "Range", "Reshape", "Shape", "Slice", "Sub", "Sum", "Transpose",
               "Unsqueeze", "Where"}  # fmt: skip
DEFAULT_OPS = {
    # Dynamic sizes sample with the gather sampler inside the grid_sample lowering (precision).
    "grid_sample": _GRID_SAMPLE_OPS | _GATHER_OPS,
    "gather": _GATHER_OPS,
}


@pytest.mark.parametrize("method", ["auto", "grid_sample", "gather"])
def test_default_opset_17_op_list(method):
    """At opset 17 (the default) every op is in the reviewed list, at most version 17, with a
    DirectML kernel, and auto is grid_sample."""
    resolved = "grid_sample" if method == "auto" else method
    ops = set()
    for name in CONFIGS:
        for dynamic in (False, True):
            deform_onnx.register(method)
            try:
                cfg = CONFIGS[name]
                proto = check(export(DeformLayer(cfg), make_inputs(cfg), 17, dynamic=dynamic))
            finally:
                deform_onnx.unregister()
            assert _schema_problems(proto, 17) == []
            ops |= {n.op_type for n in proto.graph.node}
    assert ops <= DEFAULT_OPS[resolved], f"not reviewed for DirectML/TensorRT: {sorted(ops - DEFAULT_OPS[resolved])}"
    assert ("GridSample" in ops) == (resolved == "grid_sample")
    assert ops <= set(DIRECTML_OPS) and all(_since(op, 17) <= 17 for op in ops)


# -- onnxsim 0.4.36 (pinned and run by onnx2tf) -----------------------------------------------------


def matmul_pairs(proto: onnx.ModelProto) -> list[str]:
    """Adds whose two inputs are both 2-D MatMul outputs.

    onnxoptimizer's ``fuse_matmul_add_bias_into_gemm`` (onnxsim 0.4.36) turns such an Add
    into a Gemm placed at the first MatMul, before the second one's output exists: a graph
    that fails onnx's topological-order check, so onnxsim (and onnx2tf, which runs it) stops.
    """
    inferred = onnx.shape_inference.infer_shapes(proto)
    rank = {v.name: len(v.type.tensor_type.shape.dim) for v in inferred.graph.value_info}
    matmul_2d = {o for n in proto.graph.node if n.op_type == "MatMul" for o in n.output if rank.get(o) == 2}
    return [n.name for n in proto.graph.node if n.op_type == "Add" and all(i in matmul_2d for i in n.input)]


@pytest.mark.parametrize("gid, graph", [(g, t) for g, t in GRAPHS if _method_of(g) != "native"],
                         ids=[g for g, _ in GRAPHS if _method_of(g) != "native"])  # fmt: skip
def test_no_add_of_two_matmuls(gid, graph):
    """Products are accumulated by Gemm (``C`` = the running sum), never by Add(MatMul, MatMul)."""
    proto = graph()
    assert matmul_pairs(proto) == []
    if "dcnv1" in gid:  # groups == 1: the 2-D accumulation path ran
        assert any(n.op_type == "Gemm" for n in proto.graph.node), gid


def test_matmul_pairs_finds_the_pattern():
    a = onnx.helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [2, 3])
    nodes = [onnx.helper.make_node("MatMul", ["a", "w"], ["p"], name="m1"),
             onnx.helper.make_node("MatMul", ["a", "w"], ["q"], name="m2"),
             onnx.helper.make_node("Add", ["p", "q"], ["y"], name="add")]  # fmt: skip
    w = onnx.numpy_helper.from_array(np.ones((3, 3), np.float32), "w")
    graph = onnx.helper.make_graph(nodes, "g", [a], [onnx.helper.make_tensor_value_info("y", 1, None)], [w])
    assert matmul_pairs(onnx.helper.make_model(graph)) == ["add"]
