"""Graph forms of the runtime targets: the ``ncnn`` target's graph (issue 12), the ``mnn`` target's (issue 38).

pnnx -> ncnn takes the grid_sample form only without the NaN guard
(``Equal(g, g)`` becomes ``torch.eq``, which ncnn has no layer for) and with
no leading axis other than a batch of 1 (ncnn has no batch axis). These tests
read the emitted file itself (op types, shapes from onnx's shape inference)
and compare it with torchvision on the same tensors in ONNX Runtime; the
default grid_sample graph of the same layer serves as the control that shows
each check can fail. Running it on ncnn itself: scripts/runtime_matrix.py.
"""

from __future__ import annotations

import io
import os
import warnings

import onnx
import pytest
import torch

import deform_onnx
from util import DeformLayer, assert_close, case_config, make_inputs, op_types, reference, run_ort

#: Case c25's layer with 2 offset groups and 2 groups: the form that folds groups into the batch shows.
CFG = case_config("c25").at(offset_groups=2, groups=2)


@pytest.fixture(scope="module")
def layer():
    module = DeformLayer(CFG).eval()
    inputs = make_inputs(CFG)
    return module, inputs, reference(module, inputs)


def _export(layer, **kw) -> onnx.ModelProto:
    module, inputs, _ = layer
    buf = io.BytesIO()
    kw.setdefault("verify_runtimes", ())  # a target's runtime (ncnn, ...) does not convert the file here (issue 35)
    deform_onnx.export(module, tuple(inputs.values()), buf, input_names=list(inputs), output_names=["y"], **kw)
    return onnx.load_from_string(buf.getvalue())


@pytest.fixture(scope="module")
def ncnn_file(layer):
    return _export(layer, target="ncnn")


@pytest.fixture(scope="module")
def default_file(layer):
    return _export(layer, method="grid_sample", opset_version=17)


def nan_tests(proto: onnx.ModelProto) -> list[str]:
    """IsNaN nodes and Equal nodes comparing a value with itself (read without the rules' code)."""
    return [n.op_type for n in proto.graph.node
            if n.op_type == "IsNaN" or (n.op_type == "Equal" and n.input[0] == n.input[1])]  # fmt: skip


def leading_axes(proto: onnx.ModelProto) -> set[int]:
    """The first dimension of every value of rank 5 or more."""
    inferred = onnx.shape_inference.infer_shapes(proto)
    values = [*inferred.graph.value_info, *inferred.graph.output]
    dims = [v.type.tensor_type.shape.dim for v in values if v.type.tensor_type.HasField("shape")]
    return {d[0].dim_value for d in dims if len(d) >= 5}


def test_ncnn_graph_has_no_nan_test_and_no_leading_axis_but_batch(ncnn_file, default_file, layer):
    _, inputs, want = layer
    assert "GridSample" in op_types(ncnn_file)
    assert not [op for op in op_types(ncnn_file) if op in ("Equal", "IsNaN")]
    assert leading_axes(ncnn_file) <= {1}
    assert_close(run_ort(ncnn_file.SerializeToString(), inputs), want, what="target ncnn")
    # the control: the default graph holds both, so the checks above can fail
    assert nan_tests(default_file) and leading_axes(default_file) - {1}


def test_ncnn_graph_samples_each_offset_group_on_its_own(ncnn_file, default_file):
    """One GridSample per offset group of every tap at once (the default: one per kernel row, groups folded)."""
    count = lambda proto: op_types(proto).count("GridSample")  # noqa: E731
    assert count(ncnn_file) == CFG.offset_groups and count(default_file) == CFG.kernel[0]


def test_ncnn_contracts_with_a_conv(ncnn_file, default_file):
    """The ``contraction as Conv`` form: a Conv (kernel K x 1, stride K) in place of the MatMuls (parity: above)."""
    convs = [n for n in ncnn_file.graph.node if n.op_type == "Conv"]
    taps = CFG.kernel[0] * CFG.kernel[1]
    strides = [list(a.ints) for n in convs for a in n.attribute if a.name == "strides"]
    assert strides == [[taps, 1]] and "MatMul" not in op_types(ncnn_file)
    assert "MatMul" in op_types(default_file) and "Conv" not in op_types(default_file)


