"""S2ANet's ``AlignConv`` and RepPoints' head as mmrotate / mmdet write them (``tests/real_code/s2anet_style.py``,
``tests/real_code/reppoints_style.py``).

- ``.pte``: S2ANet's ``refine_bboxes`` takes the best class with ``cls_score.max(dim=-1, keepdim=True)`` of a 4-D
  ``[N, H*W, A, K]``; XNNPACK's partitioner took it and its serializer refused the negative dim ("amax.default only
  supports dim == 2 or dim == 3": nothing was written). Such a max stays on the portable kernels
  (``formats/schedule.py`` ``xnnpack_can_serialize``).
- ``.tflite``: its ``argmax(dim=-2, keepdim=True)`` over the one anchor per cell (``num_anchors=1``) became a
  ``mhlo.reduce`` litert-torch 0.10.0 could not legalize; an argmax over a length-1 axis is written as zeros
  (``formats/litert.py`` ``argmax_of_one``).
- Target ``tflite``: the TorchScript file named the aligned feature ``onnx::Conv_...`` (returned and read by the ODM's
  ``Conv``); onnx2tf 1.29.24 lost that output (3 of 4 returned). The target renames outputs without ``:``
  (repair ``"output names without ':'"``, ``targets/repair_tflite.py``).
- Target ``ncnn``: RepPoints' ``use_grid_points`` head repeats its grid (``Tile``), which pnnx writes as
  ``torch.tile`` and ncnn does not load; the target writes a ``Tile`` of constant repeats as ``Concat`` (repair
  ``"Tile as Concat"``, ``targets/repairs.py``).
- Refusals: torch.onnx's capture error for a dynamic batch (S2ANet's per-image loops) keeps the line naming the
  dimension, and "fixed at 2" for a batch-1 example says the capture ran at 2.
- RepPoints (``center_init`` and ``use_grid_points``) exports with dynamic N, H and W at opset 11 and runs at a new
  non-square size.
Expected values are PyTorch's on the same tensors.
"""

from __future__ import annotations

import importlib.util
import io
import os
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper

import deform_onnx
from deform_onnx.targets import resolve_target
from deform_onnx.targets.repair_tflite import output_names_without_colon
from real_code.reppoints_style import build as build_reppoints
from real_code.s2anet_style import FAMHead
from real_code.s2anet_style import build as build_s2anet
from util import ATOL

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))


def _needs(module: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


def _close(got, want, what):
    assert got.shape == want.shape and np.allclose(got, want, rtol=ATOL, atol=ATOL), (
        f"{what}: max error {np.abs(got - want).max():.3g}"
    )


class _Refine(torch.nn.Module):
    """S2ANet's ``fam_head.refine_bboxes`` of one level (the part holding ``max`` / ``argmax`` / ``gather``)."""

    def __init__(self):
        super().__init__()
        self.head = FAMHead()

    def forward(self, cls_score, bbox_pred):
        return self.head.refine_bboxes([cls_score], [bbox_pred])[0][0]


def _refine_args():
    gen = torch.Generator().manual_seed(3)
    return torch.randn(1, 3, 4, 5, generator=gen), torch.randn(1, 5, 4, 5, generator=gen) * 0.1


@_needs("executorch")
def test_refine_bboxes_to_pte(tmp_path):
    model, args = _Refine().eval(), _refine_args()
    path = tmp_path / "refine.pte"
    report = deform_onnx.export(model, args, path)
    assert report.verified
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(path.read_bytes())
    (got,) = program.load_method("forward").execute(list(args))
    with torch.no_grad():
        _close(got.numpy(), model(*args).numpy(), "rotated boxes")


@_needs("litert_torch")
def test_refine_bboxes_to_tflite(tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    model, args = _Refine().eval(), _refine_args()
    path = tmp_path / "refine.tflite"
    assert deform_onnx.export(model, args, path).verified
    runner = Interpreter(model_content=path.read_bytes()).get_signature_runner()
    names = sorted(runner.get_input_details(), key=lambda n: int(n.rsplit("_", 1)[-1]))
    (got,) = runner(**{n: a.numpy() for n, a in zip(names, args, strict=True)}).values()
    with torch.no_grad():
        _close(np.asarray(got), model(*args).numpy(), "rotated boxes")


def test_output_names_without_colon_keeps_values():
    """A returned value also read by a node, named with ``::``, and a clean one: only the first is renamed, the
    reader follows it; the values stay."""
    nodes = [
        helper.make_node("Relu", ["x"], ["onnx::Conv_7"]),
        helper.make_node("Neg", ["onnx::Conv_7"], ["y"]),
    ]
    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "g",
        [value("x", TensorProto.FLOAT, [2, 3])],
        [value("onnx::Conv_7", TensorProto.FLOAT, [2, 3]), value("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})  # noqa: E731
    want = run(model)
    assert output_names_without_colon(model) == [
        "graph output(s) renamed without ':' ('onnx::Conv_7' as 'onnx__Conv_7')"
    ]
    onnx.checker.check_model(model, full_check=True)
    assert [o.name for o in model.graph.output] == ["onnx__Conv_7", "y"]
    for g, w in zip(run(model), want, strict=True):
        np.testing.assert_array_equal(g, w)
    assert output_names_without_colon(model) == []


def test_s2anet_for_tflite_keeps_every_output(tmp_path):
    """The whole model with ``target="tflite"``: by default the export converts it with onnx2tf and runs it in
    LiteRT first (3 outputs of 4 came back before the repair)."""
    assert "output names without ':'" in resolve_target("tflite").repairs
    model = build_s2anet()
    x = torch.randn(1, 3, 64, 80, generator=torch.Generator().manual_seed(1))
    path = tmp_path / "s2anet.onnx"
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(model, (x,), path, target="tflite", input_names=["x"], **opt_out)
    if not NO_RUNTIMES:
        assert any(line.startswith("tflite") for line in report.runtimes), report.runtimes
    proto = onnx.load(str(path))
    assert len(proto.graph.output) == 4 and not any(":" in o.name for o in proto.graph.output)
    got = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x.numpy()}
    )
    with torch.no_grad():
        want = [t.numpy() for t in model(x)]
    for g, w, what in zip(got, want, ("fam cls", "fam reg", "aligned feature", "odm cls"), strict=True):
        _close(g, w, what)


@pytest.mark.parametrize("head", [{}, {"use_grid_points": True, "transform_method": "minmax"}], ids=["center", "grid"])
def test_reppoints_dynamic_runs_at_a_new_size(head):
    model = build_reppoints(**head)
    x = torch.randn(1, 3, 64, 80, generator=torch.Generator().manual_seed(1))

    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(
            model,
            (x,),
            f,
            dynamo=False,
            opset_version=11,
            input_names=["x"],
            dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}},
        )
    assert len(report.checked_shapes) == 2
    x = torch.randn(2, 3, 96, 48, generator=torch.Generator().manual_seed(2))
    got = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})
    with torch.no_grad():
        want = [t.numpy() for t in model(x)]
    for g, w, what in zip(got, want, ("cls_out", "bbox"), strict=True):
        _close(g, w, what)


