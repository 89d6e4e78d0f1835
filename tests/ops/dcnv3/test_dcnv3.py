"""Case c24: DCNv3 (InternImage) in PyTorch, exported and lowered; mmdeploy's ``TRTDCNv3`` node rewritten by ``lower``.

The expected values are always PyTorch's: :func:`deform_onnx.ops.dcnv3.dcnv3_core`
(and the :class:`~deform_onnx.ops.dcnv3.DCNv3` layer around it) on the same
tensors. The core itself is checked against a plain numpy transcription of
InternImage's CUDA kernel (``dcnv3_im2col_gpu_kernel``: unpadded input, pad
subtracted from the position, bilinear with corners outside the image
contributing 0, points x outer), so the formula is pinned independently of
``F.grid_sample``.

Configurations: c24 (the case), c24 with ``remove_center=True`` (kernel 3),
and group 4 with stride 2. Each export has dynamic H and W and is run at the
export size and at another size, on ONNX Runtime and OpenVINO, within 1e-4.
"""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from torch.export import Dim

import deform_onnx
from deform_onnx.ops.dcnv3 import DCNv3, dcnv3_core, dcnv4_core, kernel_points
from util import ATOL, load_cases, op_types

#: (exporter, opset, method) per configuration: c24 gets each method its opset allows (its dynamo gather file is
#: g4s2's below: each dynamo export costs what about six TorchScript ones do).
C24_EXPORTS = (
    [("torchscript", 11, m) for m in ("gather", "auto")]
    + [("torchscript", 16, m) for m in ("grid_sample", "gather", "auto")]
    + [("dynamo", 17, "grid_sample")]
    + [("torchscript", 17, "auto")]
    + [("dynamo", 20, "native")]
    + [("torchscript", 20, m) for m in ("grid_sample", "gather", "auto")]
)
#: The other configurations: each through TorchScript; g4s2 (group 4, stride 2: the symbolic output-size
#: arithmetic) through dynamo too, with the gather sampler (c24's dynamo file has the grid_sample one, so each
#: sampler runs on the dynamo path once). remove_center changes only the static list of kernel points (Python),
#: which its TorchScript export and test_core_matches_internimage_cuda_kernel check; a dynamo export of it (the
#: costliest step of this file) repeated the g4s2 rule.
OTHER_EXPORTS = {
    "remove_center": [("torchscript", 11, "gather")],
    "g4s2": [("torchscript", 11, "gather"), ("dynamo", 17, "gather")],
}
NEW_SIZE = (7, 13)  # H, W for the dynamic-size runs (the case is 9x11)


def _case() -> dict:
    return load_cases()["c24"]["input"]


def _configs() -> dict[str, dict]:
    c = _case()
    base = dict(
        channels=c["channels"],
        kernel=c["kernel"],
        stride=c["stride"],
        pad=c["pad"],
        dilation=c["dilation"],
        group=c["group"],
        offset_scale=c["offset_scale"],
        remove_center=c["remove_center"],
    )
    return {"c24": base, "remove_center": {**base, "remove_center": True}, "g4s2": {**base, "group": 4, "stride": 2}}


def _layer(cfg: dict, seed: int = 24) -> DCNv3:
    torch.manual_seed(seed)
    m = DCNv3(
        cfg["channels"],
        cfg["kernel"],
        cfg["stride"],
        cfg["pad"],
        cfg["dilation"],
        cfg["group"],
        cfg["offset_scale"],
        cfg["remove_center"],
    ).eval()
    with torch.no_grad():  # offsets of a few pixels, some points outside the image
        m.offset.weight.mul_(6.0)
        m.mask.weight.mul_(3.0)
    return m


def _input(H: int, W: int, C: int, seed: int) -> torch.Tensor:
    return torch.randn(_case()["N"], H, W, C, generator=torch.Generator().manual_seed(seed))


