"""Case c23: multi-scale deformable attention (Deformable DETR's MSDA) exported, fused and lowered from plugin nodes.

Expected values always come from Deformable DETR's pure-PyTorch core
(:func:`deform_onnx.ops.ms_deform_attn_reference`: one ``F.grid_sample`` per
level) on the same tensors; every path within 1e-4 of it. One export per
(form, exporter, opset, method), shared by the tests (session fixture).
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import deform_onnx
from deform_onnx.ops import MSDeformAttnCore, MSDeformAttnReference, ms_deform_attn, ms_deform_attn_reference
from util import ATOL, TENSORRT_OPS, load_cases, op_types

NAMES = ["value", "sampling_locations", "attention_weights"]
#: The query axis is dynamic in every export.
AXES = {"sampling_locations": {1: "queries"}, "attention_weights": {1: "queries"}}
#: (exporter, opset, method) of the plain PyTorch form: each method each opset allows. TorchScript at 17 would
#: repeat 16 (it writes at the opset asked, and nothing the plain form holds changes schema at 17: GridSample
#: is GridSample-16 at both; auto picks grid_sample at both); the TorchScript 17 file of Deformable DETR's
#: own module: tests/ops/msda/test_msda_real.py, the fused op's at 17: FUSED.
PLAIN = (
    [("torchscript", o, m) for o in (11,) for m in ("gather", "auto")]
    + [("torchscript", 16, m) for m in ("grid_sample", "gather", "auto")]
    + [("dynamo", 16, m) for m in ("grid_sample", "gather")]
    + [("dynamo", 17, "auto")]
)
#: (exporter, opset) of the fused op (one lowering whatever the method).
FUSED = [("torchscript", 11), ("torchscript", 17), ("dynamo", 16)]


PlainMSDA = MSDeformAttnReference  # the code as Deformable DETR ships it


def _inputs(c: dict, queries: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    shapes = [tuple(s) for s in c["levels"]]
    N, M, D, L, P = c["N"], c["heads"], c["head_dim"], len(shapes), c["points"]
    value = torch.randn(N, sum(h * w for h, w in shapes), M, D, generator=g)
    loc = torch.rand(N, queries, M, L, P, 2, generator=g) * 1.2 - 0.1  # [-0.1, 1.1]: some points outside
    attn = torch.randn(N, queries, M, L * P, generator=g).softmax(-1).view(N, queries, M, L, P)
    return value, loc, attn


@pytest.fixture(scope="session")
def c23():
    c = load_cases()["c23"]["input"]
    return c, [tuple(s) for s in c["levels"]], _inputs(c, c["queries"], 23)


def _run(proto: onnx.ModelProto, feeds: dict) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _feeds(args) -> dict:
    return dict(zip(NAMES, (t.numpy() for t in args)))


def _want(shapes, args) -> np.ndarray:
    with torch.no_grad():
        return ms_deform_attn_reference(args[0], shapes, args[1], args[2]).numpy()


@pytest.fixture(scope="session")
def exports(c23, tmp_path_factory):
    """``{(form, exporter, opset, method): (proto, report)}``, one export each."""
    _, shapes, args = c23
    folder = tmp_path_factory.mktemp("c23")
    keys = [("plain", e, o, m) for e, o, m in PLAIN] + [("fused", e, o, "auto") for e, o in FUSED]
    out = {}
    for form, exporter, opset, method in keys:
        model = PlainMSDA(shapes) if form == "plain" else MSDeformAttnCore(shapes)
        path = folder / f"{form}_{exporter}_{opset}_{method}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no silent fallback to the other exporter
            report = deform_onnx.export(
                model,
                args,
                path,
                opset_version=opset,
                method=method,
                dynamo=exporter == "dynamo",
                input_names=NAMES,
                dynamic_axes=AXES,
            )
        out[form, exporter, opset, method] = (onnx.load(str(path)), report)
    return out


@pytest.mark.parametrize("key", PLAIN, ids=[f"{e}-{o}-{m}" for e, o, m in PLAIN])
def test_c23_plain_form_exports_and_matches(exports, c23, key):
    """Deformable DETR's own code: the requested exporter/opset, one GridSample per level or none, parity at
    the export's query count and another one (dynamic queries)."""
    c, shapes, args = c23
    proto, report = exports[("plain",) + key]
    exporter, opset, method = key
    assert report.exporter == exporter and report.opset == opset
    onnx.checker.check_model(proto, full_check=True)
    grid_samples = op_types(proto).count("GridSample")
    uses_grid_sample = method == "grid_sample" or (method == "auto" and opset >= 16)
    assert grid_samples == (len(shapes) if uses_grid_sample else 0)
    for queries, seed in ((c["queries"], 23), (11, 5)):
        new = _inputs(c, queries, seed) if seed != 23 else args
        np.testing.assert_allclose(
            _run(proto, _feeds(new)), _want(shapes, new), rtol=0, atol=ATOL, err_msg=f"{key} at {queries} queries"
        )


