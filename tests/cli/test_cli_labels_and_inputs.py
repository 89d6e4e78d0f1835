"""CLI leftovers of the walkthrough (issues 18/20/21): the row label, .pt2 inputs, one "nothing to lower" wording."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torchvision
from onnx import TensorProto, helper
from typer.testing import CliRunner

from deform_onnx.cli import app
from deform_onnx.rewrite import read_model
from deform_onnx.rewrite.lowerable import nothing_to_lower

runner = CliRunner()
WIDE = {"COLUMNS": "200"}  # rich wraps lines at the terminal width


def test_auto_labels_a_5d_grid_sample_row_by_the_gather_form_written(tmp_path):
    """-m auto at 17: the 5-D call takes the gather form; the row and the file name said grid_sample."""
    (tmp_path / "vol.py").write_text(
        "import torch.nn.functional as F, torch\n\n"
        "class Vol(torch.nn.Module):\n"
        "    def forward(self, x, g):\n"
        "        return F.grid_sample(x, g, align_corners=False)\n"
    )
    out = tmp_path / "out"
    args = ["export", f"{tmp_path / 'vol.py'}:Vol", "-s", "x=1,2,4,5,6", "-s", "g=1,3,4,5,3", "-m", "auto"]
    result = runner.invoke(app, [*args, "-o", str(out), "--repeat", "1"], env=WIDE)
    assert result.exit_code == 0, result.output
    (row,) = [line for line in result.stdout.splitlines() if " 17 " in line]
    assert row.split()[1] == "gather", row
    assert [p.name for p in out.iterdir()] == ["Vol_gather_op17.onnx"]
    assert "GridSample" not in {n.op_type for n in onnx.load(out / "Vol_gather_op17.onnx").graph.node}


def test_dynamic_rows_and_files_name_the_form_written(tmp_path):
    """--dynamic --opset 17: the grid_sample row's file holds no GridSample (the dynamic map takes the exact
    gather sampler). Both rows read "gather" and the grid_sample row's file kept its grid_sample name;
    now the form is written once, under its own name, and a note says why (the form: report.method)."""
    (tmp_path / "dcn.py").write_text(
        "import torch, torchvision\n\n"
        "class Dcn(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.offset = torch.nn.Conv2d(3, 18, 3, padding=1)\n"
        "        self.dcn = torchvision.ops.DeformConv2d(3, 4, 3, padding=1)\n\n"
        "    def forward(self, x):\n"
        "        return self.dcn(x, self.offset(x))\n"
    )
    out = tmp_path / "out"
    args = ["export", f"{tmp_path / 'dcn.py'}:Dcn", "-s", "1,3,16,16", "--dynamic", "--opset", "17"]
    result = runner.invoke(app, [*args, "-o", str(out), "--repeat", "1"], env=WIDE)
    assert result.exit_code == 0, result.output
    rows = [line.split()[1] for line in result.stdout.splitlines() if " 17 " in line]
    assert rows == ["gather"], result.stdout
    assert [p.name for p in out.iterdir()] == ["Dcn_gather_op17.onnx"]
    assert "grid_sample@17 wrote the gather form" in " ".join(result.output.split())


def test_lower_rows_name_the_form_written(tmp_path):
    """``lower -m grid_sample`` of a DeformConv with dynamic H, W writes the exact gather sampler (GridSample's
    precision depends on the size); its row said "grid_sample"."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 4, 3, 3], np.ones(144, np.float32))
    node = helper.make_node("DeformConv", ["x", "w", "offset"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "H", "W"]),
            helper.make_tensor_value_info("offset", TensorProto.FLOAT, [1, 18, "H", "W"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "H", "W"])],
        [weight],
    )
    src, out = tmp_path / "dcn.onnx", tmp_path / "low.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), src)
    result = runner.invoke(app, ["lower", str(src), "-o", str(out), "-m", "grid_sample"], env=WIDE)
    assert result.exit_code == 0, result.output
    (row,) = [line for line in result.stdout.splitlines() if "DeformConv" in line and "│" in line]
    assert row.split("│")[3].strip() == "gather", row
    assert "GridSample" not in {n.op_type for n in onnx.load(out).graph.node}


