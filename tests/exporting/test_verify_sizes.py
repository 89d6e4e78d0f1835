"""Every size a file claims is checked before it is written (issue 18, items 1 and 4; case c28).

A file exported with dynamic axes is run at a second size (``deform_onnx.exporting.sizes``
picks it) and compared with PyTorch there; a file that fails or differs is not
written and the error names what froze. Planted faults (a shifted sampling
coordinate, a wrong mask channel: monkeypatched lowerings; a size the model's
code bakes in) must be refused in float32 and float16, so the float64/float32
reference rules of ``deform_onnx.exporting.verification`` cannot pass a wrong file.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torchvision
from torch.export import Dim

import deform_onnx
from deform_onnx.core.errors import ExportError, VerificationError
from deform_onnx.exporting import sizes
from deform_onnx.ops.deform_conv import lower_gather as gather_lowering

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::UserWarning")

DTYPES = {"float32": torch.float32, "float16": torch.float16}


class PredictedDCN(torch.nn.Module):
    """DCNv2 as detectors write it: offset and mask predicted from the input by a 3x3 convolution."""

    def __init__(self, channels: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.pred = torch.nn.Conv2d(channels, 27, 3, padding=1)
        torch.nn.init.normal_(self.pred.weight, std=0.3)
        self.dcn = torchvision.ops.DeformConv2d(channels, channels, 3, padding=1)

    def features(self, x):
        p = self.pred(x)
        return self.dcn(x, p[:, :18], torch.sigmoid(p[:, 18:]))

    def forward(self, x):
        return self.features(x)


class BakesSize(PredictedDCN):
    """The model's code turns the export-time H*W into a Python number through numpy and splits its tokens
    with it (as Deformable DETR splits its levels by ``H_ * W_``): torch.export specialises it (the guard
    check falls back), the TorchScript trace records the example's H*W. Neither file holds at another size.
    (Deformable DETR's own ``torch.as_tensor`` pattern is made dynamic by the export-time rewrites.)"""

    def forward(self, x):
        y = self.features(x)
        tokens = y.flatten(2).split([int(np.prod(y.shape[-2:]))], dim=2)[0]
        return tokens.softmax(-1)


def _input(dtype=torch.float32, shape=(1, 4, 16, 16)):
    torch.manual_seed(1)
    return torch.randn(*shape).to(dtype)


def _model(cls, dtype):
    return cls().to(dtype).eval()


# ---- second size: picked, reported, refused ---------------------------------------------------------------


def test_candidate_sizes_keep_stride_arithmetic():
    """Batch + 1; H and W moved by the largest power of two (<= 32) dividing them, in alternate directions."""
    axes = sizes.dynamic_axes_of((torch.zeros(1, 3, 128, 128),), dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}},
                                 input_names=["x"])  # fmt: skip
    first = sizes.candidate_sizes(axes)[0]
    assert first == {(0, 0): 2, (0, 2): 192, (0, 3): 96}
    assert all(v % 32 == 0 for k, v in first.items() if k[1] >= 2)
    # Unnamed axes of equal size move together (an offset shares H and W with the image).
    shapes = ({2: Dim.DYNAMIC, 3: Dim.DYNAMIC}, {2: Dim.DYNAMIC, 3: Dim.DYNAMIC})
    axes = sizes.dynamic_axes_of((torch.zeros(1, 3, 24, 40), torch.zeros(1, 18, 24, 40)), dynamic_shapes=shapes)
    first = sizes.candidate_sizes(axes)[0]
    assert first[(0, 2)] == first[(1, 2)] != 24 and first[(0, 3)] == first[(1, 3)] != 40
    # Unnamed H and W of a square example (Dim.AUTO) move apart: the second size is not square.
    axes = sizes.dynamic_axes_of(
        (torch.zeros(1, 4, 32, 32),), dynamic_shapes=({0: Dim.AUTO, 2: Dim.AUTO, 3: Dim.AUTO},)
    )
    first = sizes.candidate_sizes(axes)[0]
    assert first[(0, 2)] != first[(0, 3)], first
    # A Dim's range is respected.
    axes = sizes.dynamic_axes_of((torch.zeros(1, 3, 16, 16),), dynamic_shapes=({2: Dim("H", max=24)},))
    assert all(c[(0, 2)] <= 24 for c in sizes.candidate_sizes(axes))
    # A square example whose ranges leave out the full step's non-square size (32x32 in [16, 64]: 96x0, the CLI's
    # `--dynamic` .pte) is still moved apart, by a smaller step, before any square candidate.
    ranged = ({2: Dim("H", min=16, max=64), 3: Dim("W", min=16, max=64)},)
    first = sizes.candidate_sizes(sizes.dynamic_axes_of((torch.zeros(1, 4, 32, 32),), dynamic_shapes=ranged))[0]
    assert first[(0, 2)] != first[(0, 3)] and all(16 <= v <= 64 for v in first.values()), first


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_dynamic_export_is_checked_at_a_second_size(tmp_path, dynamo):
    model, x = _model(PredictedDCN, torch.float32), _input()
    path = tmp_path / "m.onnx"
    report = deform_onnx.export(model, (x,), path, input_names=["x"], dynamo=dynamo,
                                dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})  # fmt: skip
    assert report.checked_shapes == [[(1, 4, 16, 16)], [(2, 4, 48, 32)]]
    assert len(report.size_checks) == 1 and report.size_checks[0].max_error <= 1e-4
    assert report.second_size_seconds > 0
    # The written file does run there, and matches PyTorch.
    x2 = sizes.inputs_at((x,), [(2, 4, 48, 32)])[0]
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x2.numpy()})[0]
    np.testing.assert_allclose(got, model(x2).detach().numpy(), atol=1e-4, rtol=1e-4)


