"""quantize of a lowered file: its recorded deformable layers rebuilt as DeformConv (issue 31), on small layers.

The configurations the bundled example lacks (tests/quantize/test_quantize.py has it: stride 2, groups 2,
offset groups 2): no mask (DCNv1), a (3, 1) kernel with dilation 2, no bias, a (1, 2) stride. One default
export shared by the module; everything else runs on that file.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn
from torchvision.ops import DeformConv2d

import deform_onnx
from deform_onnx.builder import written
from deform_onnx.quantize.rebuild import rebuild_deform_convs


class Layers(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.off_a = nn.Conv2d(4, 6, 3, padding=1)
        self.dcn_a = DeformConv2d(4, 6, (3, 1), padding=(2, 0), dilation=(2, 1), bias=False)  # DCNv1
        self.off_b = nn.Conv2d(6, 27, 3, stride=(1, 2), padding=1)
        self.dcn_b = DeformConv2d(6, 4, 3, stride=(1, 2), padding=1)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        x = torch.relu(self.dcn_a(x, self.off_a(x) * 2))
        o = self.off_b(x)
        return self.dcn_b(x, o[:, :18] * 2, torch.sigmoid(o[:, 18:]))


def image(seed: int) -> torch.Tensor:
    return torch.randn(1, 3, 12, 10, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def lowered(tmp_path_factory):
    model = Layers().eval()
    path = tmp_path_factory.mktemp("rebuild") / "layers.onnx"
    deform_onnx.export(model, (image(0),), path)  # the defaults: grid_sample at 17, dynamo
    return model, path


def feed(proto, x):
    return {proto.graph.input[0].name: x.numpy()}


def test_each_configuration_is_read_back_as_its_deform_conv(lowered):
    model, path = lowered
    proto = onnx.load(path)
    rebuilt, count, notes = rebuild_deform_convs(proto, feed(proto, image(1)))
    assert (count, notes) == (2, [])
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in rebuilt.graph.initializer}
    a, b = (n for n in rebuilt.graph.node if n.op_type == "DeformConv")
    assert len(a.input) == 4 and len(b.input) == 5  # DCNv1 has no mask input
    attrs = {at.name: list(at.ints) for at in a.attribute if at.ints}
    assert attrs["kernel_shape"] == [3, 1] and attrs["dilations"] == [2, 1] and attrs["pads"] == [2, 0, 2, 0]
    for node, layer in ((a, model.dcn_a), (b, model.dcn_b)):
        weight = layer.weight.detach().numpy()
        bias = np.zeros(weight.shape[0]) if layer.bias is None else layer.bias.detach().numpy()
        assert np.abs(inits[node.input[1]] - weight).max() <= 1e-6 * np.abs(weight).max()
        assert np.abs(inits[node.input[3]] - bias).max() <= 1e-6
    native = deform_onnx.lower(rebuilt, method="native", opset=19)
    x = image(2)
    got = ort.InferenceSession(native.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feed(native, x)
    )
    with torch.no_grad():
        assert np.abs(got[0] - model(x).numpy()).max() <= 1e-4


def test_a_record_that_does_not_match_its_subgraph_leaves_that_layer_as_it_is(lowered):
    """Plant a wrong dilation in the record of the first layer: its probes are no convolution of that spec."""
    _, path = lowered
    proto = onnx.load(path)
    calls = json.loads(next(p.value for p in proto.metadata_props if p.key == written.KEY))
    calls[0]["spec"]["dilation"] = [1, 1]
    calls[0]["spec"]["padding"] = [1, 0]  # the same output size: only the sample rows are wrong
    next(p for p in proto.metadata_props if p.key == written.KEY).value = json.dumps(calls)
    rebuilt, count, notes = rebuild_deform_convs(proto, feed(proto, image(1)))
    assert count == 1 and len(notes) == 1
    assert calls[0]["values"]["output"] in notes[0] and "no convolution of its record's spec" in notes[0]
    assert [n.op_type for n in rebuilt.graph.node].count("DeformConv") == 1
    assert "GridSample" in {n.op_type for n in rebuilt.graph.node}  # the first layer, as it was lowered


def test_quantize_takes_the_pytorch_model_and_a_file_without_a_record_says_so(lowered, tmp_path):
    """quantize(model, ..., args=) exports what the INT8 form needs itself; a TorchScript export (every value
    renamed: no record) is quantized as it is, with its contraction float, and the note says what to do;
    method="native" keeps a rebuilt layer DeformConv."""
    model, _ = lowered
    calibration = [image(s) for s in (3, 4, 5)]
    report = deform_onnx.quantize(model, tmp_path / "m.onnx", calibration, args=(image(0),), eval_inputs=image(6))
    assert report.form.startswith("DeformConv sampler, weight-first integer") and report.rebuilt == 0
    assert str(report.src).startswith("Layers (exported:") and (tmp_path / "m.onnx").is_file()
    plain = tmp_path / "torchscript.onnx"
    deform_onnx.export(model, (image(0),), plain, dynamo=False)
    assert [c.values for c in written.read(onnx.load(plain))] == [{}, {}]  # forms only
    report = deform_onnx.quantize(plain, tmp_path / "t.onnx", calibration, eval_inputs=image(6))
    # its lowering's accumulating Gemms stay float (the first kernel row's MatMul is quantized)
    assert report.rebuilt == 0 and report.form.startswith("GridSample sampler") and "float contraction" in report.form
    assert any("no record of its deformable layers" in n for n in report.notes)
    # method="native" on the default export: the rebuilt layers stay DeformConv (float), at opset 19
    report = deform_onnx.quantize(lowered[1], tmp_path / "n.onnx", calibration, method="native", eval_inputs=image(6))
    ops = [n.op_type for n in onnx.load(tmp_path / "n.onnx").graph.node]
    assert report.form == "native DeformConv (float)" and report.rebuilt == 2 and ops.count("DeformConv") == 2
    with pytest.raises(ValueError, match="args="):
        deform_onnx.quantize(model, tmp_path / "never.onnx", calibration)
    assert not (tmp_path / "never.onnx").exists()


def test_a_native_export_lowered_by_lower_keeps_a_true_record(lowered, tmp_path):
    """deform_onnx.lower rewrites the recorded DeformConv nodes: the record's forms follow (it said native),
    and quantize's rebuild finds the layers in the lowered file."""
    model, _ = lowered
    native = tmp_path / "native.onnx"
    deform_onnx.export(model, (image(0),), native, method="native", opset_version=19)
    assert [c.form for c in written.read(onnx.load(native))] == ["native", "native"]
    proto = deform_onnx.lower(native, method="grid_sample")
    assert [c.form for c in written.read(proto)] == ["grid_sample", "grid_sample"]
    rebuilt, count, notes = rebuild_deform_convs(proto, feed(proto, image(1)))
    assert (count, notes) == (2, []) and [n.op_type for n in rebuilt.graph.node].count("DeformConv") == 2


