"""export() picks the output format from the path's suffix (or format=) before any work."""

from __future__ import annotations

import io

import pytest
import torch

import deform_onnx
from deform_onnx.formats import FORMATS, Format, format_for, register_format, require, unregister_format


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("m.onnx", "onnx"),
        ("M.PTE", "executorch"),
        ("out/m.tflite", "litert"),
        ("m.mlpackage/", "coreml"),
        ("m.xml", "openvino"),
    ],
)
def test_suffix_picks_the_format(path, name):
    assert format_for(path).name == name


def test_file_object_is_onnx_unless_named():
    assert format_for(io.BytesIO()).name == "onnx"
    assert format_for(io.BytesIO(), "executorch").name == "executorch"


def test_unknown_suffix_is_one_line_before_any_work(tmp_path):
    class Boom(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("the model must not run before the suffix is checked")

    with pytest.raises(ValueError, match=r"suffix '\.bin'.*\.pte \(ExecuTorch\)") as info:
        deform_onnx.export(Boom(), (torch.zeros(1),), tmp_path / "m.bin")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="unknown format 'pt'"):
        deform_onnx.export(Boom(), (torch.zeros(1),), tmp_path / "m.onnx", format="pt")
    assert list(tmp_path.iterdir()) == []


def test_missing_extra_names_it():
    fmt = register_format(
        Format("toy", (".toy",), "Toy", writer="nowhere:write", extra="toy", modules=("no_such_mod_x",))
    )
    try:
        with pytest.raises(ModuleNotFoundError, match=r"needs no_such_mod_x: pip install 'deform-onnx\[toy\]'"):
            require(fmt)
        with pytest.raises(ValueError, match="registered already"):
            register_format(Format("toy2", (".toy",), "Toy"))
    finally:
        unregister_format("toy")
    assert "toy" not in FORMATS
