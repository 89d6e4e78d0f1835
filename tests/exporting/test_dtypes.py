"""float16 and float64 models, through both exporters: a model of that dtype, no stray float32,
and ONNX Runtime's numbers next to torchvision's in the same dtype.

Tolerances (max abs error against torchvision in the same dtype, outputs of magnitude ~1):

* float64: 1e-10. Both sides compute in float64 (relative spacing 2.2e-16);
  the results differ only in summation order, by ~1e-15.
* float16: ``|ort - torchvision| <= 1e-2 * (1 + |torchvision|)``. float16 has a
  10-bit mantissa (spacing 2^-10 ~ 1e-3 relative), torchvision rounds every
  intermediate (sampled columns, products, GEMM) to float16 and ONNX Runtime
  rounds at different places (and computes some ops in float32, inserting
  casts where its CPU provider has no float16 kernel): a few units in the last
  place apart (measured: 2e-3 on outputs of magnitude ~4). Both are also held to
  the same bound against a float64 reference, so a lowering cannot be worse
  than torchvision by more than that.

Where ONNX Runtime's CPU provider has no kernel for an op in a dtype
(NOT_IMPLEMENTED at session creation), the test checks that the combination is
listed in :data:`NO_ORT_CPU_KERNEL` (the support table of docs/targets.md), and every
combination not listed must run: the list stays exact.
"""

from __future__ import annotations

import functools
import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import deform_onnx
from util import DCNV2_ASYMMETRIC, DeformLayer, check, export, make_inputs, reference

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")

DTYPES = {"float16": torch.float16, "float64": torch.float64}
ONNX_FLOATS = {
    onnx.TensorProto.FLOAT: "float32",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.DOUBLE: "float64",
    onnx.TensorProto.BFLOAT16: "bfloat16",
}

#: ONNX Runtime 1.32 CPU: (dtype, method, opset) whose graph holds an op without a
#: kernel in that dtype (measured here): GridSample-16 is float32-only (GridSample-20
#: has float64), Clip-11 is float32-only (Clip-12+ has float64). float16 always runs
#: (ORT casts to float32 around ops without a float16 kernel).
NO_ORT_CPU_KERNEL = {
    ("float64", "grid_sample", 16): "GridSample(16)",
    ("float64", "grid_sample", 17): "GridSample(16)",
    ("float64", "grid_sample", 18): "GridSample(16)",
    ("float64", "grid_sample", 19): "GridSample(16)",
    ("float64", "gather", 11): "Clip(11)",
}

CFG = DCNV2_ASYMMETRIC
#: A DCNv2 layer without bias: the native lowering then adds a zero bias of the model's dtype.
CFG_NOBIAS = CFG.at(bias=False, groups=1, C_out=3)

TORCHSCRIPT = (
    [("native", o) for o in (19, 20)]
    + [("grid_sample", o) for o in range(16, 21)]
    + [("gather", o) for o in range(11, 21)]
)
#: Dynamo: builds at 18 and converts down; native at 20.
DYNAMO = [("grid_sample", 16), ("grid_sample", 18), ("gather", 14), ("gather", 18), ("native", 20)]


def _tol(dtype: str) -> tuple[float, float]:
    """(atol, rtol) against torchvision in the same dtype; see the module docstring."""
    return (1e-10, 0.0) if dtype == "float64" else (1e-2, 1e-2)


@functools.cache
def _torchscript(dtype: str, method: str, opset: int, bias: bool = True) -> bytes:
    cfg = (CFG if bias else CFG_NOBIAS).at(dtype=DTYPES[dtype])
    deform_onnx.register(method)
    try:
        return export(DeformLayer(cfg), make_inputs(cfg), opset)
    finally:
        deform_onnx.unregister()


@functools.cache
def _dynamo(dtype: str, method: str, opset: int) -> bytes:
    cfg = CFG.at(dtype=DTYPES[dtype])
    buf = io.BytesIO()
    inputs = make_inputs(cfg)
    report = deform_onnx.export(
        DeformLayer(cfg), tuple(inputs.values()), buf, method=method, opset_version=opset, dynamo=True,
        input_names=list(inputs), verify=False,
    )  # fmt: skip
    assert report.exporter == "dynamo"
    return buf.getvalue()


def expected_float_types(dtype: str, method: str) -> set[str]:
    """float32/float64 graphs hold only their own dtype; a float16 graph of a standard-op lowering also
    holds float32, by design: its sampling coordinates are float32 (float16 pixel coordinates
    resolve only 1 pixel at width 2048; lowering/common.py ``coordinate_dtype``)."""
    if dtype == "float16" and method != "native":
        return {"float16", "float32"}
    return {dtype}


def float_types(proto: onnx.ModelProto) -> dict[str, set[str]]:
    """Every floating dtype in the graph, by where it appears (after ONNX shape inference)."""
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    g = inferred.graph
    found: dict[str, set[str]] = {}

    def add(where: str, elem_type: int) -> None:
        if elem_type in ONNX_FLOATS:
            found.setdefault(ONNX_FLOATS[elem_type], set()).add(where)

    for vi in [*g.input, *g.output, *g.value_info]:
        add(f"value {vi.name}", vi.type.tensor_type.elem_type)
    for t in g.initializer:
        add(f"initializer {t.name}", t.data_type)
    for node in g.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                add(f"{node.op_type} {node.name}.{attr.name}", attr.t.data_type)
            if node.op_type == "Cast" and attr.name == "to":
                add(f"Cast {node.name}.to", attr.i)
    return found


