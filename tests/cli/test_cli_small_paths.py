"""CLI behaviour found by walking README as a new user: each test is one thing that was wrong."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper
from typer.testing import CliRunner

from deform_onnx.cli import app

runner = CliRunner()


def _identity_file(path, dims) -> str:
    """A one-node float32 ONNX file whose input 'x' has ``dims`` (strings are dynamic)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return str(path)


def test_export_method_auto_takes_gather_for_5d_grid_sample_below_opset_20(tmp_path):
    """docs/guides/grid-sample.md: under ``auto`` a 5-D call below opset 20 takes the gather form (the CLI passed 'grid_sample')."""
    (tmp_path / "vol.py").write_text(
        textwrap.dedent(
            """
            import torch, torch.nn.functional as F

            class Vol(torch.nn.Module):
                def forward(self, x, g):
                    return F.grid_sample(x, g, align_corners=False)
            """
        )
    )
    out = tmp_path / "vol.onnx"
    args = ["export", f"{tmp_path / 'vol.py'}:Vol", "-s", "x=1,2,4,5,6", "-s", "g=1,3,4,5,3", "-m", "auto"]
    result = runner.invoke(app, [*args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "GridSample" not in {n.op_type for n in onnx.load(out).graph.node}  # opset 17: no 5-D GridSample
    x, g = torch.randn(1, 2, 4, 5, 6), torch.rand(1, 3, 4, 5, 3) * 2.2 - 1.1
    (y,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(
        None, {"x": x.numpy(), "g": g.numpy()}
    )
    np.testing.assert_allclose(y, F.grid_sample(x, g, align_corners=False).numpy(), atol=1e-5)


def test_default_plan_fails_only_the_row_whose_method_cannot_take_the_model(tmp_path):
    """No --method: a 5-D F.grid_sample cannot be GridSample at 17, so that row fails with its reason;
    the gather@11 and native@20 rows still run and write their files (it was exit 2, nothing written)."""
    (tmp_path / "vol.py").write_text(
        "import torch.nn.functional as F, torch\n\n"
        "class Vol(torch.nn.Module):\n"
        "    def forward(self, x, g):\n"
        "        return F.grid_sample(x, g, padding_mode='border', align_corners=False)\n"
    )
    out = tmp_path / "out"
    args = ["export", f"{tmp_path / 'vol.py'}:Vol", "-s", "x=1,2,4,5,6", "-s", "g=1,3,4,5,3", "-o", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "failed grid_sample@17" in result.output and "opset >= 20" in result.output
    assert sorted(p.name for p in out.iterdir()) == ["Vol_gather_op11.onnx", "Vol_native_op20.onnx"]


def test_check_names_the_input_in_quotes(tmp_path):
    """An input called 'input' read "input input has a dynamic ..."; the name is quoted now."""
    path = _identity_file(tmp_path / "dyn.onnx", ["N", 3, 8, 8])
    result = runner.invoke(app, ["check", path, "--repeat", "0"])
    assert result.exit_code == 2, result.output
    assert "input 'x' has a dynamic or unknown shape" in result.output
    result = runner.invoke(app, ["check", path, "--input-shape", "x=1,3,8", "--repeat", "0"])
    assert result.exit_code == 2 and "input 'x' has rank 4" in result.output, result.output


def test_quantize_bad_output_and_method_are_cli_worded(tmp_path):
    """quantize's -o and --method errors name the CLI options (not quantize()'s dst/method) and write nothing."""
    src = _identity_file(tmp_path / "m.onnx", [1, 3, 8, 8])
    cal = tmp_path / "cal.npz"
    np.savez(cal, x=np.zeros((1, 3, 8, 8), np.float32))
    cases = [
        (["-o", str(tmp_path / "missing" / "q.onnx")], "error: -o", "does not exist; create it first"),
        (["-o", str(tmp_path / "q.xml")], "error: -o", "writes a .onnx file"),
        (["-o", str(tmp_path / "q.onnx"), "-t", "openvino"], "error: -o", "writes a .xml file"),
        (["-o", str(tmp_path / "q.onnx"), "-m", "foo"], "error: --method 'foo'", "grid_sample, gather or native"),
    ]
    for extra, start, text in cases:
        result = runner.invoke(app, ["quantize", src, "-c", str(cal), *extra])
        assert result.exit_code == 2, result.output
        assert start in result.output and text in result.output and "dst" not in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.npz", "m.onnx"]


def test_quantize_refuses_an_output_folder_it_cannot_write_before_any_work(tmp_path, monkeypatch):
    """``-o DIR/x.onnx`` into a folder it cannot write ended after the work in a PermissionError traceback
    (exit 1). Now one line, exit 2, nothing written, and quantize() raises before reading ``src``."""
    import os

    from deform_onnx.quantize import api, quantize

    src = _identity_file(tmp_path / "m.onnx", [1, 3, 8, 8])
    cal = tmp_path / "cal.npz"
    np.savez(cal, x=np.zeros((1, 3, 8, 8), np.float32))
    (tmp_path / "a_file").write_text("")
    locked = tmp_path / "locked"
    locked.mkdir()
    (tmp_path / "out.onnx").mkdir()  # a folder where the file should go
    real_access = os.access
    # root writes through a 0o555 mode, so the refusal is driven by what the OS answers (os.access), for
    # every user; the folder is locked as well, which stops the probe file of a non-root run too.
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == locked else real_access(p, mode, **kw))
    locked.chmod(0o555)
    work = []
    monkeypatch.setattr(api, "feeds", lambda *a, **k: work.append(1))  # reading the calibration is work
    try:
        cases = [
            (locked / "q.onnx", PermissionError, "cannot write in the folder"),
            (tmp_path / "a_file" / "q.onnx", NotADirectoryError, "is a file, not a folder"),
            (tmp_path / "missing" / "q.onnx", FileNotFoundError, "does not exist"),
            (tmp_path / "out.onnx", NotADirectoryError, "is a folder"),
        ]
        for dst, error, text in cases:
            result = runner.invoke(app, ["quantize", src, "-c", str(cal), "-o", str(dst)])
            assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
            assert result.output.startswith("error: -o") and text in result.output, result.output
            with pytest.raises(error, match=text):
                quantize(src, dst, str(cal))
        assert not work and list(locked.iterdir()) == [] and list((tmp_path / "out.onnx").iterdir()) == []
    finally:
        locked.chmod(0o755)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "cal.npz", "locked", "m.onnx", "out.onnx"]


def test_file_size_column_shows_bytes_below_one_kib():
    """A one-GridSample file (bicubic F.grid_sample at 17) showed '0 KiB' in the export table."""
    from deform_onnx.cli._export_report import _size

    assert _size(300) == "300 B" and _size(2048) == "2 KiB" and _size(3 * 1024 * 1024) == "3.0 MiB"


def test_check_runs_a_bfloat16_file_on_openvino_with_nonzero_inputs(tmp_path):
    """A bfloat16 file (what export writes at opset 22) failed check: OpenVINO's bf16 outputs were read as
    16-bit numbers of another type (1.37 off), and the random inputs were all zeros (bfloat16 is numpy kind 'V')."""
    import ml_dtypes

    pytest.importorskip("openvino")

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    init = helper.make_tensor(
        "w", TensorProto.BFLOAT16, weight.shape, weight.astype(ml_dtypes.bfloat16).tobytes(), raw=True
    )
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [1, 3, 6, 6])],
        [init],
    )
    path = tmp_path / "bf16.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10), path)
    from deform_onnx.cli._feeds import make_feeds
    from deform_onnx.rewrite import read_model
    from deform_onnx.runtimes import run_paths

    feeds = make_feeds(read_model(path), {})
    x = feeds["x"]
    assert x.dtype == ml_dtypes.bfloat16 and np.abs(x.astype(np.float32)).max() > 0.5  # not all zeros
    (ov_row,) = run_paths(path, feeds, runtimes=["openvino"], repeat=0)
    assert ov_row.ran, ov_row.reason
    (got,) = ov_row.outputs
    # An independent reference: the same convolution in float32 on the same (bfloat16) values.
    w16 = weight.astype(ml_dtypes.bfloat16).astype(np.float32)
    want = F.conv2d(torch.from_numpy(x.astype(np.float32)), torch.from_numpy(w16), padding=1).numpy()
    # One bfloat16 rounding of the output is 2^-9 relative; OpenVINO's bf16 convolution rounds more than once on
    # some CPUs (3.5e-3 relative at most on an Intel host, 6.5e-3 on an AVX2-only AMD EPYC, measured): the rule
    # is a faithful bfloat16 result, within one bfloat16 step (2^-7 relative) of |want|, plus 2^-8 near zero. The
    # old bound, 0.08 + 0.08 * max|want| (0.91), passed errors 25 times that.
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2**-7, atol=2**-8)
    result = runner.invoke(app, ["check", str(path), "--repeat", "0", "-r", "openvino"])
    assert result.exit_code == 0, result.output


