"""``export(model, args, "m.xml")`` writes OpenVINO IR verified in OpenVINO (issue 28 item 3)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

import deform_onnx
from deform_onnx.formats import openvino_ir

ov = pytest.importorskip("openvino")

from runtimes.test_deployed import TinyDCN  # noqa: E402


def test_xml_writes_ir_with_native_deformable_convolution(tmp_path: Path) -> None:
    model, x = TinyDCN().eval(), torch.randn(1, 4, 16, 16, generator=torch.Generator().manual_seed(2))
    umask = os.umask(0o022)
    try:
        report = deform_onnx.export(model, (x,), tmp_path / "m.xml", dynamic_axes={"x": {0: "n", 2: "h", 3: "w"}},
                                    input_names=["x"])  # fmt: skip
    finally:
        os.umask(umask)
    assert report.format == "openvino" and report.path == tmp_path / "m.xml"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.bin", "m.xml"]
    # Like any file the user writes (issue 35 item 8: they were mkstemp's 0600)
    assert all((tmp_path / n).stat().st_mode & 0o777 == 0o644 for n in ("m.bin", "m.xml"))
    assert report.runtimes and report.runtimes[0].startswith("openvino ")
    assert len(report.checked_shapes) == 2  # the second size the ONNX file was checked at: the IR ran there too
    ir = ov.Core().read_model(str(tmp_path / "m.xml"))  # a plain Core: the IR needs no extension
    assert "DeformableConvolution" in {op.get_type_name() for op in ir.get_ordered_ops()}
    got = ov.Core().compile_model(ir, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})([x.numpy()])[0]
    with torch.no_grad():
        want = model(x).numpy()
    assert float(np.abs(got - want).max()) < 1e-5  # measured 6e-7


def test_xml_failed_check_writes_neither_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted fault in OpenVINO's result (every output 1 off): VerificationError, no .xml, no .bin."""
    monkeypatch.setattr(openvino_ir, "_run_ir", lambda compiled, feeds: [np.ones((1, 8, 16, 16), np.float32)])
    with pytest.raises(deform_onnx.VerificationError, match="OpenVINO .* off PyTorch"):
        deform_onnx.export(TinyDCN().eval(), (torch.randn(1, 4, 16, 16),), tmp_path / "m.xml")
    assert list(tmp_path.iterdir()) == []


def test_static_xml_takes_the_measured_fastest_form(tmp_path: Path) -> None:
    """Static, no target: openvino.convert_model of the module (BENCHMARKS.md: 0.56x ORT native), verified."""
    assert openvino_ir.FASTEST_FORM == "convert_model" and openvino_ir.ONNX_TARGET == "openvino-extension"
    model, x = TinyDCN().eval(), torch.randn(1, 4, 16, 16, generator=torch.Generator().manual_seed(3))
    report = deform_onnx.export(model, (x,), tmp_path / "s.xml")
    assert any("convert_model of the PyTorch module (the fastest" in n for n in report.notes), report.notes
    got = ov.Core().compile_model(str(tmp_path / "s.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})([x.numpy()])[0]
    with torch.no_grad():
        assert float(np.abs(got - model(x).numpy()).max()) < 1e-5  # measured 6e-7


def test_target_given_takes_the_onnx_files_ir(tmp_path: Path) -> None:
    model, x = TinyDCN().eval(), torch.randn(1, 4, 16, 16)
    report = deform_onnx.export(model, (x,), tmp_path / "g.xml", target="openvino")
    assert any("the ONNX file (target 'openvino')" in n for n in report.notes), report.notes
    ops = {op.get_type_name() for op in ov.Core().read_model(str(tmp_path / "g.xml")).get_ordered_ops()}
    assert "GridSample" in ops and "DeformableConvolution" not in ops


def test_cli_writes_ir_with_the_onnx_options(tmp_path: Path) -> None:
    """``deform-onnx export MODEL -o m.xml --target openvino --dynamic``: one row, the IR and its weights, run in
    OpenVINO at a size it was not exported at against PyTorch (the CLI made such paths a folder before)."""
    from typer.testing import CliRunner

    from deform_onnx.cli import app

    (tmp_path / "tiny.py").write_text(
        "from runtimes.test_deployed import TinyDCN\n\ndef build():\n    return TinyDCN()\n"
    )
    out = tmp_path / "m.xml"
    result = CliRunner().invoke(
        app,
        [
            "export",
            f"{tmp_path / 'tiny.py'}:build",
            "-s",
            "x=1,4,16,16",
            "--target",
            "openvino",
            "--dynamic",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".xml", ".bin")) == ["m.bin", "m.xml"]
    model, x = TinyDCN().eval(), torch.randn(2, 4, 12, 20, generator=torch.Generator().manual_seed(3))
    got = ov.Core().compile_model(str(out), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})([x.numpy()])[0]
    with torch.no_grad():
        want = model(x).numpy()
    assert float(np.abs(got - want).max()) < 1e-5
    refused = CliRunner().invoke(app, ["export", "-o", str(tmp_path / "m.pte"), "--verify-runtime", "mnn"])
    assert refused.exit_code == 2 and "ExecuTorch files do not take it" in refused.output
