"""Talking-head / motion-transfer models (tests/real_code/liveportrait_style.py, fomm_style.py): refusals that name
the op and the fix, and the 6-D keypoint heatmaps converted by LiteRT.

- ``target="ncnn"``: FOMM's ``source_image.unsqueeze(1).unsqueeze(1).repeat(...)`` is 6-D, which no ncnn blob
  holds; the refusal named a Conv3d weight (LivePortrait: ``hourglass.down.weight [8, 25, 3, 3, 3]``, a layer
  parameter in ncnn, not a blob) and no fix.
- FOMM's jacobians (``torch.inverse(kp_driving['jacobian'])``): neither exporter translates ``aten::linalg_inv``;
  the error now says so and how to write it instead.
- ``.pte``: LivePortrait's hourglass pools with ``nn.AvgPool3d``, which ExecuTorch's runtime has no kernel for;
  the refusal said "Failed to load method forward, error: 0x:14" and now names ``aten::avg_pool3d.out``.
- ``.tflite``: ``kp2gaussian``'s ``(mean_sub ** 2)`` over ``[B, K, D, H, W, 3]`` made a 6-D ``tfl.pow``, which
  LiteRT refuses; the litert writer squares by ``mul``.
- ``.tflite`` of a model returning a dict (LivePortrait's ``WarpingNetwork``): litert-torch names the outputs by key
  and LiteRT lists them sorted by name; they were compared with PyTorch's out of order (refused on a shape).
- A deployed runtime that converts the verified file wrong (onnx2tf on LivePortrait's 6-D motions, FOMM's
  generator, RT-DETRv2's discrete sampling): the refusal names what to do (for LiteRT, the litert-torch ``.tflite``).
- A dynamic H the model needs even (LivePortrait's pool-then-upsample hourglass, ``.pte`` with ``dynamic_shapes``):
  the refusal asked for a Dim range; it now says to declare the size as a multiple.
- LivePortrait in float16 for a deployed runtime (``target="mnn"``): the runtime check ran the model as it is and
  raised PyTorch's NotImplementedError (``avg_pool3d`` has no ``Half`` CPU kernel); it now takes the float32 copy
  as export's own check does.

Expected values are PyTorch's on the same tensors.
"""

from __future__ import annotations

import importlib.util

import onnx
import pytest
import torch

import deform_onnx
from deform_onnx.core.errors import ExportError
from deform_onnx.targets.rules import ncnn_blobs
from real_code import fomm_style as fo
from real_code import liveportrait_style as lp


def _onnx(model, args, path):
    torch.onnx.export(model, args, str(path), dynamo=False, opset_version=17)
    return onnx.load(str(path))


def test_ncnn_rule_names_a_value_and_the_fix(tmp_path):
    """FOMM's dense motion: the 6-D repeat is named (not a weight), with what to do."""
    model = fo.randomize(fo.Generator())
    (line,) = ncnn_blobs(_onnx(model, fo.example(), tmp_path / "fomm.onnx"))
    assert "weight" not in line.split("e.g.")[1].split()[0], line
    assert "fold those axes into one" in line and "target 'mnn'" in line, line


def test_ncnn_rule_takes_conv3d_weights(tmp_path):
    """A Conv3d on a batch-1 volume: its 5-D weight is the layer's parameter, its 5-D values fit after the 1."""
    model = lp.SameBlock3d(4, 4).eval()
    assert ncnn_blobs(_onnx(model, (torch.randn(1, 4, 2, 8, 8),), tmp_path / "c3.onnx")) == []


class Jacobians(torch.nn.Module):
    """FOMM's ``create_sparse_motions`` jacobian step: ``kp_source['jacobian'] @ inverse(kp_driving['jacobian'])``
    applied to the coordinate grid, then sampled."""

    def forward(self, image, jac_driving, jac_source):
        bs, _, h, w = image.shape
        grid = fo.make_coordinate_grid((h, w), type=image.type()).view(1, h, w, 2, 1)
        jacobian = torch.matmul(jac_source, torch.inverse(jac_driving)).view(bs, 1, 1, 2, 2)
        grid = torch.matmul(jacobian, grid).squeeze(-1)
        return torch.nn.functional.grid_sample(image, grid)


def test_inverse_refusal_names_the_fix(tmp_path):
    g = torch.Generator().manual_seed(0)
    args = (torch.rand(1, 2, 8, 8, generator=g), torch.eye(2) + 0.1 * torch.randn(1, 2, 2, generator=g),
            torch.eye(2) + 0.1 * torch.randn(1, 2, 2, generator=g))  # fmt: skip
    path = tmp_path / "jac.onnx"
    with pytest.raises(ExportError, match=r"aten::linalg_inv\w* has no ONNX translation.*closed form"):
        deform_onnx.export(Jacobians(), args, path)
    assert not path.exists()


class Pool3d(torch.nn.Module):
    """LivePortrait's ``DownBlock3d`` pooling (``nn.AvgPool3d(kernel_size=(1, 2, 2))``) after its 5-D warp."""

    def forward(self, volume, grid):
        return torch.nn.functional.avg_pool3d(torch.nn.functional.grid_sample(volume, grid, align_corners=False),
                                              kernel_size=(1, 2, 2))  # fmt: skip


@pytest.mark.skipif(importlib.util.find_spec("executorch") is None, reason="needs the executorch extra")
def test_pte_names_the_op_without_kernel(tmp_path):
    args = (torch.randn(1, 2, 2, 4, 4), torch.rand(1, 2, 4, 4, 3) * 2 - 1)
    path = tmp_path / "pool.pte"
    with pytest.raises(ExportError, match=r"no kernel for aten::avg_pool3d\.out.*export to \.onnx"):
        deform_onnx.export(Pool3d(), args, path)
    assert not path.exists()


