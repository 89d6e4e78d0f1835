"""``deform_onnx.export``: both exporters, every method and opset, and the behaviour of the call.

Parity tests compare ONNX Runtime's output with ``torchvision.ops.deform_conv2d``
evaluated in PyTorch on the same tensors (max abs error <= 1e-4). The
behaviour tests check what the issue promises: the requested opset, a model
that passes ``onnx.checker`` full check, atomic writes (no file, no temporary
file after any failure), clear errors naming the fix, and a filled report.
"""

from __future__ import annotations

import io
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torchvision

import deform_onnx
import deform_onnx.core.atomic_io
from deform_onnx.exporting import api, paths
from deform_onnx.ops.deform_conv.register import LOWERINGS
from deform_onnx.ops.registry import OPS
from util import (
    SMALL,
    DeformLayer,
    assert_close,
    assert_lowering,
    default_opset,
    make_inputs,
    op_types,
    reference,
    run_ort,
)

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")

NAMES = ["x", "offset", "mask"]

DYNAMO_OPSETS = range(api.DYNAMO_MIN_OPSET, 21)  # 14..20: the dynamo path's floor, see api.py
TORCHSCRIPT_OPSETS = range(11, 21)
MIN_OPSET = {
    "auto": OPS["deform_conv2d"].min_opset,
    **{m: low.min_opset for m, low in LOWERINGS.items()},
}  # the registry's


#: "auto" on the (slower) dynamo path only where it changes its choice and at the
#: ends: at the other opsets it builds the same graph as the method it resolves to.
DYNAMO_AUTO_OPSETS = (14, 15, 16, 20)
#: Dynamo rows whose down-conversion is part of a lower opset's on the same method (the path builds at 18 and
#: converts down; the adapters do not read the target, so 14 takes every step of 15's and 16's, and grid_sample
#: at 16 every step of 17's): gather at 15 and 16 (gather at 14 and 17 kept), grid_sample at 17 (16 kept).
DYNAMO_REPEATS = {("gather", 15), ("gather", 16), ("grid_sample", 17)}


def _grid():
    for exporter, opsets in (("dynamo", DYNAMO_OPSETS), ("torchscript", TORCHSCRIPT_OPSETS)):
        for method, low in MIN_OPSET.items():
            for opset in opsets:
                if opset < low or (exporter == "dynamo" and method == "auto" and opset not in DYNAMO_AUTO_OPSETS):
                    continue
                if exporter == "dynamo" and (method, opset) in DYNAMO_REPEATS:
                    continue
                yield pytest.param(exporter, method, opset, id=f"{exporter}-{method}-op{opset}")


def _resolved(method: str, opset: int) -> str:
    return method if method != "auto" else ("grid_sample" if opset >= 16 else "gather")


def _export(tmp_path, model, inputs, **kwargs):
    path = tmp_path / "model.onnx"
    kwargs.setdefault("input_names", list(inputs))
    kwargs.setdefault("output_names", ["y"])
    report = deform_onnx.export(model, tuple(inputs.values()), path, **kwargs)
    return report, path.read_bytes()


# -- every (exporter, method, opset) on the small layer, static shapes ---------------


@pytest.mark.parametrize("exporter, method, opset", list(_grid()))
def test_exporter_method_opset(tmp_path, small, exporter, method, opset):
    model, inputs, want = small
    report, data = _export(tmp_path, model, inputs, opset_version=opset, method=method, dynamo=exporter == "dynamo")
    proto = onnx.load_from_string(data)
    assert default_opset(proto) == opset
    onnx.checker.check_model(proto, full_check=True)
    assert_lowering(proto, method, opset)  # DeformConv only with native
    assert_close(run_ort(data, inputs), want, what=f"{exporter} {method}@{opset}")
    assert report.exporter == exporter
    assert report.fallback_reason is None
    assert report.opset == opset
    assert report.method == _resolved(method, opset)
    assert report.max_error is not None and report.max_error <= 1e-4


# -- dynamic N/H/W through the TorchScript exporter (dynamo: test_dynamo.py) ------------

DYNAMIC_AXES = {
    "x": {0: "N", 2: "H", 3: "W"},
    "offset": {0: "N", 2: "Ho", 3: "Wo"},
    "mask": {0: "N", 2: "Ho", 3: "Wo"},
    "y": {0: "N", 2: "Ho", 3: "Wo"},
}
#: Sizes other than the export size (N=1, 9x8): the model must run at these.
NEW_SIZES = [(2, 13, 11), (3, 6, 15)]


