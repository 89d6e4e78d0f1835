"""Exit codes and messages of issue 11 item 4: each user error is exit code 2 with one line naming it.

(``check --input-shape x=1,3`` is in tests/test_cli_check.py; the raw
``register()`` IR dump and the dynamo opset-11 suggestion in
tests/test_cli_models.py.)
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

from deform_onnx.cli import app
from models import two_node_model

runner = CliRunner()

USER_MODULE = textwrap.dedent(
    """
    import torch, torchvision

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.predict = torch.nn.Conv2d(3, 27, 3, padding=1)
            self.dcn = torchvision.ops.DeformConv2d(3, 8, 3, padding=1)

        def forward(self, x):
            p = self.predict(x)
            return self.dcn(x, p[:, :18], torch.sigmoid(p[:, 18:]))
    """
)


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def one_line_error(result, *expected: str) -> str:
    """Exit code 2 and exactly one ``error: ...`` line on stderr containing each of ``expected``."""
    assert result.exit_code == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def unwritable_folder(tmp_path: Path) -> Path:
    """An existing folder this process cannot create files in.

    As root, permission bits do not stop writes: sysfs (``/sys``) refuses to
    create files for everyone, root included.
    """
    if os.geteuid() == 0:
        assert Path("/sys").is_dir(), "premise: Linux sysfs"
        return Path("/sys")
    folder = tmp_path / "readonly"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


@pytest.fixture
def deform_file(tmp_path):
    path = tmp_path / "dcn.onnx"
    onnx.save(two_node_model(batch=1), str(path))
    return path


@pytest.fixture
def conv_relu(tmp_path):
    """A plain Conv + Relu model at opset 17 (Relu has no 14 -> 13 adapter in onnx's version converter)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w],
    )
    path = tmp_path / "conv_relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


# -- output folders -------------------------------------------------------------------------------
def test_export_to_unwritable_folder_is_exit_2_not_a_failed_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "user_models.py").write_text(USER_MODULE)
    folder = unwritable_folder(tmp_path)
    args = ["export", "user_models.py:Net", "-s", "1,3,8,8", "--method", "gather", "--opset", "11"]
    one_line_error(invoke(*args, "-o", folder), f"cannot write to the output folder {folder}")
    one_line_error(invoke(*args, "-o", folder / "net.onnx"), f"cannot write to the output folder {folder}")


def test_lower_to_unwritable_folder(deform_file, tmp_path):
    folder = unwritable_folder(tmp_path)
    one_line_error(
        invoke("lower", deform_file, "-o", folder / "out.onnx"), f"cannot write to the output folder {folder}"
    )


def test_lower_into_a_file_as_folder(deform_file, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    line = one_line_error(invoke("lower", deform_file, "-o", afile / "out.onnx"), f"{afile} is a file, not a folder")
    assert "Errno" not in line


def test_lower_and_export_agree_on_a_missing_folder(deform_file, tmp_path, monkeypatch):
    """Both refuse ``-o missing/out.onnx`` with the same words (export creates only -o FOLDER)."""
    missing = tmp_path / "missing"
    lower_line = one_line_error(
        invoke("lower", deform_file, "-o", missing / "out.onnx"), "does not exist; create it first"
    )
    monkeypatch.chdir(tmp_path)
    (tmp_path / "user_models.py").write_text(USER_MODULE)
    export_line = one_line_error(
        invoke("export", "user_models.py:Net", "-s", "1,3,8,8", "--method", "gather", "-o", missing / "out.onnx"),
        "does not exist; create it first",
    )
    assert lower_line == export_line and not missing.exists()


def test_lower_a_directory(tmp_path):
    one_line_error(invoke("lower", tmp_path, "-o", tmp_path / "out.onnx"), f"{tmp_path}: is a directory")


def test_lower_to_a_directory(deform_file, tmp_path):
    one_line_error(invoke("lower", deform_file, "-o", tmp_path), "is a directory; give a file path")


# -- opsets -----------------------------------------------------------------------------------------
def test_lower_opset_out_of_range_names_the_range(deform_file, tmp_path):
    line = one_line_error(
        invoke("lower", deform_file, "-o", tmp_path / "o.onnx", "--opset", "30"),
        "--opset 30 is out of range",
        f"opsets 11 to {onnx.defs.onnx_opset_version()}",
    )
    assert "Assertion" not in line and "convert.h" not in line
    one_line_error(
        invoke("lower", deform_file, "-o", tmp_path / "o.onnx", "--opset", "10"), "--opset 10 is out of range"
    )


def test_lower_conversion_error_has_no_stray_python_keyword(conv_relu, tmp_path):
    line = one_line_error(
        invoke("lower", conv_relu, "-o", tmp_path / "o.onnx", "--opset", "11"), "no adapter from version 14 for Relu"
    )
    assert line.endswith("the lowest opset this model converts to is 14"), line


# -- input shapes ------------------------------------------------------------------------------------
def test_export_wrong_rank_is_named_before_the_conv_fails(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "user_models.py").write_text(USER_MODULE)
    line = one_line_error(
        invoke("export", "user_models.py:Net", "--input-shape", "1,3,64", "-o", "out"),
        "an input of shape 1,3,64 is rank 3",
        "predict (Conv2d) takes rank 4 (N,C,H,W)",
    )
    assert "channels" not in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args,expected",
    [
        (["-s", "x=1,3,8,8", "-s", "1,3,8,8"], "several --input-shape options need a name each"),
        (["-s", "x=1,3,8,8", "-s", "x=1,3,8,8"], "names x more than once"),
        (["-s", "1,3,8,8:int8"], "choose one of float32, float16, float64"),
        (["-s", "1,3,8,8", "--dtype", "bfloat16"], "--dtype 'bfloat16'"),
        (["-s", "1,3,8,8", "--inputs", "in.npz"], "either --inputs FILE.npz or --input-shape"),
        (["--inputs", "missing.npz"], "--inputs missing.npz: no such file"),
    ],
)
def test_export_input_option_errors(tmp_path, monkeypatch, args, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "user_models.py").write_text(USER_MODULE)
    np.savez(tmp_path / "in.npz", x=np.zeros((1, 3, 8, 8), np.float32))
    one_line_error(invoke("export", "user_models.py:Net", *args, "-o", "out"), expected)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "name,content,expected",
    [
        ("missing.pt", None, "missing.pt: no such file"),
        ("folder.pt2", "dir", "is a directory"),
        ("garbage.pt", b"not an archive", "not a TorchScript archive"),
        ("garbage.pt2", b"not an archive", "not a torch.export archive"),
        ("model.onnx", b"", "give MODULE:FACTORY"),
    ],
)
def test_export_model_file_errors(tmp_path, monkeypatch, name, content, expected):
    monkeypatch.chdir(tmp_path)
    if content == "dir":
        (tmp_path / name).mkdir()
    elif content is not None:
        (tmp_path / name).write_bytes(content)
    one_line_error(invoke("export", name, "-s", "1,3,8,8", "-o", "out"), expected)
