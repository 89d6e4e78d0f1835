"""The GridSample forms of targets ``mnn``, ``ncnn`` and ``tvm``, as scripts/op_matrix.py measured them (issue 19 item 7).

``mnn``: ``F.grid_sample`` with padding reflection takes the gather form (rule
``no GridSample reflection``). MNN 3.6.1 runs GridSample ``padding_mode="reflection"`` wrong (bilinear and
nearest, both ``align_corners``: 2.1 to 3.8 off PyTorch on points outside the
image, measured with scripts/op_matrix.py), while its gather form matches. The
tests read the target's rule, check that the written graph has no GridSample
reflection node and matches PyTorch in ONNX Runtime, and that zeros/border
calls keep the GridSample form (the control: the same model for another target
keeps its reflection node, which the rule then finds).

``ncnn`` and ``tvm``: GridSample cubic and 5-D GridSample-20 run on ncnn (pnnx 20261020,
ncnn 1.0.20261020: within 5.6e-6 for every padding and ``align_corners``; on ncnn
their gather forms do not load: ``torch.eq``, ``torch.unbind``) and on TVM 0.27
(within 4.8e-7), so the targets keep them as GridSample (``Target.grid_sample``); ``mnn`` keeps 5-D
(1.3e-6; its GridSample cubic is 0.8 off, so cubic stays gather). 5-D needs
``opset_version=20`` (at the target's 17 the call takes the gather form).
"""

from __future__ import annotations

import io
import warnings

import onnx
import pytest
import torch
import torch.nn.functional as F

import deform_onnx
from deform_onnx.targets import resolve_target
from deform_onnx.targets.rules import violations
from util import ATOL, op_types, run_ort


class _Warp(torch.nn.Module):
    def __init__(self, padding_mode: str, mode: str = "bilinear"):
        super().__init__()
        self.padding_mode, self.mode = padding_mode, mode

    def forward(self, x, grid):
        return F.grid_sample(x, grid, mode=self.mode, padding_mode=self.padding_mode, align_corners=True)


@pytest.fixture(scope="module")
def inputs():
    g = torch.Generator().manual_seed(19)
    return torch.randn(1, 4, 9, 11, generator=g), torch.rand(1, 5, 7, 2, generator=g) * 2.4 - 1.2


def _export(padding_mode: str, inputs, mode: str = "bilinear", **kw) -> onnx.ModelProto:
    buf = io.BytesIO()
    kw.setdefault("verify_runtimes", ())  # a target's runtime (mnn, ...) does not convert the file here (issue 35)
    deform_onnx.export(_Warp(padding_mode, mode), inputs, buf, input_names=["x", "grid"], **kw)
    return onnx.load_from_string(buf.getvalue())


def _assert_matches(proto: onnx.ModelProto, inputs, padding_mode: str, mode: str = "bilinear") -> None:
    with torch.no_grad():
        want = _Warp(padding_mode, mode)(*inputs).numpy()
    got = run_ort(proto.SerializeToString(), {"x": inputs[0], "grid": inputs[1]})
    assert abs(got - want).max() <= ATOL


def _modes(proto: onnx.ModelProto) -> list[str]:
    return [
        a.s.decode()
        for n in proto.graph.node
        if n.op_type == "GridSample"
        for a in n.attribute
        if a.name == "padding_mode"
    ]


def test_mnn_rules_name_reflection():
    target = resolve_target("mnn")
    assert "no GridSample reflection" in target.rules
    assert "no GridSample reflection" in target.emit_forms
    assert "no GridSample reflection" not in resolve_target("openvino").rules


def test_mnn_reflection_takes_the_gather_form_and_matches(inputs):
    proto = _export("reflection", inputs, target="mnn")
    assert "GridSample" not in op_types(proto) and "Gather" in op_types(proto)
    _assert_matches(proto, inputs, "reflection")


@pytest.mark.parametrize("padding_mode", ["zeros", "border"])
def test_mnn_keeps_gridsample_for_other_paddings(inputs, padding_mode):
    assert _modes(_export(padding_mode, inputs, target="mnn")) == [padding_mode]


def test_the_rule_finds_a_reflection_node(inputs):
    control = _export("reflection", inputs, target="openvino")
    assert _modes(control) == ["reflection"]
    found = violations(control, resolve_target("mnn").rules)
    assert any(v.startswith("no GridSample reflection") for v in found), found
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = deform_onnx.lower(control, target="mnn")
    assert "GridSample" not in op_types(lowered)
    assert not violations(lowered, resolve_target("mnn").rules)


