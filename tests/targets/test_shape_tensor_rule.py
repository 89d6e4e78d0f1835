"""The TensorRT rule "integer-only shape tensors" judges a value by where it flows (gjhhust/YOLOFT#1).

A float ``Range`` that feeds data (deform-onnx's own ``torch.linspace`` rewrite, InternImage's reference
points) is no shape tensor; a float value that reaches a shape input (through a ``Range`` or a ``Cast``) still
is, and is refused. The planted graphs are built by hand; the model is InternImage's DCNv3 (case c27's code,
``tests/real_code/internimage_style.py``) exported with ``target="tensorrt"`` on the TorchScript path.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import deform_onnx
from deform_onnx.targets.rules import integer_shape_tensors
from real_code.internimage_style import SegNet
from util import ATOL


def _graph(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _scalar(name, dtype, value):
    return helper.make_tensor(name, dtype, [], [value])


def _float_range(limit: str = "n_f"):
    """``Range(0.5, Cast(n, float), 1.0)``: a float Range over a size read with ``Shape``."""
    return [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["n"], axis=0),
        helper.make_node("Cast", ["n"], [limit], to=TensorProto.FLOAT),
        helper.make_node("Range", ["start", limit, "step"], ["r"]),
    ], [
        _scalar("one", TensorProto.INT64, 1),
        _scalar("start", TensorProto.FLOAT, 0.5),
        _scalar("step", TensorProto.FLOAT, 1.0),
    ]


X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "W"])


def test_a_float_range_feeding_data_is_no_shape_tensor():
    nodes, inits = _float_range()
    nodes.append(helper.make_node("Add", ["x", "r"], ["y"]))
    model = _graph(nodes, [X], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "W"])], inits)
    assert integer_shape_tensors(model) == []


def test_a_float_range_reaching_a_reshape_is_refused():
    nodes, inits = _float_range()
    nodes += [
        helper.make_node("Cast", ["r"], ["ri"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["x", "ri"], ["y"]),
    ]
    model = _graph(nodes, [X], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    found = integer_shape_tensors(model)
    assert len(found) == 1 and "Reshape" in found[0] and "depends on float value" in found[0], found


def test_a_float_cast_into_a_shape_is_still_refused():
    """The planted fault the rule was written for: a shape computed through a float."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["sf", "half"], ["hf"]),
        helper.make_node("Cast", ["hf"], ["h"], to=TensorProto.INT64),
        helper.make_node("Expand", ["x", "h"], ["y"]),
    ]
    inits = [helper.make_tensor("half", TensorProto.FLOAT, [1], [1.0])]
    model = _graph(nodes, [X], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    found = integer_shape_tensors(model)
    assert found and "Expand" in found[0], found


@pytest.mark.parametrize("kwargs", [{"opset_version": 12}, {"dynamo": False}], ids=["opset-12", "dynamo-False"])
def test_dcnv3_exports_for_tensorrt_on_the_torchscript_path(kwargs):
    """Before: "integer-only shape tensors: Range ... depends on float value" for the Range of deform-onnx's own
    ``torch.linspace`` rewrite; now the file is written and matches PyTorch."""
    import onnxruntime as ort

    torch.manual_seed(0)
    model = SegNet().eval()
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(model, (x,), f, target="tensorrt", input_names=["x"], **kwargs)
    assert report.exporter == "torchscript"
    proto = onnx.load_from_string(f.getvalue())
    # TorchScript now knows the padded map's size (exporters/aten_pad.py), so the float Range may be folded to a
    # constant; either way the rule finds no float value reaching a shape (the float-Range cases: the tests above)
    assert integer_shape_tensors(proto) == []
    with torch.no_grad():
        want = model(x).numpy()
    got = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(got, want, rtol=ATOL, atol=ATOL)  # measured: 1.3e-7
