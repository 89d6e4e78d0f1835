"""``lower(opset=N)`` and ``lower --opset N`` take a model down with export's adapters
(:mod:`deform_onnx.conversion`): onnx's version converter alone has no ``Split`` 18->17 adapter,
which every ``torch.chunk`` model exported at 18+ needs.

The model: c31's pattern in float32 (a conv whose output ``torch.chunk`` splits into DCNv2's
offset and mask), exported as a plain opset-19 file (native ``DeformConv``), then lowered.
"""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
import torch
from typer.testing import CliRunner

import deform_onnx
from deform_onnx.cli import app
from models import ChunkDCN
from util import run_ort

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def opset19():
    torch.manual_seed(0)
    model = ChunkDCN(4, 4, (3, 3), (1, 1)).eval()
    x = torch.randn(1, 4, 6, 6)
    buf = io.BytesIO()
    deform_onnx.export(model, (x,), buf, opset_version=19, method="native", input_names=["x"])
    proto = onnx.load_from_string(buf.getvalue())
    assert "Split" in {n.op_type for n in proto.graph.node}
    with torch.no_grad():
        return proto, x, model(x).numpy()


class Chunk(torch.nn.Module):
    def forward(self, x):
        a, b, c = torch.chunk(x, 3, dim=1)
        return a * b - c


def test_plain_torch_chunk_file(tmp_path):
    """A plain torch.onnx.export opset-19 file: onnx's converter alone refuses Split 18->17; lower takes it."""
    x = torch.randn(1, 6, 3, 3)
    buf = io.BytesIO()
    torch.onnx.export(Chunk(), (x,), buf, dynamo=True, opset_version=19, input_names=["x"])
    proto = onnx.load_from_string(buf.getvalue())
    with pytest.raises(Exception, match="Split"):
        onnx.version_converter.convert_version(proto, 17)
    out = deform_onnx.lower(proto, opset=17)
    onnx.checker.check_model(out, full_check=True)
    np.testing.assert_allclose(run_ort(out.SerializeToString(), {"x": x}), Chunk()(x).numpy(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("opset", [17, 14])
def test_lower_to_lower_opset(opset19, opset):
    """lower(opset=17/14): valid at that opset, DeformConv lowered, matches PyTorch."""
    proto, x, want = opset19
    out = deform_onnx.lower(proto, opset=opset)
    onnx.checker.check_model(out, full_check=True)
    assert next(o.version for o in out.opset_import if o.domain == "") == opset
    assert "DeformConv" not in {n.op_type for n in out.graph.node}
    np.testing.assert_allclose(run_ort(out.SerializeToString(), {"x": x}), want, rtol=1e-4, atol=1e-4)


def test_cli_lower_opset_names_the_repair(opset19, tmp_path):
    """deform-onnx lower --opset 17: writes the file and prints the adapter it used."""
    proto, x, want = opset19
    src, dst = tmp_path / "m19.onnx", tmp_path / "m17.onnx"
    onnx.save(proto, src)
    result = CliRunner().invoke(app, ["lower", str(src), "-o", str(dst), "--opset", "17"])
    assert result.exit_code == 0, result.output
    assert "repair: split_18_17" in " ".join(result.output.split())  # rich wraps long lines
    np.testing.assert_allclose(run_ort(dst.read_bytes(), {"x": x}), want, rtol=1e-4, atol=1e-4)