@pytest.mark.parametrize("key", FUSED, ids=[f"{e}-{o}" for e, o in FUSED])
def test_c23_fused_op_exports_one_pass_and_matches(exports, c23, key):
    """deform_onnx.ops.ms_deform_attn: no GridSample, no per-level Split, four corner MatMuls; parity as above."""
    c, shapes, args = c23
    proto, report = exports[("fused",) + key + ("auto",)]
    assert (report.exporter, report.opset) == key
    onnx.checker.check_model(proto, full_check=True)
    ops = op_types(proto)
    assert "GridSample" not in ops and "Split" not in ops
    assert ops.count("MatMul") == 4
    assert set(ops) <= TENSORRT_OPS, sorted(set(ops) - TENSORRT_OPS)
    for queries, seed in ((c["queries"], 23), (11, 5)):
        new = _inputs(c, queries, seed) if seed != 23 else args
        np.testing.assert_allclose(
            _run(proto, _feeds(new)), _want(shapes, new), rtol=0, atol=ATOL, err_msg=f"{key} at {queries} queries"
        )


@pytest.mark.parametrize(
    "key",
    [
        ("plain", "torchscript", 11, "gather"),
        ("plain", "torchscript", 16, "grid_sample"),
        ("fused", "torchscript", 11, "auto"),
    ],
    ids=["plain-gather", "plain-gridsample", "fused"],
)
def test_c23_openvino(exports, c23, key):
    """OpenVINO (CPU, f32) runs the per-level gather, per-level GridSample and fused files within 1e-4."""
    pytest.importorskip("openvino", reason="OpenVINO tests need `pip install openvino`")
    import deform_onnx.openvino as dov

    _, shapes, args = c23
    compiled = dov.compile(exports[key][0], device="CPU", precision="f32")
    got = np.asarray(next(iter(compiled([t.numpy() for t in args]).values())))
    np.testing.assert_allclose(got, _want(shapes, args), rtol=0, atol=ATOL, err_msg=str(key))


def test_fused_op_eager_is_the_reference_and_checks_shapes(c23):
    _, shapes, args = c23
    core = MSDeformAttnCore(shapes)
    torch.testing.assert_close(core(*args), ms_deform_attn_reference(args[0], shapes, args[1], args[2]))
    with pytest.raises(ValueError, match="spatial_shapes cover"):
        ms_deform_attn(args[0], core.spatial_shapes + 1, core.level_start_index, args[1], args[2])


# -- lower: plugin nodes ------------------------------------------------------------------


def _plugin_model(c23, domain: str, op_type: str, index_dtype, opset: int, **attrs) -> onnx.ModelProto:
    """One MSDA plugin node: level sizes and starts as initializers, the rest graph inputs (queries dynamic)."""
    c, shapes, _ = c23
    sizes = np.array([h * w for h, w in shapes])
    inits = [
        numpy_helper.from_array(np.array(shapes, dtype=index_dtype), "spatial_shapes"),
        numpy_helper.from_array(np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(index_dtype), "level_start_index"),
    ]
    N, M, D, L, P = c["N"], c["heads"], c["head_dim"], len(shapes), c["points"]
    node = helper.make_node(
        op_type,
        ["value", "spatial_shapes", "level_start_index", "sampling_locations", "attention_weights"],
        ["out"],
        name="msda",
        domain=domain,
        **attrs,
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("value", TensorProto.FLOAT, [N, int(sizes.sum()), M, D]),
            helper.make_tensor_value_info("sampling_locations", TensorProto.FLOAT, [N, "q", M, L, P, 2]),
            helper.make_tensor_value_info("attention_weights", TensorProto.FLOAT, [N, "q", M, L, P]),
        ],
        [
            helper.make_tensor_value_info(
                "out", TensorProto.FLOAT, [N, "q", M, D] if op_type.endswith("_TRT") else [N, "q", M * D]
            )
        ],
        initializer=inits,
    )
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=imports)


PLUGINS = [
    ("mmdeploy", "MMCVMultiScaleDeformableAttention", np.int64, {"im2col_step": 64}),
    ("", "MultiscaleDeformableAttnPlugin_TRT", np.int32, {}),
    ("trt", "MultiscaleDeformableAttnPlugin_TRT", np.int32, {}),
]


