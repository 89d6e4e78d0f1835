"""``deform-onnx check``'s border input: every sample in the 1-pixel band, where border rules differ (issue 12).

OpenVINO's ``bilinear_interpolation_pad=false`` rule (its ONNX frontend's
mapping of ``org.openvinotoolkit::DeformableConv2D``; see
rewrite/openvino_node.py) differs from torchvision only in that band, so a
random input can hide it. Here a lowering that reproduces OpenVINO's rule
(the OpenVINO node lowered to standard ops) stands in for a runtime path:
``check`` must show it matching on a normal input and far off on the border
input. The reference is ONNX Runtime's DeformConv kernel, checked against
torchvision on the same tensors.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import torch
import torchvision
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

import deform_onnx
import deform_onnx.rewrite
from deform_onnx.cli import app
from deform_onnx.rewrite import read_model
from deform_onnx.runtimes.border import border_feeds
from util import assert_close

runner = CliRunner()
#: A 3x3 DCNv2 layer, no padding: N, C, H, W and Co.
N, C, H, W, CO = 1, 4, 9, 8, 6
HO, WO = H - 2, W - 2


def _graph_model(node: onnx.NodeProto, weight: np.ndarray, imports) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, C, H, W]),
              helper.make_tensor_value_info("offset", TensorProto.FLOAT, [N, 18, HO, WO]),
              helper.make_tensor_value_info("mask", TensorProto.FLOAT, [N, 9, HO, WO])]  # fmt: skip
    graph = helper.make_graph([node], "border", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "W")])  # fmt: skip
    return helper.make_model(graph, opset_imports=imports)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """``(deformconv_path, openvino_rule_model, weight)``: the same layer as ONNX DeformConv-19 (torchvision's
    rule) and as OpenVINO's node lowered to standard ops (OpenVINO's rule)."""
    weight = (torch.randn(CO, C, 3, 3, generator=torch.Generator().manual_seed(3)) / 6).numpy()
    dcn = helper.make_node("DeformConv", ["x", "W", "offset", "", "mask"], ["y"], kernel_shape=[3, 3])
    path = tmp_path_factory.mktemp("border") / "dcn.onnx"
    onnx.save(_graph_model(dcn, weight, [helper.make_opsetid("", 19)]), path)
    ov = helper.make_node("DeformableConv2D", ["x", "offset", "W", "mask"], ["y"], domain="org.openvinotoolkit",
                          strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], group=1, deformable_groups=1)  # fmt: skip
    ov_model = _graph_model(ov, weight, [helper.make_opsetid("", 17), helper.make_opsetid("org.openvinotoolkit", 1)])
    onnx.save(ov_model, path.parent / "ov.onnx")
    return path, deform_onnx.lower(ov_model, method="gather"), weight


def _inside_inputs(tmp_path) -> str:
    """An .npz whose samples all stay in [0, size - 1] (both border rules agree there)."""
    rng = np.random.default_rng(4)
    base_y = np.arange(HO)[None, :, None] + np.repeat(np.arange(3), 3)[:, None, None]  # [K, Ho, 1]
    base_x = np.arange(WO)[None, None, :] + np.tile(np.arange(3), 3)[:, None, None]  # [K, 1, Wo]
    py = np.clip(base_y + rng.uniform(-0.9, 0.9, (9, HO, WO)), 0, H - 1)
    px = np.clip(base_x + rng.uniform(-0.9, 0.9, (9, HO, WO)), 0, W - 1)
    offset = np.stack([py - base_y, px - base_x], axis=1).reshape(1, 18, HO, WO)
    path = tmp_path / "inside.npz"
    np.savez(path, x=rng.standard_normal((N, C, H, W)).astype(np.float32), offset=offset.astype(np.float32),
             mask=rng.random((N, 9, HO, WO)).astype(np.float32))  # fmt: skip
    return str(path)


def _rows(output: str, path: str) -> dict[str, float | str]:
    """``{"normal" | "border": max abs err}`` of the ONNX Runtime rows of ``path`` (a float, or the row's text)."""
    found = {}
    for line in output.splitlines():
        if line.startswith("│") and "onnxruntime" in line and path in line:
            label = "border" if "border input" in line else "normal"
            err = re.search(r"\d\.\d\de[+-]\d\d", line)
            found[label] = float(err.group()) if err else line
    return found


def test_border_offsets_put_every_sample_in_the_band(files):
    path, _, _ = files
    feeds = {"x": np.zeros((N, C, H, W), np.float32), "offset": np.zeros((N, 18, HO, WO), np.float32),
             "mask": np.full((N, 9, HO, WO), 0.5, np.float32)}  # fmt: skip
    border, why = border_feeds(read_model(path), feeds)
    assert why == "" and (border["mask"] == 1).all()
    off = border["offset"].reshape(9, 2, HO, WO)
    py = np.arange(HO)[None, :, None] + np.repeat(np.arange(3), 3)[:, None, None] + off[:, 0]
    px = np.arange(WO)[None, None, :] + np.tile(np.arange(3), 3)[:, None, None] + off[:, 1]
    in_band = lambda p, n: ((p > -1) & (p < 0)) | ((p > n - 1) & (p < n))  # noqa: E731
    assert (in_band(py, H) | in_band(px, W)).all()
    assert ((py > -1) & (py < H) & (px > -1) & (px < W)).all()  # no sample falls outside altogether


def test_check_shows_a_border_rule_mismatch_that_a_normal_input_hides(files, tmp_path, monkeypatch):
    path, openvino_rule, weight = files
    import onnx_ir as ir

    from deform_onnx.rewrite import LowerReport

    def lower_like_openvino(*args, **kw):  # the lower() path (the reference's lower(native) is left alone)
        return ir.from_proto(openvino_rule), LowerReport()

    monkeypatch.setattr(deform_onnx.rewrite, "lower_model", lower_like_openvino)
    result = runner.invoke(app, ["check", str(path), "--runtime", "ort", "--repeat", "0",
                                 "--inputs", _inside_inputs(tmp_path)])  # fmt: skip
    assert result.exit_code == 1, result.output
    rows = _rows(result.stdout, "lower(")
    assert rows["normal"] <= 1e-4, rows  # a normal input: the two rules agree inside the image
    assert rows["border"] > 0.1, rows  # the border input: OpenVINO's rule is far off (1.66 measured)
    assert result.stdout.splitlines()[-1].endswith(
        "exceeded the tolerance 0.0001 (onnxruntime lower(auto) (border input))"
    )

    # the reference of the border rows is torchvision's rule
    feeds = dict(np.load(_inside_inputs(tmp_path)))
    border, _ = border_feeds(read_model(path), feeds)
    want = torchvision.ops.deform_conv2d(*(torch.from_numpy(border[k]) for k in ("x", "offset")),
                                         torch.from_numpy(weight), mask=torch.from_numpy(border["mask"])).numpy()  # fmt: skip
    import onnxruntime as ort

    got = ort.InferenceSession(path.read_bytes(), providers=["CPUExecutionProvider"]).run(None, border)[0]
    assert_close(got, want, what="ORT DeformConv on the border input")


def test_check_border_rows_pass_for_torchvisions_rule(files):
    path, _, _ = files
    result = runner.invoke(app, ["check", str(path), "--runtime", "ort", "--repeat", "0"])
    assert result.exit_code == 0, result.output
    rows = _rows(result.stdout, "lower(")
    assert rows["border"] <= 1e-4 and rows["normal"] <= 1e-4, rows
    assert "border input, every sample in the 1-pixel band" in " ".join(result.stdout.split())


def test_check_of_an_openvino_node_file_takes_openvino_as_the_reference(files):
    """A file with OpenVINO's own DeformableConv2D had no reference (ONNX Runtime cannot run it, and DeformConv
    cannot express its border rule): every row was n/a. OpenVINO, the runtime that defines the node, is the
    reference now, and the lowered file (which reproduces OpenVINO's rule) matches it, on the border input too."""
    pytest.importorskip("openvino")
    ov_path = files[0].parent / "ov.onnx"
    result = runner.invoke(app, ["check", str(ov_path), "--runtime", "ort,openvino", "--repeat", "0"],
                           env={"COLUMNS": "300"})  # fmt: skip
    assert "reference = openvino as is" in result.stdout, result.output
    rows = _rows(result.stdout, "lower(")
    assert rows["border"] <= 1e-4 and rows["normal"] <= 1e-4, rows


def test_check_says_why_without_a_steerable_offset(tmp_path):
    """An offset computed inside the model cannot be steered: the border row says so."""
    weight = (torch.randn(CO, C, 3, 3, generator=torch.Generator().manual_seed(3)) / 6).numpy()
    pred = numpy_helper.from_array(np.zeros((18, C, 3, 3), np.float32), "P")
    nodes = [helper.make_node("Conv", ["x", "P"], ["offset"], pads=[0, 0, 0, 0]),
             helper.make_node("DeformConv", ["x", "W", "offset"], ["y"], kernel_shape=[3, 3])]  # fmt: skip
    graph = helper.make_graph(nodes, "inner", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N, C, H, W])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "W"), pred])  # fmt: skip
    path = tmp_path / "inner.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), path)
    result = runner.invoke(app, ["check", str(path), "--runtime", "ort", "--repeat", "0"])
    assert result.exit_code == 0, result.output
    assert "border input: none (no deformable node takes its offset as a graph input" in result.stdout
