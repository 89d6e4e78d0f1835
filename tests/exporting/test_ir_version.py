"""Case c25: every file the product writes carries the lowest IR version its opsets need.

Paths: ``deform_onnx.export`` (both exporters, every method, opsets 11 to 23
at each step of onnx's opset -> IR table), the CLI's ``export`` and ``lower``,
and ``deform_onnx.lower`` / ``lower_file``. The expected IR version comes from
``onnx.helper.find_min_ir_version_for`` (onnx's own table), and each file is
checked with ``onnx.checker`` (full) and against torchvision on ONNX Runtime.
"""

from __future__ import annotations

import io

import onnx
import pytest
from onnx import helper
from typer.testing import CliRunner

import deform_onnx
from deform_onnx.cli import app
from util import DeformLayer, assert_close, case_config, check, make_inputs, reference, run_ort

CFG = case_config("c25")


def needed_ir(opset: int) -> int:
    """onnx's table: the first release that has ``opset`` gives its IR version."""
    return helper.find_min_ir_version_for([helper.make_opsetid("", opset)])


@pytest.fixture(scope="module")
def layer_inputs():
    layer = DeformLayer(CFG).eval()
    inputs = make_inputs(CFG)
    return layer, inputs, reference(layer, inputs)


#: (exporter, method, opset): one export per step of the opset -> IR table and per exporter range.
GRID = [
    ("torchscript", "gather", 11),
    ("torchscript", "gather", 13),
    ("dynamo", "gather", 14),
    ("torchscript", "grid_sample", 16),
    ("dynamo", "grid_sample", 17),
    ("dynamo", "grid_sample", 18),
    ("torchscript", "native", 19),
    ("dynamo", "native", 20),
    ("dynamo", "gather", 21),
    ("dynamo", "grid_sample", 23),
]


@pytest.mark.parametrize("exporter,method,opset", GRID, ids=[f"{e}-{m}-{o}" for e, m, o in GRID])
def test_export_writes_the_lowest_ir_version(layer_inputs, exporter, method, opset):
    layer, inputs, want = layer_inputs
    buf = io.BytesIO()
    report = deform_onnx.export(layer, tuple(inputs.values()), buf, opset_version=opset, method=method,
                                dynamo=exporter == "dynamo", input_names=list(inputs), fallback=False)  # fmt: skip
    proto = check(buf.getvalue())
    assert report.exporter == exporter
    assert proto.ir_version == needed_ir(opset), f"{exporter} {method}@{opset}: IR {proto.ir_version}"
    assert_close(run_ort(buf.getvalue(), inputs), want, what=f"{method}@{opset}")


def test_dynamo_opset17_file_was_ir10_before(layer_inputs):
    """Premise of c25: torch's exporter stamps IR 10 on an opset-17 file; export() lowers it to 8."""
    import torch

    layer, inputs, _ = layer_inputs
    program = torch.onnx.export(layer, tuple(inputs.values()), dynamo=True, opset_version=17,
                                custom_translation_table=deform_onnx.translation_table("grid_sample", 17))  # fmt: skip
    assert program.model_proto.ir_version >= 10 and needed_ir(17) == 8


def test_export_ir_version_override_and_too_old(layer_inputs, tmp_path):
    layer, inputs, _ = layer_inputs
    buf = io.BytesIO()
    deform_onnx.export(layer, tuple(inputs.values()), buf, opset_version=17, method="grid_sample", ir_version=10)
    assert check(buf.getvalue()).ir_version == 10
    path = tmp_path / "old.onnx"
    with pytest.raises(ValueError, match=r"IR version 7 is too old.*IR >= 8"):
        deform_onnx.export(layer, tuple(inputs.values()), path, opset_version=17, method="grid_sample", ir_version=7)
    assert not path.exists()


@pytest.fixture(scope="module")
def native20(layer_inputs, tmp_path_factory) -> str:
    """A native DeformConv file at opset 20 stamped with IR 10 (as torch writes it)."""
    layer, inputs, _ = layer_inputs
    buf = io.BytesIO()
    deform_onnx.export(layer, tuple(inputs.values()), buf, opset_version=20, method="native", ir_version=10,
                       input_names=list(inputs))  # fmt: skip
    path = tmp_path_factory.mktemp("c25") / "native20.onnx"
    path.write_bytes(buf.getvalue())
    return str(path)


@pytest.mark.parametrize("method,opset", [("grid_sample", 17), ("gather", 13), ("native", None)])
def test_lower_writes_the_lowest_ir_version(layer_inputs, native20, method, opset):
    _, inputs, want = layer_inputs
    proto = deform_onnx.lower(native20, method=method, opset=opset)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.ir_version == needed_ir(opset or 20)
    assert_close(run_ort(proto.SerializeToString(), inputs), want, what=f"lower {method}")


def test_lower_keeps_an_ir_version_asked_for(native20):
    assert deform_onnx.lower(native20, method="grid_sample", opset=17, ir_version=9).ir_version == 9


runner = CliRunner()


def test_cli_export_and_lower_write_the_lowest_ir_version(layer_inputs, native20, tmp_path):
    _, inputs, want = layer_inputs
    out = tmp_path / "ex.onnx"
    result = runner.invoke(app, ["export", "--method", "grid_sample", "--opset", "17", "-o", str(out), "--repeat", "1"])
    assert result.exit_code == 0, result.output
    assert onnx.load(str(out)).ir_version == needed_ir(17)
    bad = tmp_path / "bad_export.onnx"
    result = runner.invoke(
        app, ["export", "--method", "grid_sample", "--opset", "17", "-o", str(bad), "--ir-version", "7"]
    )
    assert result.exit_code == 2 and "IR version 7 is too old" in result.output and not bad.exists()

    lowered = tmp_path / "low.onnx"
    result = runner.invoke(app, ["lower", native20, "-o", str(lowered), "--method", "grid_sample", "--opset", "17"])
    assert result.exit_code == 0, result.output
    model = onnx.load(str(lowered))
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == needed_ir(17)
    assert "IR version: 10 -> 8" in result.stdout
    assert_close(run_ort(lowered.read_bytes(), inputs), want, what="CLI lower")

    forced = tmp_path / "ir10.onnx"
    result = runner.invoke(app, ["lower", native20, "-o", str(forced), "--opset", "17", "--ir-version", "10"])
    assert result.exit_code == 0, result.output
    assert onnx.load(str(forced)).ir_version == 10
    result = runner.invoke(app, ["lower", native20, "-o", str(tmp_path / "bad.onnx"), "--ir-version", "7"])
    assert result.exit_code == 2 and "IR version 7 is too old" in result.output
    assert not (tmp_path / "bad.onnx").exists()
