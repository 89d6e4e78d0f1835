"""Properties of the exported graphs (TorchScript exporter) and of register()/unregister().

* grid_sample and gather models hold no ``DeformConv`` node and only standard-domain ops;
* every model declares the requested opset;
* no constant grows with H*W (base grids are O(H + W) or built at run time);
* bad methods and opsets are a clear ``ValueError`` at export time, and no file is written;
* ``unregister()`` restores plain torch's behaviour;
* graphs are dtype-generic: a float64 model holds no float32 constant.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
import torch

import deform_onnx
from deform_onnx.ops.deform_conv.register import LOWERINGS
from deform_onnx.ops.registry import OPS
from util import (
    DCNV2_GROUPED,
    METHOD_MIN_OPSET,
    Config,
    DeformLayer,
    assert_lowering,
    check,
    default_opset,
    export,
    export_and_compare,
    graph_tensors,
    make_inputs,
    method_opsets,
    non_weight_constants,
    op_types,
)

pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor to a Python boolean:torch.jit.TracerWarning")

CONFIGS = {
    "dcnv2-grouped": DCNV2_GROUPED,
    "dcnv1-nobias": Config(N=1, C_in=6, C_out=6, H=6, W=8, kernel=(3, 3), padding=(1, 0), mask=False, bias=False),
}
ALLOWED = [(m, o) for m in METHOD_MIN_OPSET for o in method_opsets(m)]


@functools.cache
def _exported(method: str, opset: int, name: str, dynamic: bool = False) -> onnx.ModelProto:
    """One checked export per (method, opset, config), shared by the tests of this file."""
    cfg = CONFIGS[name]
    deform_onnx.register(method)
    try:
        data = export(DeformLayer(cfg), make_inputs(cfg), opset, dynamic=dynamic)
    finally:
        deform_onnx.unregister()
    return check(data)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("method,opset", ALLOWED, ids=[f"{m}-op{o}" for m, o in ALLOWED])
def test_lowered_ops(method, opset, name, dynamic):
    """Standard lowerings hold no DeformConv and only default-domain ops; native holds one DeformConv."""
    proto = _exported(method, opset, name, dynamic)
    assert_lowering(proto, method, opset)
    assert all(n.domain in ("", "ai.onnx") for n in proto.graph.node), {n.domain for n in proto.graph.node}
    if method != "native":
        assert "DeformConv" not in op_types(proto)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("method,opset", ALLOWED, ids=[f"{m}-op{o}" for m, o in ALLOWED])
def test_declares_requested_opset(method, opset, name, dynamic):
    proto = _exported(method, opset, name, dynamic)
    assert default_opset(proto) == opset
    assert [o.domain for o in proto.opset_import] in ([""], ["ai.onnx"]), list(proto.opset_import)


# -- no O(H*W) constant -------------------------------------------------------------

SIZE_CASES = [
    ("native", 19),
    ("grid_sample", 16),
    ("grid_sample", 20),
    ("gather", 11),
    ("gather", 17),
    ("auto", 12),
    ("auto", 17),
]


def _static_constants(method: str, opset: int, cfg: Config) -> list[np.ndarray]:
    model = DeformLayer(cfg)
    deform_onnx.register(method)
    try:
        data = export(model, make_inputs(cfg), opset)
    finally:
        deform_onnx.unregister()
    return non_weight_constants(check(data), model)


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("method,opset", SIZE_CASES, ids=[f"{m}-op{o}" for m, o in SIZE_CASES])
def test_no_constant_grows_with_image(method, opset, name):
    """Export the same layer at 8x8, 32x32 and 64x64 (static): constants grow at most with H + W."""
    sizes = {}
    for s in (8, 32, 64):
        cfg = CONFIGS[name].at(H=s, W=s)
        consts = _static_constants(method, opset, cfg)
        sizes[s] = (cfg.out_hw(), max((c.size for c in consts), default=0), sum(c.size for c in consts))
    (ho8, wo8), largest8, _ = sizes[8]
    (ho32, wo32), largest32, _ = sizes[32]
    # An O(Ho*Wo) constant grows by the product of the side ratios; O(Ho + Wo) by at most the larger one.
    side_growth = max(ho32 / ho8, wo32 / wo8)
    assert largest32 <= side_growth * max(largest8, 1), sizes
    (ho64, wo64), largest64, total64 = sizes[64]
    assert largest64 < ho64 * wo64, f"a constant of {largest64} elements at {ho64}x{wo64} outputs"
    assert total64 < ho64 * wo64, f"non-weight constants total {total64} elements at {ho64}x{wo64} outputs"
    assert largest64 <= 64 * 1024


# -- errors ------------------------------------------------------------------------


def test_unknown_method_is_a_value_error():
    with pytest.raises(ValueError, match="unknown method 'bogus'") as info:
        deform_onnx.register("bogus")
    for method in ("auto", "native", "grid_sample", "gather"):
        assert method in str(info.value)
    with pytest.raises(ValueError, match="unknown method"):
        deform_onnx.resolve_method("bogus", 17)


@pytest.mark.parametrize(
    "method,opset,needed",
    [
        (m, o, LOWERINGS[m].min_opset)
        for m, o in (("native", 17), ("native", 18), ("native", 11), ("grid_sample", 15), ("grid_sample", 11))
    ],
)
def test_method_below_its_opset_is_a_value_error(register, tmp_path, method, opset, needed):
    """Asking for a method the opset cannot hold fails at export time, naming the opset it needs; no file."""
    cfg = CONFIGS["dcnv2-grouped"]
    register(method)
    path = tmp_path / "model.onnx"
    with pytest.raises(ValueError, match=f"'{method}' needs opset >= {needed}"):
        torch.onnx.export(
            DeformLayer(cfg), tuple(make_inputs(cfg).values()), str(path), dynamo=False, opset_version=opset
        )
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_opset_below_11(register):
    lowest = OPS["deform_conv2d"].min_opset
    with pytest.raises(ValueError, match=f">= {lowest}"):
        deform_onnx.resolve_method("auto", lowest - 1)
    with pytest.raises(ValueError, match=f">= {lowest}"):
        deform_onnx.resolve_method("gather", lowest - 2)
    cfg = CONFIGS["dcnv1-nobias"]
    register("auto")
    # The symbolic is registered from opset 11 up; torch names the version to use.
    with pytest.raises(torch.onnx.errors.UnsupportedOperatorError, match="11"):
        export(DeformLayer(cfg), make_inputs(cfg), 10)


def _plain_torch_error(cfg: Config) -> tuple[type, str]:
    with pytest.raises(Exception) as info:
        export(DeformLayer(cfg), make_inputs(cfg), 17)
    return type(info.value), str(info.value).split("\n")[0]


def test_register_unregister_round_trip():
    cfg = CONFIGS["dcnv1-nobias"]
    deform_onnx.unregister()  # start from plain torch whatever ran before
    before = _plain_torch_error(cfg)
    assert issubclass(before[0], torch.onnx.errors.UnsupportedOperatorError), before
    assert "deform_conv2d" in before[1]
    try:
        deform_onnx.register("gather")
        deform_onnx.register("grid_sample")  # the last registration wins
        assert_lowering(export_and_compare(cfg, "grid_sample", 17), "grid_sample", 17)
    finally:
        deform_onnx.unregister()
    assert _plain_torch_error(cfg) == before
    deform_onnx.unregister()  # a second unregister is harmless
    assert _plain_torch_error(cfg) == before


# -- dtype-generic -----------------------------------------------------------------

DTYPE_CASES = [("native", 19), ("grid_sample", 16), ("grid_sample", 20), ("gather", 11), ("gather", 17)]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("method,opset", DTYPE_CASES, ids=[f"{m}-op{o}" for m, o in DTYPE_CASES])
def test_float64_model_has_no_float32_constant(register, method, opset, dynamic):
    """No float32 literal is baked in: a float64 model's float constants are all float64.

    (ONNX Runtime CPU has no float64 GridSample or Clip-11 kernel, so this
    checks the graph, not the numbers.)
    """
    cfg = CONFIGS["dcnv2-grouped"].at(dtype=torch.float64)
    register(method)
    proto = check(export(DeformLayer(cfg), make_inputs(cfg), opset, dynamic=dynamic))
    float_dtypes = {a.dtype for a in graph_tensors(proto) if np.issubdtype(a.dtype, np.floating)}
    assert float_dtypes <= {np.dtype(np.float64)}, float_dtypes
    out_type = proto.graph.output[0].type.tensor_type.elem_type
    assert out_type == onnx.TensorProto.DOUBLE
