"""Cases c02, c05, c10 and c13 of ../shared/cases/cases.json (the dynamo exporter and ``export``).

The reference is always torchvision (``DeformConv2d`` / ``deform_conv2d``)
evaluated in PyTorch on the same tensors; max abs error <= 1e-4.
"""

from __future__ import annotations

import io
import warnings

import onnx
import onnxruntime as ort
import pytest
import torch
import torchvision
from torch.export import Dim

import deform_onnx
from util import (
    DeformLayer,
    assert_close,
    assert_lowering,
    case_config,
    default_opset,
    load_cases,
    make_inputs,
    op_types,
    reference,
    run_ort,
)

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")


def _layer(case_id: str):
    cfg = case_config(case_id)
    model = DeformLayer(cfg)
    inputs = make_inputs(cfg)
    return cfg, model, inputs, reference(model, inputs)


# -- c02: translation_table() with torch.onnx.export(dynamo=True) at 17, 18, 20 -------------


@pytest.fixture(scope="module")
def c02():
    return _layer("c02")


def test_c02_case_is_what_the_test_exports(c02):
    cfg, model, _, _ = c02
    assert load_cases()["c02"]["input"]["bias"] == "zeros"
    assert cfg.mask and cfg.padding == (0, 0) and cfg.C_in == 16 and (cfg.H, cfg.W) == (20, 20)
    assert model.conv.bias is not None and not model.conv.bias.any()  # present, all zeros


C02_RUNS = [
    pytest.param(opset, method, pass_opset, id=f"op{opset}-{method}-{'opset' if pass_opset else 'no-opset'}")
    for opset in (17, 18, 20)
    for method in ("auto", "grid_sample", "gather", "native")
    for pass_opset in (True, False)
    if (method != "native" or opset >= 19) and (pass_opset or (method == "auto" and opset != 18))
]


@pytest.mark.parametrize("opset, method, pass_opset", C02_RUNS)
def test_c02_direct_dynamo(c02, opset, method, pass_opset):
    """``translation_table(method, opset)`` (and plain ``translation_table()``) in torch's own export call."""
    _, model, inputs, want = c02
    table = deform_onnx.translation_table(method, opset) if pass_opset else deform_onnx.translation_table()
    program = torch.onnx.export(
        model,
        tuple(inputs.values()),
        dynamo=True,
        opset_version=opset,
        input_names=list(inputs),
        custom_translation_table=table,
        verbose=False,
    )
    proto = program.model_proto
    assert default_opset(proto) == opset
    onnx.checker.check_model(proto, full_check=True)
    # Without an opset the table lowers for the build opset (max(18, requested)).
    assert_lowering(proto, method, opset if pass_opset else max(18, opset))
    assert_close(run_ort(proto.SerializeToString(), inputs), want, what=f"c02 {method}@{opset}")


# -- c05: groups 2, offset groups 3, stride 2, N=2, through both exporters, every method ------

C05_RUNS = [
    ("dynamo", "auto", 17),
    ("dynamo", "native", 19),
    ("dynamo", "grid_sample", 16),
    ("dynamo", "gather", 14),
    ("torchscript", "auto", 11),
    ("torchscript", "native", 20),
    ("torchscript", "grid_sample", 18),
    ("torchscript", "gather", 13),
]


@pytest.fixture(scope="module")
def c05():
    return _layer("c05")


@pytest.mark.parametrize("exporter, method, opset", C05_RUNS, ids=[f"{e}-{m}-op{o}" for e, m, o in C05_RUNS])
def test_c05(c05, exporter, method, opset):
    cfg, model, inputs, want = c05
    assert (cfg.N, cfg.C_in, cfg.C_out, cfg.H, cfg.W) == (2, 12, 6, 17, 13)
    assert (cfg.stride, cfg.groups, cfg.offset_groups, cfg.mask, cfg.bias) == ((2, 2), 2, 3, True, True)
    buf = io.BytesIO()
    report = deform_onnx.export(
        model,
        tuple(inputs.values()),
        buf,
        opset_version=opset,
        method=method,
        dynamo=exporter == "dynamo",
        input_names=list(inputs),
        output_names=["y"],
    )
    assert report.exporter == exporter
    proto = onnx.load_from_string(buf.getvalue())
    assert default_opset(proto) == opset
    onnx.checker.check_model(proto, full_check=True)
    assert_lowering(proto, method, opset)
    assert_close(run_ort(buf.getvalue(), inputs), want, what=f"c05 {exporter} {method}@{opset}")


