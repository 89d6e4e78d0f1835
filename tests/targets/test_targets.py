"""Runtime targets: what each picks, the combinations it refuses, and the rules on the emitted graph.

Every target exports the same small DCNv2 layer (case c25). A target whose
rules the emitted graph breaks must refuse it (``ValueError`` naming the
rule); with ``force=True`` the file is written with a warning, and an
independent look at that file (op types, opset, ranks from onnx's shape
inference) must find what the rule named. Files that are written match
torchvision on ONNX Runtime.
"""

from __future__ import annotations

import io
import warnings

import onnx
import pytest
from typer.testing import CliRunner

import deform_onnx
from deform_onnx.builder.forms import EMIT_FORMS
from deform_onnx.cli import app
from deform_onnx.ops.deform_conv.classes import shape_class
from deform_onnx.targets import TARGET_NAMES, all_targets, resolve_target, violations
from deform_onnx.targets.needs import FEATURES
from deform_onnx.targets.npu_rules import RKNN_UNSUPPORTED
from deform_onnx.targets.rules import RULES
from util import DeformLayer, assert_close, case_config, make_inputs, op_types, reference, run_ort

CFG = case_config("c25")


@pytest.fixture(scope="module")
def layer_inputs():
    layer = DeformLayer(CFG).eval()
    inputs = make_inputs(CFG)
    return layer, inputs, reference(layer, inputs)


def export(layer_inputs, **kw) -> tuple[onnx.ModelProto, bytes, deform_onnx.ExportReport]:
    layer, inputs, _ = layer_inputs
    buf = io.BytesIO()
    kw.setdefault("verify_runtimes", ())  # a target's runtime (mnn, ...) does not convert the file here (issue 35)
    report = deform_onnx.export(layer, tuple(inputs.values()), buf, input_names=list(inputs), **kw)
    return onnx.load_from_string(buf.getvalue()), buf.getvalue(), report


def test_table_entries_are_complete():
    targets = all_targets()
    names = [t.name for t in targets]
    assert len(names) == len(set(names))
    assert {"onnxruntime", "openvino", "tensorrt", "tensorrt-rtx", "directml", "webgpu", "coreml", "tflite", "ncnn",
            "tvm", "rknn", "qnn", "hailo", "generic"} <= set(TARGET_NAMES)  # fmt: skip
    for t in targets:
        assert t.reason and t.source and t.runtime, t.name
        assert set(t.options) <= set(RULES), t.name
        assert set(t.forms) <= set(EMIT_FORMS), t.name
        assert deform_onnx.LOWERINGS[t.method].min_opset <= t.opset, t.name
        for fault in t.faults:
            assert not fault.hits(t.method, t.opset), f"{t.name} refuses its own pick"


def _from_float(proto: onnx.ModelProto, name: str) -> bool:
    """Whether ``name`` is computed through a Floor/Ceil/Round or a Cast to integers (the gather form's sample
    indices are the floor of computed coordinates; shape arithmetic from Shape/Size is not followed).
    """
    producer = {o: n for n in proto.graph.node for o in n.output}
    stack, seen = [name], set()
    while stack:
        node = producer.get(stack.pop())
        if node is None or id(node) in seen or node.op_type in ("Shape", "Size"):
            continue
        seen.add(id(node))
        to_int = node.op_type == "Cast" and any(
            a.name == "to" and a.i in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) for a in node.attribute
        )
        if node.op_type in ("Floor", "Ceil", "Round") or to_int:
            return True
        stack.extend(node.input)
    return False


def independent_findings(proto: onnx.ModelProto) -> set[str]:
    """What the rules look for, read from the file without the rules' code."""
    opset = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    ops = set(op_types(proto))
    found = set()
    if "GridSample" in ops:
        found.add("no GridSample")
        if opset >= 20:
            found.add("no GridSample-20")
    if "IsNaN" in ops:
        found.update({"no IsNaN", "no NaN guard"})
    if any(n.op_type == "Equal" and n.input[0] == n.input[1] for n in proto.graph.node):
        found.add("no NaN guard")
    if "DeformConv" in ops:
        found.add("no DeformConv")
    if ops & RKNN_UNSUPPORTED:
        found.add("rknn ops")
    constants = {t.name for t in proto.graph.initializer}
    constants |= {n.output[0] for n in proto.graph.node if n.op_type == "Constant"}
    gathers = [n for n in proto.graph.node if n.op_type in ("Gather", "GatherElements", "GatherND")]
    if any(n.input[1] not in constants and _from_float(proto, n.input[1]) for n in gathers):
        found.add("no data-dependent gather")
    inferred = onnx.shape_inference.infer_shapes(proto)
    values = [*inferred.graph.value_info, *inferred.graph.output]
    shapes = [v.type.tensor_type.shape.dim for v in values if v.type.tensor_type.HasField("shape")]
    if any(len(dims) > 5 or (len(dims) == 5 and dims[0].dim_value != 1) for dims in shapes):
        found.add("ncnn blobs")
    return found


