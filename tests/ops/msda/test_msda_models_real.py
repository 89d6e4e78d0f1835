"""Hugging Face transformers' RT-DETR and Mask2Former (tiny configs, random weights, no download) through
``deform_onnx.export``, on the bundled photo, on ONNX Runtime and OpenVINO. Deformable DETR is in
``test_msda_real.py``. Checked with transformers 5.24; expected values always come from running the
PyTorch model on the same tensors.

RT-DETR's decoder cross-attention is the pure-PyTorch multi-scale deformable
attention (one ``grid_sample`` per level); its hybrid encoder's sine position
embedding calls ``torch.outer``, which torch's TorchScript exporter has only
from opset 12 (``deform_onnx.exporters.aten_gaps`` adds it at 11). It is
checked at the export size and, with dynamic H/W, at another size.

The query selection (``topk`` over the encoder's class scores) reorders the
outputs wherever two scores tie, so the encoder scores are an output too:
the file matches them within ``atol + rtol*|s|`` (1e-4 each), and
:func:`assert_topk_unambiguous` checks that PyTorch's top-k scores are
further apart than twice that, so no ranking can differ between the two.

Mask2Former's pixel decoder is a stack of the same attention
(``Mask2FormerPixelDecoderEncoderMultiscaleDeformableAttention``); its mask
head's ``einsum`` has a symbolic from opset 12 only (``aten_gaps`` again).
It is checked at the export size here; with dynamic H/W at a second size in
``test_dynamic_transformers.py`` (the dynamo file, since the export-time
rewrites of issue 18; before them the TorchScript trace stored the level sizes
as a constant, ``torch.as_tensor(spatial_shapes_list)``, 0.054 off on the
mask logits at 160x96, and the dynamo file failed there on a broadcast).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import deform_onnx
from deform_onnx.cli.example import load_photo

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore")]
import transformers  # noqa: E402  (the test extra has it: this test runs in CI)

from models import unit_scale  # noqa: E402
from tiny_detectors import mask2former_config, rt_detr_config  # noqa: E402
from util import assert_topk_unambiguous  # noqa: E402

EXPORT_SIZE = (128, 128)
OTHER_SIZE = (160, 96)  # every level's map changes size (stride 32: 4x4 -> 5x3)
TOL = 1e-4  # the float32 rule, as rtol and atol: |ort - torch| <= TOL + TOL * |torch|
DYNAMIC = {"x": {2: "H", 3: "W"}}


class Detections(torch.nn.Module):
    """RT-DETR's class logits ``[N, Q, C]`` and boxes ``[N, Q, 4]``, and the encoder scores ``[N, L]``
    (the maximum over classes, what the top-k query selection ranks)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values)
        return out.logits, out.pred_boxes, out.enc_outputs_class.max(-1).values


def assert_matches(got, want) -> None:
    for name, g, w in zip(("logits", "boxes", "encoder scores"), got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=name)


@pytest.fixture(scope="module")
def rtdetr():
    """``(model, {size: photo}, {size: PyTorch outputs}, num_queries)``; seed 3 of :func:`unit_scale`."""
    # scaled_dot_product_attention has no symbolic below opset 14 in torch itself
    config = rt_detr_config(decoder_layers=1, attn_implementation="eager")
    photos = {size: load_photo(size) for size in (EXPORT_SIZE, OTHER_SIZE)}
    torch.manual_seed(0)
    model = Detections(unit_scale(transformers.RTDetrForObjectDetection(config), photos[EXPORT_SIZE], seed=3))
    with torch.no_grad():
        want = {size: [t.numpy() for t in model.eval()(x)] for size, x in photos.items()}
    return model, photos, want, config.num_queries


def test_rtdetr_query_selection_is_unambiguous(rtdetr):
    """The comparisons below are of one ranking: PyTorch's top-k scores are well apart at both sizes."""
    _, _, want, k = rtdetr
    for size in (EXPORT_SIZE, OTHER_SIZE):
        assert_topk_unambiguous(want[size][2], k)


#: Opset 17 (the dynamo file, dynamic H/W, at 160x96 on ORT and OpenVINO) is checked with the default
#: attention in test_dynamic_transformers.py; here the opset-11 TorchScript file with eager attention.
@pytest.fixture(scope="module", params=[11], ids=["opset11"])
def rtdetr_dynamic(request, rtdetr, tmp_path_factory):
    """One dynamic-H/W export per opset, default arguments: ``(opset, path, report)``.

    At 11 the dynamo path cannot serve (it starts at 14): the TorchScript
    exporter, whose trace keeps the size computations in the graph. At 17
    the dynamo exporter: transformers' ``torch_int(height)`` would fix the
    sizes (``torch.export`` records ``1 + (H - 1) // 32 == 4``, which torch's
    ONNX exporter drops), but while exporting it keeps them symbolic
    (``deform_onnx.exporters.hf_transformers``, issue 18).
    """
    model, photos, _, _ = rtdetr
    opset = request.param
    path = tmp_path_factory.mktemp("rtdetr") / f"rtdetr{opset}.onnx"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = deform_onnx.export(
            model, (photos[EXPORT_SIZE],), path, opset_version=opset, input_names=["x"], dynamic_axes=DYNAMIC
        )
    fallbacks = [str(w.message) for w in caught if "falling back" in str(w.message)]
    assert (fallbacks and "reaches opset 14" in fallbacks[0]) if opset == 11 else not fallbacks, fallbacks
    return opset, path, report


