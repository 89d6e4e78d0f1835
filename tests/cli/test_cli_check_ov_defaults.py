"""``deform-onnx check`` adds OpenVINO as a user runs it with no config (issue 35 item 3).

The row ``openvino extension, defaults`` compiles the file with no ``INFERENCE_PRECISION_HINT`` (on CPUs with
bf16/AMX OpenVINO then picks bf16), reports the precision OpenVINO used, and is judged by that precision's rule
(float32's tolerance for f32, bfloat16's ``8e-2 + 8e-2 * max|reference|`` for bf16), on either kind of CPU.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import deform_onnx.runtimes
import deform_onnx.runtimes.openvino as dov
from cli.test_cli_check_exit import check, rows
from deform_onnx.cli.check_cmd import precision_tolerance
from models import two_node_model

pytest.importorskip("openvino")

ROW = "openvino extension, defaults"


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    path = tmp_path_factory.mktemp("ov_defaults") / "two.onnx"
    onnx.save(two_node_model(batch=1), str(path))
    return path


def test_defaults_row_reports_the_precision_openvino_used(two):
    used = dov.inference_precision(dov.compile(two, precision=None))  # a plain compile_model: this CPU's choice
    result, text = check(two)
    assert result.exit_code == 0, result.output
    assert f"{used} (default)" in rows(result)[ROW], rows(result)
    assert f"OpenVINO ran {used} on this CPU" in text, text
    assert "f32" in rows(result)["openvino extension"]  # the f32 row beside it


@pytest.mark.parametrize(("precision", "passes"), [("f32", False), ("bf16", True)])
def test_defaults_row_is_judged_by_its_precisions_rule(two, monkeypatch, precision, passes):
    """A planted 1e-3 error on the defaults row only: over float32's 1e-4, within bfloat16's rule."""
    real = deform_onnx.runtimes._ov_runner

    def planted(model, feeds, hint):
        run, _ = real(model, feeds, hint)
        if hint is not None:
            return run, hint
        return (lambda deadline: [o + np.float32(1e-3) for o in run(deadline)]), precision

    monkeypatch.setattr(deform_onnx.runtimes, "_ov_runner", planted)
    result, text = check(two)
    assert (result.exit_code == 0) is passes, result.output
    if not passes:
        assert f"paths exceeded the tolerance 0.0001 ({ROW})" in text, text


def test_precision_tolerance_rule():
    want = [np.array([[-3.0, 0.5]], np.float32), np.array([1.0], np.float32)]
    assert precision_tolerance("f32", want, 1e-4) == 1e-4
    assert precision_tolerance("bf16", want, 1e-4) == pytest.approx(8e-2 + 8e-2 * 1.0)  # the tightest output's
    assert precision_tolerance("f16", want, 1e-4) == pytest.approx(1e-2 + 1e-2 * 1.0)
    assert precision_tolerance("bf16", want, 1.0) == 1.0  # a wider --tolerance stays