def test_a_dynamic_export_quantizes_and_runs_at_another_size(tmp_path):
    """A file exported with dynamic N/H/W quantizes (ONNX Runtime's symbolic shape inference asserts on a Range
    over a dynamic size: a traceback before), its layers rebuilt from the record, and the INT8 file keeps its
    cosine to PyTorch at the calibration size and at a batch and size it was not calibrated at. (On these small
    layers rather than the bundled example: the example's dynamic export took 20-40 s of the suite.)"""
    model = Layers().eval()
    dynamic = tmp_path / "dynamic.onnx"
    deform_onnx.export(model, (image(0),), dynamic, input_names=["x"], dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}})
    int8 = tmp_path / "dynamic_int8.onnx"
    report = deform_onnx.quantize(dynamic, int8, [image(s) for s in (3, 4, 5)], eval_inputs=image(6))
    assert report.rebuilt == 2
    session = ort.InferenceSession(str(int8), providers=["CPUExecutionProvider"])
    other = torch.randn(2, 3, 20, 14, generator=torch.Generator().manual_seed(9))
    for x in (image(6), other):
        got = session.run(None, feed(onnx.load(int8), x))[0]
        with torch.no_grad():
            want = model(x).numpy()
        assert got.shape == want.shape
        cosine = float(got.ravel() @ want.ravel() / (np.linalg.norm(got) * np.linalg.norm(want)))
        assert cosine >= 0.99  # the bar of tests/quantize/test_quantize.py (MIN_COSINE, reasoned there)
