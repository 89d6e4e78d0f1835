"""The ``"offset groups along H"`` graph form (issue 38): every offset group sampled by one GridSample.

The groups' maps are stacked along H between zero rows and each sample's row is clamped into its own band, so
a sample outside its group's map must read zeros only, as torchvision's zero padding does: these tests put
offsets far outside the map (and at the edges of a band) and compare with torchvision on the same tensors in
ONNX Runtime, read the emitted graph (one GridSample of ``C/G`` channels over the stacked map, the Conv over
``G*K`` rows per output row), and check that one offset group leaves the file as it was.
"""

from __future__ import annotations

import io
import os

import onnx
import pytest
import torch

import deform_onnx
from deform_onnx.builder.forms import graph_forms
from deform_onnx.ops.deform_conv import lower_grid_sample
from util import DeformLayer, assert_close, case_config, make_inputs, reference, run_ort

FORM = "offset groups along H"
CFG = case_config("c25").at(C_in=8, C_out=5, H=7, W=9, groups=1, offset_groups=2)
#: The ncnn target's forms and the mnn target's (each with their own contraction Conv).
NCNN = ("no NaN guard", "batch 1", "contraction as Conv")
MNN = ("taps as channels", "whole map")


def _export(module, inputs, forms, target: str | None = None) -> onnx.ModelProto:
    buf = io.BytesIO()
    kw = {"target": target} if target else {"opset_version": 17}
    with graph_forms(forms):
        deform_onnx.export(module, tuple(inputs.values()), buf, input_names=list(inputs), method="grid_sample",
                           verify_runtimes=(), verify=False, dynamo=False, **kw)  # fmt: skip
    return onnx.load_from_string(buf.getvalue())


def _far_offsets(inputs: dict[str, torch.Tensor], H: int) -> dict[str, torch.Tensor]:
    """``inputs`` with offsets far outside the map, at infinity, and rows at the edges of a group's band."""
    out = {k: v.clone() for k, v in inputs.items()}
    off = out["offset"]
    g = torch.Generator().manual_seed(3)
    far = torch.rand(off.shape, generator=g) < 0.25
    off[far] = torch.randn(int(far.sum()), generator=g) * 4 * H  # rows and columns several maps away
    off[0, 0, 0, 0], off[0, 1, 0, 1] = 1e6, -1e6
    off[0, 2, 1, 1], off[0, 3, 1, 2] = float("inf"), float("-inf")
    # tap 0 of output pixel (1, 1) samples row 1 - 1 + dy = dy (padding 1): rows -1, -0.5, H - 0.5, H
    for i, dy in enumerate((-1.0, -0.5, H - 0.5, float(H))):
        off[0, 2 * 9 * (i % 2), 1, 1 + i] = dy  # group 0 and 1 in turn
    return out


def _grid_sample_maps(proto: onnx.ModelProto) -> list[list[int]]:
    g = onnx.shape_inference.infer_shapes(proto).graph
    dims = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in (*g.value_info, *g.input)}
    return [dims[n.input[0]] for n in g.node if n.op_type == "GridSample"]


def _conv_kernels(proto: onnx.ModelProto) -> list[list[int]]:
    return [
        list(a.ints) for n in proto.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "kernel_shape"
    ]