class Dcn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.offset = torch.nn.Conv2d(3, 18, 3, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(3, 4, 3, padding=1)

    def forward(self, image):
        return self.dcn(image, self.offset(image))


def test_pt2_archive_without_input_shape_takes_the_archives_example_inputs(tmp_path):
    """`export model.pt2` asked for --input-shape; the archive holds its example inputs (shape, dtype, name)."""
    torch.manual_seed(0)
    net, x = Dcn().eval(), torch.randn(1, 3, 11, 9)
    archive = tmp_path / "dcn.pt2"
    torch.export.save(torch.export.export(net, (x,)), str(archive))
    out = tmp_path / "dcn.onnx"
    result = runner.invoke(app, ["export", str(archive), "-m", "gather", "-o", str(out), "--repeat", "1"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "the archive's example inputs (image 1x3x11x9 float32)" in result.stdout, result.stdout
    (graph_input,) = onnx.load(out).graph.input
    assert graph_input.name == "image"
    assert [d.dim_value for d in graph_input.type.tensor_type.shape.dim] == [1, 3, 11, 9]
    (got,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"image": x.numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got, net(x).numpy(), rtol=1e-4, atol=1e-4)


def _file(path, nodes, inputs, outputs, opset=16) -> str:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), path)
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root, f = tmp_path_factory.mktemp("nothing"), TensorProto.FLOAT
    grid = _file(
        root / "gs.onnx",
        [helper.make_node("GridSample", ["x", "grid"], ["y"], align_corners=0)],
        [helper.make_tensor_value_info("x", f, [1, 2, 5, 5]), helper.make_tensor_value_info("grid", f, [1, 3, 3, 2])],
        [helper.make_tensor_value_info("y", f, [1, 2, 3, 3])],
    )
    plain = _file(
        root / "plain.onnx",
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", f, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("y", f, [1, 2, 5, 5])],
    )
    trt = _file(  # a DCNv2_TRT plugin (insert_dcn_plugin.py style: offset and mask split inside it): not lowered
        root / "trt.onnx",
        [helper.make_node("DCNv2_TRT", ["x", "om", "w", "b"], ["y"], stride=[1, 1], padding=[1, 1], dilation=[1, 1],
                          deformable_groups=1)],
        [helper.make_tensor_value_info(n, f, s) for n, s in
         (("x", [1, 2, 5, 5]), ("om", [1, 27, 5, 5]), ("w", [2, 2, 3, 3]), ("b", [2]))],
        [helper.make_tensor_value_info("y", f, [1, 2, 5, 5])],
    )  # fmt: skip
    return {"gs": grid, "plain": plain, "trt": trt}


@pytest.mark.parametrize("name", ["gs", "plain"])
def test_lower_and_check_word_nothing_to_lower_alike(files, tmp_path, name):
    """`lower` said "no deformable-convolution nodes found", `check` "no node that lower() replaces": one line now."""
    path = files[name]
    line = nothing_to_lower(read_model(path), "auto")
    assert ("'gather' would replace 1: GridSample" in line) == (name == "gs"), line
    lowered = runner.invoke(app, ["lower", path, "--method", "auto", "-o", str(tmp_path / "l.onnx")], env=WIDE)
    assert lowered.exit_code == 0 and line in lowered.stdout, lowered.output
    checked = runner.invoke(app, ["check", path, "--method", "auto", "-r", "ort", "--repeat", "0"], env=WIDE)
    assert checked.exit_code == 0 and f"{line}: lower() would not change" in checked.stdout, checked.output
    assert "deformable-convolution nodes found" not in lowered.stdout + checked.stdout


def test_nothing_to_lower_names_a_plugin_node_lower_does_not_know(files, tmp_path):
    """A file whose only deformable node is a plugin lower does not rewrite read "the file has no deformable
    convolution ... node": the line names that node and the nodes lower knows instead."""
    line = nothing_to_lower(read_model(files["trt"]), "auto")
    assert "DCNv2_TRT x1 are not ONNX ops" in line and "mmcv::MMCVModulatedDeformConv2d" in line, line
    assert "trt::ModulatedDeformConv2d" in line and "DCNv2," in line, line  # TensorRT's plugin nodes it does know
    assert "has no" not in line and "\n" not in line
    lowered = runner.invoke(app, ["lower", files["trt"], "-o", str(tmp_path / "l.onnx")], env={"COLUMNS": "400"})
    assert lowered.exit_code == 0 and line in lowered.stdout, lowered.output


def test_export_times_a_file_that_dropped_an_input_by_name(tmp_path):
    """The TorchScript exporter drops ``unused``; export() verified by name, but the CLI's timing run fed the
    file by position (``bias`` got ``unused``'s 1x4 tensor: "Invalid rank for input: bias"), failing the row."""
    (tmp_path / "skip.py").write_text(
        "import torch\n\n"
        "class Skips(torch.nn.Module):\n"
        "    def forward(self, x, unused, bias):\n"
        "        grid = x[:, :2].permute(0, 2, 3, 1).tanh()\n"
        "        return torch.nn.functional.grid_sample(x, grid, align_corners=False) + bias[None, :, None, None]\n"
    )
    out = tmp_path / "skip.onnx"
    shapes = ["-s", "x=1,3,8,8", "-s", "unused=1,4", "-s", "bias=3"]
    args = ["export", f"{tmp_path / 'skip.py'}:Skips", *shapes, "-m", "gather", "--exporter", "torchscript"]
    result = runner.invoke(app, [*args, "-o", str(out), "--repeat", "1"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert [i.name for i in onnx.load(out).graph.input] == ["x", "bias"]  # the exporter did drop it