@pytest.mark.parametrize("name", TARGET_NAMES)
def test_each_target_writes_a_graph_its_rules_accept_or_refuses_it(layer_inputs, name):
    target = resolve_target(name)
    _, inputs, want = layer_inputs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        forced, data, report = export(layer_inputs, target=name, force=True)
    per_class = {c.shape_class: c.method for c in target.class_methods if c.op == "deform_conv2d"}
    form = per_class.get(shape_class(CFG.N, CFG.offset_groups), target.method)  # the layer's class's form
    assert (report.method, report.opset) == (form, target.opset)
    assert_close(run_ort(data, inputs), want, what=f"target {name}")
    expected = independent_findings(forced) & set(target.options)
    assert {v.split(":")[0] for v in violations(forced, target.options)} >= expected
    rule_warnings = [w for w in caught if f"target {name!r}" in str(w.message)]
    lacking = [f for f, _, _ in target.lacks if FEATURES[f](layer_inputs[0], tuple(inputs.values()))]
    if lacking:  # hailo: the model's deformable sampling is refused before the export
        with pytest.raises(deform_onnx.ExportError, match=rf"target {name!r} cannot run a {lacking[0]}"):
            export(layer_inputs, target=name)
    if expected:
        assert rule_warnings, f"{name}: force=True wrote a graph breaking {expected} without a warning"
        if not lacking:
            with pytest.raises(ValueError, match=rf"target {name!r}: ({'|'.join(expected)})"):
                export(layer_inputs, target=name)
    else:
        assert not rule_warnings, [str(w.message) for w in rule_warnings]


def test_tensorrt_gets_gather_and_never_gridsample_20(layer_inputs):
    proto, _, report = export(layer_inputs, target="tensorrt")
    assert report.method == "gather" and "GridSample" not in op_types(proto)
    assert violations(proto, ("integer-only shape tensors",)) == []
    # Explicit grid_sample below 20 is the user's choice: written, GridSample-16 semantics ("bilinear").
    proto, _, _ = export(layer_inputs, target="tensorrt", method="grid_sample", opset_version=19)
    assert "GridSample" in op_types(proto)
    with pytest.raises(ValueError, match=r"tensorrt.*GridSample-20.*onnx-tensorrt PR #1060"):
        export(layer_inputs, target="tensorrt", method="grid_sample", opset_version=20)


def test_gridsample_20_rule_finds_it_and_force_writes_it(layer_inputs):
    plain, _, _ = export(layer_inputs, method="grid_sample", opset_version=20)
    assert violations(plain, ("no GridSample-20",)), "premise: the rule sees a GridSample-20 graph"
    with pytest.warns(UserWarning, match="GridSample-20"):
        forced, _, _ = export(layer_inputs, target="tensorrt", method="grid_sample", opset_version=20, force=True)
    assert "GridSample" in op_types(forced)


@pytest.mark.parametrize("name", ["tensorrt-rtx", "directml", "webgpu", "onnxruntime<1.25", "onnxruntime==1.18",
                                  "onnx2torch", "rknn", "qnn", "hailo", "tensorrt<10.1"])  # fmt: skip
def test_native_refused_where_there_is_no_kernel(layer_inputs, name):
    with pytest.raises(ValueError, match="mishandles native"):
        export(layer_inputs, target=name, method="native", opset_version=19)


def test_onnx2torch_refuses_gridsample(layer_inputs):
    """onnx2torch has no GridSample converter (measured): grid_sample is refused, and forced it breaks the rule."""
    with pytest.raises(ValueError, match="onnx2torch.*mishandles grid_sample"):
        export(layer_inputs, target="onnx2torch", method="grid_sample")
    with pytest.warns(UserWarning, match="no GridSample"):
        forced, _, _ = export(layer_inputs, target="onnx2torch", method="grid_sample", force=True)
    assert "GridSample" in op_types(forced)


def test_onnxruntime_pins():
    assert (resolve_target("onnxruntime<1.25").method, resolve_target("onnxruntime<1.25").opset) == ("grid_sample", 17)
    assert resolve_target("onnxruntime==1.18").method == "grid_sample"
    assert resolve_target("onnxruntime>=1.25").method == "native"
    assert resolve_target("onnxruntime<1.16").method == "gather"
    import onnxruntime

    installed = resolve_target("onnxruntime")
    assert installed.method == ("native" if onnxruntime.__version__ >= "1.25" else "grid_sample")
    with pytest.raises(ValueError, match="bad version pin"):
        resolve_target("onnxruntime<<1")
    with pytest.raises(ValueError, match="unknown target 'tensorflow'.*tensorrt"):
        resolve_target("tensorflow")


