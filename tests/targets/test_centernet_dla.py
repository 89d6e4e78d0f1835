"""CenterNet / FairMOT's DLA-34 with DCNv2 up-sampling and the heat-map NMS (``tests/real_code/centernet_dla_dcn_style.py``).

- Target ``ncnn``: the decode's ``keep = (hmax == heat).float()`` is an ONNX ``Equal``, which pnnx writes as
  ``torch.eq`` and ncnn does not load ("layer torch.eq not exists or registered": the export's run in ncnn refused
  the file). The target applies the repair ``"float Equal as arithmetic"`` (``targets/repair_equal.py``:
  ``1 - min(ceil(|a - b|), 1)``, the same 0/1 for finite operands). Checked here: the repair keeps ONNX Runtime's
  values of ``Equal`` on equal, adjacent (one ulp apart), subnormal and large floats; the model's file holds no
  ``Equal``, ran in ncnn and gives PyTorch's values (without the repair the export's run in ncnn refuses it).
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import deform_onnx
from deform_onnx.targets import resolve_target
from deform_onnx.targets.repair_equal import float_equal_as_arithmetic
from real_code.centernet_dla_dcn_style import build
from util import ATOL

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))
NEEDS_NCNN = pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_rewrite_keeps_the_onnx_values(dtype):
    """``Cast(Equal(a, b))`` to the operands' type and to float32: the rewritten graph gives ONNX Runtime's
    values of the original on equal, one-ulp-apart, subnormal, signed-zero, large and broadcast operands; an
    ``Equal`` read by a non-``Cast`` node (``Where``) is left."""
    elem = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.float64: TensorProto.DOUBLE}[dtype]
    info = np.finfo(dtype)
    a = np.array([0, 1, 1, -0.0, info.smallest_subnormal, info.tiny, info.max, -info.max, 3.5, 1e-3], dtype)
    b = np.array([0, 1, np.nextafter(dtype(1), dtype(2)), 0.0, 0, info.tiny, info.max, info.max, 3.5, 2e-3], dtype)
    nodes = [
        helper.make_node("Equal", ["a", "b"], ["eq"], name="eq"),
        helper.make_node("Cast", ["eq"], ["keep"], to=elem),
        helper.make_node("Cast", ["eq"], ["keep32"], to=TensorProto.FLOAT),
        helper.make_node("Equal", ["a", "s"], ["eqs"], name="eqs"),  # broadcast against a 1-element input
        helper.make_node("Cast", ["eqs"], ["keeps"], to=elem),
        helper.make_node("Equal", ["a", "b"], ["eqw"], name="eqw"),  # read by Where: left
        helper.make_node("Where", ["eqw", "a", "b"], ["picked"]),
    ]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "g",
        [value("a", elem, [10]), value("b", elem, [10]), value("s", elem, [1])],
        [
            value("keep", elem, [10]),
            value("keep32", TensorProto.FLOAT, [10]),
            value("keeps", elem, [10]),
            value("picked", elem, [10]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"a": a, "b": b, "s": np.array([3.5], dtype)}
    want = _ort(model, feeds)
    assert float_equal_as_arithmetic(model) == ["float Equal written as arithmetic on 2 node(s)"]
    onnx.checker.check_model(model, full_check=True)
    assert [n.name for n in model.graph.node if n.op_type == "Equal"] == ["eqw"]
    for g, w in zip(_ort(model, feeds), want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_an_integer_equal_is_left():
    """Integers (argmax indices compared) are not this repair's: their ``Equal`` stays."""
    nodes = [
        helper.make_node("Equal", ["i", "j"], ["eq"]),
        helper.make_node("Cast", ["eq"], ["y"], to=TensorProto.FLOAT),
    ]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "g",
        [value("i", TensorProto.INT64, [3]), value("j", TensorProto.INT64, [3])],
        [value("y", TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert float_equal_as_arithmetic(model) == []


def _x() -> torch.Tensor:
    return torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def centernet_ncnn(tmp_path_factory):
    """CenterNet exported with ``target="ncnn"``: by default the export runs the file in ncnn first (a shallow DLA,
    two DCNs, for a quick export: the NMS is the same)."""
    model = build(channels=[4, 8, 8, 16], last_level=3)
    path = tmp_path_factory.mktemp("centernet") / "centernet.onnx"
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    return model, path, deform_onnx.export(model, (_x(),), path, target="ncnn", input_names=["x"], **opt_out)


def test_centernet_nms_for_ncnn_is_written_without_equal(centernet_ncnn):
    model, path, report = centernet_ncnn
    assert "float Equal as arithmetic" in resolve_target("ncnn").repairs
    assert "target 'ncnn': float Equal written as arithmetic on 1 node(s)" in report.repairs
    proto = onnx.load(str(path))
    assert "Equal" not in {n.op_type for n in proto.graph.node}
    x = _x()
    got = _ort(proto, {"x": x.numpy()})
    with torch.no_grad():
        want = [t.numpy() for t in model(x)]
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=ATOL, rtol=ATOL)
    if not NO_RUNTIMES:
        assert any(line.startswith("ncnn") for line in report.runtimes), report.runtimes