@pytest.mark.parametrize("opset_from, opset_to", [(17, None), (17, 11)], ids=["keep-17", "to-11"])
@pytest.mark.parametrize("domain, op_type, index_dtype, attrs", PLUGINS, ids=["mmdeploy", "trt", "trt-domain"])
def test_c23_lower_plugin_node(c23, domain, op_type, index_dtype, attrs, opset_from, opset_to):
    """`lower` turns the plugin node into standard ops that plain ONNX Runtime runs, matching PyTorch;
    mmdeploy's output is [N, Lq, M*D], TensorRT's [N, Lq, M, D]."""
    c, shapes, args = c23
    model = _plugin_model(c23, domain, op_type, index_dtype, opset_from, **attrs)
    lowered = deform_onnx.lower(model, opset=opset_to)
    onnx.checker.check_model(lowered, full_check=True)
    assert {n.domain for n in lowered.graph.node} == {""}
    assert op_type not in op_types(lowered) and "GridSample" not in op_types(lowered)
    assert [o.domain for o in lowered.opset_import] == [""]
    assert lowered.opset_import[0].version == (opset_to or opset_from)
    for queries, seed in ((c["queries"], 23), (11, 5)):
        new = _inputs(c, queries, seed) if seed != 23 else args
        want = _want(shapes, new)
        if op_type.endswith("_TRT"):
            want = want.reshape(want.shape[0], queries, c["heads"], c["head_dim"])
        np.testing.assert_allclose(_run(lowered, _feeds(new)), want, rtol=0, atol=ATOL, err_msg=f"{op_type} {queries}")


def test_c23_lower_cli(c23, tmp_path):
    """`deform-onnx lower` on an mmdeploy MSDA file writes a file plain ONNX Runtime runs."""
    from typer.testing import CliRunner

    from deform_onnx.cli import app

    c, shapes, args = c23
    src, dst = tmp_path / "mmdeploy.onnx", tmp_path / "lowered.onnx"
    onnx.save(_plugin_model(c23, "mmdeploy", "MMCVMultiScaleDeformableAttention", np.int64, 17, im2col_step=64), src)
    result = CliRunner().invoke(app, ["lower", str(src), "-o", str(dst)])
    assert result.exit_code == 0, result.output
    np.testing.assert_allclose(_run(onnx.load(str(dst)), _feeds(args)), _want(shapes, args), rtol=0, atol=ATOL)


def test_lower_refuses_unknown_plugin_attributes(c23):
    model = _plugin_model(c23, "mmdeploy", "MMCVMultiScaleDeformableAttention", np.int64, 17, im2col_step=64, mode=1)
    with pytest.raises(
        ValueError, match=r"node msda \(mmdeploy::MMCVMultiScaleDeformableAttention\): unknown attribute"
    ):
        deform_onnx.lower(model)
    del model.graph.node[0].attribute[1]  # mode
    del model.graph.node[0].input[4]
    with pytest.raises(ValueError, match="expected 5 inputs"):
        deform_onnx.lower(model)


#: Max abs error of c23's fused-op files (outputs of scale 0.75). float16: measured 2.6e-4 against the float32
#: copy (about half an ulp, 4.9e-4, there: the output's own rounding); float64: measured 2.2e-16.
BOUND_OTHER_DTYPES = {torch.float16: 1e-3, torch.float64: 1e-12}


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64], ids=["float16", "float64"])
def test_fused_op_other_dtypes(c23, dtype):
    """float16 (coordinates in float32) and float64 files match PyTorch at the dtype's export tolerance."""
    c, shapes, args = c23
    args = tuple(t.to(dtype) for t in args)
    buf = io.BytesIO()
    report = deform_onnx.export(MSDeformAttnCore(shapes), args, buf, opset_version=17, dynamo=False, input_names=NAMES)
    (tol,) = report.tolerances.values()
    assert tol.dtype == str(dtype).removeprefix("torch.")
    got = _run(onnx.load_from_string(buf.getvalue()), _feeds(args)).astype(np.float64)
    with torch.no_grad():  # float16: against the float32 copy on the upcast inputs; float64: PyTorch in float64
        want = MSDeformAttnCore(shapes)(*(t.to(torch.float32 if dtype == torch.float16 else dtype) for t in args))
    err = float(np.abs(got - want.double().numpy()).max())
    assert err == pytest.approx(report.max_error, rel=1e-6)
    assert err <= BOUND_OTHER_DTYPES[dtype], err


def test_grid_of_another_dtype_is_cast_to_the_input_dtype():
    """A float64 grid next to a float32 input (the TorchScript exporter's promotion in Hugging Face's
    Deformable DETR; PyTorch itself requires one dtype) is cast, since ORT has no mixed GridSample kernel."""
    import onnx_ir as ir

    from deform_onnx.builder import TapeBuilder
    from deform_onnx.ops.grid_sample.binding import emit_grid_sampler

    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([1, 2, 4, 5]))
    grid = ir.Value(name="grid", type=ir.TensorType(ir.DataType.DOUBLE), shape=ir.Shape([1, 3, 3, 2]))
    b = TapeBuilder(17)
    emit_grid_sampler(b, "auto", 17, x, grid, 0, 0, False)
    cast, sample = b.tape.nodes
    assert (cast.op_type, sample.op_type) == ("Cast", "GridSample")
    assert cast.attributes["to"].value == ir.DataType.FLOAT and sample.inputs[1] is cast.outputs[0]