def test_tile_as_concat_keeps_values():
    """``Tile`` with constant repeats (1 on some axes) as ``Concat`` copies; one of computed repeats is left."""
    from deform_onnx.targets.repairs import tile_as_concat

    value = helper.make_tensor_value_info
    reps = helper.make_tensor("reps", TensorProto.INT64, [5], [1, 3, 1, 2, 1])
    nodes = [
        helper.make_node("Tile", ["x", "reps"], ["y"], name="tile"),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Tile", ["x", "s"], ["z"], name="computed"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [value("x", TensorProto.FLOAT, [1, 1, 3, 2, 4])],
        [value("y", TensorProto.FLOAT, [1, 3, 3, 4, 4]), value("z", TensorProto.FLOAT, [1, 1, 9, 4, 16])],
        [reps],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((1, 1, 3, 2, 4)).astype(np.float32)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})  # noqa: E731
    want = run(model)
    assert tile_as_concat(model) == ["Tile with constant repeats written as Concat on 1 node(s)"]
    onnx.checker.check_model(model, full_check=True)
    assert [n.name for n in model.graph.node if n.op_type == "Tile"] == ["computed"]
    for g, w in zip(run(model), want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_reppoints_grid_for_ncnn_is_written_without_tile(tmp_path):
    """RepPoints' ``use_grid_points`` head with ``target="ncnn"``: by default the export runs the file in ncnn first
    (``torch.tile`` refused to load before the repair)."""
    assert "Tile as Concat" in resolve_target("ncnn").repairs
    model = build_reppoints(use_grid_points=True)
    x = torch.randn(1, 3, 64, 80, generator=torch.Generator().manual_seed(1))
    path = tmp_path / "reppoints.onnx"
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    report = deform_onnx.export(model, (x,), path, target="ncnn", input_names=["x"], **opt_out)
    if not NO_RUNTIMES:
        assert any(line.startswith("ncnn") for line in report.runtimes), report.runtimes
    proto = onnx.load(str(path))
    assert "Tile" not in {n.op_type for n in proto.graph.node}
    got = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x.numpy()}
    )
    with torch.no_grad():
        want = [t.numpy() for t in model(x)]
    for g, w, what in zip(got, want, ("cls_out", "bbox"), strict=True):
        _close(g, w, what)


def test_capture_failure_names_the_conflicting_dimension():
    """torch.onnx's capture error is a heading ending in ``:`` with the dimensions on the next lines (S2ANet with
    a dynamic batch: its per-image loop fixes N); the one-line reason keeps the first items."""
    from deform_onnx.exporters.calls import cause

    text = (
        "Found the following conflicts between user-specified ranges and inferred ranges from model tracing:\n"
        "- Received user-specified dim hint Dim.DYNAMIC(min=None, max=None), but tracing inferred a static shape "
        "of 2 for dimension inputs[0].shape[0].\n"
    )
    try:
        try:
            raise ValueError(text)
        except ValueError as inner:
            raise RuntimeError("export failed") from inner
    except RuntimeError as exc:
        reason = cause(exc)
    assert reason.startswith("ValueError: Found the following conflicts") and "inputs[0].shape[0]" in reason
    assert "\n" not in reason


class _PerImage(torch.nn.Module):
    """A loop over the images in Python, as S2ANet's ``refine_bboxes`` and ``AlignConv.forward`` write it."""

    def forward(self, x):
        return torch.stack([x[i] * 2 for i in range(x.shape[0])])


def test_a_batch_loop_with_a_dynamic_batch_says_where_2_comes_from():
    """The refusal named ``is fixed at 2`` for a batch-1 example (the capture runs at 2): it now says why."""
    from torch.export import Dim

    with pytest.raises(deform_onnx.ExportError) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        deform_onnx.export(
            _PerImage(), (torch.randn(1, 3, 4, 4),), io.BytesIO(), dynamic_shapes=({0: Dim("N", max=4)},)
        )
    assert "axis 0 (N) is fixed at 2 (the example's 1, captured at 2" in str(info.value), str(info.value)