def test_rtdetr_dynamic_onnxruntime(rtdetr, rtdetr_dynamic):
    """export verified the file at 128x128 (float32: 1e-4); ONNX Runtime matches PyTorch at 160x96 too."""
    import onnxruntime as ort

    _, photos, want, _ = rtdetr
    opset, path, report = rtdetr_dynamic
    assert report.exporter == ("torchscript" if opset == 11 else "dynamo") and report.opset == opset
    assert report.max_error <= TOL
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for size in (EXPORT_SIZE, OTHER_SIZE):
        assert_matches(session.run(None, {"x": photos[size].numpy()}), want[size])


def test_rtdetr_dynamic_openvino(rtdetr, rtdetr_dynamic):
    """OpenVINO (CPU, f32) runs the same file at both sizes within 1e-4 of PyTorch."""
    pytest.importorskip("openvino", reason="OpenVINO tests need `pip install openvino`")
    import deform_onnx.openvino as dov

    _, photos, want, _ = rtdetr
    _, path, _ = rtdetr_dynamic
    compiled = dov.compile(str(path), device="CPU", precision="f32")
    for size in (EXPORT_SIZE, OTHER_SIZE):
        result = compiled([photos[size].numpy()])
        assert_matches([np.asarray(result[out]) for out in compiled.outputs], want[size])


# Opset 17 on the dynamo path: test_dynamic_transformers.py exports this tiny RT-DETR there (default attention,
# dynamic H/W, checked by export at 128x128 and by the test at 160x96); a static export of the eager-attention
# model at 17 repeated that path with no deformable rule of its own.


class Segmentation(torch.nn.Module):
    """Mask2Former's class logits ``[N, Q, C+1]`` and mask logits ``[N, Q, H/4, W/4]``."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        out = self.model(pixel_values=pixel_values)
        return out.class_queries_logits, out.masks_queries_logits


@pytest.fixture(scope="module")
def mask2former():
    """``(model, photo, PyTorch outputs)``: a ResNet backbone (transformers' default is Swin), one
    pixel-decoder encoder layer, two decoder layers; seed 0 of :func:`unit_scale`."""
    config = mask2former_config()
    photo = load_photo(EXPORT_SIZE)
    torch.manual_seed(0)
    model = Segmentation(unit_scale(transformers.Mask2FormerForUniversalSegmentation(config), photo, seed=0))
    with torch.no_grad():
        want = [t.numpy() for t in model.eval()(photo)]
    return model, photo, want


#: OpenVINO compile options beyond f32 for each opset's file. OpenVINO 2026.4 cannot compile the
#: dynamo file's decoder self-attention (not a deformable op): its MatMul-Softmax-MatMul "snippet"
#: fails on ``Softmax([2, 10, 10]) @ V[1, 2, 10, 16]`` as the exporter's optimizer leaves it
#: ("ReduceDecomposition supports only Reduce by last dimension"); without snippets it compiles.
OPENVINO_OPTIONS = {11: {}, 17: {"SNIPPETS_MODE": "DISABLE"}}


# The dynamo file at 17 (this config, dynamic H/W, both sizes, ORT and OpenVINO): test_dynamic_transformers.py.
@pytest.mark.parametrize("opset, exporter", [(11, "torchscript")], ids=["opset11"])
def test_mask2former_onnxruntime_and_openvino(mask2former, tmp_path, opset, exporter):
    """Default arguments (11: the TorchScript fallback; 17: dynamo): export verified the file on
    ONNX Runtime (float32: 1e-4), and OpenVINO (CPU, f32) runs it within 1e-4 of PyTorch."""
    model, photo, want = mask2former
    path = tmp_path / f"mask2former{opset}.onnx"
    report = deform_onnx.export(model, (photo,), path, opset_version=opset, input_names=["x"])
    assert report.exporter == exporter and report.opset == opset
    import onnxruntime as ort

    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": photo.numpy()})
    for name, g, w in zip(("class logits", "mask logits"), got, want, strict=True):  # the file, here
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL, err_msg=name)
    pytest.importorskip("openvino", reason="OpenVINO tests need `pip install openvino`")
    import openvino as ov

    import deform_onnx.openvino as dov

    core = ov.Core()
    options = {"INFERENCE_PRECISION_HINT": "f32", **OPENVINO_OPTIONS[opset]}
    compiled = core.compile_model(dov.read_model(str(path), core), "CPU", options)
    result = compiled([photo.numpy()])
    for name, out, w in zip(("class logits", "mask logits"), compiled.outputs, want, strict=True):
        np.testing.assert_allclose(np.asarray(result[out]), w, rtol=TOL, atol=TOL, err_msg=name)