# -- ncnn, tvm: GridSample cubic and 5-D kept -------------------------------------------------------
def _gridsamples(proto: onnx.ModelProto) -> list[tuple[str, int]]:
    """(mode, input rank) of each GridSample node."""
    inferred = onnx.shape_inference.infer_shapes(proto).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in (*inferred.input, *inferred.value_info)}
    return [
        (next(a.s.decode() for a in n.attribute if a.name == "mode"), ranks[n.input[0]])
        for n in proto.graph.node
        if n.op_type == "GridSample"
    ]


@pytest.mark.parametrize("name", ["ncnn", "tvm"])
def test_rules_keep_cubic_and_5d(name):
    target = resolve_target(name)
    assert set(target.grid_sample) == {"5-D", "cubic"}
    assert "no GridSample cubic" not in target.rules and "no 5-D GridSample" not in target.rules
    assert "no GridSample cubic" not in target.emit_forms and "GridSample 4-D only" not in target.emit_forms


@pytest.mark.parametrize("name", ["ncnn", "tvm"])
def test_bicubic_is_gridsample_cubic(inputs, name):
    # method grid_sample: the target's measured pick (deform_onnx.targets.measured; tvm: gather) is every op's method
    proto = _export("border", inputs, mode="bicubic", target=name, method="grid_sample")
    assert _gridsamples(proto) == [("bicubic", 4)]
    _assert_matches(proto, inputs, "border", "bicubic")
    control = _export("border", inputs, mode="bicubic", target="tensorrt")
    assert "GridSample" not in op_types(control)


def test_ncnn_rule_needs_opset_20_for_5d():
    """The rule: ncnn's 5-D grid_sample needs opset 20 (its gather form, what lower opsets get, does not load)."""
    target = resolve_target("ncnn")
    assert target.opset == 17 and [(f, n) for f, n, _ in target.needs] == [("5-D grid_sample", 20)]


def test_ncnn_5d_default_picks_gridsample_20(inputs):
    """Default arguments: a 5-D call gets opset 20 (GridSample-20, matching PyTorch); a 4-D one keeps 17."""
    g = torch.Generator().manual_seed(29)
    volume = (torch.randn(1, 3, 4, 5, 6, generator=g), torch.rand(1, 3, 4, 2, 3, generator=g) * 2.2 - 1.1)
    proto = _export("zeros", volume, target="ncnn")
    assert next(o.version for o in proto.opset_import if o.domain == "") == 20 and _gridsamples(proto) == [
        ("linear", 5)
    ]
    _assert_matches(proto, volume, "zeros")
    flat = _export("zeros", inputs, target="ncnn")
    assert next(o.version for o in flat.opset_import if o.domain == "") == 17


@pytest.mark.parametrize("opset", [17, 19])
def test_ncnn_5d_below_opset_20_is_refused_naming_20(tmp_path, opset):
    """An explicit opset below 20: a one-line ExportError naming opset 20, before anything is written."""
    volume = (torch.randn(1, 3, 4, 5, 6), torch.rand(1, 3, 4, 2, 3) * 2 - 1)
    path = tmp_path / "no.onnx"
    with pytest.raises(deform_onnx.ExportError, match="opset 20") as info:
        deform_onnx.export(_Warp("zeros"), volume, path, target="ncnn", opset_version=opset)
    assert "\n" not in str(info.value) and not path.exists()


def test_mnn_5d_is_gridsample_20_at_opset_20_reflection_gather():
    assert "5-D" in resolve_target("mnn").grid_sample
    g = torch.Generator().manual_seed(29)
    volume = (torch.randn(1, 3, 4, 5, 6, generator=g), torch.rand(1, 3, 4, 2, 3, generator=g) * 2.2 - 1.1)
    assert _gridsamples(_export("border", volume, target="mnn", opset_version=20)) == [("linear", 5)]
    reflected = _export("reflection", volume, target="mnn", opset_version=20)
    assert "GridSample" not in op_types(reflected)
    _assert_matches(reflected, volume, "reflection")


def test_tflite_bicubic_form_has_no_value_over_4d(inputs):
    """onnx2tf misconverted the 16-tap form's 5-D outer-product broadcast (measured); the form stays within 4-D."""
    proto = _export("zeros", inputs, mode="bicubic", target="tflite")
    assert "GridSample" not in op_types(proto)
    inferred = onnx.shape_inference.infer_shapes(proto).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in inferred.value_info}
    assert ranks and max(ranks.values()) <= 4, {k: r for k, r in ranks.items() if r > 4}
    _assert_matches(proto, inputs, "zeros", "bicubic")