def test_static_export_has_no_second_size():
    report = deform_onnx.export(_model(PredictedDCN, torch.float32), (_input(),), io.BytesIO(), dynamo=False)
    assert report.checked_shapes == [[(1, 4, 16, 16)]] and report.size_checks == []


def test_verify_shapes_are_used_as_given():
    report = deform_onnx.export(_model(PredictedDCN, torch.float32), (_input(),), io.BytesIO(), dynamo=False,
                                input_names=["x"], dynamic_axes={"x": {2: "H", 3: "W"}},
                                verify_shapes=[(1, 4, 20, 12), (1, 4, 8, 24)])  # fmt: skip
    assert report.checked_shapes[1:] == [[(1, 4, 20, 12)], [(1, 4, 8, 24)]]


def test_bad_verify_shapes_fail_before_export():
    with pytest.raises(ValueError, match="rank 3"):
        deform_onnx.export(_model(PredictedDCN, torch.float32), (_input(),), io.BytesIO(), dynamo=False,
                           input_names=["x"], dynamic_axes={"x": {2: "H"}}, verify_shapes=[(1, 4, 20)])  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_frozen_size_is_refused_at_a_second_size(tmp_path, dtype, dynamo):
    """Planted fault: a reshape with the export-time H*W. The file is right at the export size (a static
    export of it is written) and wrong at any other: the dynamic export is refused, naming the value and
    the node that holds it, and nothing is written."""
    model, x = _model(BakesSize, DTYPES[dtype]), _input(DTYPES[dtype])
    static = deform_onnx.export(model, (x,), io.BytesIO(), dynamo=dynamo, input_names=["x"])
    assert static.max_error is not None
    path = tmp_path / "m.onnx"
    with pytest.raises(
        ExportError,
        match=r"does not hold at a second size .*at Split node .*value 256 "
        r"\(H/1\*W/1\) in .*What to do",
    ):
        deform_onnx.export(model, (x,), path, dynamo=dynamo, input_names=["x"],
                           dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})  # fmt: skip
    assert list(tmp_path.iterdir()) == []


class SpecialisesSize(PredictedDCN):
    """c28: the model's code builds a normaliser with ``torch.tensor`` from ``x.shape[-2:]`` (as Python floats)."""

    def forward(self, x):
        h, w = x.shape[-2:]
        scale = torch.tensor([float(w), float(h)], dtype=x.dtype)
        return self.features(x) * (scale[0] / scale[1])


