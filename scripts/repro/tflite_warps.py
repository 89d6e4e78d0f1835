"""Repro (issue 37 item 4): optical-flow warps through ``target="tflite"`` (onnx2tf 1.29.24 -> LiteRT) on square maps.

One model with every ``F.grid_sample`` warp a flow-based model writes (base grid from aranges plus the flow,
normalised): 4-D on an 8x8 image with padding zeros / border / reflection and both ``align_corners``, 5-D
on a 4x4x4 volume (zeros, border, reflection), and a DCNv2 layer on the same image; exported with
``target="tflite"``, which converts and runs the file in LiteRT before writing it. Before the target's form
``"flat sampling grid"`` and repair ``"constant operand last"``, the 4-D border warp alone on a 16x16 image
was 3.6 off PyTorch and the 5-D warp on 4x4x4 1.9 off; with them every output matches (3.1e-6, measured
here; about 5 minutes on a loaded 2-core machine). Non-square maps converted right before too.

Usage: ``PYTHONPATH=src python scripts/repro/tflite_warps.py [SIZE]``
"""

from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F
import torchvision

import deform_onnx


def warp2d(x, flow, pad, ac):
    h, w = x.shape[2:]
    ys, xs = torch.meshgrid(torch.arange(h, dtype=x.dtype), torch.arange(w, dtype=x.dtype), indexing="ij")
    if ac:
        gx = 2 * (xs + flow[:, 0]) / max(w - 1, 1) - 1
        gy = 2 * (ys + flow[:, 1]) / max(h - 1, 1) - 1
    else:
        gx = (2 * (xs + flow[:, 0]) + 1) / w - 1
        gy = (2 * (ys + flow[:, 1]) + 1) / h - 1
    return F.grid_sample(x, torch.stack((gx, gy), dim=-1), mode="bilinear", padding_mode=pad, align_corners=ac)


def warp3d(v, flow, pad, ac):
    d, h, w = v.shape[2:]
    zs, ys, xs = torch.meshgrid(*(torch.arange(s, dtype=v.dtype) for s in (d, h, w)), indexing="ij")
    g = [2 * (base + flow[:, k]) / max(size - 1, 1) - 1 for k, (base, size) in enumerate(((xs, w), (ys, h), (zs, d)))]
    return F.grid_sample(v, torch.stack(g, dim=-1), mode="bilinear", padding_mode=pad, align_corners=ac)


class Warps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.dcn = torchvision.ops.DeformConv2d(3, 4, 3, padding=1)
        self.off = torch.nn.Conv2d(3, 27, 3, padding=1)

    def forward(self, x, flow, v, flow3):
        outs = [warp2d(x, flow, p, ac) for p in ("zeros", "border", "reflection") for ac in (True, False)]
        outs += [warp3d(v, flow3, p, ac) for p, ac in (("zeros", True), ("border", False), ("reflection", True))]
        o = self.off(x)
        outs.append(self.dcn(x, o[:, :18], torch.sigmoid(o[:, 18:])))
        return tuple(outs)


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    torch.manual_seed(0)
    x, flow = torch.randn(1, 3, size, size), torch.randn(1, 2, size, size) * 2
    v, flow3 = torch.randn(1, 2, 4, 4, 4), torch.randn(1, 3, 4, 4, 4) * 1.5
    start = time.time()
    report = deform_onnx.export(Warps().eval(), (x, flow, v, flow3), f"/tmp/tflite_warps_{size}.onnx", target="tflite")
    print(report.runtimes, f"{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