# -- the core against InternImage's CUDA kernel, transcribed ------------------------------------
def _cuda_reference(x, offset, mask, k, s, p, d, G, gc, scale, remove_center):
    """Numpy transcription of InternImage's ``dcnv3_im2col_gpu_kernel`` (square kernel, one stride/pad/dilation)."""
    x, offset, mask = (t.double().numpy() for t in (x, offset, mask))
    N, H, W, _ = x.shape
    _, Ho, Wo, _ = offset.shape
    centre = d * (k - 1) // 2
    taps = [(i, j) for i in range(k) for j in range(k) if not (remove_center and i == j == k // 2)]
    out = np.zeros((N, Ho, Wo, G * gc))
    for n in range(N):
        for h in range(Ho):
            for w in range(Wo):
                p0w = centre - p + w * s - centre * scale
                p0h = centre - p + h * s - centre * scale
                for g in range(G):
                    img = x[n, :, :, g * gc : (g + 1) * gc]
                    for q, (i, j) in enumerate(taps):
                        ow, oh = offset[n, h, w, (g * len(taps) + q) * 2 : (g * len(taps) + q) * 2 + 2]
                        lw, lh = p0w + (i * d + ow) * scale, p0h + (j * d + oh) * scale
                        if not (lh > -1 and lw > -1 and lh < H and lw < W):
                            continue
                        h0, w0 = int(np.floor(lh)), int(np.floor(lw))
                        val = np.zeros(gc)
                        for yy, wy in ((h0, 1 - (lh - h0)), (h0 + 1, lh - h0)):
                            for xx, wx in ((w0, 1 - (lw - w0)), (w0 + 1, lw - w0)):
                                if 0 <= yy < H and 0 <= xx < W:
                                    val += wy * wx * img[yy, xx]
                        out[n, h, w, g * gc : (g + 1) * gc] += mask[n, h, w, g * len(taps) + q] * val
    return out


@pytest.mark.parametrize("name, scale, dilation", [("c24", 1.0, 1), ("remove_center", 0.5, 1), ("g4s2", 1.0, 2)])
def test_core_matches_internimage_cuda_kernel(name, scale, dilation):
    cfg = _configs()[name]
    k, s, p, G = cfg["kernel"], cfg["stride"], cfg["pad"] + dilation - 1, cfg["group"]
    gc = cfg["channels"] // G
    P = len(kernel_points(k, k, dilation, dilation, cfg["remove_center"]))
    H, W = _case()["H"], _case()["W"]
    Ho, Wo = (H + 2 * p - dilation * (k - 1) - 1) // s + 1, (W + 2 * p - dilation * (k - 1) - 1) // s + 1
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, H, W, G * gc, generator=g)
    offset = torch.randn(1, Ho, Wo, G * P * 2, generator=g) * 3
    mask = torch.softmax(torch.randn(1, Ho, Wo, G, P, generator=g), -1).reshape(1, Ho, Wo, -1)
    got = dcnv3_core(x, offset, mask, k, k, s, s, p, p, dilation, dilation, G, gc, scale, cfg["remove_center"])
    want = _cuda_reference(x, offset, mask, k, s, p, dilation, G, gc, scale, cfg["remove_center"])
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-5)


class _DCNv4(torch.nn.Module):
    """DCNv4's core on ``(x, offset_mask)``: group 2, 3x3, stride 1, pad 1, padded offset_mask (as DCNv4's layer)."""

    def forward(self, x, offset_mask):
        return dcnv4_core(x, offset_mask, 3, 3, 1, 1, 1, 1, 1, 1, 2, x.shape[3] // 2, 1.0)


def _dcnv4_inputs(seed: int = 4):
    g = torch.Generator().manual_seed(seed)
    H, W = _case()["H"], _case()["W"]
    return torch.randn(1, H, W, 16, generator=g), torch.randn(1, H, W, 56, generator=g) * 2  # 2*9*3 = 54 -> 56


def test_dcnv4_core_matches_its_cuda_kernel_layout():
    """DCNv4's packed layout (per group: 2P offsets, then P weights; tail padding ignored), no softmax."""
    x, om = _dcnv4_inputs()
    packed = om[..., :54].reshape(1, 9, 11, 2, 27)
    offset, mask = packed[..., :18].reshape(1, 9, 11, 36), packed[..., 18:].reshape(1, 9, 11, 18)
    want = _cuda_reference(x, offset, mask, 3, 1, 1, 1, 2, 8, 1.0, False)
    # float32 against float64 with unnormalised weights (outputs up to ~20): the project's 1e-4.
    np.testing.assert_allclose(_DCNv4()(x, om).numpy(), want, rtol=0, atol=ATOL)
    with pytest.raises(ValueError, match="group \\* points \\* 3"):
        _DCNv4()(x, om[..., :50])


@pytest.mark.parametrize("opset, method", [(11, "gather"), (17, "grid_sample")])
def test_dcnv4_core_exports(tmp_path, opset, method):
    """The DCNv4 core exports (TorchScript) at 11 and 17 and matches PyTorch on ONNX Runtime at a new size."""
    x, om = _dcnv4_inputs()
    path = tmp_path / "dcnv4.onnx"
    deform_onnx.export(
        _DCNv4(),
        (x, om),
        path,
        opset_version=opset,
        method=method,
        dynamo=False,
        input_names=["x", "om"],
        dynamic_axes={"x": {1: "H", 2: "W"}, "om": {1: "H", 2: "W"}},
    )
    import onnxruntime as ort

    x2, om2 = torch.randn(1, *NEW_SIZE, 16), torch.randn(1, *NEW_SIZE, 56) * 2
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x2.numpy(), "om": om2.numpy()})[0]
    np.testing.assert_allclose(got, _DCNv4()(x2, om2).numpy(), rtol=0, atol=ATOL)


