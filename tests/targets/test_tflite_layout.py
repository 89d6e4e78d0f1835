"""The tflite runner reads each input's and output's layout from onnx2tf, not from shapes alone.

onnx2tf makes every 3-D to 5-D input channels-last and leaves each output as its graph left it. A value whose
channel and spatial sizes are equal (a Conv2d's ``[1, 8, 8, 8]``, a Conv1d's ``[1, 8, 8]``) has the same shape
either way: the runner used to pick a layout by shape, fed such an input channels-first and read such an
output as the file's layout, so a right file came out 2.4 off PyTorch in LiteRT (measured here; a
``[1, 8, 8, 9]`` input ran right). The runner now feeds every 3-D to 5-D input channels-last (onnx2tf 1.29's
ops/Input.py) and reads a square output in the layout onnx2tf's converter for its op gives it (a Conv's:
channels-last); a square output whose op's layout is not known (a Transpose's) is refused as ambiguous, never
guessed by which reading matches. One onnx2tf conversion per file; expected values are PyTorch's.
"""

from __future__ import annotations

import os

import onnx
import pytest
import torch
from onnx import helper

from deform_onnx.runtimes.deployed.check import check_runtimes

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))
NEEDS_TFLITE = pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")


class SquareConvs(torch.nn.Module):
    """A Conv2d on ``[1, 8, 8, 8]`` and a Conv1d on ``[1, 8, 8]``: C == H == W, C == L."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.conv1 = torch.nn.Conv1d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.conv2(x), self.conv1(s)


def _args() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(1, 8, 8, 8, generator=g), torch.randn(1, 8, 8, generator=g)


@pytest.fixture(scope="module")
def square_file(tmp_path_factory):
    model, args = SquareConvs().eval(), _args()
    path = tmp_path_factory.mktemp("layout") / "square.onnx"
    torch.onnx.export(model, args, path, input_names=["x", "s"], output_names=["y", "z"], dynamo=False,
                      opset_version=17)  # fmt: skip
    return path, model, args


@NEEDS_TFLITE
def test_square_inputs_and_outputs_run_right(square_file) -> None:
    path, model, args = square_file
    row = check_runtimes(path, ["tflite"], model=model, args=args, repeats=1)[0]
    assert row.error is None, row.error
    assert row.ok, row.failure
    assert [n for n, _ in row.outputs] == ["y", "z"]


@NEEDS_TFLITE
def test_a_really_transposed_output_is_refused(square_file, tmp_path) -> None:
    """Planted: the file's ``y`` is the Conv's output moved channels-last (the same shape); PyTorch's is not.
    Reading it either way until one matches would pass it."""
    path, model, args = square_file
    m = onnx.load(path)
    g = m.graph
    conv_out = "y_nchw"
    for node in g.node:
        node.output[:] = [conv_out if o == "y" else o for o in node.output]
    g.node.append(helper.make_node("Transpose", [conv_out], ["y"], perm=[0, 2, 3, 1]))
    planted = tmp_path / "transposed.onnx"
    onnx.save(m, planted)
    row = check_runtimes(planted, ["tflite"], model=model, args=args, repeats=1)[0]
    assert not row.ok
    # refused as ambiguous (a Transpose's square output) or by the comparison of 'y'
    assert (row.error and "'y'" in row.error and "channels-first and channels-last" in row.error) or (
        row.failure and "'y'" in row.failure
    ), (row.error, row.failure)


def test_output_layouts_follow_the_op_onnx2tf_converted() -> None:
    """The rule itself, on a hand-built graph (no conversion): a Conv's output and a Relu of it are channels-last,
    a Reshape's to a static shape and an ArgMax over channels are laid out as the file, a Transpose's is not known;
    a converter record naming another op than the graph makes it not known."""
    from onnx import TensorProto, numpy_helper

    from deform_onnx.runtimes.deployed.tflite_layout import output_layouts

    v = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    w = numpy_helper.from_array(torch.zeros(8, 8, 1, 1).numpy(), "w")
    shape = numpy_helper.from_array(torch.tensor([1, 8, 8, 8]).numpy(), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["c", "shape"], ["re"]),
        helper.make_node("ArgMax", ["x"], ["a"], axis=1, keepdims=0),
        helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Add", ["c", "re"], ["mixed"]),
    ]
    outs = ["c", "r", "re", "a", "t", "mixed"]
    graph = helper.make_graph(nodes, "g", [v("x", [1, 8, 8, 8])], [v(n, None) for n in outs], [w, shape])
    records = {"re": {"optype": "Reshape", "shape": [1, 8, 8, 8]}, "a": {"optype": "ArgMax", "shape": [1, 8, 8]}}
    got = output_layouts(graph, records, outs)
    assert got == {"c": "channels-last", "r": "channels-last", "re": "as file", "a": "as file", "t": None,
                   "mixed": None}  # fmt: skip
    assert output_layouts(graph, {"c": {"optype": "Transpose"}}, ["c", "r"]) == {"c": None, "r": None}


def test_squeezed_channel_of_a_channels_last_value_is_laid_out_as_the_file() -> None:
    """DBNet's ``sigmoid(binarize(img).squeeze(1))``: onnx2tf squeezes a ``ConvTranspose``'s channels-last
    ``[N, H, W, 1]`` on its last axis (``convert_axis``), which leaves ``[N, H, W]``, the file's layout; a squeeze
    of another axis, or of a value of unknown layout, stays not known."""
    from onnx import TensorProto, numpy_helper

    from deform_onnx.runtimes.deployed.tflite_layout import output_layouts

    v = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    w = numpy_helper.from_array(torch.zeros(8, 1, 2, 2).numpy(), "w")
    one, two = (numpy_helper.from_array(torch.tensor([a]).numpy(), f"axis{a}") for a in (1, 2))
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w"], ["up"], strides=[2, 2]),
        helper.make_node("Squeeze", ["up", "axis1"], ["sq"]),
        helper.make_node("Sigmoid", ["sq"], ["prob"]),
        helper.make_node("Squeeze", ["up", "axis2"], ["other"]),  # not the channel axis
        helper.make_node("Transpose", ["up"], ["t"], perm=[0, 1, 3, 2]),
        helper.make_node("Squeeze", ["t", "axis1"], ["unknown"]),
    ]
    outs = ["up", "prob", "other", "unknown"]
    graph = helper.make_graph(nodes, "g", [v("x", [1, 8, 8, 8])], [v(n, None) for n in outs], [w, one, two])
    records = {"up": {"optype": "ConvTranspose", "shape": [1, 1, 16, 16]}}
    got = output_layouts(graph, records, outs)
    assert got == {"up": "channels-last", "prob": "as file", "other": None, "unknown": None}


@NEEDS_TFLITE
def test_dbnet_head_square_probability_map_runs_in_litert() -> None:
    """DBNet++'s ``DBHead`` (``tests/real_code/dbnetpp_style.py``: two ``ConvTranspose2d``, ``squeeze(1)``,
    ``sigmoid``) on an 8x8 map gives a square ``[1, 32, 32]`` map, which the runner refused as ambiguous before
    it knew onnx2tf's ``Squeeze``; now target tflite writes it, run in LiteRT against PyTorch."""
    import io

    import numpy as np
    import onnxruntime as ort

    import deform_onnx
    from real_code.dbnetpp_style import DBHead

    torch.manual_seed(0)
    model, x = DBHead(8).eval(), torch.randn(1, 8, 8, 8)
    buf = io.BytesIO()
    report = deform_onnx.export(model, (x,), buf, target="tflite", input_names=["x"])
    assert any(line.startswith("tflite") for line in report.runtimes), report.runtimes
    (got,) = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    with torch.no_grad():
        want = model(x).numpy()
    assert got.shape == want.shape == (1, 32, 32)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)