# -- c10: plain dynamo export at 17/18 is invalid; deform_onnx.export is not ---------------------


@pytest.fixture(scope="module")
def c10():
    return _layer("c10")


@pytest.mark.parametrize("opset", [17, 18])
def test_c10_plain_torch_export_is_invalid(c10, opset):
    """torch's built-in translation writes DeformConv (opset 19) into an opset-17/18 model, silently."""
    _, model, inputs, _ = c10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(model, tuple(inputs.values()), dynamo=True, opset_version=opset, verbose=False)
    proto = program.model_proto
    assert default_opset(proto) == opset
    assert "DeformConv" in op_types(proto)
    with pytest.raises(
        onnx.checker.ValidationError, match=f"No Op registered for DeformConv with domain_version of {opset}"
    ):
        onnx.checker.check_model(proto, full_check=True)
    with pytest.raises(Exception, match="No Op registered for DeformConv"):
        ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("opset", [17, 18])
def test_c10_deform_onnx_export_is_valid(tmp_path, c10, opset):
    _, model, inputs, want = c10
    path = tmp_path / "c10.onnx"
    report = deform_onnx.export(
        model, tuple(inputs.values()), path, dynamo=True, opset_version=opset, input_names=list(inputs)
    )
    assert report.exporter == "dynamo" and report.opset == opset
    data = path.read_bytes()
    proto = onnx.load_from_string(data)
    assert default_opset(proto) == opset
    onnx.checker.check_model(proto, full_check=True)
    assert "DeformConv" not in op_types(proto)
    assert_close(run_ort(data, inputs), want, what=f"c10 deform_onnx.export@{opset}")


# -- c13: a data-dependent guard on the offsets: torch.export cannot capture it ---------------------


