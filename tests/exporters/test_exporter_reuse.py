"""The exporter's repeated work done once (``deform_onnx.exporters.exporter_reuse``) writes the same file.

The torchlib registry is built once per opset and handed out as copies that register their own custom
translations: the same registry as torch's own code, undone on exit, and the same bytes for a deformable
model exported with and without it.
"""

from __future__ import annotations

import contextlib
import io
import warnings

import torch

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