@pytest.mark.parametrize("method, opset", [("gather", 11), ("auto", 13), ("grid_sample", 16), ("native", 19)])
def test_torchscript_dynamic_axes(tmp_path, small, method, opset):
    model, inputs, _ = small
    _, data = _export(
        tmp_path, model, inputs, opset_version=opset, method=method, dynamo=False, dynamic_axes=DYNAMIC_AXES
    )
    proto = onnx.load_from_string(data)
    dims = {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim] for i in proto.graph.input}
    assert dims["x"] == ["N", "", "H", "W"]
    for N, H, W in NEW_SIZES:
        new = make_inputs(SMALL, seed=7, N=N, H=H, W=W)
        assert_close(run_ort(data, new), reference(model, new), what=f"{method}@{opset} at N={N} {H}x{W}")


# -- report ------------------------------------------------------------------------------


def test_report_fields(tmp_path, small):
    model, inputs, _ = small
    model.train()  # export() evaluates in eval mode and restores the mode afterwards
    try:
        report, data = _export(tmp_path, model, inputs, opset_version=17, method="gather", dynamo=False)
        assert model.training
    finally:
        model.eval()
    proto = onnx.load_from_string(data)
    assert report.path == tmp_path / "model.onnx"
    assert report.file_size == os.path.getsize(report.path) == len(data)
    assert report.node_count == len(proto.graph.node)
    assert report.op_types == sorted(set(op_types(proto)))
    assert (report.opset, report.method, report.exporter) == (17, "gather", "torchscript")
    assert report.worst_output == "y"
    own_error = float(np.abs(run_ort(data, inputs).astype(np.float64) - reference(model, inputs)).max())
    assert report.max_error == pytest.approx(own_error, abs=1e-7)
    assert report.export_seconds > 0
    assert report.fallback_reason is None


def test_defaults_and_file_object(small):
    """Default opset 17 (19 for native); a file-like target gets the bytes and no path."""
    model, inputs, want = small
    buf = io.BytesIO()
    report = deform_onnx.export(model, tuple(inputs.values()), buf, dynamo=False, input_names=NAMES)
    assert report.path is None and report.opset == 17 and report.method == "grid_sample"
    assert report.file_size == len(buf.getvalue())
    assert_close(run_ort(buf.getvalue(), inputs), want, what="default opset")
    buf = io.BytesIO()
    report = deform_onnx.export(model, tuple(inputs.values()), buf, method="native", dynamo=False, input_names=NAMES)
    assert report.opset == 19 and default_opset(onnx.load_from_string(buf.getvalue())) == 19


def test_verify_false_skips_ort(tmp_path, small, monkeypatch):
    model, inputs, _ = small

    def no_ort(*args, **kwargs):
        raise AssertionError("verify=False must not run ONNX Runtime")

    monkeypatch.setattr(ort, "InferenceSession", no_ort)
    report = deform_onnx.export(
        model, tuple(inputs.values()), tmp_path / "m.onnx", opset_version=16, dynamo=False, verify=False
    )
    assert report.max_error is None and report.worst_output is None
    onnx.checker.check_model(onnx.load(tmp_path / "m.onnx"), full_check=True)