@pytest.mark.parametrize("forms", [NCNN, MNN], ids=["ncnn", "mnn"])
@pytest.mark.parametrize(
    "changes",
    [{}, dict(offset_groups=4, stride=(2, 2), dilation=(2, 2), padding=(2, 2), mask=False, bias=False)],
    ids=["og2", "og4-stride-dilation-no-mask"],
)
def test_stacked_groups_match_torchvision_far_outside_the_map(forms, changes):
    cfg = CFG.at(**changes)
    module = DeformLayer(cfg).eval()
    inputs = _far_offsets(make_inputs(cfg), cfg.H)
    proto = _export(module, inputs, (*forms, FORM))
    G, K = cfg.offset_groups, 9
    # one GridSample of C/G channels over the groups' maps stacked along H, each between zero rows
    assert _grid_sample_maps(proto) == [[1, cfg.C_in // G, G * (cfg.H + 2), cfg.W]]
    assert _conv_kernels(proto) == [[G * K, 1] if forms == NCNN else [1, 1]]
    assert_close(run_ort(proto.SerializeToString(), inputs), reference(module, inputs), what=f"{forms} {changes}")
    # the control: without the form, one GridSample per offset group (ncnn) or the groups in the batch (mnn)
    plain = _grid_sample_maps(_export(module, inputs, forms))
    assert plain == ([[1, cfg.C_in // G, cfg.H, cfg.W]] * G if forms == NCNN else [[G, cfg.C_in // G, cfg.H, cfg.W]])


def test_a_nan_offset_reads_zeros_with_the_guard():
    """With the NaN guard (the mnn target's forms keep it) a NaN row or column samples 0, like an offset far out."""
    module = DeformLayer(CFG).eval()
    inputs = make_inputs(CFG)
    nan, far = ({k: v.clone() for k, v in inputs.items()} for _ in range(2))
    nan["offset"][0, 0, 3, 3] = nan["offset"][0, 19, 2, 4] = float("nan")  # group 0's row, group 1's column
    far["offset"][0, 0, 3, 3] = far["offset"][0, 19, 2, 4] = 1e6
    proto = _export(module, inputs, (*MNN, FORM))  # traced on finite offsets: torchvision's kernel crashes on NaN
    assert_close(run_ort(proto.SerializeToString(), nan), reference(module, far), what="NaN offsets")


@pytest.mark.parametrize("target, forms", [("ncnn", ()), ("mnn", (FORM,))])
def test_one_offset_group_or_a_tall_stack_leaves_the_file_as_it_was(target, forms, monkeypatch):
    """The form applies to more than one offset group only, and to a stack of at most STACKED_MAX_ROWS rows: the
    file is then the one written without it (the ``ncnn`` target asks for it; here also the mnn target's forms)."""

    def files(cfg, rows):
        monkeypatch.setattr(lower_grid_sample, "STACKED_MAX_ROWS", rows)
        module, inputs = DeformLayer(cfg).eval(), make_inputs(cfg)
        return _export(module, inputs, forms, target=target).SerializeToString()

    without = lambda cfg: files(cfg, 0)  # noqa: E731
    default = lower_grid_sample.STACKED_MAX_ROWS
    one = CFG.at(offset_groups=1)
    assert files(one, default) == without(one)
    assert files(CFG, 2 * (CFG.H + 2) - 1) == without(CFG)
    assert files(CFG, 2 * (CFG.H + 2)) != without(CFG)  # the control: two groups of H + 2 rows fit


def test_ncnn_target_stacks_offset_groups():
    """Target ``ncnn`` (no form asked for here): one GridSample for both offset groups, within 1e-4 of torchvision
    in ONNX Runtime, and in ncnn itself (the export's own check, where the runtime's venv is there)."""
    module = DeformLayer(CFG).eval()
    inputs = _far_offsets(make_inputs(CFG), CFG.H)
    in_runtime = not os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES")
    buf = io.BytesIO()
    report = deform_onnx.export(module, tuple(inputs.values()), buf, input_names=list(inputs), target="ncnn",
                                **({} if in_runtime else {"verify_runtimes": ()}))  # fmt: skip
    assert any(line.startswith("ncnn") for line in report.runtimes) == in_runtime, report.runtimes
    proto = onnx.load_from_string(buf.getvalue())
    assert _grid_sample_maps(proto) == [[1, CFG.C_in // 2, 2 * (CFG.H + 2), CFG.W]]
    assert_close(run_ort(proto.SerializeToString(), inputs), reference(module, inputs), what="target ncnn")


def test_lower_with_target_ncnn_folds_the_reordered_weight(tmp_path):
    """``lower(target="ncnn")`` of a native ``DeformConv`` file: the weight is the file's initializer, so the
    reordered weight is written as a constant (no Transpose of it); torchvision's numbers in ONNX Runtime."""
    module = DeformLayer(CFG).eval()
    inputs = _far_offsets(make_inputs(CFG), CFG.H)
    native = tmp_path / "native.onnx"
    deform_onnx.export(module, tuple(inputs.values()), native, input_names=list(inputs), method="native",
                       opset_version=19, verify=False, verify_runtimes=(), dynamo=False)  # fmt: skip
    proto = deform_onnx.lower(onnx.load(native), target="ncnn")
    assert _grid_sample_maps(proto) == [[1, CFG.C_in // 2, 2 * (CFG.H + 2), CFG.W]]
    conv = next(n for n in proto.graph.node if n.op_type == "Conv")
    made = {o: n for n in proto.graph.node for o in n.output}
    weights = {i.name: list(i.dims) for i in proto.graph.initializer}
    if conv.input[1] in made:  # a Constant node (the builder's constants), nothing computed from the weight
        node = made[conv.input[1]]
        assert node.op_type == "Constant", node.op_type
        weights[conv.input[1]] = list(node.attribute[0].t.dims)
    assert weights[conv.input[1]] == [CFG.C_out, CFG.C_in // 2, 2 * 9, 1]
    assert_close(run_ort(proto.SerializeToString(), inputs), reference(module, inputs), what="lower(target='ncnn')")
