"""Targets that take a runtime version (``webgpu>=1.30``, ``tensorrt==10.0``, ``openvino``): resolution only.

No export here (the forms are checked in test_npu_targets.py and test_targets.py): a pin means every
release it admits, a form is kept only where every admitted release runs it, the installed version is read
where the runtime's Python package is installed, and a bad pin is a one-line ValueError (CLI: exit code 2).
"""

from __future__ import annotations

import dataclasses
from importlib import metadata

import pytest
from packaging.version import Version
from typer.testing import CliRunner

from deform_onnx.cli import app
from deform_onnx.targets import hooks, resolve_target, versions
from deform_onnx.targets.versions import FAMILIES, installed


def test_webgpu_is_gather_at_every_version_while_no_fix_is_known():
    assert versions.WEBGPU_GRIDSAMPLE_FIXED_IN is None
    for name in ("webgpu", "webgpu>=1.26", "webgpu==1.40", "webgpu<1.20"):
        target = resolve_target(name)
        assert (target.method, target.opset) == ("gather", 17), name
        assert {"no GridSample", "no DeformConv"} <= set(target.rules), name


def test_webgpu_gridsample_only_where_every_admitted_release_is_fixed(monkeypatch):
    """The version rule, with a fixed release planted: GridSample from it, gather wherever an older one is admitted."""
    monkeypatch.setattr(versions, "WEBGPU_GRIDSAMPLE_FIXED_IN", Version("1.31"))
    fixed = resolve_target("webgpu>=1.31")
    assert (fixed.method, fixed.opset) == ("grid_sample", 17) and fixed.name == "webgpu>=1.31"
    assert "no GridSample" not in fixed.rules and "no GridSample-20" in fixed.rules
    hooks.for_export(fixed, None, None, True)  # its own pick is not refused
    with pytest.raises(ValueError, match="GridSample-20"):
        hooks.for_export(fixed, "grid_sample", 20, True)
    for name in ("webgpu>=1.30", "webgpu==1.30.1", "webgpu<1.31"):
        older = resolve_target(name)
        assert older.method == "gather" and "no GridSample" in older.rules, name
        with pytest.raises(ValueError, match="#32275"):
            hooks.for_export(older, "grid_sample", 17, True)


def test_tensorrt_native_only_where_every_release_has_the_plugin():
    for name in ("tensorrt<10.1", "tensorrt==10.0", "tensorrt>=8.6"):
        with pytest.raises(ValueError, match=r"mishandles native.*plugin from 10.1"):
            hooks.for_export(name, "native", 19, True)
        assert "no DeformConv" in resolve_target(name).rules
    recent = resolve_target("tensorrt>=10.1")
    hooks.for_export(recent, "native", 19, True)
    assert "no DeformConv" not in recent.rules
    for name in ("tensorrt>=10.1", "tensorrt==11.1"):  # onnx-tensorrt PR #1060 is open: no release is spared
        with pytest.raises(ValueError, match=r"GridSample-20.*PR #1060"):
            hooks.for_export(name, "grid_sample", 20, True)


def test_openvino_reads_the_installed_version_and_marks_unmeasured_pins():
    version = installed(FAMILIES["openvino"])
    assert version == Version(metadata.version("openvino"))
    target = resolve_target("openvino")
    assert f"OpenVINO {version} (installed)" in target.runtime
    assert resolve_target("openvino==2025.1").status == "measured here"
    old = resolve_target("openvino<2023.3")
    assert old.status == "read" and "not measured" in old.reason and old.method == "grid_sample"


def test_a_runtime_not_installed_means_any_version(monkeypatch):
    monkeypatch.setitem(
        FAMILIES, "webgpu", dataclasses.replace(FAMILIES["webgpu"], dists=("no-such-dist-deform-onnx",))
    )
    assert "any version" in resolve_target("webgpu").runtime


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("webgpu=1.30", r"bad version pin 'webgpu=1.30'.*e\.g\. webgpu>=1\.30"),
        ("tensorrt>=ten", r"bad version pin 'tensorrt>=ten'"),
        ("openvino 2026", r"bad version pin 'openvino2026'"),
        ("tensorrt>=99", r"'tensorrt>=99' admits no TensorRT release"),
        ("webgpu>=1.30,<1.20", r"admits no onnxruntime-web release"),
    ],
)
def test_bad_pins_are_one_line_errors(name, match):
    with pytest.raises(ValueError, match=match) as info:
        resolve_target(name)
    assert "\n" not in str(info.value)


def test_names_that_only_start_like_a_family_are_not_pins():
    assert resolve_target("tensorrt-rtx").name == "tensorrt-rtx"
    assert resolve_target("openvino-extension").name == "openvino-extension"
    with pytest.raises(ValueError, match="unknown target 'webgpux'"):
        resolve_target("webgpux")


def test_cli_lists_the_targets_with_sources_and_refuses_bad_pins():
    runner = CliRunner(env={"COLUMNS": "4000"})  # one line per row: the sources are not folded
    result = runner.invoke(app, ["targets"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    for needle in ("rknn", "qnn", "hailo", "rknn_model_zoo#366", "hailo_model_zoo#161", "QNN-ExecutionProvider.md",
                   "onnxruntime#32275", "PR #1060", "grid_sample@20", "gather@13"):  # fmt: skip
        assert needle in text, needle
    result = runner.invoke(app, ["targets", "webgpu>=1.30"])
    assert result.exit_code == 0 and "onnxruntime-web>=1.30" in " ".join(result.stdout.split()), result.output
    result = runner.invoke(app, ["targets", "webgpu=1"])
    assert result.exit_code == 2 and "bad version pin" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