def test_c28_requested_dims_kept_or_named(tmp_path):
    """``dynamic_shapes`` naming H and W on a model that specialises them: the dynamo file would be static
    (refused, naming the dimension), and the TorchScript file freezes W/H: refused at the second size."""
    path = tmp_path / "m.onnx"
    model, x = _model(SpecialisesSize, torch.float32), _input(shape=(1, 4, 16, 32))
    with pytest.raises(ExportError) as info:
        deform_onnx.export(model, (x,), path, dynamic_shapes=({2: Dim("H"), 3: Dim("W")},))
    text = str(info.value)
    assert "does not hold at a second size" in text
    assert "input 'x' axis 2 (H) is fixed at 16" in text or "specialised" in text or "fixes a dynamic size" in text
    assert list(tmp_path.iterdir()) == []
    # Without fallback the dynamo path's own refusal names the dimension.
    with pytest.raises(ExportError, match=r"axis [23] \([HW]\) is fixed at|fixes a dynamic size|specializ"):
        deform_onnx.export(model, (x,), path, dynamic_shapes=({2: Dim("H"), 3: Dim("W")},), fallback=False)
    assert list(tmp_path.iterdir()) == []


def test_guard_check_that_cannot_capture_says_so(monkeypatch):
    """The guard check's own capture failing is reported; the second-size check still runs."""
    from deform_onnx.exporters import guards

    def refuse(*args, **kwargs):
        raise RuntimeError("capture refused for this test")

    monkeypatch.setattr(guards.torch.export, "export", refuse)
    report = deform_onnx.export(_model(PredictedDCN, torch.float32), (_input(),), io.BytesIO(), input_names=["x"],
                                dynamic_axes={"x": {2: "H", 3: "W"}})  # fmt: skip
    assert any("guard check could not capture" in n and "capture refused" in n for n in report.notes)
    assert len(report.checked_shapes) == 2


# ---- planted faults in the lowering: refused in float32 and float16 ------------------------------------------


def _shift_columns(monkeypatch):
    """The gather lowering samples half a pixel to the right of where torchvision does."""
    original = gather_lowering.base_coords

    def shifted(b, spec, axis, n_out, like, *args, **kwargs):
        out = original(b, spec, axis, n_out, like, *args, **kwargs)
        return b.op("Add", out, b.float_const(0.5, like)) if axis == 1 else out

    monkeypatch.setattr(gather_lowering, "base_coords", shifted)


def _roll_mask(monkeypatch):
    """The gather lowering weights each tap by its neighbour's mask channel."""
    original = gather_lowering.checked_spatial
    calls = [0]

    def rolled(b, t, Ho, Wo):
        out = original(b, t, Ho, Wo)
        calls[0] += 1
        if out is None or calls[0] % 2:  # lower_gather checks the offset first, then the mask
            return out
        return b.op("Concat", b.slice(out, 1, 2**62, axis=1), b.slice(out, 0, 1, axis=1), axis=1)

    monkeypatch.setattr(gather_lowering, "checked_spatial", rolled)


