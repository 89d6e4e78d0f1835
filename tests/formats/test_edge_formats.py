"""export() to .pte / .tflite / .mlpackage: each file run in its own runtime against PyTorch before it is written.

One shared export per format of one small model holding the family: a DCNv2 neck (offsets and mask
from a conv), a 5-D optical-flow-style warp, the fused MSDA op and Deformable DETR's per-level
PyTorch core. Measured (torch 2.14.1, executorch 1.5.1, litert-torch 0.10.0): ExecuTorch <= 1.2e-6
(both sizes), LiteRT <= 1.2e-6; bound 1e-4 (float32 default).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F
import torchvision

import deform_onnx
from deform_onnx.core.errors import ExportError, VerificationError
from deform_onnx.ops.msda.op import MSDeformAttnCore, MSDeformAttnReference

SHAPES = [(4, 5), (2, 3)]


def _needs(module: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


class Family(torch.nn.Module):
    """DCNv2 + 5-D warp + MSDA (fused and per-level core) on small tensors."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.offsets = torch.nn.Conv2d(4, 27, 3, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(4, 4, 3, padding=1)
        self.fused = MSDeformAttnCore(SHAPES)
        self.core = MSDeformAttnReference(SHAPES)

    def forward(self, x, volume, flow, value, loc, attn):
        o = self.offsets(x)
        y = self.dcn(x, o[:, :18], o[:, 18:].sigmoid())
        warped = F.grid_sample(volume, flow, align_corners=False, padding_mode="border")
        return y, warped, self.fused(value, loc, attn) + self.core(value, loc, attn)


def _args(H: int = 6):
    gen = torch.Generator().manual_seed(1)
    S = sum(h * w for h, w in SHAPES)
    return (
        torch.randn(1, 4, H, 7, generator=gen),
        torch.randn(1, 2, 3, 4, 5, generator=gen),
        torch.rand(1, 3, 4, 5, 3, generator=gen) * 2.4 - 1.2,
        torch.randn(1, S, 2, 4, generator=gen),
        torch.rand(1, 5, 2, len(SHAPES), 2, 2, generator=gen),
        torch.rand(1, 5, 2, len(SHAPES), 2, generator=gen),
    )


@pytest.fixture(scope="module")
def pte(tmp_path_factory):
    path = tmp_path_factory.mktemp("pte") / "family.pte"
    H = torch.export.Dim("H", min=4, max=16)
    dynamic = ({2: H}, None, None, None, None, None)
    return path, deform_onnx.export(Family().eval(), _args(), path, dynamic_shapes=dynamic)


@pytest.fixture(scope="module")
def tflite(tmp_path_factory):
    path = tmp_path_factory.mktemp("tflite") / "family.tflite"
    return path, deform_onnx.export(Family().eval(), _args(), path)


@_needs("executorch")
def test_pte_runs_in_executorch_at_two_sizes(pte, capfd):
    path, report = pte
    assert path.is_file() and report.format == "executorch" and report.verified
    assert report.runtime == "ExecuTorch (XNNPACK)"
    assert len(report.checked_shapes) == 2 and report.checked_shapes[0] != report.checked_shapes[1]
    assert report.max_error is not None and report.max_error <= 1e-4
    assert not any("torchvision" in op or "grid_sampler_3d" in op for op in report.op_types)
    assert "cpuinfo" not in capfd.readouterr().err


@_needs("litert_torch")
def test_tflite_runs_in_litert(tflite):
    path, report = tflite
    assert path.is_file() and report.format == "litert" and report.verified and report.runtime == "LiteRT"
    assert report.max_error is not None and report.max_error <= 1e-4


@_needs("litert_torch")
def test_planted_fault_is_refused_and_not_written(tmp_path, monkeypatch):
    import deform_onnx.formats.decompose as decompose

    real = decompose.decompositions

    def shifted(method="auto", **kw):
        table = real(method, **kw)
        op = torch.ops.torchvision.deform_conv2d.default
        good = table[op]
        table[op] = lambda x, w, off, *rest: good(x, w, off + 0.5, *rest)
        return table

    monkeypatch.setattr(decompose, "decompositions", shifted)
    model = Family().eval()
    with pytest.raises(VerificationError, match="output"):
        deform_onnx.export(model, _args(), tmp_path / "bad.tflite")
    assert list(tmp_path.iterdir()) == []


@_needs("coremltools")
def test_mlpackage_is_converted_not_run(tmp_path):
    class Neck(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.offsets = torch.nn.Conv2d(4, 27, 3, padding=1)
            self.dcn = torchvision.ops.DeformConv2d(4, 4, 3, padding=1)

        def forward(self, x):
            o = self.offsets(x)
            return self.dcn(x, o[:, :18], o[:, 18:].sigmoid())

    report = deform_onnx.export(Neck().eval(), (torch.randn(1, 4, 6, 7),), tmp_path / "neck.mlpackage")
    assert report.verified is False and report.max_error is None and "not run" in report.notes[0]
    assert (tmp_path / "neck.mlpackage" / "Manifest.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["neck.mlpackage"]


@pytest.mark.parametrize(
    ("suffix", "setting", "value"),
    [
        (".pte", "opset_version", 17),
        (".tflite", "dynamic_shapes", {"x": {}}),
        (".pte", "dynamic_axes", {"x": {0: "n"}}),
    ],
)
def test_settings_that_mean_nothing_are_one_line(tmp_path, suffix, setting, value):
    class Boom(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("must not run")

    if importlib.util.find_spec("executorch" if suffix == ".pte" else "litert_torch") is None:
        pytest.skip("format not installed")
    with pytest.raises(ValueError, match=f"{setting}= is not taken") as info:
        deform_onnx.export(Boom(), (torch.zeros(1),), tmp_path / f"m{suffix}", **{setting: value})
    assert "\n" not in str(info.value) and list(tmp_path.iterdir()) == []


@_needs("litert_torch")
def test_uncovered_op_is_named(tmp_path):
    class Pool(torch.nn.Module):
        def forward(self, x, boxes):
            return torchvision.ops.roi_align(x, boxes, 2)

    args = (torch.randn(1, 2, 8, 8), torch.tensor([[0.0, 1.0, 1.0, 5.0, 6.0]]))
    with pytest.raises(ExportError, match=r"holds torchvision.roi_align.default, which no decomposition") as info:
        deform_onnx.export(Pool(), args, tmp_path / "m.tflite")
    assert "\n" not in str(info.value) and list(tmp_path.iterdir()) == []


@_needs("executorch")
def test_float16_pte_within_the_float16_rule(tmp_path):
    """Measured: 7.5e-4 against the float32 model (float16 rule). LiteRT: litert-torch 0.10.0's converter
    refuses float16 here ("failed to legalize operation 'tfl.pad'"), a one-line ExportError."""

    class Neck(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.offsets = torch.nn.Conv2d(4, 27, 3, padding=1)
            self.dcn = torchvision.ops.DeformConv2d(4, 4, 3, padding=1)

        def forward(self, x):
            o = self.offsets(x)
            return self.dcn(x, o[:, :18], o[:, 18:].sigmoid())

    report = deform_onnx.export(Neck().eval().half(), (torch.randn(1, 4, 6, 7).half(),), tmp_path / "neck.pte")
    assert report.verified and report.tolerances["output_0"].dtype == "float16"
