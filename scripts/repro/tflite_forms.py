"""Minimal repros: onnx2tf -> LiteRT on the two graph forms (issue 12).

1. gather form (``tflite_gather.onnx``): case c12's layer (1x8x9x9, 3x3, DCNv2), gather@13, the
   smallest case model of the matrix. onnx2tf fails in its accuracy-correction step at the
   lowering's ``conv/Add_2`` node: ``ValueError: Output tensors of a Functional model must be the
   output of a TensorFlow `Layer` (thus holding past layer metadata). Found: 1.0`` (measured here;
   a 1-channel 1x1-kernel layer, ``tflite_gather_1x1.onnx``, fails the same way). The matrix's
   run of the whole example and cases c04/c12/c25 stopped earlier, at ``tf.reshape_3`` ("Exception
   encountered when calling layer ... (type TFOpLambda)"): the gather form's 5-D/6-D reshapes after
   onnx2tf's NCHW->NHWC transposition.
2. grid_sample form: a single deformable layer, stride 2 included, converts and matches
   (``tflite_grid_sample_layer.onnx``, the control). The bundled example's stride-2 DCNv2 block
   (the example's ``stage2``, ``DeformBlock(16, 32, stride=2)`` with its weights: offsets and mask predicted by a Conv,
   two deformable layers, a strided 1x1 shortcut; ``tflite_grid_sample_block.onnx``) fails with
   ``ValueError: Output tensors of a Functional model must be the output of a TensorFlow `Layer` ...
   Found: [[[[...`` (onnx2tf put a constant array where the output should be), and the same block
   at 8 -> 8 channels (``tflite_grid_sample_block8.onnx``) converts but its LiteRT output is off by
   0.11 (measured here). With stride 1 the block converts and matches.

Each file is written with ``deform_onnx.export(..., force=True)`` (the ``tflite`` target's rules
refuse both forms: ``max tensor rank 4``), then converted and run in the runtime matrix's cached
onnx2tf venv (onnx2tf, TensorFlow, LiteRT; about a minute per file); one JSON line each.

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

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2] / "tests")]
from _run import run  # noqa: E402

import deform_onnx  # noqa: E402  (after _run, which puts this checkout's src first)


class Layer(torch.nn.Module):
    """``DeformConv2d`` with the offset as a graph input (no mask)."""

    def __init__(self, channels: int, kernel: int, stride: int = 1):
        super().__init__()
        self.conv = torchvision.ops.DeformConv2d(channels, channels, kernel, stride=stride, padding=kernel // 2)

    def forward(self, x, offset):
        return self.conv(x, offset)


def cases() -> dict[str, tuple[torch.nn.Module, dict[str, torch.Tensor], str]]:
    """name -> (module, inputs, method)."""
    torch.manual_seed(0)
    from deform_onnx.example import DeformBlock, example_model

    from util import DeformLayer, case_config, make_inputs  # tests/util.py: the cases' layers and inputs

    c12, c12_inputs = DeformLayer(case_config("c12")).eval(), make_inputs(case_config("c12"))
    tiny = Layer(1, 1).eval()
    layer = Layer(8, 3, stride=2).eval()
    return {
        "tflite_gather": (c12, c12_inputs, "gather"),
        "tflite_gather_1x1": (tiny, {"x": torch.randn(1, 1, 3, 3), "offset": torch.randn(1, 2, 3, 3)}, "gather"),
        "tflite_grid_sample_layer": (layer, {"x": torch.randn(1, 8, 16, 16), "offset": torch.randn(1, 18, 8, 8) * 2},
                                     "grid_sample"),
        "tflite_grid_sample_block": (example_model().stage2, {"x": torch.randn(1, 16, 16, 16)}, "grid_sample"),
        "tflite_grid_sample_block8": (DeformBlock(8, 8, stride=2).eval(), {"x": torch.randn(1, 8, 16, 16)},
                                      "grid_sample"),
    }


def main() -> None:
    args = sys.argv[1:]
    out = Path(args.pop(0) if args else ".").resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name, (module, inputs, method) in cases().items():
        if args and name not in args:
            continue
        with torch.no_grad():
            want = module(*inputs.values()).numpy()
        path = out / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # force=True's rule warnings: the point of the repro
            buf = io.BytesIO()
            deform_onnx.export(module, tuple(inputs.values()), buf, target="tflite", method=method, force=True,
                               input_names=list(inputs), output_names=["y"])  # fmt: skip
        path.write_bytes(buf.getvalue())
        print(f"{name} ({method}): ", end="", flush=True)
        result = run("onnx2tf", path, {k: v.numpy() for k, v in inputs.items()}, list(want.shape))
        if result.get("error") is None:
            got = np.load(path.with_suffix(".out.npy"))
            print(f"  max abs error against PyTorch: {np.abs(got - want).max():.1e}")


if __name__ == "__main__":
    main()
