"""Cases c14, c15 and c16 of ../shared/cases/cases.json: ``deform_onnx.export`` with default
arguments (issue 9 items 1-3), and float64 models on a runtime without a float64 ``Conv``
(issue 11 item 3).

The reference is always torchvision (``torchvision.ops.deform_conv2d`` / ``DeformConv2d``)
evaluated in PyTorch on the same tensors.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import onnx
import pytest
import torch
import torchvision
from torch.export import Dim

import deform_onnx
from deform_onnx.conversion import adapters
from util import DeformLayer, assert_close, case_config, default_opset, make_inputs, reference, run_ort

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")


def _ours(caught) -> list[str]:
    return [str(w.message) for w in caught if str(w.message).startswith("deform_onnx:")]


# -- c14: the DCN pack pattern (torch.chunk of one conv into offset parts and mask) -------------


class DcnPack(torch.nn.Module):
    """``o1, o2, m = torch.chunk(conv_offset(x), 3, dim=1)``; DCNv2 on ``cat(o1, o2)`` and ``sigmoid(m)``."""

    def __init__(self, cfg, deform: bool = True):
        super().__init__()
        taps = cfg.kernel[0] * cfg.kernel[1]
        self.conv_offset = torch.nn.Conv2d(cfg.C_in, 3 * cfg.offset_groups * taps, 3, padding=1)
        self.dcn = (
            torchvision.ops.DeformConv2d(
                cfg.C_in,
                cfg.C_out,
                cfg.kernel,
                stride=cfg.stride,
                padding=cfg.padding,
                dilation=cfg.dilation,
                groups=cfg.groups,
                bias=cfg.bias is not False,
            )
            if deform
            else None
        )
        self.scale = cfg.offset_scale
        gen = torch.Generator().manual_seed(14)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) / p[0].numel() ** 0.5)

    def parts(self, x):
        o1, o2, m = torch.chunk(self.conv_offset(x), 3, dim=1)
        return torch.cat((o1, o2), dim=1) * self.scale, torch.sigmoid(m)

    def forward(self, x):
        offset, mask = self.parts(x)
        if self.dcn is None:  # chunk and recombine only
            return offset[:, :3] + mask[:, :3]
        return self.dcn(x, offset, mask)


def _c14_reference(model: DcnPack, x: torch.Tensor) -> np.ndarray:
    """torchvision.ops.deform_conv2d on the offset and mask the module predicts (the oracle)."""
    with torch.no_grad():
        offset, mask = model.parts(x)
        assert offset.abs().mean() > 0.5  # offsets of pixels, not a plain convolution
        d = model.dcn
        return torchvision.ops.deform_conv2d(
            x, offset, d.weight, d.bias, stride=d.stride, padding=d.padding, dilation=d.dilation, mask=mask
        ).numpy()


@pytest.fixture(scope="module")
def c14():
    cfg = case_config("c14")
    assert (cfg.C_in, cfg.kernel, cfg.offset_groups, cfg.mask) == (8, (3, 3), 1, True)
    model = DcnPack(cfg).eval()
    x = torch.randn(cfg.N, cfg.C_in, cfg.H, cfg.W, generator=torch.Generator().manual_seed(1))
    return cfg, model, x


def _assert_no_opset18_split(proto: onnx.ModelProto) -> None:
    for node in proto.graph.node:
        if node.op_type == "Split":
            assert all(a.name != "num_outputs" for a in node.attribute), node


# (opset or None for "no argument", dynamic). Each form (static, dynamic) once per default lowering: 17 for
# grid_sample (16 adds no op version between 16 and 17 that this model uses) and 14 for gather (onnx's version
# converter steps 18 -> 14 through 15's adapters; split_18_17 serves every target). test_c15_every_opset_with_defaults
# runs every opset's file in ONNX Runtime.
C14_RUNS = [(None, False), (14, False), (17, True), (14, True)]


@pytest.mark.parametrize(
    "opset, dynamic", C14_RUNS, ids=[f"{o or 'default'}-{'dyn' if d else 'static'}" for o, d in C14_RUNS]
)
def test_c14_dcn_pack_exports_through_dynamo(tmp_path, c14, opset, dynamic):
    cfg, model, x = c14
    kwargs = {} if opset is None else {"opset_version": opset}
    if dynamic:
        # N=2 in the example: torch.export specialises a dynamic dimension whose example is 1.
        x = torch.randn(2, cfg.C_in, cfg.H, cfg.W, generator=torch.Generator().manual_seed(2))
        kwargs["dynamic_shapes"] = ({0: Dim("N"), 2: Dim("H", min=4), 3: Dim("W", min=4)},)
    path = tmp_path / "c14.onnx"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = deform_onnx.export(model, (x,), path, **kwargs)
    assert _ours(caught) == [] and report.exporter == "dynamo" and report.fallback_reason is None
    assert report.opset == (opset or 17)
    split = [r for r in report.repairs if r.startswith("split_18_17 (Split opset 18->17")]
    assert split and "num_outputs" in split[0], report.repairs
    data = path.read_bytes()
    proto = onnx.load_from_string(data)
    assert default_opset(proto) == report.opset
    onnx.checker.check_model(proto, full_check=True)
    _assert_no_opset18_split(proto)
    assert_close(run_ort(data, {"x": x}), _c14_reference(model, x), what=f"c14 @{report.opset}")
    if dynamic:
        x2 = torch.randn(3, cfg.C_in, cfg.H + 5, cfg.W - 3, generator=torch.Generator().manual_seed(3))
        assert_close(run_ort(data, {"x": x2}), _c14_reference(model, x2), what=f"c14 @{report.opset} at 3x15x7")


def test_c14_chunk_without_deformable_layer(tmp_path, c14):
    """The same chunk pattern with no deformable layer at all (plain torch fails it the same way)."""
    cfg, _, x = c14
    model = DcnPack(cfg, deform=False).eval()
    path = tmp_path / "chunk.onnx"
    report = deform_onnx.export(model, (x,), path)
    assert report.exporter == "dynamo" and any(r.startswith("split_18_17") for r in report.repairs)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    _assert_no_opset18_split(proto)
    with torch.no_grad():
        want = model(x).numpy()
    assert_close(run_ort(proto.SerializeToString(), {"x": x}), want, what="chunk only")


def test_c14_unrepairable_conversion_falls_back(tmp_path, c14, monkeypatch):
    """Without the Split adapter the conversion is impossible: fallback=True warns (naming the op)
    and writes the TorchScript export, which matches; fallback=False raises naming dynamo=False."""
    cfg, model, x = c14
    monkeypatch.setattr(
        "deform_onnx.conversion.ADAPTERS", {k: v for k, v in adapters.ADAPTERS.items() if k[0] != "Split"}
    )
    path = tmp_path / "c14.onnx"
    with pytest.warns(
        UserWarning,
        match=r"cannot be converted down to opset 17: onnx's version converter has no adapter for Split.*falling back to the TorchScript exporter",
    ):
        report = deform_onnx.export(model, (x,), path)
    assert report.exporter == "torchscript" and "Split" in report.fallback_reason and report.repairs == []
    data = path.read_bytes()
    onnx.checker.check_model(onnx.load_from_string(data), full_check=True)
    assert_close(run_ort(data, {"x": x}), _c14_reference(model, x), what="c14 fallback")
    strict = tmp_path / "strict.onnx"
    with pytest.raises(deform_onnx.ExportError, match=r"no adapter for Split.*pass fallback=True or dynamo=False"):
        deform_onnx.export(model, (x,), strict, fallback=False)
    assert not strict.exists()


# -- c15: every opset 11..23 with default arguments ----------------------------------------------------


@pytest.fixture(scope="module")
def c15():
    cfg = case_config("c15")
    assert not cfg.mask and cfg.groups == 4 and cfg.offset_groups == 2
    model = DeformLayer(cfg)
    inputs = make_inputs(cfg)
    return model, inputs, reference(model, inputs)


@pytest.mark.parametrize("opset", range(11, 24))
def test_c15_every_opset_with_defaults(tmp_path, c15, opset):
    model, inputs, want = c15
    path = tmp_path / "c15.onnx"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = deform_onnx.export(model, tuple(inputs.values()), path, opset_version=opset)
    ours = _ours(caught)
    if opset < 14:
        assert report.exporter == "torchscript", report
        assert len(ours) == 1 and f"reaches opset 14 at the lowest, not {opset}" in ours[0], ours
        assert "falling back to the TorchScript exporter" in ours[0]
    else:
        assert report.exporter == "dynamo" and ours == [], ours
    data = path.read_bytes()
    proto = onnx.load_from_string(data)
    assert default_opset(proto) == opset
    onnx.checker.check_model(proto, full_check=True)
    assert_close(run_ort(data, inputs), want, what=f"c15 @{opset}")


def test_c15_no_fallback_at_11_names_dynamo_false(tmp_path, c15):
    model, inputs, _ = c15
    with pytest.raises(deform_onnx.ExportError, match=r"reaches opset 14 at the lowest, not 11.*dynamo=False") as info:
        deform_onnx.export(model, tuple(inputs.values()), tmp_path / "m.onnx", opset_version=11, fallback=False)
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


# -- c16: float16 models pass default verification; tolerance follows the dtype ---------------------


@pytest.fixture(scope="module")
def c16():
    cfg = case_config("c16").at(dtype=torch.float16)
    model = DeformLayer(cfg)  # DeformLayer casts to cfg.dtype: model.half()
    inputs = make_inputs(cfg)
    assert all(t.dtype == torch.float16 for t in inputs.values())
    return model, inputs, reference(model, inputs)


@pytest.mark.parametrize("method", ["auto", "grid_sample", "gather"])  # what the default opset (17) allows
def test_c16_float16_passes_default_verification(tmp_path, c16, method):
    model, inputs, want = c16
    path = tmp_path / "c16.onnx"
    report = deform_onnx.export(model, tuple(inputs.values()), path, method=method)
    assert report.exporter == "dynamo" and report.opset == 17
    (tol,) = report.tolerances.values()  # one output
    assert (tol.dtype, tol.rtol, tol.atol, tol.explicit) == ("float16", 1e-2, 1e-2, False)
    got = run_ort(path.read_bytes(), inputs)
    assert got.dtype == np.float16
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert np.all(diff <= tol.atol + tol.rtol * np.abs(want.astype(np.float64))), diff.max()
    # max_error is against the reference used: for float16, an upcast float32 copy (issue 18).
    (check,) = report.checks.values()
    with torch.no_grad():
        want32 = copy.deepcopy(model).float()(*(t.float() for t in inputs.values())).numpy().astype(np.float64)
    assert check.reference == "float32 copy"
    err = np.abs(got.astype(np.float64) - want32).max()
    assert report.max_error == pytest.approx(err)
    assert check.pytorch_error == pytest.approx(np.abs(want.astype(np.float64) - want32).max())
    # measured 9.7e-4 (auto, grid_sample) and 1.3e-3 (gather) on outputs of scale 3.0, about half a float16 ulp
    # (1.95e-3) there; PyTorch float16 itself 7.8e-3 off
    assert err <= 3e-3, err


def test_c16_explicit_tolerance_wins(tmp_path, c16):
    """rtol/atol given by the caller replace the dtype's default (float16 cannot meet 1e-6)."""
    model, inputs, _ = c16
    with pytest.raises(deform_onnx.VerificationError, match=r"atol=1e-06, rtol=0\.0, given\)"):
        deform_onnx.export(model, tuple(inputs.values()), tmp_path / "m.onnx", dynamo=False, rtol=0.0, atol=1e-6)
    assert list(tmp_path.iterdir()) == []


