"""``lower`` / ``check`` of TensorRT's deformable plugin nodes: ``ModulatedDeformConv2d`` and CenterNet's ``DCNv2``.

Each node is built with onnx.helper from a torchvision ``DeformConv2d``'s weights (``models.trt_plugin_model``);
the lowered file runs in ONNX Runtime and is compared with torchvision's ``deform_conv2d`` on the same tensors.
Uneven stride / padding / dilation, groups 2 and deformable groups 2 on a 9x11 map catch a swapped ``(h, w)``,
``(dy, dx)`` or group layout.
"""

from __future__ import annotations

import onnx
import pytest
from typer.testing import CliRunner

import deform_onnx
from deform_onnx.cli import app
from deform_onnx.ops.deform_conv import SOURCE_OPS
from deform_onnx.ops.registry import OPS
from models import trt_plugin_model
from util import UNEVEN, Config, assert_close, op_types, reference, run_ort

MDC = "ModulatedDeformConv2d"

CASES = [
    # (op, domain, bias, method)
    (MDC, "", True, "grid_sample"),
    (MDC, "", True, "gather"),
    (MDC, "trt", False, "grid_sample"),
    ("DCNv2", "", True, "gather"),
    ("DCNv2", "", False, "grid_sample"),
]


def _lowered_matches(proto, layer, feeds, method: str, what: str) -> onnx.ModelProto:
    lowered = deform_onnx.lower(proto, method=method)
    onnx.checker.check_model(lowered, full_check=True)
    assert all(n.domain in ("", "ai.onnx") for n in lowered.graph.node) and "DeformConv" not in op_types(lowered)
    assert {MDC, "DCNv2"}.isdisjoint(op_types(lowered))
    assert_close(run_ort(lowered.SerializeToString(), feeds), reference(layer, feeds), what=what)
    return lowered


@pytest.mark.parametrize("op, domain, bias, method", CASES)
def test_plugin_nodes_lower_and_match_torchvision(op, domain, bias, method):
    cfg = UNEVEN.at(mask=True, bias=bias)
    proto, layer, feeds = trt_plugin_model(cfg, op, domain=domain)
    lowered = _lowered_matches(proto, layer, feeds, method, f"{domain}::{op} bias={bias} {method}")
    assert ("GridSample" in op_types(lowered)) == (method == "grid_sample")
    assert {o.domain for o in lowered.opset_import} == {""}  # the unused "trt" import is dropped


def test_dcnv2_reads_ints_and_its_importers_defaults():
    """CenterNet's symbolic writes single ints; its onnx-tensorrt importer reads a missing padding as 1."""
    cfg = Config(C_in=4, C_out=6, H=6, W=9, padding=(1, 1), offset_groups=2, mask=True, bias=True)
    proto, layer, feeds = trt_plugin_model(cfg, "DCNv2", attrs={"stride": 1, "dilation": 1, "padding": None})
    _lowered_matches(proto, layer, feeds, "grid_sample", "DCNv2 ints, padding by default")


def test_a_swapped_attribute_is_seen():
    """Planted: the pairs written [w, h]. Padding alone changes the output size: refused, naming the node;
    padding and dilation together keep it (3x3 kernel, (1, 2) each): the lowered file runs and misses torchvision.
    """
    cfg = Config(C_in=4, C_out=4, H=7, W=10, padding=(1, 2), dilation=(1, 2), offset_groups=2, mask=True, bias=True)
    proto, layer, feeds = trt_plugin_model(cfg, MDC)
    _lowered_matches(proto, layer, feeds, "gather", "premise: the file as written")
    swapped, _, _ = trt_plugin_model(cfg, MDC, attrs={"padding": [2, 1]})
    with pytest.raises(ValueError, match=r"node dcn \(ModulatedDeformConv2d\)"):
        deform_onnx.lower(swapped)
    swapped, _, _ = trt_plugin_model(cfg, MDC, attrs={"padding": [2, 1], "dilation": [2, 1]})
    for method in ("grid_sample", "gather"):
        with pytest.raises(AssertionError, match="max abs error"):
            _lowered_matches(swapped, layer, feeds, method, f"planted [w, h] {method}")


def test_bad_attributes_are_refused_by_name():
    cfg = UNEVEN.at(mask=True)
    proto, _, _ = trt_plugin_model(cfg, MDC, attrs={"groups": 2})  # DCNv2's spelling on TensorRT's node
    with pytest.raises(ValueError, match="unknown attribute.*groups"):
        deform_onnx.lower(proto)
    proto, _, _ = trt_plugin_model(cfg, "DCNv2", attrs={"deformable_groups": 2})
    with pytest.raises(ValueError, match="both deformable_group and deformable_groups"):
        deform_onnx.lower(proto)
    proto, _, _ = trt_plugin_model(cfg, MDC, attrs={"padding": [1, -1]})
    with pytest.raises(ValueError, match="padding=.*>= 0"):
        deform_onnx.lower(proto)