class GuardedAlign(torch.nn.Module):
    """Video-restoration style alignment: offset and mask from a conv over a second feature map,
    a data-dependent sanity check on the offsets, then DCNv2 (``DeformConv2d`` with a mask)."""

    def __init__(self, cfg):
        super().__init__()
        self.offset_groups = cfg.offset_groups
        taps = cfg.kernel[0] * cfg.kernel[1]
        self.predict = torch.nn.Conv2d(cfg.C_in, 3 * cfg.offset_groups * taps, 3, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(
            cfg.C_in,
            cfg.C_out,
            cfg.kernel,
            stride=cfg.stride,
            padding=cfg.padding,
            dilation=cfg.dilation,
            groups=cfg.groups,
            bias=cfg.bias is not False,
        )
        self.split = 2 * cfg.offset_groups * taps
        self.scale = cfg.offset_scale

    def forward(self, x, feat):
        out = self.predict(feat)
        offset = out[:, : self.split] * self.scale
        mask = torch.sigmoid(out[:, self.split :])
        if offset.abs().mean() > 50:
            warnings.warn("offset mean is larger than 50 pixels: alignment is likely broken")  # noqa: B028 (the model code as written)
        return self.dcn(x, offset, mask)


@pytest.fixture(scope="module")
def c13():
    cfg = case_config("c13")
    torch.manual_seed(13)
    model = GuardedAlign(cfg).eval()
    gen = torch.Generator().manual_seed(14)
    x = torch.randn(cfg.N, cfg.C_in, cfg.H, cfg.W, generator=gen)
    feat = torch.randn(cfg.N, cfg.C_in, cfg.H, cfg.W, generator=gen)
    return cfg, model, x, feat


def _c13_reference(model, x, feat):
    """torchvision.ops.deform_conv2d on the offset and mask the module predicts (the oracle)."""
    with torch.no_grad():
        out = model.predict(feat)
        offset = out[:, : model.split] * model.scale
        mask = torch.sigmoid(out[:, model.split :])
        assert offset.abs().mean() > 0.5  # real offsets, not a plain convolution
        return torchvision.ops.deform_conv2d(
            x,
            offset,
            model.dcn.weight,
            model.dcn.bias,
            stride=model.dcn.stride,
            padding=model.dcn.padding,
            dilation=model.dcn.dilation,
            mask=mask,
        ).numpy()


@pytest.fixture(scope="module")
def c13_fallback(c13, tmp_path_factory):
    """One dynamo export of the c13 module: it falls back to TorchScript."""
    _, model, x, feat = c13
    path = tmp_path_factory.mktemp("c13") / "c13.onnx"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = deform_onnx.export(model, (x, feat), path, dynamo=True, output_names=["y"])
    return report, path.read_bytes(), caught


def test_c13_falls_back_with_a_warning_naming_the_cause(c13_fallback):
    report, _, caught = c13_fallback
    ours = [w for w in caught if str(w.message).startswith("deform_onnx:")]
    assert len(ours) == 1, [str(w.message) for w in caught]
    message = str(ours[0].message)
    assert ours[0].category is UserWarning
    assert "torch.export could not capture the model" in message
    assert "data-dependent" in message and "falling back to the TorchScript exporter" in message
    assert ours[0].filename == __file__  # points at the caller of export()
    assert report.exporter == "torchscript"
    assert "data-dependent" in report.fallback_reason
    # The reason names the user's line, not only torch's symbolic guard text.
    assert "test_cases_dynamo.py" in report.fallback_reason
    assert "offset.abs().mean() > 50" in report.fallback_reason


def test_c13_fallback_matches_torchvision(c13, c13_fallback):
    _, model, x, feat = c13
    report, data, _ = c13_fallback
    proto = onnx.load_from_string(data)
    assert default_opset(proto) == report.opset == 17
    onnx.checker.check_model(proto, full_check=True)
    assert "DeformConv" not in op_types(proto)
    names = [i.name for i in proto.graph.input]
    assert names == ["x", "feat"]  # forward's names, as the dynamo exporter would use
    assert_close(run_ort(data, {"x": x, "feat": feat}), _c13_reference(model, x, feat), what="c13 fallback")
    assert report.max_error <= 1e-4


def test_c13_no_fallback_raises_clear_error(tmp_path, c13, capfd):
    _, model, x, feat = c13
    path = tmp_path / "c13.onnx"
    with pytest.raises(deform_onnx.ExportError) as info:
        deform_onnx.export(model, (x, feat), path, dynamo=True, fallback=False)
    message = str(info.value)
    assert message.startswith("torch.export could not capture the model (GuardOnDataDependentSymNode")
    assert "offset.abs().mean() > 50" in message
    assert "pass fallback=True or dynamo=False" in message
    assert len(message) < 600, message  # a sentence, not torch's multi-page report
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no chained torch.export traceback
    assert "Traceback" not in capfd.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_c13_fallback_beyond_torchscript_opsets_raises(tmp_path, c13):
    """At opset 21 the TorchScript fallback is impossible: say so, write nothing."""
    _, model, x, feat = c13
    with pytest.raises(deform_onnx.ExportError, match=r"TorchScript fallback supports opset <= 20, not 21"):
        deform_onnx.export(model, (x, feat), tmp_path / "c13.onnx", dynamo=True, opset_version=21)
    assert list(tmp_path.iterdir()) == []


def test_c13_fallback_keeps_dynamic_shapes(tmp_path, c13):
    """dynamic_shapes (torch.export.Dim) become TorchScript dynamic_axes in the fallback."""
    cfg, model, x, feat = c13
    N, H, W = Dim("N"), Dim("H"), Dim("W")
    path = tmp_path / "c13.onnx"
    with pytest.warns(UserWarning, match="falling back to the TorchScript exporter"):
        report = deform_onnx.export(
            model,
            (x, feat),
            path,
            dynamo=True,
            opset_version=16,
            method="gather",
            dynamic_shapes={"x": {0: N, 2: H, 3: W}, "feat": {0: N, 2: H, 3: W}},
        )
    assert report.exporter == "torchscript" and report.method == "gather"
    data = path.read_bytes()
    gen = torch.Generator().manual_seed(15)
    for n, h, w in [(2, 11, 19), (1, 7, 5)]:
        x2 = torch.randn(n, cfg.C_in, h, w, generator=gen)
        f2 = torch.randn(n, cfg.C_in, h, w, generator=gen)
        assert_close(run_ort(data, {"x": x2, "feat": f2}), _c13_reference(model, x2, f2), what=f"c13 at {n}x{h}x{w}")
