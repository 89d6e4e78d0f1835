"""Case c38: the ncnn target checks the whole graph: indexing ncnn cannot load is rewritten or refused.

voxelmorph's SpatialTransformer (tests/real_code/voxelmorph_style.py) writes ``ScatterElements`` (its
in-place ``new_locs[:, i, ...] = ...``) and ``GatherND`` (``new_locs[..., [1, 0]]``); ncnn loads neither.
``target="ncnn"`` rewrites both as ``Slice`` + ``Concat`` (targets/repair_index.py) and the file runs in
ncnn; indexing the rewrites do not cover is refused in one line naming the op and the model code.
Expected values are PyTorch's on the same tensors.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import deform_onnx
from deform_onnx.targets.repair_index import index_list_as_concat, scatter_as_concat
from real_code.voxelmorph_style import TinyVxm
from util import ATOL, load_cases, op_types


def _c38():
    size = tuple(int(s) for s in load_cases()["c38"]["input"]["x"].split()[0].split("x"))
    torch.manual_seed(38)
    return TinyVxm(size[2:]).eval(), torch.randn(*size)


NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))


@pytest.fixture(scope="module")
def c38_ncnn(tmp_path_factory):
    """The c38 export with ``target="ncnn"``: by default the target also runs the file in ncnn before writing."""
    model, x = _c38()
    path = tmp_path_factory.mktemp("c38") / "vxm.onnx"
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    return model, x, path, deform_onnx.export(model, (x,), path, target="ncnn", **opt_out)


def test_c38_target_file_has_only_ops_ncnn_loads(c38_ncnn):
    model, x, path, report = c38_ncnn
    ops = op_types(onnx.load(str(path)))
    assert "ScatterElements" not in ops and "GatherND" not in ops, ops
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0], want, atol=ATOL, rtol=0)


@pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")
def test_c38_runs_in_ncnn(c38_ncnn):
    """The target's file was run in ncnn (pnnx, its cached venv) within the float32 rule before it was written."""
    *_, report = c38_ncnn
    assert any(line.startswith("ncnn") for line in report.runtimes), report.runtimes


def test_partial_scatter_is_refused_naming_the_op(tmp_path):
    """An assignment to part of an index (``x[:, 0, :2] = y``) is no single-index scatter: refused in one line."""

    class Partial(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            y[:, 0, :2] = x[:, 1, :2] + 1
            return y

    with pytest.raises(ValueError, match=r"Scatter(Elements|ND) node .* in-place assignment") as info:
        deform_onnx.export(
            Partial(), (torch.randn(1, 2, 4, 4),), tmp_path / "p.onnx", target="ncnn", verify_runtimes=()
        )
    assert "\n" not in str(info.value) and not (tmp_path / "p.onnx").exists()
    assert "test_ncnn_indexing.py:" in str(info.value), info.value  # the model's line, where the exporter recorded it
    assert "in forward: y[:, 0, :2] = x[:, 1, :2] + 1" in str(info.value), info.value


def _run(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("index", [0, 1, 2, -1])
def test_scatter_as_concat_keeps_values(index):
    """``ScatterElements`` of one index on axis 1 (first, middle, last, negative) equals its Slice + Concat."""
    data = helper.make_tensor_value_info("data", TensorProto.FLOAT, [2, 3, 4])
    upd = helper.make_tensor_value_info("upd", TensorProto.FLOAT, [2, 1, 4])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3, 4])
    idx = numpy_helper.from_array(np.full((2, 1, 4), index, dtype=np.int64), "idx")
    node = helper.make_node("ScatterElements", ["data", "idx", "upd"], ["out"], axis=1)
    model = helper.make_model(helper.make_graph([node], "g", [data, upd], [out], [idx]), opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
    rng = np.random.default_rng(index + 5)
    feeds = {"data": rng.standard_normal((2, 3, 4), np.float32), "upd": rng.standard_normal((2, 1, 4), np.float32)}
    want = _run(model, feeds)
    assert scatter_as_concat(model) and "ScatterElements" not in op_types(model)
    onnx.checker.check_model(model, full_check=True)
    np.testing.assert_array_equal(_run(model, feeds), want)


def test_index_list_as_concat_keeps_values():
    """``GatherND`` with constant ``[n, 1]`` indices (repeats and a negative index) equals its Slice + Concat."""
    data = helper.make_tensor_value_info("data", TensorProto.FLOAT, [3, 2, 5])
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [4, 2, 5])
    idx = numpy_helper.from_array(np.array([[2], [0], [-2], [2]], dtype=np.int64), "idx")
    node = helper.make_node("GatherND", ["data", "idx"], ["out"])
    model = helper.make_model(helper.make_graph([node], "g", [data], [out], [idx]), opset_imports=[helper.make_opsetid("", 17)])  # fmt: skip
    feeds = {"data": np.random.default_rng(0).standard_normal((3, 2, 5), np.float32)}
    want = _run(model, feeds)
    assert index_list_as_concat(model) and "GatherND" not in op_types(model)
    onnx.checker.check_model(model, full_check=True)
    np.testing.assert_array_equal(_run(model, feeds), want)
