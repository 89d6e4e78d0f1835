"""Minimal repros: onnx2tf -> LiteRT on the graph forms tried for the ``tflite`` target (issue 12).

onnx2tf turns an NCHW ONNX graph into an NHWC TensorFlow one and guesses each value's layout from
its shape; the forms below show where those guesses go wrong for deformable convolution and the form
that converts (each file converted and run in the runtime matrix's cached onnx2tf venv, which runs
onnxsim 0.4.36 first, as onnx2tf does; about 10 s to 3 min per file; one JSON line each):

1. ``tflite_gather_apart`` (the control: what the ``tflite`` target writes): the bundled example's
   stage 3 block (``DeformBlock(32, 64, stride=2, groups=2, offset_groups=2)`` with its weights, on a
   ``[1, 32, 16, 16]`` input), gather@13 in the target's form (``flat offset groups``: every group's
   indices on 2-D values; until issue 38 ``offset groups apart``, each group's indices computed on their
   own, which matched within 2.4e-6 too: ``scripts/repro/tflite_offset_groups.py`` compares the two).
2. ``tflite_gather_together``: the same block with the default gather form (one index computation
   with an offset-group axis: ``[K, N, G, Ho, Wo]`` values, a 6-D offset view). Converts, but onnx2tf
   misplaces the group axis: LiteRT's output is off by 0.62 (the control: 2.4e-6; the whole bundled
   example on its photo in this form: off by 1.8; measured here).
3. ``tflite_grid_sample``: the bundled example up to stage 2 (stem, a plain ResNet block, the first
   DCNv2 block), grid_sample@16. onnx2tf's Add converter moves the plain block's residual sum back to
   NCHW ("rescue" of a shape it did not expect), the GridSample converter then reads that NCHW tensor
   as NHWC, and a later Reshape fails: "Cannot reshape a tensor with 24576 elements to shape
   [48,256] (12288 elements)".
4. ``tflite_gather_chw_equal``: one ``DeformConv2d`` (16 -> 8 channels, 3x3, DCNv1) on a
   ``[1, 16, 16, 16]`` input, as the ``tflite`` target writes it. With C == H == W onnx2tf cannot
   tell NCHW from NHWC (its converters compare shapes; some skip the transposition when every
   non-batch axis is equal). The gather form's channels-last copy of the input, made by a 4-D
   Transpose, came out wrong (off by 2.0); it is now made by a 3-D Transpose of ``[N, C, pixels]``
   and matches (6.0e-7), like ``tflite_gather_chw_unequal`` (the same layer on ``[1, 16, 16, 20]``).

5. ``tflite_dcnv3`` and ``tflite_msda``: a DCNv3 layer (InternImage's, 16 channels, 2 groups, NHWC input
   ``[1, 12, 12, 16]``) and a multi-scale deformable attention core (levels 8x8 and 4x4, 2 heads, 2
   points; 5-D/6-D inputs), as the ``tflite`` target writes them. Converted with onnx2tf's
   ``-kat NAMES`` (keep those inputs' layouts: onnx2tf otherwise reads DCNv3's NHWC input as NCHW and
   re-lays out MSDA's 5-D/6-D inputs) and, for DCNv3, ``-rtpo Erf`` (the layer's own exact GELU would
   become ``FlexErf``, which plain LiteRT lacks). Both match (measured here).

Usage: ``PYTHONPATH=src python scripts/repro/tflite_forms.py [OUT_DIR] [NAME ...]``
"""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
import torchvision

sys.path[:0] = [str(Path(__file__).resolve().parent)]
from _run import run  # noqa: E402

import deform_onnx  # noqa: E402  (after _run, which puts this checkout's src first)


class Layer(torch.nn.Module):
    """``DeformConv2d`` with the offset as a graph input (no mask)."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int):
        super().__init__()
        self.conv = torchvision.ops.DeformConv2d(in_channels, out_channels, kernel, padding=kernel // 2)

    def forward(self, x, offset):
        return self.conv(x, offset)


def cases() -> dict[str, tuple[torch.nn.Module, dict[str, torch.Tensor], dict, list[str]]]:
    """name -> (module, inputs, export keywords, onnx2tf arguments)."""
    torch.manual_seed(0)
    from deform_onnx.cli.example import example_model
    from deform_onnx.ops import MSDeformAttnCore
    from deform_onnx.ops.dcnv3 import DCNv3

    example = example_model()
    stage3 = {"x": torch.randn(1, 32, 16, 16)}
    up_to_stage2 = torch.nn.Sequential(example.stem, example.stage1, example.stage2).eval()
    layer = Layer(16, 8, 3).eval()  # 8 outputs: an output with C == H == W would be ambiguous to read back
    square = {"x": torch.randn(1, 16, 16, 16), "offset": torch.randn(1, 18, 16, 16) * 2}
    wide = {"x": torch.randn(1, 16, 16, 20), "offset": torch.randn(1, 18, 16, 20) * 2}
    tflite = {"target": "tflite"}
    M, D, L, P, Lq = 2, 8, 2, 4, 10  # heads, channels per head, levels, points, queries
    msda = {
        "value": torch.randn(1, 8 * 8 + 4 * 4, M, D),
        "loc": torch.rand(1, Lq, M, L, P, 2),
        "attn": torch.softmax(torch.randn(1, Lq, M, L * P), -1).reshape(1, Lq, M, L, P),
    }
    return {
        "tflite_gather_apart": (example.stage3, stage3, tflite, []),
        "tflite_gather_together": (example.stage3, stage3, {"method": "gather", "opset_version": 13}, []),
        "tflite_grid_sample": (up_to_stage2, {"x": torch.randn(1, 3, 128, 128)},
                               {"method": "grid_sample", "opset_version": 16}, []),
        "tflite_gather_chw_equal": (layer, square, tflite, []),
        "tflite_gather_chw_unequal": (layer, wide, tflite, []),
        "tflite_dcnv3": (DCNv3(16, group=2).eval(), {"x": torch.randn(1, 12, 12, 16)}, tflite,
                         ["-kat", "x", "-rtpo", "Erf"]),
        "tflite_msda": (MSDeformAttnCore([(8, 8), (4, 4)]).eval(), msda, tflite, ["-kat", *msda]),
    }  # fmt: skip


def main() -> None:
    args = sys.argv[1:]
    out = Path(args.pop(0) if args else ".").resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name, (module, inputs, how, onnx2tf_args) in cases().items():
        if args and name not in args:
            continue
        with torch.no_grad():
            want = module(*inputs.values()).numpy()
        path = out / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # opset 13: the TorchScript exporter, with its warning
            buf = io.BytesIO()
            deform_onnx.export(module, tuple(inputs.values()), buf, input_names=list(inputs), output_names=["y"],
                               **how)  # fmt: skip
        path.write_bytes(buf.getvalue())
        print(f"{name} ({how}, onnx2tf {' '.join(onnx2tf_args) or 'defaults'}): ", end="", flush=True)
        feeds = {k: v.numpy() for k, v in inputs.items()}
        result = run("onnx2tf", path, feeds, list(want.shape), timeout=1800, args=onnx2tf_args)
        if result.get("error") is None:
            got = np.load(path.with_suffix(".out.npy"))
            print(f"  max abs error against PyTorch: {np.abs(got - want).max():.1e}")


if __name__ == "__main__":
    main()