# -- bad input: clear errors, no file --------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(method="bogus"), r"unknown method 'bogus'; choose one of auto, native, grid_sample, gather"),
        (dict(method="native", opset_version=17), r"'native' needs opset >= 19.*raise the opset or use one of"),
        (dict(method="grid_sample", opset_version=15, dynamo=False), r"'grid_sample' needs opset >= 16"),
        (dict(opset_version=21, dynamo=False), r"TorchScript exporter's range 11\.\.20.*use dynamo=True"),
        (dict(opset_version=10, dynamo=False), r"opset >= 11"),
    ],
    ids=["unknown-method", "native-at-17", "grid_sample-at-15", "ts-at-21", "op10"],
)
def test_bad_arguments_raise_value_error(tmp_path, small, kwargs, match):
    model, inputs, _ = small
    with pytest.raises(ValueError, match=match):
        deform_onnx.export(model, tuple(inputs.values()), tmp_path / "m.onnx", **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_missing_output_folder(tmp_path, small):
    model, inputs, _ = small
    target = tmp_path / "no" / "such" / "m.onnx"
    with pytest.raises(FileNotFoundError, match=r"output folder .*no/such does not exist; create it first"):
        deform_onnx.export(model, tuple(inputs.values()), target, opset_version=17, dynamo=False)
    assert list(tmp_path.iterdir()) == []


class _PerturbedSession(ort.InferenceSession):
    """ONNX Runtime session whose first output is off by 0.01 at one element."""

    def run(self, *args, **kwargs):
        outputs = super().run(*args, **kwargs)
        outputs[0] = outputs[0].copy()
        outputs[0].flat[3] += 0.01
        return outputs


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_verification_error_writes_nothing(tmp_path, small, monkeypatch, dynamo):
    model, inputs, _ = small
    monkeypatch.setattr(ort, "InferenceSession", _PerturbedSession)
    with pytest.raises(deform_onnx.VerificationError, match=r"output 'y' differs from PyTorch: max abs error 0\.01"):
        _export(tmp_path, model, inputs, opset_version=17, dynamo=dynamo)
    assert list(tmp_path.iterdir()) == []  # neither the model nor a temporary file


class _CallCounter(torch.nn.Module):
    """Eager output changes on every call: the exported graph freezes one of them."""

    def __init__(self):
        super().__init__()
        self.layer = DeformLayer(SMALL)
        self.calls = 0

    def forward(self, x, offset, mask):
        self.calls += 1
        return self.layer(x, offset, mask) + float(self.calls)


def test_verification_error_keeps_existing_file(tmp_path, small):
    """A model whose PyTorch output differs from the export: the old file at the target stays as it was."""
    _, inputs, _ = small
    target = tmp_path / "model.onnx"
    target.write_bytes(b"previous contents")
    with pytest.raises(deform_onnx.VerificationError, match=r"output 'y' differs from PyTorch: max abs error [1-9]"):
        _export(tmp_path, _CallCounter(), inputs, opset_version=16, dynamo=False)
    assert target.read_bytes() == b"previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def test_failed_rename_removes_temp_file(tmp_path, small, monkeypatch):
    """If the final rename fails, the temporary file is removed and the target untouched."""
    model, inputs, _ = small
    target = tmp_path / "model.onnx"
    target.write_bytes(b"previous contents")
    renamed = []

    def failing_replace(src, dst):
        renamed.append((os.path.dirname(src), os.path.basename(str(dst))))
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(deform_onnx.core.atomic_io.os, "replace", failing_replace)
    with pytest.raises(OSError, match="simulated"):
        _export(tmp_path, model, inputs, opset_version=17, dynamo=False)
    assert renamed == [(str(tmp_path), "model.onnx")]  # the temp file was in the target's folder
    assert target.read_bytes() == b"previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def test_invalid_model_is_not_written(tmp_path, small, monkeypatch):
    """A model failing the checker raises ExportError and writes nothing."""
    model, inputs, _ = small

    def broken(*args, **kwargs):
        proto = onnx.load_from_string(original(*args, **kwargs).SerializeToString())
        node = next(n for n in proto.graph.node if n.input)
        node.input[0] = "nowhere"  # dangling input: full_check must reject it
        return proto

    original = paths.export_torchscript
    monkeypatch.setattr(paths, "export_torchscript", broken)
    with pytest.raises(deform_onnx.ExportError, match="not valid ONNX"):
        _export(tmp_path, model, inputs, opset_version=17, dynamo=False)
    assert list(tmp_path.iterdir()) == []


# -- several deformable layers with other ops around them: the bundled example ---------

_EXAMPLE_RUNS = [
    # issue 3's "done when": dynamo at 16, 17, 18 and 20 with each method the opset allows. grid_sample at 17
    # and native at 20 are the main job's rows (conftest's session-wide main_job, one deform_onnx.export per
    # row), checked the same way in tests/cli/test_example.py: not exported again here (auto's choice of
    # grid_sample from 16 up: test_exporter_method_opset). Each remaining row is a distinct path of the example's
    # ops; the rest repeat one (dynamo builds at max(opset, 18) and converts down below 18, with adapters that
    # do not read the target opset, so a lower target takes a superset of a higher one's steps):
    # - gather at 15, 16 and 17: test_example_at_15_through_dynamo (gather, converted 18->15: every step of 16's
    #   and 17's);
    # - grid_sample at 16: grid_sample at 17 (the main job's; nothing in the example changes schema at 17);
    # - gather at 18 and 20: grid_sample at 18 and 20 here (the example's other ops built at that opset) and
    #   test_exporter_method_opset[dynamo-gather-op18/op20] (the gather lowering at that opset).
    *[(True, "grid_sample", o) for o in (18, 20)],
    (False, "gather", 13),
]


@pytest.mark.parametrize(
    "dynamo, method, opset",
    _EXAMPLE_RUNS,
    ids=[f"{'dynamo' if d else 'torchscript'}-{m}-{o}" for d, m, o in _EXAMPLE_RUNS],
)
def test_bundled_example(tmp_path, example, dynamo, method, opset):
    model, photo, want = example
    report, data = _export(tmp_path, model, {"image": photo}, opset_version=opset, method=method, dynamo=dynamo)
    proto = onnx.load_from_string(data)
    assert default_opset(proto) == opset
    onnx.checker.check_model(proto, full_check=True)
    ops = op_types(proto)
    layers = sum(isinstance(m, torchvision.ops.DeformConv2d) for m in model.modules())
    assert layers == 4
    assert ops.count("DeformConv") == (layers if method == "native" else 0), ops
    # The grid_sample lowering samples one kernel row per GridSample (3x3 kernels: 3 per layer).
    assert ops.count("GridSample") == (3 * layers if _resolved(method, opset) == "grid_sample" else 0), ops
    assert_close(run_ort(data, {"image": photo}), want, what=f"example {method}@{opset}")
    assert report.exporter == ("dynamo" if dynamo else "torchscript")
    assert report.method == _resolved(method, opset)


def test_written_file_follows_umask(tmp_path, small):
    """The exported file gets a normal file's permissions (0o666 less the umask), not mkstemp's 0o600."""
    model, inputs, _ = small
    old = os.umask(0o022)
    try:
        _export(tmp_path, model, inputs, opset_version=17, dynamo=False)
    finally:
        os.umask(old)
    assert (tmp_path / "model.onnx").stat().st_mode & 0o777 == 0o644


def test_training_mode_restored_per_module(tmp_path, small):
    """export() puts the model in eval mode while exporting and restores each submodule's own mode."""
    model, inputs, _ = small
    model.train()
    children = list(model.modules())[1:]
    children[0].eval()
    before = [m.training for m in model.modules()]
    _export(tmp_path, model, inputs, opset_version=17, dynamo=False)
    assert [m.training for m in model.modules()] == before


def test_example_at_15_through_dynamo(tmp_path, example):
    """At opset 15 torch's own down-conversion of the example fails (it used to fall back to
    TorchScript): export() converts the opset-18 build itself, so the dynamo exporter writes it."""
    model, photo, want = example
    path = tmp_path / "ex15.onnx"
    report = deform_onnx.export(model, (photo,), path, opset_version=15, input_names=["image"])
    assert report.exporter == "dynamo" and report.fallback_reason is None
    proto = onnx.load(path)
    assert proto.opset_import[0].version == 15
    onnx.checker.check_model(proto, full_check=True)
    assert_close(run_ort(proto.SerializeToString(), {"image": photo}), want, what="example dynamo@15")


class _WarpedDcn(torch.nn.Module):
    """A deformable convolution and a 4-D ``F.grid_sample`` warp: two ops whose forms the method picks."""

    def __init__(self):
        super().__init__()
        self.offset = torch.nn.Conv2d(3, 18, 3, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(3, 4, 3, padding=1)

    def forward(self, x, grid):
        return torch.nn.functional.grid_sample(self.dcn(x, self.offset(x)), grid, align_corners=False)


class _Volume(torch.nn.Module):
    def forward(self, x, grid):
        return torch.nn.functional.grid_sample(x, grid, align_corners=False)


def test_report_method_names_the_form_the_file_holds(tmp_path):
    """report.method said grid_sample for a 5-D F.grid_sample file at 17 that is all gather (no 5-D
    GridSample below 20), and for a dynamic deformable convolution (exact gather sampler) beside a GridSample."""
    torch.manual_seed(0)
    volume = (torch.randn(1, 2, 4, 5, 6), torch.rand(1, 3, 4, 5, 3) * 2 - 1)
    report = deform_onnx.export(_Volume(), volume, tmp_path / "v.onnx", method="auto")
    assert "GridSample" not in report.op_types
    assert (report.method, report.forms) == ("gather", {"grid_sample": "gather"})
    inputs = (torch.randn(1, 3, 16, 16), torch.rand(1, 8, 8, 2) * 2 - 1)
    hw = {2: torch.export.Dim("h", min=4, max=64), 3: torch.export.Dim("w", min=4, max=64)}
    report = deform_onnx.export(_WarpedDcn().eval(), inputs, tmp_path / "dynamic.onnx", dynamic_shapes=(hw, None))
    assert "GridSample" in report.op_types  # the warp's; the dynamic deformable convolution is gather
    assert report.forms == {"deform_conv2d": "gather", "grid_sample": "grid_sample"}
    assert report.method == "grid_sample+gather"
