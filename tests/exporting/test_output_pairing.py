"""Verification pairs the file's outputs with PyTorch's one for one (issue 32, item 1).

PyTorch's return value is flattened as the exporters flatten it (``torch.utils._pytree``: dicts in
insertion order, ``None`` dropped, transformers' ``ModelOutput`` by its set fields); a file with an
output missing, an extra one, or two outputs swapped is refused, and so is an output verification
cannot compare (a string, an unknown container), in one line. Each container's file is run here in
ONNX Runtime and compared, output by output in the expected order, with the model's own tensors.
"""

from __future__ import annotations

import collections
import dataclasses
import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import deform_onnx
from deform_onnx.core.errors import VerificationError
from deform_onnx.exporting.verification import verify
from util import assert_close

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::UserWarning")

Pair = collections.namedtuple("Pair", "first second")


@dataclasses.dataclass
class Plain:
    """A dataclass no one registered with pytree (both exporters refuse it; verify() flattens its fields)."""

    first: torch.Tensor
    skipped: object
    second: torch.Tensor


@dataclasses.dataclass
class Registered:
    first: torch.Tensor
    second: torch.Tensor


torch.export.register_dataclass(Registered, serialized_type_name="test_output_pairing.Registered")


class Box:
    """A container pytree does not know."""

    def __init__(self, t):
        self.t = t


class Heads(torch.nn.Module):
    """``x [1, 2, 5, 5]`` -> a 3x3 convolution ``a`` and ``b = 2a - 1`` (same shape, different values),
    returned in the container ``kind`` names."""

    def __init__(self, kind: str = "tuple"):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
        self.kind = kind

    def forward(self, x):
        a = self.conv(x)
        b = 2 * a - 1
        kind = self.kind
        if kind == "tuple":
            return a, b
        if kind == "dict":  # insertion order, not sorted: "zeta" is written first
            return {"zeta": a, "alpha": b}
        if kind == "namedtuple":
            return Pair(a, b)
        if kind == "registered dataclass":
            return Registered(a, b)
        if kind == "plain dataclass":
            return Plain(a, None, b)
        if kind == "model output":
            from transformers.modeling_outputs import BaseModelOutput

            return BaseModelOutput(last_hidden_state=a, hidden_states=None, attentions=(b, a.relu()))
        if kind == "nested, None between":
            return a, None, (b, [a.relu(), None])
        if kind == "shape number":  # a Python int from a shape: the TorchScript exporter writes a 0-d output
            return a, x.shape[-1], b
        if kind == "string":
            return a, "label"
        if kind == "box":
            return a, Box(b)
        raise AssertionError(kind)


#: kind -> the model's tensors in the order the file must hold them, from its return value.
EXPECTED_ORDER = {
    "dict": lambda out: [out["zeta"], out["alpha"]],
    "namedtuple": lambda out: [out.first, out.second],
    "registered dataclass": lambda out: [out.first, out.second],
    "model output": lambda out: [out.last_hidden_state, *out.attentions],
    "nested, None between": lambda out: [out[0], out[2][0], out[2][1][0]],
    "shape number": lambda out: [out[0], torch.tensor(out[1]), out[2]],
}


def _x() -> torch.Tensor:
    return torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(1))


def _run(data: bytes, x: torch.Tensor) -> list[np.ndarray]:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})


@pytest.fixture(scope="module")
def two_outputs():
    """The tuple model, its input, its file (default arguments) as a proto, and the export's report."""
    model, x = Heads().eval(), _x()
    buf = io.BytesIO()
    report = deform_onnx.export(model, (x,), buf)
    return model, x, onnx.load_from_string(buf.getvalue()), report


@pytest.mark.parametrize("kind", ["tuple", *EXPECTED_ORDER])
def test_every_container_is_compared_output_by_output(two_outputs, kind):
    """Each container's file has one output per tensor, in the exporters' order; verify checks each one."""
    model, x = Heads(kind).eval(), _x()
    if kind == "tuple":
        data, report = two_outputs[2].SerializeToString(), two_outputs[3]
    else:  # the dynamo exporter fails on a Python number output; the TorchScript exporter writes it
        buf = io.BytesIO()
        report = deform_onnx.export(model, (x,), buf, dynamo=kind != "shape number")
        data = buf.getvalue()
    with torch.no_grad():
        out = model(x)
        want = [t.numpy() for t in (list(out) if kind == "tuple" else EXPECTED_ORDER[kind](out))]
    got = _run(data, x)
    assert len(got) == len(want) == len(report.checks), (len(got), len(want), list(report.checks))
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert_close(g, w, what=kind)  # 1e-4: measured max 4.8e-7 (float32 convolution, 18 terms)


def test_a_plain_dataclass_is_flattened_by_its_fields(two_outputs):
    """verify() on a dataclass pytree does not know: its fields in order, None dropped (register_dataclass's order)."""
    _, x, proto, _ = two_outputs
    verified = verify(Heads("plain dataclass").eval(), (x,), proto.SerializeToString())
    assert list(verified.checks) == [o.name for o in proto.graph.output] and len(verified.checks) == 2


def test_a_deleted_output_is_refused_naming_both_sides(two_outputs):
    model, x, proto, _ = two_outputs
    fewer = onnx.ModelProto()
    fewer.CopyFrom(proto)
    kept = fewer.graph.output[0].name
    del fewer.graph.output[1]
    with pytest.raises(VerificationError) as info:
        verify(model, (x,), fewer.SerializeToString())
    text = str(info.value)
    assert f"the file has 1 output ('{kept}' float32 [1, 3, 5, 5]), PyTorch returns 2" in text, text
    assert "[0] float32 [1, 3, 5, 5], [1] float32 [1, 3, 5, 5]" in text and "\n" not in text, text


def test_an_extra_output_is_refused(two_outputs):
    """The convolution's input as a third graph output: PyTorch returns two."""
    model, x, proto, _ = two_outputs
    more = onnx.ModelProto()
    more.CopyFrom(proto)
    more.graph.output.append(
        onnx.helper.make_tensor_value_info(proto.graph.input[0].name, onnx.TensorProto.FLOAT, None)
    )
    with pytest.raises(VerificationError, match=r"the file has 3 outputs .*, PyTorch returns 2"):
        verify(model, (x,), more.SerializeToString())


def test_two_outputs_of_equal_shape_swapped_are_refused(two_outputs):
    """Same shapes, different values (a and 2a - 1): the swap is named, with both orders."""
    model, x, proto, _ = two_outputs
    swapped = onnx.ModelProto()
    swapped.CopyFrom(proto)
    first, second = (onnx.ValueInfoProto(), onnx.ValueInfoProto())
    first.CopyFrom(proto.graph.output[1])
    second.CopyFrom(proto.graph.output[0])
    del swapped.graph.output[:]
    swapped.graph.output.extend([first, second])
    with pytest.raises(VerificationError, match=r"holds PyTorch's output \[1\], not \[0\].*not in the order"):
        verify(model, (x,), swapped.SerializeToString())


@pytest.mark.parametrize(("kind", "named"), [("string", "output [1] of the model is a str"),
                                             ("box", "output [1] of the model is a test_output_pairing.Box")])  # fmt: skip
def test_an_output_verify_cannot_compare_is_one_line(two_outputs, kind, named):
    """A string (the TorchScript exporter drops it) or an unknown container: never compared on nothing."""
    _, x, proto, _ = two_outputs
    with pytest.raises(VerificationError) as info:
        verify(Heads(kind).eval(), (x,), proto.SerializeToString())
    assert str(info.value).startswith(named) and "verify=False" in str(info.value) and "\n" not in str(info.value)