def test_dynamic_with_several_inputs_names_the_way_out(tmp_path):
    """--dynamic with two inputs is refused before torch loads the model; the line now says what to do instead."""
    (tmp_path / "two.py").write_text("import torch\n\ndef build():\n    return torch.nn.Identity()\n")
    args = ["export", f"{tmp_path / 'two.py'}:build", "-s", "x=1,3,8,8", "-s", "g=1,4,4,2", "--dynamic"]
    result = runner.invoke(app, [*args, "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert "several inputs" in result.output and "dynamic_shapes=" in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_quantize_images_for_a_non_image_input_do_not_suggest_nhwc(tmp_path):
    """An 8-channel input with a folder of images suggested layout='NHWC', which cannot fit either."""
    from deform_onnx.quantize import Preprocess, quantize

    photos = tmp_path / "photos"
    photos.mkdir()
    (photos / "a.png").write_bytes(b"")  # refused before any image is read
    # (input shape, layout, whether the other layout fits): NCHW 8 channels: no layout fits;
    # NHWC given for an NCHW 3-channel input: NCHW fits.
    for shape, layout, fits in (([1, 8, 8, 8], "NCHW", False), ([1, 3, 8, 8], "NHWC", True)):
        src = _identity_file(tmp_path / "m.onnx", shape)
        with pytest.raises(ValueError) as info:
            quantize(src, tmp_path / "q.onnx", str(photos), preprocess=Preprocess(size=(8, 8), layout=layout))
        text = str(info.value)
        assert ("layout='NCHW'" in text) == fits and "layout='NHWC'" not in text and "images give" in text, text
    assert not (tmp_path / "q.onnx").exists()
