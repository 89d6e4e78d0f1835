"""The dynamo path: ``deform_onnx.translation_table`` used directly and through ``export``, static and dynamic shapes.

Every parity check compares ONNX Runtime with ``torchvision.ops.deform_conv2d``
evaluated in PyTorch on the same tensors (max abs error <= 1e-4).
"""

from __future__ import annotations

import onnx
import pytest
import torch
from torch.export import Dim

import deform_onnx
from deform_onnx.exporters import dynamo as dynamo_exporter
from util import (
    SMALL,
    assert_close,
    assert_lowering,
    default_opset,
    make_inputs,
    reference,
    run_ort,
)

#: Sizes other than the export size (N=1, 9x8) that a dynamic model must run at.
NEW_SIZES = [(2, 13, 11), (3, 6, 15)]


def _torch_export(model, inputs, opset, table, **kwargs) -> bytes:
    program = torch.onnx.export(
        model,
        tuple(inputs.values()),
        dynamo=True,
        opset_version=opset,
        input_names=list(inputs),
        output_names=["y"],
        custom_translation_table=table,
        verbose=False,
        **kwargs,
    )
    return program.model_proto.SerializeToString()


# -- translation_table() itself ---------------------------------------------------------


def test_table_maps_the_torchvision_op():
    table = deform_onnx.translation_table("gather", 17)
    # deformable convolution, F.grid_sample (aten.grid_sampler; grid_sampler_2d after decomposition),
    # deform_onnx.ops.ms_deform_attn, and the ATen ops torchlib lacks (exporters/aten_detectors.py)
    assert list(table) == [
        torch.ops.torchvision.deform_conv2d.default,
        torch.ops.aten.grid_sampler.default,
        torch.ops.aten.grid_sampler_2d.default,
        torch.ops.aten.grid_sampler_3d.default,  # 5-D grid_sample (issue 19, items 1-2)
        torch.ops.deform_onnx.ms_deform_attn.default,
        torch.ops.aten._is_all_true.default,
        torch.ops.aten.isin.Tensor_Tensor,
        torch.ops.aten.cummax.default,
        torch.ops.aten.cummin.default,
    ]
    assert all(callable(fn) for fn in table.values())


@pytest.mark.parametrize(
    "method, opset, match",
    [
        ("bogus", None, r"unknown method 'bogus'; choose one of auto, native, grid_sample, gather"),
        ("native", 18, r"'native' needs opset >= 19.*use one of: grid_sample, gather"),
        ("grid_sample", 15, r"'grid_sample' needs opset >= 16"),
        ("gather", 13, r"opset 13 is below 14.*dynamo=False"),
        ("auto", 11, r"opset 11 is below 14.*deform_onnx.register\(\)"),
    ],
)
def test_table_rejects_what_the_path_cannot_do(method, opset, match):
    with pytest.raises(ValueError, match=match):
        deform_onnx.translation_table(method, opset)


def test_native_without_opset_fails_inside_the_exporter(small):
    """With no opset the table lowers for the build opset (18): native cannot, and says why."""
    model, inputs, _ = small
    with pytest.raises(Exception) as info:
        _torch_export(model, inputs, 17, deform_onnx.translation_table("native"))
    chain, exc = [], info.value
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__
    assert any(isinstance(e, ValueError) and "'native' needs opset >= 19" in str(e) for e in chain), chain


# -- direct torch.onnx.export(dynamo=True, custom_translation_table=...) --------------------


@pytest.mark.parametrize(
    "method, opset",
    # 17, 18 and 20 with every method: test_cases_dynamo.py (case c02).
    [("auto", 14), ("gather", 15), ("grid_sample", 16), ("native", 19), ("native", 23)],
)
def test_direct_torch_export(small, method, opset):
    model, inputs, want = small
    data = _torch_export(model, inputs, opset, deform_onnx.translation_table(method, opset))
    proto = onnx.load_from_string(data)
    assert default_opset(proto) == opset
    onnx.checker.check_model(proto, full_check=True)
    assert_lowering(proto, method, opset)
    assert_close(run_ort(data, inputs), want, what=f"direct {method}@{opset}")


# -- dynamic N, H, W ------------------------------------------------------------------------


def _named_dims():
    N, H, W, Ho, Wo = Dim("N"), Dim("H"), Dim("W"), Dim("Ho"), Dim("Wo")
    return {"x": {0: N, 2: H, 3: W}, "offset": {0: N, 2: Ho, 3: Wo}, "mask": {0: N, 2: Ho, 3: Wo}}


def _auto_dims():
    d = Dim.DYNAMIC
    return {name: {0: d, 2: d, 3: d} for name in ("x", "offset", "mask")}


DYNAMIC_AXES = {
    "x": {0: "N", 2: "H", 3: "W"},
    "offset": {0: "N", 2: "Ho", 3: "Wo"},
    "mask": {0: "N", 2: "Ho", 3: "Wo"},
    "y": {0: "N", 2: "Ho", 3: "Wo"},
}