def test_nan_offset_is_zero_with_the_guard_and_runtime_defined_without(layer, default_file, ncnn_file):
    """What docs/guides/deform-conv.md says of NaN offsets: 0 with the guard; without it, whatever the runtime makes of NaN."""
    module, inputs, _ = layer
    nan_inputs = {k: v.clone() for k, v in inputs.items()}
    nan_inputs["offset"][0, 0, 3, 3] = float("nan")
    # the sample that NaN moves is dropped: compare with an offset that puts it outside the image
    far = {k: v.clone() for k, v in inputs.items()}
    far["offset"][0, 0, 3, 3] = 1e6
    want = reference(module, far)
    assert_close(run_ort(default_file.SerializeToString(), nan_inputs), want, what="guarded NaN offset")
    got = run_ort(ncnn_file.SerializeToString(), nan_inputs)
    assert got.shape == want.shape  # runs; its value at that pixel is ONNX Runtime's business


class _OwnGuard(torch.nn.Module):
    """A model that writes its own NaN guard (``torch.where(x == x, x, 0)``) before the layer."""

    def __init__(self, layer: torch.nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, x, offset, mask):
        return self.layer(torch.where(x == x, x, torch.zeros_like(x)), offset, mask)


def test_the_form_leaves_the_models_own_nan_guard_to_the_rule(layer):
    """Only the lowerings' guards go: a guard the model wrote stays as written, and the ncnn rule names it."""
    module, inputs, _ = layer
    with pytest.raises(ValueError, match="target 'ncnn': .*NaN guard"):
        _export((_OwnGuard(module), inputs, None), target="ncnn")


@pytest.fixture(scope="module")
def native_file(tmp_path_factory, layer):
    """The layer written as DeformConv-19 (the file ``lower`` and ``check`` start from)."""
    module, inputs, _ = layer
    native = tmp_path_factory.mktemp("native") / "native.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        deform_onnx.export(module, tuple(inputs.values()), native, method="native", opset_version=19,
                           input_names=list(inputs), output_names=["y"])  # fmt: skip
    return native


def test_lower_with_target_ncnn_writes_the_same_form(native_file, layer):
    _, inputs, want = layer
    native = native_file
    proto = deform_onnx.lower(onnx.load(native), target="ncnn")
    assert "GridSample" in op_types(proto) and not nan_tests(proto)
    assert leading_axes(proto) <= {1}
    assert_close(run_ort(proto.SerializeToString(), inputs), want, what="lower(target='ncnn')")


def test_ncnn_refuses_a_graph_no_ncnn_blob_holds(layer):
    """The gather form (6-D values; also what maps over 512 px a side sample with): refused, naming the rule."""
    with pytest.raises(ValueError, match="target 'ncnn': ncnn blobs"):
        _export(layer, target="ncnn", method="gather")


def test_check_with_target_lowers_in_the_targets_form(native_file, layer, monkeypatch):
    """``check --target ncnn``'s lower() rows run the ncnn form (per-group GridSample, no NaN test), not the default."""
    import onnx_ir as ir

    import deform_onnx.rewrite as rewrite
    from deform_onnx.runtimes import run_paths

    _, inputs, want = layer
    native = native_file
    seen = []
    real_lower = rewrite.lower_model

    def recorded(*a, **kw):
        out = real_lower(*a, **kw)
        seen.append(ir.to_proto(out[0]))
        return out

    monkeypatch.setattr(rewrite, "lower_model", recorded)
    feeds = {k: v.numpy() for k, v in inputs.items()}
    for target in (None, "ncnn"):
        results = run_paths(native, feeds, runtimes=["ort"], method="grid_sample", target=target, repeat=0)
        lowered = next(r for r in results if r.path.startswith("lower("))
        assert lowered.ran, lowered.reason
        assert_close(lowered.outputs[0], want, what=f"check lower() row, target {target}")
    default, ncnn = seen
    assert op_types(ncnn).count("GridSample") == CFG.offset_groups < op_types(default).count("GridSample")
    assert nan_tests(default) and not nan_tests(ncnn)


def index_computations(proto: onnx.ModelProto) -> int:
    """How many sample-index computations the gather form made (each floors y and x once)."""
    return op_types(proto).count("Floor") // 2


def test_tflite_samples_offset_groups_in_flat_rows(layer):
    """The ``tflite`` target's gather form (``flat offset groups``): one index computation for every offset group,
    on 2-D values (the default gather form's are 5-D: onnx2tf misplaces their group axis), the same numbers."""
    _, inputs, want = layer
    flat = _export(layer, target="tflite")
    together = _export(layer, method="gather", opset_version=17)
    assert index_computations(flat) == index_computations(together) == 1
    assert floor_ranks(flat) == {2} and floor_ranks(together) == {5}
    assert "GridSample" not in op_types(flat)
    for proto, what in ((flat, "flat offset groups"), (together, "one index computation")):
        assert_close(run_ort(proto.SerializeToString(), inputs), want, what=what)


