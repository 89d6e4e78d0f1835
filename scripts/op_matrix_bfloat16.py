"""The bfloat16 rows of scripts/op_matrix.py (issue 19 item 3 on every runtime family).

Two models, each ``.to(torch.bfloat16)`` as users write it: case c31's DeformConv2d layer (one conv
whose output ``torch.chunk`` splits into offset and mask, as tests/test_bfloat16.py builds it) and a
4-D bilinear ``F.grid_sample``. ``deform_onnx.export`` writes bfloat16 inputs and outputs at opset 22
(the first that types Conv and GridSample in bfloat16). numpy has no bfloat16: the feeds are stored as
float32 (exact: float32 holds every bfloat16), and each runner of :mod:`matrix_runners` gives the
inputs the file types as bfloat16 to its runtime in bfloat16 (``meta["bfloat16"]``), and saves the
output as float32. The reference is a float32 copy of the model on the upcast inputs (torchvision's
``deform_conv2d`` has no bfloat16 CPU kernel), compared at the project's bfloat16 rule
(``|got - want| <= atol + rtol * |want|``, :data:`deform_onnx.exporting.verification.DEFAULT_TOLERANCES`).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torchvision

from deform_onnx.exporting.verification import DEFAULT_TOLERANCES

#: Op key -> the table's op column.
LABELS: dict[str, str] = {
    "dcn-bf16": "DeformConv2d layer, bfloat16 (c31: conv, `torch.chunk` into offset and mask)",
    "gs4d-bf16": "grid_sample 4-D bilinear, zeros, align_corners=False, bfloat16",
}
#: (rtol, atol) of the bfloat16 rows.
RTOL, ATOL = DEFAULT_TOLERANCES["bfloat16"]


class ChunkDCN(torch.nn.Module):
    """c31's pattern: one conv gives offset and mask (``torch.chunk`` into three), then DCNv2."""

    def __init__(self, c_in: int, c_out: int, kernel: tuple[int, int], padding: tuple[int, int]):
        super().__init__()
        self.conv = torch.nn.Conv2d(c_in, 3 * kernel[0] * kernel[1], kernel, padding=padding)
        self.dcn = torchvision.ops.DeformConv2d(c_in, c_out, kernel, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o1, o2, mask = torch.chunk(self.conv(x), 3, dim=1)
        return self.dcn(x, torch.cat((o1, o2), dim=1), torch.sigmoid(mask))


def models(grid_sample: type[torch.nn.Module]) -> list[tuple[str, torch.nn.Module, dict[str, torch.Tensor]]]:
    """(op key, bfloat16 module, bfloat16 inputs by name); ``grid_sample``: op_matrix's GridSample module.

    c31 at batch 1 (ncnn has no batch axis); the grid_sample shapes of op_matrix's ``gs4d``.
    """
    from util import load_cases

    case = load_cases()["c31"]["input"]
    torch.manual_seed(31)
    dcn = ChunkDCN(case["C_in"], case["C_out"], tuple(case["kernel"]), tuple(case["padding"]))
    with torch.no_grad():  # offsets of a few pixels, so that the sampling is not trivial (as the test)
        dcn.conv.weight.mul_(4)
    g = torch.Generator().manual_seed(31)
    x = torch.randn(1, case["C_in"], case["H"], case["W"], generator=g)
    gx = torch.randn(1, 8, 13, 17, generator=g)
    grid = (torch.rand(1, 5, 7, 2, generator=g) * 2 - 1) * 1.2
    bf = torch.bfloat16
    return [
        ("dcn-bf16", dcn.to(bf).eval(), {"x": x.to(bf)}),
        ("gs4d-bf16", grid_sample(align_corners=False).to(bf), {"x": gx.to(bf), "grid": grid.to(bf)}),
    ]


def is_bfloat16(inputs: dict[str, torch.Tensor]) -> bool:
    """Whether an op's inputs are bfloat16 (its row uses this module's reference and rule)."""
    return any(v.dtype == torch.bfloat16 for v in inputs.values())


def reference(module: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(the float32 copy's output, the feeds as float32 arrays: exact, float32 holds every bfloat16)."""
    upcast = {k: v.float() for k, v in inputs.items()}
    with torch.no_grad():
        want = copy.deepcopy(module).float()(*upcast.values()).numpy()
    return want, {k: v.numpy() for k, v in upcast.items()}


def within(got: np.ndarray, want: np.ndarray) -> bool:
    """The project's bfloat16 rule against the float32 model: ``|got - want| <= atol + rtol * |want|``."""
    got, want = got.astype(np.float64), want.astype(np.float64)
    return bool(np.all(np.isfinite(got)) and np.all(np.abs(got - want) <= ATOL + RTOL * np.abs(want)))
