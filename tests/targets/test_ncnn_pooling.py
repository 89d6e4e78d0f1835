"""The ncnn target writes ``ceil_mode=1`` pooling so ncnn computes PyTorch's values (targets/repair_pool.py).

ncnn's ``Pooling`` divides a partial last window by the whole kernel when it counts pads, and keeps a last
window PyTorch drops. PaddleOCR's DBNet backbone (``ResNet_vd`` with DCN: its shortcut's
``AvgPool2d(2, 2, ceil_mode=True)``) on an odd map was refused by the target's own run in ncnn; the repair
makes it match. Expected values are PyTorch's on the same tensors.
"""

from __future__ import annotations

import io
import os

import numpy as np
import onnx
import pytest
import torch
from onnx import helper

import deform_onnx
from deform_onnx.rewrite import lower_file
from deform_onnx.runtimes.deployed.check import check_runtimes
from deform_onnx.targets import resolve_target
from deform_onnx.targets.repair_pool import ceil_mode_pooling_explicit
from real_code.paddleocr_resnet_vd_style import TinyResNetVd
from util import ATOL, run_ort

NO_RUNTIMES = bool(os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES"))
NEEDS_NCNN = pytest.mark.skipif(NO_RUNTIMES, reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES is set")


def _ocr():
    torch.manual_seed(7)
    # 18x18: the stem and max pool leave a 5x5 map, whose shortcut pooling's last window is partial
    return TinyResNetVd().eval(), torch.randn(1, 3, 18, 18)


@pytest.fixture(scope="module")
def ocr_ncnn(tmp_path_factory):
    """The DBNet backbone exported with ``target="ncnn"``: by default the export runs the file in ncnn first."""
    model, x = _ocr()
    path = tmp_path_factory.mktemp("ocr") / "resnet_vd.onnx"
    opt_out = {"verify_runtimes": ()} if NO_RUNTIMES else {}
    return model, x, path, deform_onnx.export(model, (x,), path, target="ncnn", **opt_out)


def test_ocr_backbone_pooling_is_repaired_and_keeps_values(ocr_ncnn):
    model, x, path, report = ocr_ncnn
    assert "ceil_mode pooling explicit" in resolve_target("ncnn").repairs
    assert any(r.startswith("target 'ncnn': ceil_mode=1 AveragePool") for r in report.repairs), report.repairs
    pools = [n for n in onnx.load(str(path)).graph.node if n.op_type == "AveragePool"]
    attrs = [{a.name: helper.get_attribute_value(a) for a in n.attribute} for n in pools]
    assert attrs and all(a.get("count_include_pad", 0) == 0 for a in attrs), attrs
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(run_ort(path.read_bytes(), {"x": x}), want, atol=ATOL, rtol=0)


@NEEDS_NCNN
def test_ocr_backbone_runs_in_ncnn(ocr_ncnn):
    """The target's file was run in ncnn (pnnx, its cached venv) within the float32 rule before it was written."""
    *_, report = ocr_ncnn
    assert any(line.startswith("ncnn") for line in report.runtimes), report.runtimes


@NEEDS_NCNN
def test_without_the_repair_ncnn_refuses_the_ocr_backbone(tmp_path, monkeypatch):
    """The planted fault: the repair does nothing, and the export's run in ncnn refuses the file (none written)."""
    from deform_onnx.targets import repairs

    monkeypatch.setitem(repairs.REPAIRS, "ceil_mode pooling explicit", lambda model: [])
    model, x = _ocr()
    with pytest.raises(deform_onnx.VerificationError, match=r"ncnn .* misses the reference"):
        deform_onnx.export(model, (x,), tmp_path / "bad.onnx", target="ncnn")
    assert not (tmp_path / "bad.onnx").exists()


class _Pools(torch.nn.Module):
    """Each ``ceil_mode`` pooling case ncnn got wrong, one output each, on one ``[1, 3, 5, 8]`` input."""

    def __init__(self):
        super().__init__()
        self.pools = torch.nn.ModuleList(
            [
                torch.nn.AvgPool2d(2, 2, 0, ceil_mode=True),  # PaddleOCR's: partial windows on H, no pads
                torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True),  # partial on W, counting pads: an explicit Pad
                torch.nn.AvgPool2d(2, 2, 1, ceil_mode=True),  # the last window on H starts in the pad: dropped
                torch.nn.AvgPool2d(2, 2, 1, ceil_mode=True, count_include_pad=False),  # dropped
                torch.nn.MaxPool2d(2, 2, 1, ceil_mode=True),  # dropped
                torch.nn.AvgPool2d((2, 3), 2, 1, ceil_mode=True),  # dropped on H, partial on W
                torch.nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),  # ncnn right: left alone
            ]
        )

    def forward(self, x):
        return tuple(pool(x) for pool in self.pools)


