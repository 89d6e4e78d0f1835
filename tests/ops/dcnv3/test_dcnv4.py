"""DCNv4 (FlashInternImage): the layer with DCNv4's own parameter names, and a FlashInternImage block exported.

Expected values are PyTorch's on the same tensors; the layer's sampling is pinned against the numpy
transcription of the CUDA kernel in test_dcnv3.py (``_cuda_reference``). The block
(tests/real_code/flash_internimage_style.py, written as OpenGVLab/DCNv4 writes it) exports with default
arguments at opset 11 and 17 (each rerun here in ONNX Runtime, the dynamic one at a non-square new size)
and to ``.pte`` (rerun in ExecuTorch).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
from test_dcnv3 import _cuda_reference

import deform_onnx
from deform_onnx.ops.dcnv3 import DCNv4
from real_code.flash_internimage_style import FlashBlock
from util import ATOL

#: The state_dict keys of OpenGVLab/DCNv4's ``DCNv4`` module (DCNv4_op/DCNv4/modules/dcnv4.py), per option.
DCNV4_KEYS = {"offset_mask.weight", "offset_mask.bias", "value_proj.weight", "value_proj.bias", "output_proj.weight"}
DW_KEYS = {"offset_mask_dw.weight", "offset_mask_dw.bias"}
CFS_KEYS = {"center_feature_scale_proj_weight", "center_feature_scale_proj_bias"}


def _layer(seed: int = 0, **kw) -> DCNv4:
    torch.manual_seed(seed)
    m = DCNv4(channels=16, group=2, **kw).eval()
    with torch.no_grad():  # DCNv4 initialises offset_mask to zero: offsets of a few pixels instead
        m.offset_mask.weight.normal_(0, 0.7)
        m.offset_mask.bias.normal_(0, 0.5)
    return m


class _OnMap(torch.nn.Module):
    """A DCNv4 layer called on a 4x5 map of tokens (``forward(x, shape)``, as FlashInternImage's blocks call it)."""

    def __init__(self, m: DCNv4):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x, (4, 5))


def test_state_dict_matches_dcnv4s_module():
    """A FlashInternImage checkpoint loads: the same keys and shapes (padded offset_mask width) as DCNv4's module."""
    assert set(DCNv4(64, group=4, output_bias=False).state_dict()) == DCNV4_KEYS
    full = DCNv4(64, group=4, dw_kernel_size=5, center_feature_scale=True).state_dict()
    assert set(full) == DCNV4_KEYS | {"output_proj.bias"} | DW_KEYS | CFS_KEYS
    assert full["offset_mask.weight"].shape == (112, 64)  # 4 groups * 9 points * 3 = 108 -> a multiple of 8
    assert set(DCNv4(32, group=2, without_pointwise=True, remove_center=True).state_dict()) == {
        "offset_mask.weight",
        "offset_mask.bias",
    }
    assert DCNv4(32, group=2, remove_center=True).offset_mask.out_features == 48  # 2 * 8 * 3


