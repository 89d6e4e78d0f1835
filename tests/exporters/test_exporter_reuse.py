"""The exporter's repeated work done once (``deform_onnx.exporters.exporter_reuse``) writes the same file.

The torchlib registry is built once per opset and handed out as copies that register their own custom
translations; onnxscript's multi-output pattern matcher rejects a node that cannot start a match before it
scans the graph. Each: the same result as torch's / onnxscript's own code, undone on exit, and the same
bytes for a deformable model exported with and without it.
"""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import onnx
import onnx_ir as ir
import torch
from onnx import TensorProto, helper, numpy_helper

import deform_onnx
from deform_onnx.exporters import calls, exporter_reuse
from models import Neck


def _content(registry) -> dict:
    """What dispatching reads from a registry: per op, each function and how it was registered."""
    return {
        target: [(d.onnx_function, d.fx_target, d.is_custom, d.is_complex, d.opset_introduced) for d in decomps]
        for target, decomps in registry.functions.items()
    }


def test_registry_copies_equal_torchs_own_and_keep_their_registrations():
    from torch.onnx._internal.exporter import _registration

    cls = _registration.ONNXRegistry
    original = cls.__dict__["from_torchlib"]
    own = cls.from_torchlib(opset_version=18)
    with exporter_reuse.cached_torchlib_registry():
        first = cls().from_torchlib(opset_version=18)  # as torch.onnx.export calls it
        first.register_op(torch.ops.aten.add.Tensor, lambda a, b: a, is_complex=False)
        second = cls.from_torchlib(opset_version=18)
        at_19 = cls.from_torchlib(opset_version=19)
    assert cls.__dict__["from_torchlib"] is original  # undone
    assert _content(second) == _content(own)  # the custom op registered into `first` stays there
    added = first.functions["aten::add.Tensor"]
    assert added[0].is_custom and len(added) == len(own.functions["aten::add.Tensor"]) + 1
    assert at_19.opset_version == 19 and second.opset_version == 18
    assert _content(at_19) == _content(cls.from_torchlib(opset_version=19))


def test_registry_key_changes_with_the_tables():
    """A function added to onnxscript's torchlib table (or a torch op that resolves later) makes a new key."""
    tables = exporter_reuse._torchlib_tables()
    assert tables is not None
    torch_table, onnxscript_table = tables
    key, _ = exporter_reuse._registry_key(tables)
    assert exporter_reuse._registry_key(tables)[0] == key  # stable while nothing changes

    class Grown:
        def items(self):
            yield from onnxscript_table.items()
            yield "aten::planted_op", type("F", (), {"overloads": [len], "complex": []})()

    assert exporter_reuse._registry_key((torch_table, Grown()))[0] != key


def _relu_and_abs() -> onnx.ModelProto:
    """``Relu(x)`` and ``Abs(x)`` of one input, after a ``Neg``: what :func:`_relu_abs_rule` matches."""
    graph = helper.make_graph(
        [
            helper.make_node("Neg", ["x"], ["n"]),
            helper.make_node("Relu", ["n"], ["a"]),
            helper.make_node("Abs", ["n"], ["b"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 8]) for n in "ab"],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _relu_abs_rule():
    """A two-output-node pattern (as onnxscript's SlicesSplit is) that does match: ``Relu(x), Abs(x)``."""
    from onnxscript.rewriter import pattern

    class ReluAbs(pattern.RewriteRuleClassBase):
        def pattern(self, op, x):
            return op.Relu(x), op.Abs(x)

        def rewrite(self, op, x):  # two copies of x: the new pair does not match again
            return op.Relu(op.Identity(x)), op.Abs(op.Identity(x))

    return ReluAbs.rule()


def _rewritten(proto: onnx.ModelProto, rules) -> bytes:
    from onnxscript import rewriter

    return ir.to_proto(rewriter.rewrite(ir.from_proto(proto), rules)).SerializeToString()


def _optimized(proto: onnx.ModelProto) -> bytes:
    from onnxscript._framework_apis import torch_2_9

    model = ir.from_proto(proto)
    torch_2_9.optimize(model)  # what torch.onnx.export(optimize=True) runs (torch 2.14)
    return ir.to_proto(model).SerializeToString()


def test_prefilter_keeps_every_match():
    from onnxscript.rewriter import _matcher

    original = _matcher.SimplePatternMatcher.match
    plain = _rewritten(_relu_and_abs(), [_relu_abs_rule()])
    with exporter_reuse.prefiltered_multi_output_patterns():
        assert _matcher.SimplePatternMatcher.match is not original
        filtered = _rewritten(_relu_and_abs(), [_relu_abs_rule()])
    assert _matcher.SimplePatternMatcher.match is original  # undone
    assert filtered == plain
    assert "Identity" in [n.op_type for n in onnx.load_from_string(filtered).graph.node]  # the rule fired


def test_prefilter_skips_the_scan_where_the_first_node_differs(monkeypatch):
    """With a multi-output pattern, the original matcher (which indexes the whole graph) runs only at nodes of
    the first output node's op: for onnxscript's optimizer (its SlicesSplit rule) at Slice nodes only."""
    from onnxscript.rewriter import _matcher

    seen: list[str] = []
    original = _matcher.SimplePatternMatcher.match

    def spy(self, model, graph, node, *args, **kwargs):
        if len(self.pattern.output_nodes) > 1:
            seen.append(node.op_type)
        return original(self, model, graph, node, *args, **kwargs)

    monkeypatch.setattr(_matcher.SimplePatternMatcher, "match", spy)
    plain = _optimized(_relu_and_abs())
    assert {"Neg", "Relu", "Abs"} <= set(seen)  # unfiltered: every node
    seen.clear()
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Slice", ["r", "s", "e"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(v, dtype=np.int64), n) for n, v in (("s", [0]), ("e", [4]))],
    )
    with exporter_reuse.prefiltered_multi_output_patterns():
        assert _optimized(_relu_and_abs()) == plain
        seen.clear()
        _optimized(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))
    assert seen == ["Slice"]


def _export_bytes(model, x, **kwargs) -> bytes:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(model, (x,), f, **kwargs)
    assert report.exporter == "dynamo", report.fallback_reason
    return f.getvalue()


def test_same_file_with_and_without(monkeypatch):
    """A DCNv2 exported with dynamic H/W (the guard capture, every optimizer pass) and statically: the same bytes."""
    model, x = Neck().eval(), torch.randn(1, 4, 12, 10)
    dynamic = {"input_names": ["x"], "dynamic_axes": {"x": {2: "H", 3: "W"}}}
    reused = [_export_bytes(model, x, **dynamic), _export_bytes(model, x)]
    monkeypatch.setattr(calls.exporter_reuse, "reused", contextlib.nullcontext)
    assert [_export_bytes(model, x, **dynamic), _export_bytes(model, x)] == reused