def test_float16_runtime_conv_is_one_ulp_from_pytorch(tmp_path):
    """The basis of the float16 default: ONNX Runtime's own float16 Conv (no deformable layer) differs
    from PyTorch's by at most one unit in the last place of the output (both accumulate in float32
    and round once), far inside the default; the deformable layer's extra roundings need the rest."""
    gen = torch.Generator().manual_seed(5)
    conv = torch.nn.Conv2d(16, 16, 3, padding=1)
    with torch.no_grad():  # unit-scale outputs, as the default assumes
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen) / 12.0)
        conv.bias.copy_(torch.randn(16, generator=gen))
    conv = conv.half().eval()
    x = torch.randn(1, 16, 16, 16, generator=gen).half()
    path = tmp_path / "conv16.onnx"
    report = deform_onnx.export(conv, (x,), path, dynamo=False, input_names=["x"])
    with torch.no_grad():
        want = conv(x).numpy()
    got = run_ort(path.read_bytes(), {"x": x})
    # One ulp of the larger of the two; near zero (float16 subnormals, spacing 6e-8) the float32
    # accumulators' own difference (~1e-7) spans a few subnormal steps.
    ulp = np.maximum(np.spacing(np.maximum(np.abs(want), np.abs(got))).astype(np.float64), 1e-6)
    assert np.all(np.abs(got.astype(np.float64) - want.astype(np.float64)) <= ulp)
    assert report.max_error <= 2**-10 * (1 + np.abs(want).max())  # one ulp at the largest output


