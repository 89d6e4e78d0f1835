"""Sweep of Hugging Face transformers' deformable-attention detectors through ``deform_onnx.export`` with
dynamic H/W (issue 18, "Done when", second item).

Per class: a tiny config, random weights re-drawn to unit scale (``tests/test_msda_models_real.unit_scale``,
so that top-k query selections do not tie), the model's DEFAULT attention implementation, one
``deform_onnx.export`` at 128x128 with ``dynamic_axes`` H/W and default arguments otherwise; then the
written file at 160x96 on ONNX Runtime and OpenVINO, compared with PyTorch at that size (max abs error over
all outputs). A refused export is recorded with the first line of its message.

Measured 2026-12-01 (transformers 5.24, torch 2.14.1, ORT 1.32, OpenVINO 2026.4), max abs error at 160x96:
written on dynamo and within the rules on ONNX Runtime / OpenVINO: Deformable DETR 1.4e-5/1.9e-5, RT-DETR and
RT-DETRv2 8.0e-5/7.2e-5, D-FINE 5.1e-4/3.2e-4 (one output, passed by the float64 rule: PyTorch float32 is as far
from float64), Mask2Former 2.4e-5/2.3e-5, OneFormer 3.1e-6/2.4e-6, Grounding DINO 6.5e-5/7.6e-5,
MM-Grounding-DINO 1.1e-5/1.9e-5, LW-DETR 1.7e-6/1.4e-6. Refused: OmDet-Turbo (HF Swin backbone: its window
padding and attention mask are Python ints, ExportError names the Reshape and the frozen H/16, H/8 constants),
RF-DETR (ExportError naming aten::_upsample_bicubic2d_aa: below opset 18 the antialiased resize's weights are
computed at export; measured the same day, its fix holds: ``opset_version=18`` with dynamic H/W writes a dynamo
file verified at 112x112 and 168x224, 7.2e-7 and 4.8e-7 on ONNX Runtime).

Each model runs in its own subprocess, one at a time (the machine is shared)::

    PYTHONPATH=src:tests DEFORM_ONNX_CASES=/work/shared/cases/cases.json \
        /work/venv/bin/python scripts/transformers_dynamic_sweep.py [NAME ...]
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

EXPORT_SIZE, OTHER_SIZE = (128, 128), (160, 96)
#: As in tests/test_dynamic_transformers.py: OpenVINO 2026.4 cannot compile the decoder self-attention
#: MatMul-Softmax-MatMul "snippet" of dynamo files.
OPENVINO_OPTIONS = {"INFERENCE_PRECISION_HINT": "f32", "SNIPPETS_MODE": "DISABLE"}
TIMEOUT_S = 900
TOL = 1e-4  # the float32 rule of deform_onnx.export, as rtol and atol
#: RF-DETR's own code fixes the input to multiples of patch size x windows (14 x 2 here): 128 and 160x96 do not
#: run in PyTorch ("shape '[1, 2, 4, 2, 4, -1]' is invalid"), so it is exported at 112x112 and checked at 168x224.
SIZES = {"RF-DETR": ((112, 112), (168, 224))}


def _resnet(features):
    from tiny_detectors import resnet_config

    return resnet_config(features)


def _rtdetr_like(config_cls, **extra):
    from tiny_detectors import rt_detr_config

    return rt_detr_config(config_cls, **extra)


def _grounding(config_cls):
    from tiny_detectors import grounding_dino_config

    return grounding_dino_config(config_cls)


#: ids 1, 2, 3 stand for [CLS], [SEP], "." (no tokenizer needed)
GROUNDING_IDS = [[1, 5, 7, 3, 9, 3, 2]]


def build(name):
    """``(model, extra input tensors, output fields)``: the transformers model in eval mode, random weights."""
    import torch
    import transformers as T

    import tiny_detectors

    extra: list = []
    if name == "Deformable DETR":
        config = tiny_detectors.deformable_detr_config()
        model = T.DeformableDetrForObjectDetection(config)
    elif name == "RT-DETR":
        model = T.RTDetrForObjectDetection(_rtdetr_like(T.RTDetrConfig, decoder_layers=1))
    elif name == "RT-DETRv2":
        model = T.RTDetrV2ForObjectDetection(_rtdetr_like(T.RTDetrV2Config, decoder_layers=2))
    elif name == "D-FINE":
        model = T.DFineForObjectDetection(_rtdetr_like(T.DFineConfig, decoder_layers=2))
    elif name == "Mask2Former":
        config = tiny_detectors.mask2former_config()
        model = T.Mask2FormerForUniversalSegmentation(config)
    elif name == "OneFormer":
        config = T.OneFormerConfig(
            backbone_config=_resnet(["stage1", "stage2", "stage3", "stage4"]),
            use_pretrained_backbone=False,
            conv_dim=32,
            mask_dim=32,
            hidden_dim=32,
            encoder_feedforward_dim=64,
            dim_feedforward=64,
            encoder_layers=1,
            decoder_layers=2,
            num_attention_heads=2,
            num_queries=10,
            num_labels=5,
            task_seq_len=8,
            text_encoder_width=32,
            text_encoder_context_length=8,
            text_encoder_num_layers=1,
            text_encoder_vocab_size=100,
            query_dec_layers=1,
        )
        model = T.OneFormerForUniversalSegmentation(config)
        extra = [torch.tensor([[1, 5, 7, 3, 2, 0, 0, 0]])]  # task_inputs: the task prompt's token ids
    elif name == "Grounding DINO":
        model = T.GroundingDinoForObjectDetection(_grounding(T.GroundingDinoConfig))
        extra = [torch.tensor(GROUNDING_IDS)]
    elif name == "MM-Grounding-DINO":
        model = T.MMGroundingDinoForObjectDetection(_grounding(T.MMGroundingDinoConfig))
        extra = [torch.tensor(GROUNDING_IDS)]
    elif name == "OmDet-Turbo":
        backbone = T.SwinConfig(
            image_size=128,
            embed_dim=16,
            depths=[1, 1, 1, 1],
            num_heads=[1, 2, 2, 2],
            window_size=4,
            out_indices=[2, 3, 4],
        )
        text = T.CLIPTextConfig(
            vocab_size=100, hidden_size=48, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
        )
        config = T.OmDetTurboConfig(
            backbone_config=backbone,
            use_timm_backbone=False,
            use_pretrained_backbone=False,
            apply_layernorm_after_vision_backbone=False,  # it expects timm's channels-last maps
            text_config=text,
            image_size=128,
            text_projection_in_dim=48,
            text_projection_out_dim=48,
            task_encoder_hidden_dim=64,
            class_embed_dim=48,  # != decoder_hidden_dim: else transformers lacks task_project
            num_queries=10,
            encoder_hidden_dim=32,
            vision_features_channels=[32, 32, 32],
            encoder_in_channels=[32, 64, 128],
            encoder_attention_heads=2,
            encoder_dim_feedforward=64,
            decoder_hidden_dim=32,
            decoder_num_heads=2,
            decoder_num_layers=2,
            decoder_dim_feedforward=64,
        )
        model = T.OmDetTurboForObjectDetection(config)
        # two classes of two tokens each, one task prompt of four tokens, batch 1
        extra = [
            torch.tensor([[5, 6, 0, 0], [7, 8, 0, 0]]),
            torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0]]),
            torch.tensor([[9, 10, 11, 12]]),
            torch.tensor([[1, 1, 1, 1]]),
            torch.tensor([2]),
        ]
    elif name == "LW-DETR":
        backbone = T.LwDetrViTConfig(
            hidden_size=32,
            num_hidden_layers=4,
            num_attention_heads=2,
            mlp_ratio=2,
            image_size=128,
            pretrain_image_size=64,
            patch_size=16,
            window_block_indices=[0, 2],
            num_windows=4,
            out_indices=[1, 3],
        )
        config = T.LwDetrConfig(
            backbone_config=backbone,
            projector_scale_factors=[2.0, 0.5],
            d_model=32,
            decoder_ffn_dim=64,
            decoder_layers=2,
            num_queries=10,
            group_detr=1,
            decoder_self_attention_heads=2,
            decoder_cross_attention_heads=2,
            decoder_n_points=2,
            num_labels=5,
        )
        model = T.LwDetrForObjectDetection(config)
    elif name == "RF-DETR":
        config = tiny_detectors.rf_detr_config()
        model = T.RfDetrForObjectDetection(config)
    else:
        raise SystemExit(f"unknown model {name!r}; one of {', '.join(MODELS)}")
    return model, extra


MODELS = [
    "Deformable DETR",
    "RT-DETR",
    "RT-DETRv2",
    "D-FINE",
    "Mask2Former",
    "OneFormer",
    "Grounding DINO",
    "MM-Grounding-DINO",
    "OmDet-Turbo",
    "LW-DETR",
    "RF-DETR",
]
INPUT_NAMES = {
    "OneFormer": ["task_inputs"],
    "Grounding DINO": ["input_ids"],
    "MM-Grounding-DINO": ["input_ids"],
    "OmDet-Turbo": [
        "classes_input_ids",
        "classes_attention_mask",
        "tasks_input_ids",
        "tasks_attention_mask",
        "classes_structure",
    ],
}


def _tensors(out):
    """Every floating tensor field of a transformers output, in order (nested tuples flattened)."""
    import torch

    found = []

    def walk(value):
        if isinstance(value, torch.Tensor):
            if value.is_floating_point():
                found.append(value)
        elif isinstance(value, (tuple, list)):
            for v in value:
                walk(v)

    for key in out:
        if key in ("last_hidden_state",) or "hidden_states" in key or "attentions" in key:
            continue
        walk(out[key])
    return found


def run_one(name):
    """Export ``name`` at 128x128 with dynamic H/W, run the file at 160x96; a dict for the table."""
    import numpy as np
    import torch

    import deform_onnx
    from deform_onnx.cli.example import load_photo
    from models import unit_scale

    export_size, other_size = SIZES.get(name, (EXPORT_SIZE, OTHER_SIZE))
    row = {"class": name, "sizes": f"{export_size} -> {other_size}"}
    photos = {size: load_photo(size) for size in (export_size, other_size)}
    torch.manual_seed(0)
    inner, extra = build(name)
    keys = INPUT_NAMES.get(name, [])
    row["attn"] = inner.config._attn_implementation

    class Outputs(torch.nn.Module):
        """The model's floating outputs as a tuple; extra inputs as named parameters (no ``*args``:
        torch.export sees a varargs tuple as one input, which ``dynamic_axes`` cannot describe)."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def run(self, pixel_values, args):
            return tuple(_tensors(self.model(pixel_values=pixel_values, **dict(zip(keys, args)))))

    class Outputs1(Outputs):
        def forward(self, pixel_values, a):
            return self.run(pixel_values, (a,))

    class Outputs5(Outputs):
        def forward(self, pixel_values, a, b, c, d, e):
            return self.run(pixel_values, (a, b, c, d, e))

    class Outputs0(Outputs):
        def forward(self, pixel_values):
            return self.run(pixel_values, ())

    model = {0: Outputs0, 1: Outputs1, 5: Outputs5}[len(extra)](inner).eval()
    if extra:
        _unit_scale_with(inner, photos[export_size], extra, keys)
    else:
        unit_scale(inner, photos[export_size], seed=3)
    model.eval()
    with torch.no_grad():
        want = {size: [t.numpy() for t in model(x, *extra)] for size, x in photos.items()}
        out = inner(pixel_values=photos[other_size], **dict(zip(keys, extra)))
    if getattr(out, "enc_outputs_class", None) is not None:  # the ranking top-k selects from
        scores = np.sort(out.enc_outputs_class.max(-1).values.reshape(-1).numpy())[::-1][: inner.config.num_queries + 1]
        row["topk_gap"] = float((scores[:-1] - scores[1:]).min())
    names = ["x", *[f"in{i}" for i in range(len(extra))]]
    f = io.BytesIO()
    t0 = time.perf_counter()
    try:
        report = deform_onnx.export(
            model, (photos[export_size], *extra), f, input_names=names, dynamic_axes={"x": {2: "H", 3: "W"}}
        )
    except Exception as exc:  # noqa: BLE001  (the sweep records every refusal)
        row.update(status="refused", error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        row["export_s"] = round(time.perf_counter() - t0, 1)
        return row
    row["export_s"] = round(time.perf_counter() - t0, 1)
    row.update(status="written", exporter=report.exporter, fallback=(report.fallback_reason or "")[:200])
    row["checked_sizes"] = str(getattr(report, "verified_shapes", getattr(report, "checked_shapes", "")))[:200]
    # deform_onnx's own verification: the worst outputs and the rule that passed them (both sizes)
    checks = list(report.checks.items()) + [c for v in report.size_checks for c in v.checks.items()]
    worst = sorted(checks, key=lambda nc: -nc[1].error)[:3]
    row["worst_checks"] = [f"{name}: {c.error:.1e} vs {c.reference}, {c.rule}" for name, c in worst]
    data = f.getvalue()
    feeds = {size: {n: t.numpy() for n, t in zip(names, (x, *extra))} for size, x in photos.items()}

    def max_err(got, size):
        """Max abs error over all outputs (equal infinities count as equal), and whether every output is within
        the float32 rule ``|g - w| <= 1e-4 + 1e-4 |w|``."""
        worst, close = 0.0, True
        for g, w in zip(got, want[size]):
            g, w = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
            same = (g == w) | (np.isnan(g) & np.isnan(w))
            diff = np.where(same, 0.0, np.abs(g - w))
            diff = np.where(np.isnan(diff), np.inf, diff)
            worst = max(worst, float(diff.max()))
            close = close and bool((diff <= TOL + TOL * np.abs(np.where(np.isfinite(w), w, 0.0))).all())
        return f"{worst:.1e}" + ("" if close else " (beyond 1e-4 rule)")

    try:
        import onnxruntime as ort

        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        row["ort_export_size"] = max_err(session.run(None, feeds[export_size]), export_size)
        row["ort"] = max_err(session.run(None, feeds[other_size]), other_size)
    except Exception as exc:  # noqa: BLE001
        row["ort"] = f"fails: {str(exc).splitlines()[0][:300]}"
    try:
        import onnx
        import openvino as ov

        import deform_onnx.openvino as dov

        core = ov.Core()
        compiled = core.compile_model(dov.read_model(onnx.load_from_string(data), core), "CPU", OPENVINO_OPTIONS)
        result = compiled(list(feeds[other_size].values()))
        row["openvino"] = max_err([result[o] for o in compiled.outputs], other_size)
    except Exception as exc:  # noqa: BLE001
        row["openvino"] = f"fails: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}"
    return row


def _unit_scale_with(inner, photo, extra, keys):
    """:func:`unit_scale` for models that need more inputs than the photo (text ids, task tokens)."""
    import torch

    from models import unit_scale

    class WithExtra(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(pixel_values=x, **dict(zip(keys, extra)))

    unit_scale(WithExtra(), photo, seed=3)


def _fmt(value):
    return f"{value:.1e}" if isinstance(value, float) else str(value or "")


def main(argv):
    if argv[:1] == ["--one"]:
        try:
            row = run_one(argv[1])
        except Exception as exc:  # noqa: BLE001
            row = {"class": argv[1], "status": "sweep error", "error": traceback.format_exc().splitlines()[-1]}
            del exc
        print("ROW " + json.dumps(row), flush=True)
        return
    rows = []
    for name in argv or MODELS:
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--one", name], capture_output=True, text=True, timeout=TIMEOUT_S
            )
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]
            row = (
                json.loads(lines[-1][4:])
                if lines
                else {"class": name, "status": "crashed", "error": proc.stderr[-300:]}
            )
        except subprocess.TimeoutExpired:
            row = {"class": name, "status": f"timeout {TIMEOUT_S}s"}
        row["total_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print()
    header = ["class", "attn", "exporter", "status", "ORT 160x96", "OpenVINO 160x96", "export s", "first error line"]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for r in rows:
        cells = [r.get("class"), r.get("attn"), r.get("exporter"), r.get("status"), r.get("ort"), r.get("openvino")]
        cells += [r.get("export_s"), r.get("error") or r.get("fallback")]
        print(" | ".join(_fmt(c) for c in cells))


if __name__ == "__main__":
    main(sys.argv[1:])