class Heatmaps(torch.nn.Module):
    """LivePortrait's ``create_heatmap_representations`` core: ``kp2gaussian`` of driving minus source over a
    ``(2, 4, 4)`` volume (6-D ``mean_sub``)."""

    def forward(self, kp_driving, kp_source):
        return lp.kp2gaussian(kp_driving, (2, 4, 4), 0.01) - lp.kp2gaussian(kp_source, (2, 4, 4), 0.01)


@pytest.mark.skipif(importlib.util.find_spec("litert_torch") is None, reason="needs the litert extra")
def test_tflite_squares_6d_heatmaps(tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    _, kp_d, kp_s = lp.example(num_kp=2)
    path = tmp_path / "heat.tflite"
    deform_onnx.export(Heatmaps(), (kp_d, kp_s), path)
    it = Interpreter(model_path=str(path))
    it.allocate_tensors()
    for detail, value in zip(it.get_input_details(), (kp_d, kp_s), strict=True):
        it.set_tensor(detail["index"], value.numpy())
    it.invoke()
    got = torch.from_numpy(it.get_tensor(it.get_output_details()[0]["index"]))
    torch.testing.assert_close(got, Heatmaps()(kp_d, kp_s), rtol=0, atol=1e-5)


class WarpDict(torch.nn.Module):
    """``WarpingNetwork.forward``'s return: a dict whose keys are not in sorted order (LiteRT lists outputs by name)."""

    def forward(self, feature, grid):
        out = torch.nn.functional.grid_sample(feature, grid, align_corners=False)
        return {"occlusion_map": torch.sigmoid(out[:, :1]), "deformation": grid, "out": out}


@pytest.mark.skipif(importlib.util.find_spec("litert_torch") is None, reason="needs the litert extra")
def test_tflite_dict_outputs_in_model_order(tmp_path):
    """Refused before ("LiteRT shape (1, 4, 4, 2) != PyTorch shape (1, 1, 4, 4)"): written and matched now."""
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(1, 2, 4, 4, generator=g), torch.rand(1, 4, 4, 2, generator=g) * 2 - 1)
    report = deform_onnx.export(WarpDict(), args, tmp_path / "warp.tflite")
    assert report.max_error <= 1e-4


@pytest.mark.parametrize(
    ("runtime", "error", "says"),
    [
        ("tflite", "onnx2tf wrote no .tflite: ValueError: Dimensions must be equal", "'model.tflite'"),
        ("onnx2torch", "IndexError: tensors used as indices must be long", "export for another target"),
        ("mnn", "could not create the runtime's venv: pip failed", None),
    ],
)
def test_deployed_refusal_names_the_fix(monkeypatch, runtime, error, says):
    """A deployed runtime that fails on the verified file: the refusal says what to do (LivePortrait's warp through
    onnx2tf: the litert-torch .tflite), except where the runtime could not be set up (its line says why)."""
    from deform_onnx.core.errors import VerificationError
    from deform_onnx.exporting import deployed_check
    from deform_onnx.runtimes.deployed import check

    row = check.RuntimeRow(runtime=runtime, title=runtime, version="1", error=error)
    monkeypatch.setattr(check, "check_runtimes", lambda *a, **k: [row])
    with pytest.raises(VerificationError) as caught:
        deployed_check.check_deployed(b"", None, (), [runtime])
    message = str(caught.value)
    assert error in message and message.endswith("; nothing was written")
    assert (says in message) if says else ("another target" not in message and "model.tflite" not in message)


class PoolUp(torch.nn.Module):
    """LivePortrait's hourglass on a map: ``avg_pool`` by 2 then ``interpolate(scale_factor=2)`` added back, which
    holds only for an even size (torch.export's guard ``H == 2*(H // 2)``)."""

    def forward(self, x):
        return x + torch.nn.functional.interpolate(torch.nn.functional.avg_pool2d(x, 2), scale_factor=2)


def test_capture_refusal_names_the_multiple():
    """A .pte / .tflite with a dynamic H the model needs even: the refusal said "give its Dim the range the model
    allows", which no range gives; it now says to declare H as 2 * Dim."""
    from torch.export import Dim

    from deform_onnx.formats.capture import capture

    with pytest.raises(ExportError, match=r"multiple of 2: declare it as 2 \* torch\.export\.Dim"):
        capture(PoolUp(), (torch.randn(1, 2, 8, 8),), ({2: Dim("H", min=4, max=16)},), "ExecuTorch")
    h = Dim("h", min=2, max=8)
    assert capture(PoolUp(), (torch.randn(1, 2, 8, 8),), ({2: 2 * h},), "ExecuTorch").program is not None


def test_deployed_reference_of_a_half_model_without_cpu_kernel(tmp_path):
    """LivePortrait in float16 (``avg_pool3d`` has no ``Half`` kernel on CPU): export's own check takes the float32
    copy as reference, but the deployed-runtime check ran the model as it is and raised PyTorch's
    NotImplementedError ('"avg_pool3d_out_frame" not implemented for 'Half''); it now takes the same copy."""
    from deform_onnx.runtimes.deployed.check import reference_outputs

    model = Pool3d()
    args = (torch.randn(1, 2, 2, 4, 4).half(), (torch.rand(1, 2, 4, 4, 3) * 2 - 1).half())
    with pytest.raises(NotImplementedError):
        model(*args)
    path = tmp_path / "pool_half.onnx"
    deform_onnx.export(model, args, path)
    ((_, got),) = reference_outputs(path, {}, model, args)
    want = model(*(a.float() for a in args)).half().numpy()
    assert got.dtype == want.dtype and (got == want).all()