def test_cli_lower_for_tensorrt_and_check_with_restamped_reference(tmp_path):
    """``lower --target tensorrt`` writes standard ops; ``check`` compares with ONNX Runtime's DeformConv kernel on
    the file re-stamped (the reference of mmcv files), which the test first holds against torchvision itself."""
    cfg = UNEVEN.at(mask=True, bias=True)
    proto, layer, feeds = trt_plugin_model(cfg, MDC)
    src, out = tmp_path / "trt.onnx", tmp_path / "out.onnx"
    onnx.save(proto, str(src))
    runner = CliRunner()
    result = runner.invoke(app, ["lower", str(src), "--target", "tensorrt", "-o", str(out)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert f"│ dcn │ {MDC} │ gather │" in " ".join(result.stdout.split()), result.stdout  # tensorrt's pick
    lowered = onnx.load(str(out))
    assert MDC not in op_types(lowered) and "DeformConv" not in op_types(lowered)
    assert_close(run_ort(str(out), feeds), reference(layer, feeds), what="lower --target tensorrt")

    restamped = deform_onnx.lower(proto, method="native", opset=19)  # check's reference, trusted only if it is right
    assert op_types(restamped) == ["DeformConv"]
    assert_close(run_ort(restamped.SerializeToString(), feeds), reference(layer, feeds), what="re-stamped")
    result = runner.invoke(app, ["check", str(src), "--runtime", "ort"], env={"COLUMNS": "300"})
    assert "re-stamped at opset 19" in result.stdout, result.output
    summary = " ".join(result.stdout.split()).rpartition("check failed: ")[2]
    # ORT cannot run the plugin as is (that path fails the check); the lowered paths ran and matched.
    assert result.exit_code == 1 and summary.startswith("2 of 4 paths did not run (onnxruntime as is"), result.output


def test_every_source_module_registers_through_the_registry():
    """A new ``source_*.py`` is the only edit a node kind needs: the op's entry and quantize read SOURCE_OPS."""
    import pkgutil

    import deform_onnx.ops.deform_conv as package
    from deform_onnx.quantize.lowering import deform_kinds, native_kinds

    modules = {m.name for m in pkgutil.iter_modules(package.__path__) if m.name.startswith("source_")}
    assert {"source_tensorrt", "source_mmcv"} <= modules
    assert set(OPS["deform_conv2d"].onnx_nodes) == set(SOURCE_OPS) >= {("", MDC), ("trt", MDC), ("", "DCNv2")}
    assert set(SOURCE_OPS) <= deform_kinds() and {("mmdeploy", "TRTDCNv3")} <= deform_kinds()
    assert native_kinds() == set(SOURCE_OPS) - {("org.openvinotoolkit", "DeformableConv2D")}


@pytest.mark.parametrize("method", [None, "native"])
def test_quantize_lowers_the_plugin_node(tmp_path, method):
    """``quantize`` lowers TensorRT's plugin node (INT8 form; ``native``: ``DeformConv`` at 19, which ONNX Runtime
    runs) after checking the lowered float model against the file re-stamped as ``DeformConv``; a 1x1 Conv after
    the node gives ``native`` something to quantize."""
    import numpy as np
    import torch
    from onnx import helper, numpy_helper

    cfg = UNEVEN.at(mask=True, bias=True)
    proto, layer, _ = trt_plugin_model(cfg, MDC)
    head = np.random.default_rng(0).standard_normal((4, cfg.C_out, 1, 1)).astype(np.float32) / 3
    proto.graph.node[0].output[0] = "d"
    proto.graph.node.append(helper.make_node("Conv", ["d", "head"], ["y"]))
    proto.graph.initializer.append(numpy_helper.from_array(head, "head"))
    proto.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 4
    src, dst = tmp_path / "trt.onnx", tmp_path / "trt_int8.onnx"
    onnx.save(proto, str(src))
    tensors = [trt_plugin_model(cfg, MDC, seed=seed)[2] for seed in range(4)]
    samples = [{k: v.numpy() for k, v in feeds.items()} for feeds in tensors]
    deform_onnx.quantize(src, dst, samples[:3], eval_inputs=samples[3], method=method)
    written = onnx.load(str(dst))
    onnx.checker.check_model(written)
    assert MDC not in op_types(written) and ("DeformConv" in op_types(written)) == (method == "native")
    want = torch.nn.functional.conv2d(torch.from_numpy(reference(layer, tensors[3])), torch.from_numpy(head)).numpy()
    got = run_ort(str(dst), tensors[3])
    cosine = float((got * want).sum() / np.sqrt((got * got).sum() * (want * want).sum()))
    assert cosine >= 0.99, cosine