def test_explicit_method_and_opset_win(layer_inputs):
    _, _, report = export(layer_inputs, target="openvino", method="gather", opset_version=13, dynamo=False)
    assert (report.method, report.opset) == ("gather", 13)
    _, _, report = export(layer_inputs, target="tensorrt", method="grid_sample")  # the target's opset (17)
    assert (report.method, report.opset) == ("grid_sample", 17)
    _, _, report = export(layer_inputs, target="generic")
    assert (report.method, report.opset, report.exporter) == ("gather", 11, "torchscript")


def test_an_opset_below_the_targets_method_takes_a_method_that_holds_there(layer_inputs):
    """Only an opset asked (the mission: any opset from 11): a target whose method needs more takes the first of
    auto's methods that holds there and that the target runs; an explicit method is still refused."""
    from deform_onnx.targets import hooks

    assert (hooks.for_export("tvm", None, 11, True).method, hooks.for_export("tvm", None, 11, True).opset) == (
        "gather",
        11,
    )
    assert hooks.for_lower("tvm", None, 11, 19).method == "gather"
    assert hooks.for_export("onnxruntime>=1.25", None, 17, True).method == "grid_sample"
    with pytest.raises(ValueError, match="needs opset >= 16"):
        hooks.for_export("tvm", "grid_sample", 11, True)
    _, inputs, want = layer_inputs
    proto, data, report = export(layer_inputs, target="onnxruntime>=1.25", opset_version=13)
    assert (report.method, report.opset) == ("gather", 13) and "DeformConv" not in op_types(proto)
    assert_close(run_ort(data, inputs), want, what="onnxruntime>=1.25 at opset 13")


def test_lower_with_target(tmp_path, layer_inputs):
    _, inputs, want = layer_inputs
    native, data, _ = export(layer_inputs, method="native", opset_version=20)
    proto = deform_onnx.lower(native, target="tensorrt")
    assert "DeformConv" not in op_types(proto) and "GridSample" not in op_types(proto) and "Gather" in op_types(proto)
    assert_close(run_ort(proto.SerializeToString(), inputs), want, what="lower --target tensorrt")
    with pytest.raises(ValueError, match="tensorrt-rtx.*mishandles native"):
        deform_onnx.lower(native, target="tensorrt-rtx", method="native")


runner = CliRunner()


def test_cli_targets_and_faults(tmp_path, layer_inputs):
    result = runner.invoke(app, ["targets"])
    assert result.exit_code == 0, result.output
    for name in ("tensorrt", "tensorrt-rtx", "onnxruntime<1.25", "generic", "gather@17", "grid_sample@17"):
        assert name in result.stdout
    result = runner.invoke(app, ["targets", "tflite"])  # one target: one field per line
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.replace("│", " ").split())  # the table wraps its cells at the terminal's width
    assert (
        "gather@13 (forms: flat offset groups, flat sampling grid, table padded flat, corner-major gather, "
        "float row index, int32 row index);"
        in text
        and "tensorrt" not in result.stdout
    )
    result = runner.invoke(app, ["targets", "nope"])
    assert result.exit_code == 2 and "unknown target" in result.output

    out = tmp_path / "trt.onnx"
    result = runner.invoke(app, ["export", "--target", "tensorrt", "--method", "grid_sample", "--opset", "20",
                                 "-o", str(out)])  # fmt: skip
    assert result.exit_code == 2 and "GridSample-20" in result.output and not out.exists()
    assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(app, ["export", "--target", "tflite", "--dynamic", "-o", str(out)])
    assert result.exit_code == 2 and "static shapes only" in result.output and not out.exists()

    native, _, _ = export(layer_inputs, method="native", opset_version=20)
    src = tmp_path / "native.onnx"
    onnx.save(native, str(src))
    lowered = tmp_path / "low.onnx"
    result = runner.invoke(app, ["lower", str(src), "-o", str(lowered), "--target", "tensorrt"])
    assert result.exit_code == 0, result.output
    assert "gather" in result.stdout and "GridSample" not in op_types(onnx.load(str(lowered)))
    result = runner.invoke(app, ["lower", str(src), "-o", str(tmp_path / "x.onnx"), "--target", "tensorrt-rtx",
                                 "--method", "native"])  # fmt: skip
    assert result.exit_code == 2 and "no deformable plugin" in result.output
    result = runner.invoke(app, ["check", str(src), "--target", "tensorrt", "--runtime", "ort"])
    assert result.exit_code == 0, result.output
    assert "tensorrt: lowered paths use gather" in result.stdout
    assert "the file as is passes its rules" in result.stdout  # TensorRT has a DeformConv plugin
    result = runner.invoke(app, ["check", str(src), "--target", "directml", "--runtime", "ort"])
    assert result.exit_code == 1, result.output  # check --target exits 1 when the file breaks the rules (3fc1346)
    assert (
        "the file as is breaks" in result.stdout and "DeformConv node(s): DirectML has no DeformConv" in result.stdout
    )
