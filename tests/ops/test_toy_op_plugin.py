"""An op is a plugin (issue 29 item 1): a toy op from the tests folder registers itself and is exported,
lowered and targeted like the package's own ops, with no edit outside tests.

The toy is ``shift`` (tests/toy_shift_op.py): a ``torch.library`` op that moves a map one pixel right,
lowered to ``Slice`` + ``Pad`` (methods native, grid_sample, auto) or ``Slice`` + ``Concat`` (gather).
Each test registers it and unregisters it after, so the other tests see the package's ops only.
Every comparison is against PyTorch on the same tensors (the toy's plain-torch reference).
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import deform_onnx
import toy_shift_op as toy
from deform_onnx.ops import registry
from deform_onnx.targets import TARGETS
from deform_onnx.targets.rules import violations


@pytest.fixture
def shift_op():
    entry = registry.register(toy.entry())
    try:
        yield entry
    finally:
        registry.unregister("shift")


class _Net(torch.nn.Module):
    """A conv, then the toy op (as a module, so its module check applies)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.shift = toy.Shift()

    def forward(self, x):
        return self.shift(self.conv(x))


def _run(path_or_proto, x: np.ndarray) -> np.ndarray:
    data = path_or_proto.SerializeToString() if isinstance(path_or_proto, onnx.ModelProto) else str(path_or_proto)
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def _shift_file(opset: int = 17) -> onnx.ModelProto:
    """A file holding one ``deform_onnx.toy::Shift`` node between a ``Relu`` and the output."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node(toy.OP_TYPE, ["r"], ["y"], name="shift_0", domain=toy.DOMAIN),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 5])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(toy.DOMAIN, 1)])


def test_registration_is_checked(shift_op):
    """A second entry for a name, a torch op or a file node kind raises; the registry then lists the toy."""
    assert "shift" in registry.OPS and registry.OPS["shift"] is shift_op
    with pytest.raises(ValueError, match="name 'shift' is already registered"):
        registry.register(toy.entry())
    import dataclasses

    with pytest.raises(ValueError, match="file node .*TRTDCNv3.* already registered by op 'dcnv3'"):
        registry.register(
            dataclasses.replace(shift_op, name="shift2", torch_ops=(), onnx_nodes=(("mmdeploy", "TRTDCNv3"),))
        )
    assert "shift2" not in registry.OPS


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
@pytest.mark.parametrize("method,form", [("auto", "Pad"), ("gather", "Concat")])
def test_export_writes_the_toy_lowering(shift_op, tmp_path, dynamo, method, form):
    """``deform_onnx.export`` lowers the toy op through its binding in both exporters, verified, and the file
    matches PyTorch on the same tensor (exactly: a shift moves values, it computes none)."""
    torch.manual_seed(0)
    net, x = _Net().eval(), torch.randn(1, 3, 6, 7)
    report = deform_onnx.export(net, (x,), tmp_path / "shift.onnx", dynamo=dynamo, method=method)
    assert report.exporter == ("dynamo" if dynamo else "torchscript")
    assert form in report.op_types and "Slice" in report.op_types, report.op_types
    model = onnx.load(str(tmp_path / "shift.onnx"))
    assert not [n for n in model.graph.node if n.domain not in ("", "ai.onnx")]
    with torch.no_grad():
        want = toy.reference(net.conv(x)).numpy()
    got = _run(tmp_path / "shift.onnx", x.numpy())
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)  # the conv's float32 rounding; the shift is exact


def test_module_check_refuses_before_export(shift_op, tmp_path):
    """The op's module check (a forward pre-hook installed by export through the registry) refuses a 3-D map."""

    class Flat(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.shift = toy.Shift()

        def forward(self, x):
            return self.shift(x)

    with pytest.raises(ValueError, match=r"^shift \(Shift\): input has rank 3, expected a 4-D map$"):
        deform_onnx.export(Flat(), (torch.randn(2, 3, 4),), tmp_path / "flat.onnx")
    assert not (tmp_path / "flat.onnx").exists()


@pytest.mark.parametrize("method,form", [("auto", "Pad"), ("gather", "Concat")])
def test_lower_replaces_the_toy_file_node(shift_op, method, form):
    """``deform_onnx.lower`` finds the toy's node through its file-node module and replaces it; its domain goes."""
    lowered = deform_onnx.lower(_shift_file(), method=method)
    assert [n.op_type for n in lowered.graph.node if n.op_type in ("Pad", "Concat", toy.OP_TYPE)] == [form]
    assert toy.DOMAIN not in {o.domain for o in lowered.opset_import}
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 5)).astype(np.float32)
    want = toy.reference(torch.relu(torch.from_numpy(x))).numpy()
    np.testing.assert_array_equal(_run(lowered, x), want)


def test_targets_check_the_toy_rule_and_fault(shift_op, tmp_path):
    """The toy brings a graph rule (checked by target generic) and a fault (target tensorrt refuses its pad form):
    both reach the targets through the registry."""
    assert "no Shift node" in TARGETS["generic"].rules
    assert violations(_shift_file(), TARGETS["generic"].rules) == ["no Shift node: Shift node(s) shift_0"]
    lowered = deform_onnx.lower(_shift_file(), target="generic")  # the rule holds on the result
    assert violations(lowered, TARGETS["generic"].rules) == []
    x = np.random.default_rng(1).standard_normal((1, 2, 3, 5)).astype(np.float32)
    np.testing.assert_array_equal(_run(lowered, x), toy.reference(torch.relu(torch.from_numpy(x))).numpy())

    net, x_t = _Net().eval(), torch.randn(1, 3, 6, 7)
    report = deform_onnx.export(net, (x_t,), tmp_path / "trt.onnx", target="tensorrt")  # gather: the concat form
    assert "Concat" in report.op_types and "Pad" not in report.op_types
    with pytest.raises(ValueError, match=r"target 'tensorrt' mishandles shift's pad form: a made-up fault"):
        deform_onnx.export(net, (x_t,), tmp_path / "refused.onnx", target="tensorrt", method="grid_sample")
    assert not (tmp_path / "refused.onnx").exists()
    with pytest.raises(ValueError, match="mishandles shift's pad form"):
        deform_onnx.lower(_shift_file(), target="tensorrt", method="grid_sample")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        deform_onnx.lower(_shift_file(), target="tensorrt", method="grid_sample", force=True)
    assert any("mishandles shift's pad form" in str(w.message) for w in caught)


def test_unregistered_toy_is_gone():
    """Once unregistered, nothing knows the toy: its node is left alone and no exporter binds it."""
    registry.register(toy.entry())
    registry.unregister("shift")
    assert "shift" not in registry.OPS
    assert toy.__name__ not in {m.__name__ for m in registry.bindings()}
    kept = deform_onnx.lower(_shift_file())
    assert [n.op_type for n in kept.graph.node] == ["Relu", toy.OP_TYPE]  # nothing to lower
    assert toy.DOMAIN in {o.domain for o in kept.opset_import}
    with pytest.raises(KeyError, match="no op 'shift' is registered"):
        registry.unregister("shift")