@pytest.mark.parametrize("remove_center", [False, True])
def test_layer_samples_as_the_cuda_kernel(remove_center):
    """Without the projections the layer is the CUDA kernel on ``(input, offset_mask(input))``, per group."""
    m = _layer(remove_center=remove_center, without_pointwise=True)
    H, W, C, G = 5, 7, 16, 2
    P = 8 if remove_center else 9
    x = torch.randn(1, H * W, C, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = m(x, (H, W)).reshape(1, H, W, C).numpy()
        om = m.offset_mask(x).reshape(1, H, W, -1)[..., : G * P * 3].reshape(1, H, W, G, 3 * P)
    offset, mask = om[..., : 2 * P].reshape(1, H, W, G * P * 2), om[..., 2 * P :].reshape(1, H, W, G * P)
    want = _cuda_reference(x.reshape(1, H, W, C), offset, mask, 3, 1, 1, 1, G, C // G, 1.0, remove_center)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


def test_center_feature_scale_and_projections():
    """value_proj -> core -> per-group sigmoid gate between the core's output and value_proj's -> output_proj."""
    m = _layer(dw_kernel_size=3, center_feature_scale=True)
    with torch.no_grad():
        m.center_feature_scale_proj_weight.normal_(0, 0.5)
        m.center_feature_scale_proj_bias.normal_(0, 0.5)
    H, W, C, G = 4, 6, 16, 2
    x = torch.randn(2, H * W, C, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        got = m(x, (H, W))
        v = m.value_proj(x).reshape(2, H, W, C)
        feat = m.offset_mask_dw(x.reshape(2, H, W, C).permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
        om = m.offset_mask(feat)[..., : G * 27].reshape(2, H, W, G, 27)
        core = torch.from_numpy(
            _cuda_reference(
                v,
                om[..., :18].reshape(2, H, W, 36),
                om[..., 18:].reshape(2, H, W, 18),
                3,
                1,
                1,
                1,
                G,
                C // G,
                1.0,
                False,
            )
        ).float()
        gate = torch.sigmoid(core @ m.center_feature_scale_proj_weight.T + m.center_feature_scale_proj_bias)
        gate = gate.repeat_interleave(C // G, dim=-1)
        want = m.output_proj((core * (1 - gate) + v * gate).reshape(2, H * W, C))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=ATOL)


def test_float16_layer_through_torchscript_at_opset_11(tmp_path):
    """A float16 DCNv4 layer (with its depthwise conv and centre feature scale) exports with the TorchScript
    exporter at opset 11 (gather) and matches the layer in PyTorch float16 in ONNX Runtime within the float16
    rule (``1e-2 * (1 + |torch|)``, tests/exporting/test_dtypes.py). The core's float16 ``torch.arange`` failed
    in TorchScript's ``Range`` symbolic ("tensor does not have a device": FlashInternImage with ``--dtype
    float16``)."""
    import onnxruntime as ort

    m = _layer(dw_kernel_size=3, center_feature_scale=True).half()

    x = torch.randn(1, 20, 16, generator=torch.Generator().manual_seed(7)).half()
    path = tmp_path / "dcnv4_f16.onnx"
    deform_onnx.export(_OnMap(m).eval(), (x,), path, opset_version=11, dynamo=False, method="gather", verify=False)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        want = _OnMap(m)(x).float().numpy()
    assert got.dtype == np.float16
    np.testing.assert_array_less(np.abs(got.astype(np.float32) - want), 1e-2 * (1 + np.abs(want)))


def test_ncnn_target_samples_each_group_over_the_batch(tmp_path):
    """Target ncnn (form ``"batch 1"``): the core samples each group with its own GridSample over the model's batch
    (ncnn has no axis for the folded ``[N * group, ...]`` batch: FlashInternImage was refused, rule ``GridSample
    batch 1``), and the file matches the layer in ONNX Runtime; the plain export folds the groups (what the rule
    refuses). FlashInternImage through ncnn itself: 5.7e-6 (measured here, ``deform-onnx export --target ncnn``)."""
    import onnx
    import onnxruntime as ort

    from deform_onnx.ops.grid_sample.rules import gridsample_batch_1

    m = _layer(dw_kernel_size=3, center_feature_scale=True)

    x = torch.randn(1, 20, 16, generator=torch.Generator().manual_seed(8))
    ncnn, plain = tmp_path / "ncnn.onnx", tmp_path / "plain.onnx"
    deform_onnx.export(_OnMap(m).eval(), (x,), ncnn, target="ncnn", verify=False)
    deform_onnx.export(_OnMap(m).eval(), (x,), plain, verify=False)
    written = onnx.load(str(ncnn))
    assert gridsample_batch_1(written) == []
    (refused,) = gridsample_batch_1(onnx.load(str(plain)))
    assert "deform_onnx.ops.dcnv3.dcnv3_core" in refused  # the batch is the model's groups: the fix named
    assert sum(n.op_type == "GridSample" for n in written.graph.node) == 2  # one per group
    session = ort.InferenceSession(str(ncnn), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        want = _OnMap(m)(x).numpy()
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0], want, rtol=0, atol=ATOL)


def test_ncnn_batch_rule_names_the_fix_for_an_image_batch():
    """Rule ``GridSample batch 1`` on a GridSample over the input's own batch of 2: the fix is batch 1, not the core."""
    from onnx import TensorProto, helper

    from deform_onnx.ops.grid_sample.rules import gridsample_batch_1

    node = helper.make_node("GridSample", ["x", "g"], ["y"], name="gs")
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 8, 8]),
            helper.make_tensor_value_info("g", TensorProto.FLOAT, [2, 8, 8, 2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8, 8])],
    )
    (refused,) = gridsample_batch_1(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert "gs (batch 2)" in refused and "export with batch 1" in refused and "dcnv3_core" not in refused


def test_errors_name_the_fix():
    with pytest.raises(ValueError, match="divisible by group"):
        DCNv4(30, group=4)
    with pytest.raises(ValueError, match="stride"):
        DCNv4(16, group=2, stride=2)
    with pytest.raises(ValueError, match="pad"):
        DCNv4(16, group=2, pad=0)


def _block() -> FlashBlock:
    torch.manual_seed(0)
    m = FlashBlock().eval()
    with torch.no_grad():
        for blk in m.blocks:
            blk.dcn.offset_mask.weight.normal_(0, 0.5)
            if blk.dcn.center_feature_scale:
                blk.dcn.center_feature_scale_proj_weight.normal_(0, 0.3)
    return m


def _image(H: int, W: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(1, 3, H, W, generator=torch.Generator().manual_seed(seed))


def _ort(path, x: torch.Tensor) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


@pytest.mark.parametrize("opset", [11, 17])
def test_flash_block_exports_with_default_arguments(tmp_path, opset):
    """The block exports at opset 11 (gather) and 17 with defaults; the file matches PyTorch in ONNX Runtime
    at the export size and (17: dynamic H and W) at a non-square size it was not exported at."""
    m, x = _block(), _image(32, 32)
    path = tmp_path / f"flash{opset}.onnx"
    dynamic = dict(input_names=["x"], dynamic_axes={"x": {2: "H", 3: "W"}}) if opset == 17 else {}
    report = deform_onnx.export(m, (x,), path, opset_version=opset, **dynamic)
    assert report.opset == opset
    for size in [x] + ([_image(24, 48, seed=1)] if dynamic else []):
        with torch.no_grad():
            want = m(size).numpy()
        got = _ort(path, size)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


@pytest.mark.skipif(importlib.util.find_spec("executorch") is None, reason="executorch is not installed")
def test_flash_block_to_pte(tmp_path):
    """``.pte`` with default arguments: written, and the file itself rerun in ExecuTorch matches PyTorch."""
    from deform_onnx.formats.executorch import ExecuTorchSession

    m, x = _block(), _image(24, 32)
    path = tmp_path / "flash.pte"
    report = deform_onnx.export(m, (x,), path)
    assert path.is_file() and report.verified
    with torch.no_grad():
        want = m(x).numpy()
    got = ExecuTorchSession(path.read_bytes()).run(None, {"input_0": x.numpy()})[0]
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=ATOL)


@pytest.mark.skipif(importlib.util.find_spec("coremltools") is None, reason="coremltools is not installed")
def test_flash_block_to_mlpackage(tmp_path):
    """``.mlpackage``: DCNv3/DCNv4 sampling stays at rank <= 5 (Core ML's limit), so coremltools converts it
    (Core ML cannot run on Linux: converted and validated, not run; the report says so)."""
    m, x = _block(), _image(16, 24)
    path = tmp_path / "flash.mlpackage"
    report = deform_onnx.export(m, (x,), path)
    assert path.is_dir() and not report.verified
    assert any("not run" in n for n in report.notes)
    assert any(n.startswith("the program converted") and "matched the model" in n for n in report.notes)


def _dcnv4_plugin_model(C: int, G: int, P: int, padded: int, scale: float, remove_center: int, **extra):
    """A file with NVIDIA DL4AGX's ``custom_op::DCNv4_Plugin`` node (AV-Solutions/dcnv4-trt/tools/export_onnx.py)."""
    from onnx import TensorProto, helper

    attrs = dict(kh=3, kw=3, sh=1, sw=1, ph=1, pw=1, dh=1, dw=1, group=G, group_channels=C // G, offscale=scale,
                 step=256, remove_center=remove_center, **extra)  # fmt: skip
    node = helper.make_node("DCNv4_Plugin", ["x", "offset_mask"], ["y"], domain="custom_op", name="dcnv4_0", **attrs)
    graph = helper.make_graph(
        [node],
        "dcnv4_plugin",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "H", "W", C]),
            helper.make_tensor_value_info("offset_mask", TensorProto.FLOAT, ["N", "H", "W", padded]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "H", "W", C])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom_op", 1)])