FAULTS = {"none": None, "shifted coordinate": _shift_columns, "wrong mask channel": _roll_mask}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_planted_lowering_fault_is_refused(tmp_path, monkeypatch, dtype, fault, dynamic):
    """Without the fault the export is written (the control); with it, refused at the export size: float32
    after the float64 check, float16 against the float32 copy of the model, nothing written."""
    if FAULTS[fault] is not None:
        FAULTS[fault](monkeypatch)
    model, x = _model(PredictedDCN, DTYPES[dtype]), _input(DTYPES[dtype])
    path = tmp_path / "m.onnx"
    kwargs = {"input_names": ["x"], "dynamic_axes": {"x": {2: "H", 3: "W"}}} if dynamic else {}
    if fault == "none":
        report = deform_onnx.export(model, (x,), path, method="gather", opset_version=13, dynamo=False, **kwargs)
        assert path.exists() and len(report.checked_shapes) == (2 if dynamic else 1)
        return
    refused = "against the model run in float64" if dtype == "float32" else "differs from the float32 model"
    with pytest.raises(VerificationError, match=refused):
        deform_onnx.export(model, (x,), path, method="gather", opset_version=13, dynamo=False, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_planted_fault_is_refused_at_a_second_size(tmp_path, monkeypatch):
    """A fault that shows only at other sizes (the mask is rolled only when H differs from the export's):
    the example passes, the second size refuses it."""
    original = gather_lowering.checked_spatial
    calls = [0]

    def rolled_when_resized(b, t, Ho, Wo):
        out = original(b, t, Ho, Wo)
        calls[0] += 1
        if out is None or calls[0] % 2:  # lower_gather checks the offset first, then the mask
            return out
        same = b.op("Equal", b.slice(b.op("Shape", out), 2, 3, axis=0), b.i64([16]))
        rolled = b.op("Concat", b.slice(out, 1, 2**62, axis=1), b.slice(out, 0, 1, axis=1), axis=1)
        return b.op("Where", same, out, rolled)

    monkeypatch.setattr(gather_lowering, "checked_spatial", rolled_when_resized)
    x = _input()
    model = _model(PredictedDCN, torch.float32)

    class WithMaskInput(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dcn = model.dcn

        def forward(self, x, offset, mask):
            return self.dcn(x, offset, mask)

    offset, mask = torch.randn(1, 18, 16, 16), torch.rand(1, 9, 16, 16)
    path = tmp_path / "m.onnx"
    axes = {n: {2: "H", 3: "W"} for n in ("x", "offset", "mask")}
    with pytest.raises(ExportError, match=r"does not hold at a second size .*against the model run in float64"):
        deform_onnx.export(WithMaskInput(), (x, offset, mask), path, method="gather", opset_version=13,
                           dynamo=False, input_names=["x", "offset", "mask"], dynamic_axes=axes)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_float64_rule_is_recorded_in_the_report():
    """A correct float32 file passes by the tolerance rule; the report names the reference and the rule."""
    report = deform_onnx.export(_model(PredictedDCN, torch.float32), (_input(),), io.BytesIO(), dynamo=False)
    (check,) = report.checks.values()
    assert check.reference == "pytorch" and "tolerance" in check.rule and check.error == report.max_error


def test_second_size_failure_names_the_onnx_node():
    """ONNX Runtime's own failure at the second size is quoted with the node it failed at."""
    model = _model(BakesSize, torch.float32)
    with pytest.raises(ExportError, match=r"ONNX Runtime fails there at Split node '[^']*'"):
        deform_onnx.export(model, (_input(),), io.BytesIO(), dynamo=False, input_names=["x"],
                           dynamic_axes={"x": {2: "H", 3: "W"}})  # fmt: skip


class FreezesReshape(torch.nn.Module):
    """``int(x.shape[2])`` in a reshape: the TorchScript trace writes ``Mul(W, 12)`` (the export-time H)
    into the Reshape's shape. With ONNX Runtime's graph optimisations on, the file ran "right" at another
    size (1x2x20x16 gave the shape (1, 2, 320)); as the ONNX spec runs it, its Reshape fails there."""

    def forward(self, x):
        return x.reshape(x.shape[0], x.shape[1], int(x.shape[2]) * x.shape[3]).softmax(-1)


def test_a_size_frozen_into_a_reshape_is_refused_though_onnxruntime_optimises_it_away():
    """The second size runs with ONNX Runtime's graph optimisations off (runtimes.sessions.make_session)."""
    from deform_onnx.runtimes.sessions import make_session, run_file

    buf = io.BytesIO()
    torch.onnx.export(FreezesReshape(), (torch.randn(1, 2, 12, 8),), buf, dynamo=False, input_names=["x"],
                      dynamic_axes={"x": {2: "H", 3: "W"}})  # fmt: skip
    other = torch.randn(1, 2, 20, 16)
    _, (got,) = run_file(make_session(buf.getvalue()), (other,))  # premise: optimised, it looks right
    np.testing.assert_allclose(got, FreezesReshape()(other).numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ExportError, match=r"does not hold at a second size"):
        deform_onnx.export(FreezesReshape(), (torch.randn(1, 2, 12, 8),), io.BytesIO(), dynamo=False,
                           input_names=["x"], dynamic_axes={"x": {2: "H", 3: "W"}})  # fmt: skip


def test_onnx_file_of_static_export_is_unchanged():
    """Sanity: a static export's graph inputs stay static (the static-dim check only reads dynamic axes)."""
    buf = io.BytesIO()
    deform_onnx.export(_model(PredictedDCN, torch.float32), (_input(),), buf, dynamo=False)
    dims = onnx.load_from_string(buf.getvalue()).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [1, 4, 16, 16]


# ---- the CLI shares the picker; check uses the dtype's tolerance ------------------------------------------


def test_cli_export_second_size_comes_from_the_shared_picker():
    from deform_onnx.cli import export_cmd

    model, x = _model(PredictedDCN, torch.float32), _input()
    picked = export_cmd._resized_input(model, x, "x")
    axes = sizes.dynamic_axes_of((x,), dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}}, input_names=["x"])
    assert tuple(picked.shape) == sizes.second_inputs(model, (x,), axes)[0][0][1][0] == (2, 4, 48, 32)