def test_core_and_layer_errors_name_the_fix():
    x = torch.zeros(1, 5, 5, 8)
    with pytest.raises(ValueError, match="group \\* group_channels"):
        dcnv3_core(x, torch.zeros(1, 5, 5, 36), torch.zeros(1, 5, 5, 18), 3, 3, 1, 1, 1, 1, 1, 1, 2, 3, 1.0)
    with pytest.raises(ValueError, match="square odd kernel"):
        kernel_points(2, 2, 1, 1, remove_center=True)
    with pytest.raises(ValueError, match="stride > 1"):
        DCNv3(16, kernel_size=3, stride=2, pad=2)


# -- exports ------------------------------------------------------------------------------------
def _export(model, x, path, exporter: str, opset: int, method: str):
    if exporter == "dynamo":
        kw = dict(dynamic_shapes=({1: Dim("H", min=5), 2: Dim("W", min=5)},))
    else:
        kw = dict(dynamic_axes={"x": {1: "H", 2: "W"}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no silent fallback to the other exporter
        return deform_onnx.export(
            model, (x,), path, opset_version=opset, method=method, dynamo=exporter == "dynamo", input_names=["x"], **kw
        )


@pytest.fixture(scope="session")
def dcnv3_exports(tmp_path_factory):
    """``{(config, exporter, opset, method): (model, path, report)}``: one export per entry."""
    folder = tmp_path_factory.mktemp("c24")
    out = {}
    for name, cfg in _configs().items():
        model = _layer(cfg)
        x = _input(_case()["H"], _case()["W"], cfg["channels"], seed=1)
        for exporter, opset, method in C24_EXPORTS if name == "c24" else OTHER_EXPORTS[name]:
            path = folder / f"{name}_{exporter}_{opset}_{method}.onnx"
            report = _export(model, x, path, exporter, opset, method)
            out[name, exporter, opset, method] = (model, path, report)
    return out


KEYS = [("c24", *e) for e in C24_EXPORTS] + [(n, *e) for n, exports in OTHER_EXPORTS.items() for e in exports]


def _run_ort(path, x: torch.Tensor) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x.numpy()})[0]


def _run_openvino(path, x: torch.Tensor) -> np.ndarray:
    from deform_onnx.runtimes import openvino as dov

    compiled = dov.compile(path, precision="f32")
    return compiled([x.numpy()])[0]


@pytest.mark.parametrize("key", KEYS, ids=["-".join(map(str, k)) for k in KEYS])
def test_export_matches_pytorch_on_onnxruntime_and_openvino(dcnv3_exports, key):
    """Valid file at the opset, the sampler the method asks for, and PyTorch's values at two sizes on both runtimes."""
    pytest.importorskip("openvino", reason="the OpenVINO comparison needs `pip install openvino`")
    name, exporter, opset, method = key
    model, path, report = dcnv3_exports[key]
    assert report.exporter == exporter and report.opset == opset
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    ops = op_types(proto)
    assert ("GridSample" in ops) == (method in ("native", "grid_sample") or (method == "auto" and opset >= 16)), ops
    assert all(n.domain in ("", "ai.onnx") for n in proto.graph.node)
    C = model.channels
    for H, W in ((_case()["H"], _case()["W"]), NEW_SIZE):
        x = _input(H, W, C, seed=H * W)
        with torch.no_grad():
            want = model(x).numpy()
        for runtime, run in (("onnxruntime", _run_ort), ("openvino", _run_openvino)):
            got = run(path, x)
            assert got.shape == want.shape, (runtime, H, W)
            np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=f"{key} {runtime} at {H}x{W}")


# -- lower: mmdeploy's TRTDCNv3 node ------------------------------------------------------------
def _trt_dcnv3_model(cfg: dict, scale: float, opset: int = 17, **extra_attrs) -> onnx.ModelProto:
    k, s, p, G = cfg["kernel"], cfg["stride"], cfg["pad"], cfg["group"]
    P = len(kernel_points(k, k, 1, 1, cfg["remove_center"]))
    C = cfg["channels"]
    attrs = dict(
        kernel_h=k,
        kernel_w=k,
        stride_h=s,
        stride_w=s,
        pad_h=p,
        pad_w=p,
        dilation_h=1,
        dilation_w=1,
        group=G,
        group_channels=C // G,
        offset_scale=scale,
        im2col_step=256,
        remove_center=int(cfg["remove_center"]),
        **extra_attrs,
    )
    node = helper.make_node("TRTDCNv3", ["x", "offset", "mask"], ["y"], domain="mmdeploy", name="dcnv3_0", **attrs)
    graph = helper.make_graph(
        [node],
        "trt_dcnv3",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "H", "W", C]),
            helper.make_tensor_value_info("offset", TensorProto.FLOAT, ["N", "Ho", "Wo", G * P * 2]),
            helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["N", "Ho", "Wo", G * P]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "Ho", "Wo", C])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("mmdeploy", 1)])