def _check_runs_at_new_sizes(model, data, what):
    proto = onnx.load_from_string(data)
    x = next(i for i in proto.graph.input if i.name == "x")
    dims = [d.dim_param for d in x.type.tensor_type.shape.dim]
    assert dims[0] and not dims[1] and dims[2] and dims[3], f"{what}: x is not dynamic in N/H/W: {dims}"
    for N, H, W in NEW_SIZES:
        new = make_inputs(SMALL, seed=11, N=N, H=H, W=W)  # offset/mask sized by the output-size formula
        assert_close(run_ort(data, new), reference(model, new), what=f"{what} at N={N} {H}x{W}")


@pytest.mark.parametrize(
    "method, opset, shapes",
    [
        ("gather", 15, "dims"),
        ("grid_sample", 17, "dims"),
        ("native", 19, "dims"),
        ("auto", 20, "auto-dims"),
        # the dynamic_axes form once here (gather takes it at 14: test_dynamic_at_14_through_export)
        ("grid_sample", 16, "dynamic_axes"),
    ],
)
def test_export_dynamic_shapes(tmp_path, small, method, opset, shapes):
    """deform_onnx.export(dynamo=True) with torch.export.Dim (named or DYNAMIC) or the dynamic_axes form."""
    model, inputs, _ = small
    kwargs = (
        {"dynamic_shapes": _named_dims()}
        if shapes == "dims"
        else {"dynamic_shapes": _auto_dims()}
        if shapes == "auto-dims"
        else {"dynamic_axes": DYNAMIC_AXES}
    )
    path = tmp_path / "m.onnx"
    report = deform_onnx.export(
        model,
        tuple(inputs.values()),
        path,
        opset_version=opset,
        method=method,
        input_names=list(inputs),
        output_names=["y"],
        **kwargs,
    )
    assert report.exporter == "dynamo" and report.fallback_reason is None
    data = path.read_bytes()
    proto = onnx.load_from_string(data)
    assert default_opset(proto) == opset
    onnx.checker.check_model(proto, full_check=True)
    assert_lowering(proto, method, opset)
    _check_runs_at_new_sizes(model, data, f"{method}@{opset} {shapes}")


@pytest.mark.parametrize("form", ["dims", "axes"])
def test_dynamic_at_14_through_export(tmp_path, small, form):
    """Dynamic shapes at 14: torch's own conversion stops at 15 (no Shape 15->14 adapter), export()
    converts with its shape_15_14 adapter and says so in the report; the file runs at new sizes."""
    model, inputs, _ = small
    kwargs = {"dynamic_shapes": _named_dims()} if form == "dims" else {"dynamic_axes": DYNAMIC_AXES}
    path = tmp_path / "m.onnx"
    report = deform_onnx.export(
        model,
        tuple(inputs.values()),
        path,
        opset_version=14,
        method="gather",
        input_names=list(inputs),
        output_names=["y"],
        **kwargs,
    )
    assert report.exporter == "dynamo" and report.fallback_reason is None
    assert any(r.startswith("shape_15_14 (Shape opset 15->14") for r in report.repairs), report.repairs
    data = path.read_bytes()
    proto = onnx.load_from_string(data)
    assert default_opset(proto) == 14
    onnx.checker.check_model(proto, full_check=True)
    _check_runs_at_new_sizes(model, data, f"gather@14 {form}")


def test_direct_torch_export_dynamic(small):
    """The table with torch.onnx.export's own dynamic_shapes (no deform_onnx.export in between)."""
    model, inputs, _ = small
    data = _torch_export(model, inputs, 18, deform_onnx.translation_table("gather", 18), dynamic_shapes=_named_dims())
    onnx.checker.check_model(onnx.load_from_string(data), full_check=True)
    _check_runs_at_new_sizes(model, data, "direct gather@18")


def test_why_the_floors_are_14_and_15(small):
    """Below 14 torch's down-conversion fails (no Reshape 14->13 adapter) and it silently keeps opset 18.

    This is why translation_table() and export() refuse opsets below 14 on
    this path (15 with dynamic shapes). If a later torch/onnx reaches lower,
    this fails: lower the floors.
    """
    from deform_onnx.exporting import api

    assert api.DYNAMO_MIN_OPSET == dynamo_exporter.MIN_OPSET
    model, inputs, _ = small
    data = _torch_export(model, inputs, dynamo_exporter.MIN_OPSET - 1, deform_onnx.translation_table("gather"))
    assert default_opset(onnx.load_from_string(data)) == 18
    # Same with dynamic shapes one opset higher (Shape-15 has no adapter to 14).
    below = dynamo_exporter.DYNAMIC_MIN_OPSET - 1
    data = _torch_export(
        model, inputs, below, deform_onnx.translation_table("gather", below), dynamic_shapes=_named_dims()
    )
    assert default_opset(onnx.load_from_string(data)) == 18