def test_check_uses_the_float16_tolerance(tmp_path):
    """A float16 file whose lowered path is ~1e-3 off (float16 rounding) passes ``check`` by default and fails
    at float32's 1e-4 (which the default used to be)."""
    from typer.testing import CliRunner

    from deform_onnx.cli import app

    path = tmp_path / "f16.onnx"
    deform_onnx.export(_model(PredictedDCN, torch.float16), (_input(torch.float16),), path, method="native",
                       opset_version=19, verify=False)  # fmt: skip
    base = ["check", str(path), "--runtime", "ort", "--repeat", "0"]
    ok = CliRunner().invoke(app, base)
    assert ok.exit_code == 0, ok.output
    strict = CliRunner().invoke(app, [*base, "--tolerance", "1e-4"])
    assert strict.exit_code == 1 and "exceeded the tolerance" in strict.output


def test_verify_shapes_without_dynamic_axes_is_a_user_error():
    with pytest.raises(ValueError, match="verify_shapes= needs dynamic axes"):
        deform_onnx.export(_model(PredictedDCN, torch.float32), (_input(),), io.BytesIO(), dynamo=False,
                           verify_shapes=[(1, 4, 8, 8)])  # fmt: skip


def test_dynamic_shapes_keyed_by_axis_is_a_user_error(tmp_path):
    """The walkthrough's ``dynamic_shapes={0: Dim("N"), ...}`` (one input's axes without the tuple): an error
    before the export, not a static file written without a word."""
    with pytest.raises(ValueError, match=r"keyed by axis numbers; give one entry per input"):
        deform_onnx.export(_model(PredictedDCN, torch.float32), (_input(),), tmp_path / "m.onnx",
                           dynamic_shapes={0: Dim("N"), 2: Dim("H"), 3: Dim("W")})  # fmt: skip
    assert list(tmp_path.iterdir()) == []


# ---- c27: InternImage's pure-PyTorch DCNv3 reference points, dynamic N/H/W ---------------------------------
# The helpers follow OpenGVLab/InternImage's ops_dcnv3/functions/dcnv3_func.py (dcnv3_core_pytorch), written
# the way that file writes them: sizes from ``input.shape`` as Python numbers, torch.linspace over them and
# ``torch.tensor([W_in, H_in])`` for the normaliser.