@pytest.mark.parametrize("remove_center", [0, 1])
@pytest.mark.parametrize(("method", "opset"), [("gather", 11), ("auto", 17)])
def test_lower_dcnv4_plugin_node_runs_on_plain_onnxruntime(method, opset, remove_center):
    """DCNv4's public TensorRT plugin node, lowered to standard ops, matches ``dcnv4_core`` (unnormalised weights,
    the padded offset_mask's tail ignored) at two sizes and batches."""
    import onnx
    import onnxruntime as ort

    from deform_onnx.ops.dcnv3 import dcnv4_core

    C, G, scale = 8, 2, 0.75
    P = 9 - remove_center
    padded = -(-G * P * 3 // 8) * 8 + 8  # DCNv4's width, padded to a multiple of 8, and wider still
    lowered = deform_onnx.lower(_dcnv4_plugin_model(C, G, P, padded, scale, remove_center), method=method, opset=opset)
    onnx.checker.check_model(lowered, full_check=True)
    assert all(n.domain in ("", "ai.onnx") for n in lowered.graph.node)
    session = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    for N, H, W in ((1, 5, 6), (2, 7, 4)):
        gen = torch.Generator().manual_seed(N * H)
        x = torch.randn(N, H, W, C, generator=gen)
        offset_mask = torch.randn(N, H, W, padded, generator=gen) * 2
        want = dcnv4_core(x, offset_mask, 3, 3, 1, 1, 1, 1, 1, 1, G, C // G, scale, bool(remove_center)).numpy()
        got = session.run(None, {"x": x.numpy(), "offset_mask": offset_mask.numpy()})[0]
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=f"{method}@{opset} {N}x{H}x{W}")


def test_lower_dcnv4_plugin_node_refuses_what_it_cannot_take():
    from deform_onnx.rewrite import lower_model
    from deform_onnx.rewrite.model_io import _from_proto

    _, report = lower_model(_from_proto(_dcnv4_plugin_model(8, 2, 9, 56, 1.0, 0)), method="gather", opset=11)
    assert [(r.node, r.op, r.lowering) for r in report.replaced] == [("dcnv4_0", "custom_op::DCNv4_Plugin", "gather")]
    with pytest.raises(ValueError, match=r"node dcnv4_0 \(custom_op::DCNv4_Plugin\): unknown attribute\(s\) softmax"):
        deform_onnx.lower(_dcnv4_plugin_model(8, 2, 9, 56, 1.0, 0, softmax=1), method="gather", opset=11)
    with pytest.raises(ValueError, match=r"offset_mask has 48 channels, fewer than group \* points \* 3 = 54"):
        deform_onnx.lower(_dcnv4_plugin_model(8, 2, 9, 48, 1.0, 0), method="gather", opset=11)
