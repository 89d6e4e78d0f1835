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
  (repair ``"output names without ':'"``, ``targets/repair_tflite.py``; tested on a two-node graph).
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
import torchvision
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


@pytest.mark.skipif(NO_RUNTIMES, reason="deployed runtimes are off (DEFORM_ONNX_NO_DEPLOYED_RUNTIMES)")
def test_onnx2tf_loses_an_output_named_with_colons_until_renamed(tmp_path):
    """S2ANet's TorchScript file returned ``onnx::Conv_...`` (its aligned feature, read by the ODM's ``Conv``) and LiteRT
    gave back 3 outputs of 4 (the whole model's check took 40 s). The same on two nodes: refused as converted, every
    output back after the target's repair ``output names without ':'``."""
    from deform_onnx.runtimes.deployed.check import check_runtimes

    assert "output names without ':'" in resolve_target("tflite").repairs
    value = helper.make_tensor_value_info
    rng = np.random.default_rng(1)
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 4, 1, 1], rng.standard_normal(8).astype(np.float32))
    nodes = [helper.make_node("Relu", ["x"], ["onnx::Conv_7"]), helper.make_node("Conv", ["onnx::Conv_7", "w"], ["y"])]
    outputs = [value("onnx::Conv_7", TensorProto.FLOAT, [1, 4, 6, 5]), value("y", TensorProto.FLOAT, [1, 2, 6, 5])]
    graph = helper.make_graph(nodes, "g", [value("x", TensorProto.FLOAT, [1, 4, 6, 5])], outputs, [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    feeds = {"x": rng.standard_normal((1, 4, 6, 5)).astype(np.float32)}
    path = tmp_path / "colon.onnx"
    onnx.save(model, path)
    (row,) = check_runtimes(path, ["tflite"], inputs=feeds)
    assert not row.ok and row.failure is not None and "returns 1 outputs" in row.failure, (row.failure, row.error)
    output_names_without_colon(model)
    onnx.save(model, path)
    (row,) = check_runtimes(path, ["tflite"], inputs=feeds)
    assert row.ok, (row.failure, row.error)


def test_s2anet_default_export_at_a_new_size():
    """The whole model (``AlignConv``'s offsets from rotated anchors built from ``x.shape`` under ``no_grad``) with
    default arguments and dynamic H, W: PyTorch's numbers at the example's size and at a new non-square one."""
    model = build_s2anet()
    x = torch.randn(1, 3, 64, 80, generator=torch.Generator().manual_seed(1))
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(model, (x,), f, input_names=["x"], dynamic_axes={"x": {2: "H", 3: "W"}})
    assert report.max_error is not None and len(report.checked_shapes) >= 2
    session = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])
    for image in (x, torch.randn(1, 3, 48, 96, generator=torch.Generator().manual_seed(2))):
        got = session.run(None, {"x": image.numpy()})
        with torch.no_grad():
            want = [t.numpy() for t in model(image)]
        for g, w, what in zip(got, want, ("fam cls", "fam reg", "aligned feature", "odm cls"), strict=True):
            _close(g, w, f"{what} at {tuple(image.shape)}")


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


def test_fixed_at_2_for_a_batch_1_example_says_the_capture_ran_at_2():
    """The refusal named ``is fixed at 2`` for a batch-1 example (the capture runs a size-1 dynamic axis at 2; S2ANet's
    per-image loops then fix N): it now says why. On the file's own dims (the whole export took 16 s)."""
    from deform_onnx.exporting.frozen import static_dims
    from deform_onnx.exporting.sizes import Axis

    value = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g", [value("x", TensorProto.FLOAT, [2, 3, "H"])],
        [value("y", TensorProto.FLOAT, [2, 3, "H"])],
    )  # fmt: skip
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (line,) = static_dims(proto, [Axis(0, 0, "N", 1), Axis(0, 2, "H", 4)], ["x"])
    assert line.startswith("input 'x' axis 0 (N) is fixed at 2 (the example's 1, captured at 2"), line
    (line,) = static_dims(proto, [Axis(0, 0, "N", 3)], ["x"])  # an example of 3: no such note
    assert line == "input 'x' axis 0 (N) is fixed at 2", line


class _Float32Offsets(torch.nn.Module):
    """A float16 map sampled at offsets computed in float32 (S2ANet's AlignConv builds them from float32 anchors):
    PyTorch's own float16 run fails (torchvision wants one dtype), so the float32 copy is the reference."""

    def __init__(self):
        super().__init__()
        self.dcn = torchvision.ops.DeformConv2d(4, 4, 3, padding=1)

    def forward(self, x, offset):
        return self.dcn(x, offset)


@pytest.mark.parametrize("method", ["native", "grid_sample", "gather"])
def test_float32_offsets_on_a_float16_map_export_in_every_form(method):
    """``DeformConv`` takes every float input in X's type: the native form casts the offsets (it wrote an invalid
    file before, and target onnxruntime refused S2ANet in float16); the other forms compute coordinates in float32."""
    gen = torch.Generator().manual_seed(0)
    model = _Float32Offsets().half().eval()
    x, offset = torch.randn(1, 4, 6, 7, generator=gen).half(), torch.randn(1, 18, 6, 7, generator=gen)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(model, (x, offset), f, method=method, opset_version=19)
    assert report.max_error is not None and report.method == method
    session = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), (x, offset), strict=True)})[0]
    with torch.no_grad():
        want = model.float()(x.float(), offset).numpy()
    assert got.dtype == np.float16 and np.allclose(got.astype(np.float32), want, rtol=1e-2, atol=1e-2)
