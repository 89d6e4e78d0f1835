"""CLI ``deform-onnx lower`` and ``deform-onnx check``.

Expected outputs are torchvision's ``deform_conv2d`` on the same tensors; a
user error is exit code 2 with a one-line message and no file written.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from typer.testing import CliRunner

from deform_onnx.cli import app
from models import mmcv_model, two_node_model
from util import Config, assert_close, default_opset, op_types, reference, run_ort

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def _mmcv_file(tmp_path, bias: bool = True):
    cfg = Config(C_in=6, C_out=4, H=7, W=8, offset_groups=3, mask=True, bias=bias)
    proto, layer, feeds = mmcv_model(cfg, modulated=True)
    path = tmp_path / "mmcv.onnx"
    onnx.save(proto, str(path))
    want = reference(layer, dict(zip(("x", "offset", "mask"), feeds.values())))
    return path, feeds, want


def test_lower_mmcv_file_runs_on_plain_onnxruntime(tmp_path):
    src, feeds, want = _mmcv_file(tmp_path)
    with pytest.raises(Exception, match="MMCVModulatedDeformConv2d"):
        ort.InferenceSession(str(src))  # premise: plain ORT cannot run it
    before = src.read_bytes()
    out = tmp_path / "out.onnx"
    result = invoke("lower", src, "-o", out)
    assert result.exit_code == 0, result.output
    assert "dcn" in result.stdout and "mmcv::MMCVModulatedDeformConv2d" in result.stdout
    assert "opset: 13" in result.stdout and "removed opset imports: mmcv" in result.stdout
    assert src.read_bytes() == before
    assert_close(run_ort(str(out), feeds), want, what="lowered mmcv file on ORT")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mmcv.onnx", "out.onnx"]  # no temp files left


def test_lower_opset_and_method(tmp_path):
    src, feeds, want = _mmcv_file(tmp_path, bias=False)
    out = tmp_path / "o11.onnx"
    result = invoke("lower", src, "-o", out, "--opset", "11", "--method", "gather")
    assert result.exit_code == 0, result.output
    assert "13 -> 11" in result.stdout
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    assert default_opset(model) == 11 and "Gather" in op_types(model)
    assert_close(run_ort(str(out), feeds), want, what="opset 11")


def test_lower_in_place(tmp_path):
    src, feeds, want = _mmcv_file(tmp_path)
    result = invoke("lower", src, "--in-place")
    assert result.exit_code == 0, result.output
    assert_close(run_ort(str(src), feeds), want, what="in place")
    assert [p.name for p in tmp_path.iterdir()] == ["mmcv.onnx"]


def _assert_user_error(result, tmp_path, files_before):
    assert result.exit_code == 2, result.output
    err = result.stderr.strip()
    assert err.startswith("error:") and "\n" not in err, err
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == files_before


@pytest.mark.parametrize("kind", ["missing", "truncated", "text", "empty"])
def test_lower_bad_file_exit_2_and_no_output(tmp_path, kind):
    src = tmp_path / "in.onnx"
    if kind != "missing":
        data = {
            "truncated": two_node_model().SerializeToString()[:700],
            "text": b"this is not an ONNX model\n",
            "empty": b"",
        }[kind]
        src.write_bytes(data)
    files = sorted(p.name for p in tmp_path.iterdir())
    _assert_user_error(invoke("lower", src, "-o", tmp_path / "out.onnx"), tmp_path, files)


def test_lower_refuses_to_overwrite_input_without_in_place(tmp_path):
    src, _, _ = _mmcv_file(tmp_path)
    before = src.read_bytes()
    _assert_user_error(invoke("lower", src, "-o", src), tmp_path, ["mmcv.onnx"])
    _assert_user_error(invoke("lower", src), tmp_path, ["mmcv.onnx"])
    _assert_user_error(invoke("lower", src, "-o", tmp_path / "o.onnx", "--method", "bilinear"), tmp_path, ["mmcv.onnx"])
    assert src.read_bytes() == before


def test_lower_node_error_names_node(tmp_path):
    model = two_node_model()
    model.graph.node[2].attribute.append(onnx.helper.make_attribute("foo", 1))
    src = tmp_path / "bad.onnx"
    onnx.save(model, str(src))
    result = invoke("lower", src, "-o", tmp_path / "out.onnx")
    _assert_user_error(result, tmp_path, ["bad.onnx"])
    assert "dc1" in result.stderr and "foo" in result.stderr


# -- check --------------------------------------------------------------------------------
def test_check_native_model_prints_table(tmp_path):
    path = tmp_path / "two.onnx"
    onnx.save(two_node_model(batch=1), str(path))
    result = invoke("check", path)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("onnxruntime", "openvino", "as is", "extension", "lower(auto)", "reference", "f32"):
        assert text in out, (text, out)
    assert out.count("ran") >= 4 and "not run" not in out


def test_check_mmcv_model_uses_restamped_reference(tmp_path):
    src, _, _ = _mmcv_file(tmp_path)
    result = invoke("check", src, "--runtime", "ort", "--runtime", "openvino")
    # ORT as is cannot run mmcv nodes: the reference is ORT's DeformConv kernel on the file re-stamped at 19.
    assert "re-stamped at opset 19" in result.stdout and "not run" in result.stdout
    # A path that did not run fails the check (issue 32; it exited 0 before), and the summary names it (on
    # the random and the border input); the three others ran and matched on both.
    assert result.exit_code == 1, result.output
    summary = " ".join(result.stdout.split()).rpartition("check failed: ")[2]
    assert summary == "2 of 9 paths did not run (onnxruntime as is, onnxruntime as is (border input))", summary


def test_check_fails_above_tolerance(tmp_path):
    path = tmp_path / "two.onnx"
    onnx.save(two_node_model(batch=1), str(path))
    result = invoke("check", path, "--runtime", "ort", "--tolerance", "0")
    assert result.exit_code == 1, result.output
    assert "check failed: 1 of 2 paths exceeded the tolerance 0 (onnxruntime lower(auto))" in result.stdout


def test_check_dynamic_input_needs_shape_and_npz_inputs(tmp_path):
    path = tmp_path / "dyn.onnx"
    model = two_node_model(batch="N")
    onnx.save(model, str(path))
    result = invoke("check", path, "--runtime", "ort")
    assert result.exit_code == 2 and "--input-shape" in result.stderr, result.output
    result = invoke("check", path, "--runtime", "ort", "--input-shape", "x=2,6,8,9")
    assert result.exit_code == 0, result.output
    # --inputs: the npz tensor gives the dynamic input its shape (no --input-shape needed).
    np.savez(tmp_path / "in.npz", x=np.random.default_rng(5).standard_normal((1, 6, 8, 9)).astype(np.float32))
    result = invoke("check", path, "--runtime", "ort", "--inputs", tmp_path / "in.npz")
    assert result.exit_code == 0, result.output
    result = invoke("check", path, "--runtime", "ort", "--inputs", tmp_path / "missing.npz")
    assert result.exit_code == 2 and "missing.npz" in result.stderr


def test_check_bundled_example_on_the_photo(tmp_path):
    """The bundled DCNv2 example, exported by plain torch (DeformConv, opset 20), checked on every path."""
    from deform_onnx.cli.example import example_model, load_photo

    net = example_model()
    photo = load_photo(64)
    path = tmp_path / "example.onnx"
    torch.onnx.export(
        net,
        (photo,),
        str(path),
        dynamo=True,
        opset_version=20,
        input_names=["image"],
        external_data=False,
        verbose=False,
    )
    assert "DeformConv" in op_types(onnx.load(str(path)))
    np.savez(tmp_path / "photo.npz", image=photo.numpy())
    result = invoke("check", path, "--inputs", tmp_path / "photo.npz", "--repeat", "1")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 5 and all(" ran " in row for row in rows), result.stdout  # + OpenVINO defaults
    # The table's reference (ORT's DeformConv kernel) agrees with torchvision on the photo.
    with torch.no_grad():
        want = net(photo).numpy()
    assert_close(run_ort(str(path), {"image": photo}), want, what="example on ORT")