@pytest.fixture(scope="module")
def pools_repaired():
    torch.manual_seed(3)
    model, x = _Pools().eval(), torch.randn(1, 3, 5, 8)
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, input_names=["x"], dynamo=False, opset_version=17)
    proto = onnx.load_from_string(buf.getvalue())
    done = ceil_mode_pooling_explicit(proto)
    return model, x, proto, done


def test_repair_keeps_every_pool_value(pools_repaired):
    """Every rewritten pool gives PyTorch's values and shapes in ONNX Runtime; the one ncnn gets right is untouched."""
    model, x, proto, done = pools_repaired
    assert done == [
        "ceil_mode=1 pooling whose windows all fit written with ceil_mode=0 on 3 node(s)",
        "ceil_mode=1 AveragePool counting pads written as Pad + count_include_pad=0 on 3 node(s)",
    ], done
    onnx.checker.check_model(proto, full_check=True)
    assert sum(n.op_type == "Pad" for n in proto.graph.node) == 2  # no Pad where the pool has no pads
    session = __import__("onnxruntime").InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x.numpy()})
    with torch.no_grad():
        want = [y.numpy() for y in model(x)]
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=1e-6, rtol=0)
    inferred = onnx.shape_inference.infer_shapes(proto).graph.output
    assert [[d.dim_value for d in o.type.tensor_type.shape.dim] for o in inferred] == [list(w.shape) for w in want]


@NEEDS_NCNN
def test_pools_are_wrong_in_ncnn_mnn_openvino_and_right_repaired(pools_repaired, tmp_path):
    """Each target applying the repair gets some of these pools wrong as exported, and every one right repaired."""
    model, x, proto, _ = pools_repaired
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, input_names=["x"], dynamo=False, opset_version=17)
    (tmp_path / "as_exported.onnx").write_bytes(buf.getvalue())
    onnx.save(proto, str(tmp_path / "repaired.onnx"))
    runtimes = ["ncnn", "mnn", "openvino"]
    for name in runtimes:
        assert "ceil_mode pooling explicit" in resolve_target(name).repairs, name
    before = check_runtimes(tmp_path / "as_exported.onnx", runtimes, model=model, args=(x,), repeats=1)
    assert all(row.error is None and not row.ok for row in before), [(r.runtime, r.error) for r in before]
    after = check_runtimes(tmp_path / "repaired.onnx", runtimes, model=model, args=(x,), repeats=1)
    assert all(row.ok for row in after), [row.failure or row.error for row in after]


def test_lower_file_names_the_target_repair(tmp_path):
    """``lower --target ncnn`` of a file with such a pool and no deformable node writes the repair and reports it."""
    model, x = _Pools().eval(), torch.randn(1, 3, 5, 8)
    src = tmp_path / "pools.onnx"
    torch.onnx.export(model, (x,), src, input_names=["x"], dynamo=False, opset_version=17)
    report = lower_file(src, tmp_path / "out.onnx", target="ncnn")
    assert report.changed and any(r.startswith("target 'ncnn': ceil_mode=1") for r in report.repairs), report.repairs
    pads = [n for n in onnx.load(str(tmp_path / "out.onnx")).graph.node if n.op_type == "Pad"]
    assert len(pads) == 2, [n.op_type for n in onnx.load(str(tmp_path / "out.onnx")).graph.node]