def floor_ranks(proto: onnx.ModelProto) -> set[int]:
    """The ranks of the values the gather form floors (its sample coordinates), from onnx's shape inference."""
    g = onnx.shape_inference.infer_shapes(proto).graph
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in (*g.value_info, *g.input)}
    return {ranks[n.input[0]] for n in g.node if n.op_type == "Floor"}


def test_flat_offset_groups_compute_indices_on_2d_values():
    """Form ``flat offset groups`` on 2 offset groups, 2 images (each image's first table row) and a 12x10 map: one
    index computation for every group on 2-D values (the control, 5-D: the test above), one Gather per corner and
    tap for all groups, and torchvision's numbers in ONNX Runtime."""
    from deform_onnx.builder.forms import graph_forms

    cfg = CFG.at(N=2, W=10)
    module, inputs = DeformLayer(cfg).eval(), make_inputs(cfg)
    with graph_forms(["flat offset groups"]):
        flat = _export((module, inputs, None), method="gather", opset_version=13, dynamo=False)
    assert index_computations(flat) == 1 and floor_ranks(flat) == {2}
    taps = cfg.kernel[0] * cfg.kernel[1]
    table_gathers = [n for n in flat.graph.node if n.op_type == "Gather" and "Mul" in _users(flat, n.output[0])]
    assert len(table_gathers) == 4 * taps
    assert_close(run_ort(flat.SerializeToString(), inputs), reference(module, inputs), what="flat offset groups")


def _users(proto: onnx.ModelProto, name: str) -> list[str]:
    return [n.op_type for n in proto.graph.node if name in n.input]


def conv_kernels(proto: onnx.ModelProto) -> list[list[int]]:
    """The ``kernel_shape`` of every Conv node."""
    return [
        list(a.ints) for n in proto.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "kernel_shape"
    ]


def test_mnn_samples_every_tap_at_once_and_contracts_with_a_1x1_conv(layer, default_file):
    """The ``mnn`` target's ``taps as channels`` + ``whole map`` forms: one GridSample, one 1x1 Conv, no MatMul."""
    _, inputs, want = layer
    mnn = _export(layer, target="mnn")
    assert op_types(mnn).count("GridSample") == 1 and conv_kernels(mnn) == [[1, 1]]
    assert "MatMul" not in op_types(mnn) and "Expand" not in op_types(mnn)  # 4 channels per offset group: one block
    assert_close(run_ort(mnn.SerializeToString(), inputs), want, what="target mnn")
    # the control: the default form samples kernel row by kernel row and contracts with MatMuls
    assert op_types(default_file).count("GridSample") > 1 and not conv_kernels(default_file)


def _grid_sample_shapes(proto: onnx.ModelProto) -> list[tuple[list[int], list[int]]]:
    """(map shape, grid shape) of every GridSample, from onnx's shape inference."""
    g = onnx.shape_inference.infer_shapes(proto).graph
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in (*g.value_info, *g.input)}
    return [(dims[n.input[0]], dims[n.input[1]]) for n in g.node if n.op_type == "GridSample"]