def _get_reference_points(spatial_shapes, kernel_h, kernel_w, dilation_h, dilation_w, stride_h=1, stride_w=1):
    _, H_, W_, _ = spatial_shapes
    H_out = (H_ - (dilation_h * (kernel_h - 1) + 1)) // stride_h + 1
    W_out = (W_ - (dilation_w * (kernel_w - 1) + 1)) // stride_w + 1
    ref_y, ref_x = torch.meshgrid(
        torch.linspace((dilation_h * (kernel_h - 1)) // 2 + 0.5,
                       (dilation_h * (kernel_h - 1)) // 2 + 0.5 + (H_out - 1) * stride_h, H_out, dtype=torch.float32),
        torch.linspace((dilation_w * (kernel_w - 1)) // 2 + 0.5,
                       (dilation_w * (kernel_w - 1)) // 2 + 0.5 + (W_out - 1) * stride_w, W_out, dtype=torch.float32),
        indexing="ij",
    )  # fmt: skip
    ref_y = ref_y.reshape(-1)[None] / H_
    ref_x = ref_x.reshape(-1)[None] / W_
    return torch.stack((ref_x, ref_y), -1).reshape(1, H_out, W_out, 1, 2)


def _generate_dilation_grids(spatial_shapes, kernel_h, kernel_w, dilation_h, dilation_w, group):
    _, H_, W_, _ = spatial_shapes
    x, y = torch.meshgrid(
        torch.linspace(-((dilation_w * (kernel_w - 1)) // 2),
                       -((dilation_w * (kernel_w - 1)) // 2) + (kernel_w - 1) * dilation_w, kernel_w, dtype=torch.float32),
        torch.linspace(-((dilation_h * (kernel_h - 1)) // 2),
                       -((dilation_h * (kernel_h - 1)) // 2) + (kernel_h - 1) * dilation_h, kernel_h, dtype=torch.float32),
        indexing="ij",
    )  # fmt: skip
    grid = torch.stack([x / W_, y / H_], -1).reshape(-1, 1, 2).repeat(1, group, 1).permute(1, 0, 2)
    return grid.reshape(1, 1, 1, group * kernel_h * kernel_w, 2)


def dcnv3_core_pytorch(input, offset, mask, k, pad, group, group_channels, offset_scale=1.0):
    input = torch.nn.functional.pad(input, [0, 0, pad, pad, pad, pad])
    N_, H_in, W_in, _ = input.shape
    _, H_out, W_out, _ = offset.shape
    ref = _get_reference_points(input.shape, k, k, 1, 1)
    grid = _generate_dilation_grids(input.shape, k, k, 1, 1, group)
    spatial_norm = torch.tensor([W_in, H_in]).reshape(1, 1, 1, 2).repeat(1, 1, 1, group * k * k)
    sampling_locations = (ref + grid * offset_scale).repeat(N_, 1, 1, 1, 1).flatten(3, 4)
    sampling_locations = sampling_locations + offset * offset_scale / spatial_norm
    P_ = k * k
    sampling_grids = 2 * sampling_locations - 1
    input_ = input.view(N_, H_in * W_in, group * group_channels).transpose(1, 2).reshape(
        N_ * group, group_channels, H_in, W_in)  # fmt: skip
    grid_ = sampling_grids.view(N_, H_out * W_out, group, P_, 2).transpose(1, 2).flatten(0, 1)
    sampled = torch.nn.functional.grid_sample(input_, grid_, mode="bilinear", padding_mode="zeros", align_corners=False)
    mask = mask.view(N_, H_out * W_out, group, P_).transpose(1, 2).reshape(N_ * group, 1, H_out * W_out, P_)
    output = (sampled * mask).sum(-1).view(N_, group * group_channels, H_out * W_out)
    return output.transpose(1, 2).reshape(N_, H_out, W_out, -1).contiguous()


class InternImageSeg(torch.nn.Module):
    """c27: a two-stage conv stem (stride 4), then one DCNv3 layer (channels 32, group 4, kernel 3, pad 1)."""

    def __init__(self, channels: int = 32, group: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, channels, 3, stride=2, padding=1), torch.nn.GELU(),
            torch.nn.Conv2d(channels, channels, 3, stride=2, padding=1),
        )  # fmt: skip
        self.group = group
        self.offset = torch.nn.Linear(channels, group * 9 * 2)
        self.mask = torch.nn.Linear(channels, group * 9)
        self.out = torch.nn.Linear(channels, channels)

    def forward(self, x):
        y = self.stem(x).permute(0, 2, 3, 1)
        N, H, W, _ = y.shape
        offset = self.offset(y)
        mask = torch.softmax(self.mask(y).reshape(N, H, W, self.group, -1), -1).reshape(N, H, W, -1)
        z = dcnv3_core_pytorch(y, offset, mask, 3, 1, self.group, y.shape[-1] // self.group)
        return self.out(z).permute(0, 3, 1, 2)


@pytest.mark.parametrize("dynamo", [True, False], ids=["default", "torchscript"])
def test_c27_internimage_dcnv3_dynamic_is_right_or_refused(tmp_path, dynamo):
    """Either the written file matches PyTorch at the case's second size 1x3x96x160 (within 1e-4), or export()
    refuses before writing, naming the second size; a guard check that could not capture is in the report."""
    model, x = InternImageSeg().eval(), torch.randn(1, 3, 128, 128)
    path = tmp_path / "c27.onnx"
    try:
        report = deform_onnx.export(model, (x,), path, dynamo=dynamo, input_names=["x"],
                                    dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})  # fmt: skip
    except ExportError as exc:
        assert "does not hold at a second size" in str(exc) and "no file was written" in str(exc)
        # The frozen value is named: the padded level size in torch.tensor([W_in, H_in]), the normaliser.
        assert "value 34 (H/4+2)" in str(exc) and "-> Div" in str(exc)
        assert list(tmp_path.iterdir()) == []
        return
    assert len(report.checked_shapes) == 2
    x2 = torch.randn(1, 3, 96, 160)
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x2.numpy()})[0]
    np.testing.assert_allclose(got, model(x2).detach().numpy(), atol=1e-4, rtol=1e-4)


class _AtLeast12(torch.nn.Module):
    """A DCNv1 layer (offsets from a conv) that checks it gets at least 12 rows: PyTorch fails at 8."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.off = torch.nn.Conv2d(4, 18, 3, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(4, 4, 3, padding=1)

    def forward(self, x):
        torch._check(x.shape[2] >= 12)  # a model that needs at least 12 rows
        return self.dcn(x, self.off(x))


def test_declared_dim_bounds_are_checked(tmp_path):
    """A ``Dim`` with ``min``/``max`` is run at both bounds too (issue 35 item 2), and a bound the model itself
    cannot run is refused in one line naming it, before a file is written."""
    model = _AtLeast12().eval()
    x = torch.randn(1, 4, 16, 16)
    dims = ({2: Dim("H", min=12, max=24)},)
    report = deform_onnx.export(model, (x,), tmp_path / "b.onnx", dynamic_shapes=dims)
    shapes = [s[0] for s in report.checked_shapes]
    assert (1, 4, 12, 16) in shapes and (1, 4, 24, 16) in shapes, shapes
    assert any("declared bounds" in n for n in report.notes), report.notes
    with pytest.raises(ExportError, match=r"does not run in PyTorch at its declared lower bound 1,4,8,16") as info:
        deform_onnx.export(model, (x,), tmp_path / "c.onnx", dynamic_shapes=({2: Dim("H", min=8, max=24)},))
    assert "\n" not in str(info.value) and not (tmp_path / "c.onnx").exists()


def test_batch_only_dynamic_has_no_unchecked_axes_note():
    """Only the batch dynamic: the second size checks every dynamic axis, so no note says others went unchecked;
    with H and W dynamic too, a model that runs at no other H/W gets the note."""
    model, x = _model(PredictedDCN, torch.float32), _input()
    axes = sizes.dynamic_axes_of((x,), dynamic_axes={"x": {0: "N"}}, input_names=["x"])
    (sets, note) = sizes.second_inputs(model, (x,), axes)
    assert sets[0][1][0][0] != x.shape[0] and note is None

    class FixedSize(torch.nn.Module):  # runs at its traced H x W only
        def forward(self, t):
            return t.reshape(t.shape[0], *x.shape[1:]) * 2

    axes = sizes.dynamic_axes_of((x,), dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}}, input_names=["x"])
    (sets, note) = sizes.second_inputs(FixedSize(), (x,), axes)
    assert sets and note is not None and "only the batch" in note