def _session(data: bytes, key: tuple) -> ort.InferenceSession | None:
    """The ORT CPU session, or None where ORT has no kernel; checks that against NO_ORT_CPU_KERNEL."""
    try:
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - checked just below
        text = str(exc)
        assert "NOT_IMPLEMENTED" in text, text
        assert key in NO_ORT_CPU_KERNEL, f"ORT has no kernel for {key}, not listed in NO_ORT_CPU_KERNEL: {text}"
        assert f"Could not find an implementation for {NO_ORT_CPU_KERNEL[key]}" in text, text
        return None
    assert key not in NO_ORT_CPU_KERNEL, f"{key} runs in ORT now: remove it from NO_ORT_CPU_KERNEL and docs/targets.md"
    return session


def _compare(session: ort.InferenceSession, dtype: str, bias: bool = True, what: str = "") -> None:
    cfg = (CFG if bias else CFG_NOBIAS).at(dtype=DTYPES[dtype])
    model = DeformLayer(cfg)
    inputs = make_inputs(cfg, seed=5)
    feeds = {i.name: v.numpy() for i, v in zip(session.get_inputs(), inputs.values())}
    (got,) = session.run(None, feeds)
    want = reference(model, inputs)
    assert got.dtype == want.dtype == np.dtype(dtype), (got.dtype, want.dtype)
    assert np.isfinite(got).all(), what
    atol, rtol = _tol(dtype)
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bound = atol + rtol * np.abs(want.astype(np.float64))
    assert (err <= bound).all(), (
        f"{what}: max abs error {err.max():.3g} vs torchvision {dtype} (atol {atol}, rtol {rtol})"
    )
    # Against float64 (the exact answer up to 1e-15), ORT is held to the same bound torchvision meets.
    exact = reference(DeformLayer(cfg.at(dtype=torch.float64)), {k: v.double() for k, v in inputs.items()})
    tv_err = np.abs(want.astype(np.float64) - exact)
    assert (tv_err <= bound).all(), f"torchvision {dtype} itself is {tv_err.max():.3g} from float64: bound too tight"
    assert (np.abs(got - exact) <= bound).all(), f"{what}: {np.abs(got - exact).max():.3g} from the float64 result"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("method, opset", TORCHSCRIPT, ids=[f"{m}-op{o}" for m, o in TORCHSCRIPT])
def test_torchscript(dtype, method, opset):
    proto = check(_torchscript(dtype, method, opset))
    types = float_types(proto)
    assert set(types) == expected_float_types(dtype, method), {t: sorted(w)[:5] for t, w in types.items() if t != dtype}
    session = _session(proto.SerializeToString(), (dtype, method, opset))
    if session is not None:
        _compare(session, dtype, what=f"torchscript {method}@{opset} {dtype}")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("method, opset", DYNAMO, ids=[f"{m}-op{o}" for m, o in DYNAMO])
def test_dynamo(dtype, method, opset):
    proto = check(_dynamo(dtype, method, opset))
    types = float_types(proto)
    assert set(types) == expected_float_types(dtype, method), {t: sorted(w)[:5] for t, w in types.items() if t != dtype}
    session = _session(proto.SerializeToString(), (dtype, method, opset))
    if session is not None:
        _compare(session, dtype, what=f"dynamo {method}@{opset} {dtype}")


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("method, opset", [("native", 19), ("grid_sample", 20), ("gather", 13)])
def test_without_bias(dtype, method, opset):
    """No bias (native then adds a zero bias before the mask): no stray float32 (coordinates aside)."""
    proto = check(_torchscript(dtype, method, opset, bias=False))
    assert set(float_types(proto)) == expected_float_types(dtype, method)
    session = _session(proto.SerializeToString(), (dtype, method, opset))
    if session is not None:
        _compare(session, dtype, bias=False, what=f"{method}@{opset} {dtype} no bias")


def test_float_types_sees_a_stray_float32():
    """The walker is not blind: a float32 Cast inside a float64 graph is reported."""
    proto = onnx.load_from_string(_torchscript("float64", "gather", 13))
    cast = onnx.helper.make_node("Cast", ["y"], ["y32"], to=onnx.TensorProto.FLOAT, name="stray")
    proto.graph.node.append(cast)
    assert "Cast stray.to" in float_types(proto).get("float32", set())


def test_bfloat16_is_refused_by_torchvision():
    """Why bfloat16 is not exported: torchvision's CPU kernel has no bfloat16 (there is nothing to match)."""
    cfg = CFG.at(dtype=torch.bfloat16)
    with pytest.raises(RuntimeError):
        reference(DeformLayer(cfg), make_inputs(cfg))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("method", ["grid_sample", "gather"])
def test_lower_keeps_the_dtype(dtype, method):
    """``lower()`` of a native file of that dtype: no stray float32 (no CastLike from float32)."""
    native = _torchscript(dtype, "native", 20)
    proto = check(deform_onnx.lower(onnx.load_from_string(native), method=method).SerializeToString())
    assert "CastLike" not in {n.op_type for n in proto.graph.node}
    types = float_types(proto)
    assert set(types) == expected_float_types(dtype, method), {t: sorted(w)[:5] for t, w in types.items() if t != dtype}
    session = _session(proto.SerializeToString(), (dtype, method, 20))
    if session is not None:
        _compare(session, dtype, what=f"lower() to {method} {dtype}")