@pytest.mark.parametrize("target, size, taps", [("mnn", 32, 9), ("openvino", 8, 3)])
@pytest.mark.parametrize("channels, offset_groups, batch", [(64, 1, 2), (128, 2, 1)])
def test_targets_sample_channel_blocks(channels, offset_groups, batch, target, size, taps):
    """The ``mnn`` target's ``GridSample channel blocks`` (the ``openvino`` target's ``... of 8``): an offset group
    of 64 channels is sampled as 2 batch entries of 32 channels (8 of 8), each with its copy of the grid, by one
    GridSample; torchvision's numbers on ONNX Runtime, and for the batch of 2 in the target's runtime too (the
    export's own check); ``taps`` per GridSample (mnn: all, openvino: a kernel row). The control: the 6-channel
    layer above is sampled as one entry (no Expand)."""
    cfg = CFG.at(N=batch, C_in=channels, C_out=4, H=5, W=6, groups=1, offset_groups=offset_groups)
    module, inputs = DeformLayer(cfg).eval(), make_inputs(cfg)
    in_runtime = batch == 2 and not os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES")
    buf = io.BytesIO()
    report = deform_onnx.export(module, tuple(inputs.values()), buf, input_names=list(inputs), target=target,
                                method="grid_sample", **({} if in_runtime else {"verify_runtimes": ()}))  # fmt: skip
    proto = onnx.load_from_string(buf.getvalue())
    assert any(line.startswith(target) for line in report.runtimes) == in_runtime, report.runtimes
    blocks = channels // offset_groups // size
    entries = batch * offset_groups * blocks
    ho, wo = cfg.out_hw()
    assert _grid_sample_shapes(proto) == [([entries, size, 5, 6], [entries, taps * ho, wo, 2])] * (9 // taps)
    assert "Expand" in op_types(proto)
    assert_close(run_ort(proto.SerializeToString(), inputs), reference(module, inputs), what=f"{channels} channels")


@pytest.mark.parametrize("forms", [("contraction as Conv",), ("taps as channels", "whole map")], ids=["Kx1", "1x1"])
@pytest.mark.parametrize(
    "changes",
    [dict(stride=(2, 2), dilation=(2, 2), padding=(2, 2), mask=False, bias=False), dict(N=2, offset_groups=1)],
    ids=["stride-dilation-no-mask-no-bias", "batch-2"],
)
def test_contraction_as_conv_matches_torchvision(changes, forms):
    """The ncnn target's contraction (a Conv of kernel K x 1 over the (row, tap) samples) and the mnn target's
    (a 1x1 Conv over the (tap, row) samples read as C*K channels), alone, on ONNX Runtime."""
    from deform_onnx.builder.forms import graph_forms

    cfg = CFG.at(**changes)
    module, inputs = DeformLayer(cfg).eval(), make_inputs(cfg)
    with graph_forms(forms):
        proto = _export((module, inputs, None), method="grid_sample", opset_version=17)
    taps = cfg.kernel[0] * cfg.kernel[1]
    assert conv_kernels(proto) == [[taps, 1] if forms[0] == "contraction as Conv" else [1, 1]]
    assert "MatMul" not in op_types(proto)
    assert_close(run_ort(proto.SerializeToString(), inputs), reference(module, inputs), what=str(changes))


def test_ncnn_refuses_a_batch_naming_the_fix():
    """A batch of 2 (ncnn has no batch axis): refused by the blob rule, which says to export with batch 1."""
    cfg = CFG.at(N=2)
    module, inputs = DeformLayer(cfg).eval(), make_inputs(cfg)
    with pytest.raises(ValueError, match="target 'ncnn': ncnn blobs: .*batch above 1.*export with batch 1"):
        _export((module, inputs, None), target="ncnn")


def test_tvm_grid_sample_of_a_float16_map_takes_one_dtype(layer, monkeypatch):
    """target tvm, a float16 layer with 2 offset groups (grid_sample): TVM's frontend refuses a float16 map with
    the float32 grid (planted: the form left out), so the map is sampled in float32 and cast back; the file runs
    in TVM against PyTorch before it is written (the export's own check)."""
    import dataclasses

    from deform_onnx.core.errors import VerificationError
    from deform_onnx.targets import resolve_target

    module, inputs, _ = layer
    half = {k: v.half() for k, v in inputs.items()}
    module = DeformLayer(CFG).eval().half()
    module.load_state_dict({k: v.half() for k, v in layer[0].state_dict().items()})

    def export(target):
        buf = io.BytesIO()
        deform_onnx.export(module, tuple(half.values()), buf, input_names=list(half), target=target)
        return onnx.load_from_string(buf.getvalue())

    proto = export("tvm")
    made = {o: n for n in proto.graph.node for o in n.output}
    grid_samples = [n for n in proto.graph.node if n.op_type == "GridSample"]
    assert grid_samples and all(made[n.input[0]].op_type == "Cast" for n in grid_samples)
    got, want = run_ort(proto.SerializeToString(), half).astype(float), reference(module, half).astype(float)
    assert (abs(got - want) <= 1e-2 + 1e-2 * abs(want)).all()  # float16's per-element tolerance (docs/runtimes.md)
    import deform_onnx.targets as targets

    monkeypatch.setitem(targets.TARGETS, "tvm", dataclasses.replace(targets.TARGETS["tvm"], forms=()))
    assert "GridSample one dtype" not in resolve_target("tvm").forms
    with pytest.raises(VerificationError, match="tvm.*same datatype"):
        export("tvm")


def test_tvm_refuses_native_before_exporting(layer):
    """``target="tvm", method="native"``: one line naming the methods to use, before any export (TVM's frontend
    has no DeformConv converter)."""
    with pytest.raises(ValueError, match="use method grid_sample or gather") as info:
        _export(layer, target="tvm", method="native")
    assert "\n" not in str(info.value)


def test_ncnn_refuses_a_float16_model_naming_float32(layer):
    """target ncnn, a float16 layer: refused by the rule before pnnx runs (pnnx leaves a float16 Conv unconverted)."""
    module, inputs, _ = layer
    half = {k: v.half() for k, v in inputs.items()}
    buf = io.BytesIO()
    with pytest.raises(ValueError, match="target 'ncnn': ncnn float32: a float16 model.*export in float32"):
        deform_onnx.export(DeformLayer(CFG).eval().half(), tuple(half.values()), buf, input_names=list(half),
                           target="ncnn")  # fmt: skip
