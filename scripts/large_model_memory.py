"""Case c33 by hand: export a 2.1 GiB model (a 3->16 conv, DCNv2 16->2048, 15 Conv2d(2048, 2048, 3) at 8x8)
with deform_onnx.export and report the peak resident memory (ru_maxrss) and the files written.

    python scripts/large_model_memory.py OUT_DIR [--dynamo 0|1] [--opset N]

Heavy (about 2.3 GB of weights): run it alone, not in the test suite.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import torch
import torchvision

import deform_onnx


class Big(torch.nn.Module):
    def __init__(self, layers: int = 15, width: int = 2048):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.offset = torch.nn.Conv2d(16, 27, 3, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(16, width, 3, padding=1)
        self.body = torch.nn.Sequential(*[torch.nn.Conv2d(width, width, 3, padding=1) for _ in range(layers)])

    def forward(self, x):
        x = self.stem(x)
        o1, o2, mask = torch.chunk(self.offset(x), 3, dim=1)
        return self.body(self.dcn(x, torch.cat((o1, o2), 1), torch.sigmoid(mask)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--dynamo", type=int, default=1)
    parser.add_argument("--opset", type=int, default=None)
    parser.add_argument("--layers", type=int, default=15, help="Conv2d(2048, 2048, 3) layers (15: 2.1 GiB)")
    parser.add_argument(
        "--limit", type=int, default=None, help="lower deform_onnx.exporting.large.PROTOBUF_LIMIT (bytes)"
    )
    a = parser.parse_args()
    if a.limit is not None:  # a smaller model through the same external-data path
        from deform_onnx.exporting import large

        large.PROTOBUF_LIMIT, large.MARGIN = a.limit, 0
    torch.manual_seed(0)
    with torch.no_grad():
        model = Big(layers=a.layers).eval()
        for conv in model.body:  # PyTorch's default init shrinks the variance 3x per layer: keep unit scale
            conv.weight.mul_(3**0.5)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    x = torch.randn(1, 3, 8, 8)
    path = a.out / "big.onnx"
    start = time.perf_counter()
    report = deform_onnx.export(model, (x,), path, dynamo=bool(a.dynamo), opset_version=a.opset)
    with torch.no_grad():
        scale = float(model(x).abs().max())
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    files = {p.name: p.stat().st_size for p in a.out.iterdir()}
    print(
        f"weights {weights / 2**30:.2f} GiB; exporter {report.exporter}, opset {report.opset}, "
        f"max error {report.max_error:.3g} (outputs up to {scale:.3g}); {seconds:.0f} s; peak RSS {peak:.2f} GiB (after building the model: "
        f"{base:.2f} GiB); files {files}"
    )


if __name__ == "__main__":
    main()