def _trt_inputs(cfg: dict, N: int, H: int, W: int, seed: int):
    k, s, p, G = cfg["kernel"], cfg["stride"], cfg["pad"], cfg["group"]
    P = len(kernel_points(k, k, 1, 1, cfg["remove_center"]))
    Ho, Wo = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, H, W, cfg["channels"], generator=g)
    offset = torch.randn(N, Ho, Wo, G * P * 2, generator=g) * 3
    mask = torch.softmax(torch.randn(N, Ho, Wo, G, P, generator=g), -1).reshape(N, Ho, Wo, -1)
    return x, offset, mask


@pytest.mark.parametrize("name", ["c24", "remove_center", "g4s2"])
@pytest.mark.parametrize("method, opset", [("gather", 11), ("auto", 17)])
def test_lower_trt_dcnv3_runs_on_plain_onnxruntime(name, method, opset):
    """A file with mmdeploy's plugin node, lowered, runs on ONNX Runtime and matches the PyTorch core (two sizes)."""
    import onnxruntime as ort

    cfg = _configs()[name]
    scale = 1.5
    lowered = deform_onnx.lower(_trt_dcnv3_model(cfg, scale), method=method, opset=opset)
    onnx.checker.check_model(lowered, full_check=True)
    assert {o.domain for o in lowered.opset_import} == {""}, "the mmdeploy domain is dropped"
    assert all(n.domain in ("", "ai.onnx") for n in lowered.graph.node)
    assert [o.version for o in lowered.opset_import] == [opset]
    assert ("GridSample" in op_types(lowered)) == (method == "auto")
    session = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    G, k = cfg["group"], cfg["kernel"]
    for N, H, W in ((1, _case()["H"], _case()["W"]), (2, *NEW_SIZE)):
        x, offset, mask = _trt_inputs(cfg, N, H, W, seed=N * H)
        want = dcnv3_core(
            x,
            offset,
            mask,
            k,
            k,
            cfg["stride"],
            cfg["stride"],
            cfg["pad"],
            cfg["pad"],
            1,
            1,
            G,
            cfg["channels"] // G,
            scale,
            cfg["remove_center"],
        ).numpy()
        got = session.run(None, {"x": x.numpy(), "offset": offset.numpy(), "mask": mask.numpy()})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=f"{name} {method}@{opset} N={N} {H}x{W}")


def test_lower_trt_dcnv3_reports_and_refuses_bad_nodes():
    cfg = _configs()["c24"]
    from deform_onnx.rewrite import lower_model
    from deform_onnx.rewrite.model_io import _from_proto

    _, report = lower_model(_from_proto(_trt_dcnv3_model(cfg, 1.0)), method="gather", opset=11)
    assert [(r.node, r.op, r.lowering) for r in report.replaced] == [("dcnv3_0", "mmdeploy::TRTDCNv3", "gather")]
    with pytest.raises(ValueError, match="dcnv3_0.*unknown attribute.*bogus"):
        deform_onnx.lower(_trt_dcnv3_model(cfg, 1.0, bogus=1), method="gather")
    even = _trt_dcnv3_model({**cfg, "remove_center": True}, 1.0)
    for a in even.graph.node[0].attribute:
        if a.name in ("kernel_h", "kernel_w"):
            a.i = 2
    with pytest.raises(ValueError, match="dcnv3_0.*square odd kernel"):
        deform_onnx.lower(even, method="gather")
    with pytest.raises(ValueError, match="opset"):
        deform_onnx.lower(_trt_dcnv3_model(cfg, 1.0), method="grid_sample", opset=11)


@pytest.mark.skipif(importlib.util.find_spec("coremltools") is None, reason="coremltools is not installed")
@pytest.mark.slow
def test_internimage_dcnv3_to_mlpackage(tmp_path):
    """InternImage's own pure-PyTorch DCNv3 (tests/real_code/internimage_style.py) to ``.mlpackage`` with defaults:
    converted, and the program converted matches the model in PyTorch (Core ML cannot run here)."""
    from real_code.internimage_style import SegNet

    torch.manual_seed(0)
    path = tmp_path / "segnet.mlpackage"
    report = deform_onnx.export(SegNet(channels=16).eval(), (torch.randn(1, 3, 16, 16),), path)
    assert (path / "Manifest.json").is_file() and report.verified is False
    assert any(n.startswith("the program converted") and "matched the model" in n for n in report.notes)
