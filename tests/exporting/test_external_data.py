"""Models over protobuf's 2 GiB limit (case c33): written with external data, both files or neither.

A real 2.1 GiB model is too heavy for the suite: these tests lower
``deform_onnx.exporting.large.PROTOBUF_LIMIT`` so that a small model takes the same path (its weights
go to ``<name>.data`` beside the ``.onnx``; checked and verified in ONNX Runtime from the path).
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import deform_onnx
from deform_onnx.core.errors import ExportError, VerificationError
from deform_onnx.exporting import large
from models import ChunkDCN

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture
def small_limit(monkeypatch):
    """Every model with more than 1 KiB of weights counts as over the limit."""
    monkeypatch.setattr(large, "PROTOBUF_LIMIT", 1024)
    monkeypatch.setattr(large, "MARGIN", 0)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return ChunkDCN(8, 16, (3, 3), (1, 1)).eval(), torch.randn(1, 8, 8, 8)


def _files(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("kw", [{}, {"dynamo": False, "opset_version": 17}], ids=["default", "torchscript17"])
def test_export_writes_model_and_data(small_limit, model, tmp_path, kw):
    """big.onnx + big.onnx.data and nothing else; ONNX Runtime runs it from the path and matches PyTorch."""
    m, x = model
    path = tmp_path / "big.onnx"
    report = deform_onnx.export(m, (x,), path, input_names=["x"], **kw)
    assert _files(tmp_path) == ["big.onnx", "big.onnx.data"] and report.path == path
    assert report.max_error is not None and report.max_error <= 1e-4
    header = onnx.load(str(path), load_external_data=False)
    external = [t for t in header.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert external and {e.value for t in external for e in t.external_data if e.key == "location"} == {"big.onnx.data"}
    assert (tmp_path / "big.onnx.data").stat().st_size >= m.dcn.weight.numel() * 4 > path.stat().st_size / 4
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        want = m(x).numpy()
    np.testing.assert_allclose(session.run(None, {"x": x.numpy()})[0], want, rtol=1e-4, atol=1e-4)
    assert report.file_size == path.stat().st_size + (tmp_path / "big.onnx.data").stat().st_size


def test_failed_verification_leaves_neither_file(small_limit, model, tmp_path, monkeypatch):
    """A planted fault (verification refuses): no .onnx, no data file, no temporary folder."""
    from deform_onnx.exporting import dynamic_check

    def refuse(*args, **kwargs):
        raise VerificationError("planted")

    monkeypatch.setattr(dynamic_check, "verify", refuse)  # every export's verification runs through here
    m, x = model
    with pytest.raises(ExportError):
        deform_onnx.export(m, (x,), tmp_path / "big.onnx", dynamo=False)
    assert _files(tmp_path) == []


def test_file_like_output_is_refused(small_limit, model):
    """External data needs a path: one line saying so."""
    m, x = model
    with pytest.raises(ExportError, match="give export\\(\\) a file path"):
        deform_onnx.export(m, (x,), io.BytesIO())


def test_lower_file_reads_and_writes_external_data(small_limit, model, tmp_path):
    """lower_file of such a file (native at 19 -> gather at 17): the output keeps its weights external."""
    m, x = model
    src = tmp_path / "src" / "big.onnx"
    src.parent.mkdir()
    deform_onnx.export(m, (x,), src, opset_version=19, method="native", input_names=["x"])
    dst = tmp_path / "out" / "low.onnx"
    dst.parent.mkdir()
    from deform_onnx.rewrite import lower_file

    report = lower_file(src, dst, method="gather", opset=17)
    assert report.opset_after == 17 and _files(dst.parent) == ["low.onnx", "low.onnx.data"]
    session = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        want = m(x).numpy()
    np.testing.assert_allclose(session.run(None, {"x": x.numpy()})[0], want, rtol=1e-4, atol=1e-4)


def test_check_reads_external_data(small_limit, model, tmp_path):
    """deform-onnx check on such a file: every path runs and matches (ONNX Runtime and OpenVINO, as is and lowered)."""
    from typer.testing import CliRunner

    from deform_onnx.cli import app

    m, x = model
    path = tmp_path / "big.onnx"
    deform_onnx.export(m, (x,), path, opset_version=19, method="native", input_names=["x"])
    result = CliRunner().invoke(app, ["check", str(path), "--input-shape", "x=1,8,8,8"])
    assert result.exit_code == 0, result.output
    assert "all 5 paths ran and match the reference" in result.output and "lower(auto)" in result.output