def test_default_tolerances_per_dtype():
    from deform_onnx.exporting.verification import tolerance_for

    assert (tolerance_for(torch.float64).rtol, tolerance_for(np.float64).atol) == (1e-8, 1e-8)
    assert (tolerance_for(torch.float32).rtol, tolerance_for(torch.float32).atol) == (1e-4, 1e-4)
    assert (tolerance_for(torch.float16).rtol, tolerance_for("float16").atol) == (1e-2, 1e-2)
    assert tolerance_for(torch.bfloat16).atol == 8e-2
    assert tolerance_for(torch.int64).atol == 0.0 and tolerance_for(torch.bool).rtol == 0.0
    # float64 must catch a float32 cast hidden in the graph: tighter than float32's spacing at 1.
    assert tolerance_for(torch.float64).atol < np.finfo(np.float32).eps
    mixed = tolerance_for(torch.float16, atol=1e-3)
    assert (mixed.rtol, mixed.atol, mixed.explicit) == (1e-2, 1e-3, True)


# -- issue 11 item 3: float64 models with an ordinary Conv2d ------------------------------------------


def test_float64_conv_names_the_missing_kernel(tmp_path, c14):
    """ONNX Runtime's CPU provider has no float64 Conv: ExportError naming op and dtype and offering
    verify=False (not onnxruntime's own NOT_IMPLEMENTED text); verify=False writes a valid file."""
    cfg, model, x = c14
    model64, x64 = DcnPack(cfg).double().eval(), x.double()
    path = tmp_path / "m64.onnx"
    with pytest.raises(
        deform_onnx.ExportError, match=r"no float64 kernel for Conv \(opset \d+, node .*verify=False"
    ) as info:
        deform_onnx.export(model64, (x64,), path, method="gather")
    assert "NOT_IMPLEMENTED" not in str(info.value) and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []
    report = deform_onnx.export(model64, (x64,), path, method="gather", verify=False)
    assert report.exporter == "dynamo" and report.max_error is None and report.tolerances == {}
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.DOUBLE
