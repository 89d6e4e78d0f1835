"""``deform-onnx bench --op grid_sample_5d`` and ``--op grid_sample_bicubic``: the new forms of issue 19.

``grid_sample_5d``: ``F.grid_sample`` (trilinear, zeros, ``align_corners=False``)
of ``[N, C, D, D, D]`` at an ``[N, G, G, G, 3]`` grid: ONNX Runtime's
GridSample-20 (``method="native"``, opset 20) vs this project's trilinear
gather form (``method="gather"``, opset 11), and PyTorch eager.

``grid_sample_bicubic``: ``F.grid_sample(mode="bicubic")`` (zeros,
``align_corners=False``) of ``[N, C, H, H]`` at an ``[N, G, G, 2]`` grid:
ONNX Runtime's GridSample ``bicubic`` (``method="grid_sample"``, opset 17) vs
the 16-tap gather form (opset 11), and PyTorch eager.

Both: input randn, grid uniform in [-1.1, 1.1], seed 0; ratios to GridSample.
Cases and exports as in :mod:`.sampling` (one export per method and opset).
"""

from __future__ import annotations

from pathlib import Path

from .harness import Contender, Suite
from .sampling import GridSampleShape, _eager, _ExportingCase, _ort

# One shape type for every grid_sample suite: [N, C, S, S] (or [N, C, S, S, S]) at a grid of side G.
FormShape = GridSampleShape


def _module(mode: str):
    import torch
    import torch.nn.functional as F

    class GridSample(torch.nn.Module):
        def forward(self, input, grid):
            return F.grid_sample(input, grid, mode=mode, padding_mode="zeros", align_corners=False)

    return GridSample().eval()


class _FormCase(_ExportingCase):
    rank = 4
    mode = "bilinear"

    def __init__(self, shape: FormShape, workdir: Path, threads: int):
        import torch

        self.shape = shape
        g = torch.Generator().manual_seed(0)
        spatial = self.rank - 2
        self.inputs = {
            "input": torch.randn(shape.batch, shape.channels, *[shape.size] * spatial, generator=g),
            "grid": torch.rand(shape.batch, *[shape.grid_size] * spatial, spatial, generator=g) * 2.2 - 1.1,
        }
        self.module = _module(self.mode)
        self._setup(workdir, threads)


class Volumetric(_FormCase):
    """5-D trilinear."""

    rank, mode = 5, "bilinear"


class Bicubic(_FormCase):
    """4-D bicubic."""

    rank, mode = 4, "bicubic"


GRID_SAMPLE_5D = Suite(
    op="grid_sample_5d",
    title="F.grid_sample 5-D (trilinear, zeros)",
    contenders=(
        Contender("torch", "PyTorch eager", _eager),
        Contender("ort-gridsample20", "ORT GridSample-20 (opset 20)", _ort("module", "native", 20), ort=True),
        Contender("ort-gather", "ORT trilinear gather (opset 11)", _ort("module", "gather", 11), ort=True),
    ),
    legend={
        "torch": "F.grid_sample on 5-D input, PyTorch CPU eager, torch.inference_mode()",
        "ort-gridsample20": "ONNX Runtime CPU, deform_onnx.export(method='native', opset 20): one GridSample-20 node",
        "ort-gather": "ONNX Runtime CPU, deform_onnx.export(method='gather', opset 11): the trilinear gather form "
        "(ops/grid_sample/lower_3d.py)",
    },
    reference="ort-gridsample20",
    ref_name="GridSample-20",
    make_case=Volumetric,
    parse_shape=FormShape.parse,
    full_shapes=(FormShape(1, 16, 32), FormShape(1, 32, 24), FormShape(2, 8, 32, grid=16)),
    quick_shapes=(FormShape(1, 16, 16),),
    markers=(
        "<!-- deform-onnx bench --op grid_sample_5d: begin (generated; edit outside these markers) -->",
        "<!-- deform-onnx bench --op grid_sample_5d: end -->",
    ),
    heading="## F.grid_sample 5-D (trilinear)",
    shape_note="N x C x S: input [N, C, S, S, S], grid [N, S, S, S, 3] unless `grid G` ([N, G, G, G, 3]); "
    "trilinear, padding zeros, align_corners=False",
    inputs_note="Input randn, grid uniform in [-1.1, 1.1]; seed 0",
)

GRID_SAMPLE_BICUBIC = Suite(
    op="grid_sample_bicubic",
    title="F.grid_sample bicubic (4-D, zeros)",
    contenders=(
        Contender("torch", "PyTorch eager", _eager),
        Contender(
            "ort-gridsample-cubic", "ORT GridSample bicubic (opset 17)", _ort("module", "grid_sample", 17), ort=True
        ),
        Contender("ort-gather", "ORT 16-tap gather (opset 11)", _ort("module", "gather", 11), ort=True),
    ),
    legend={
        "torch": "F.grid_sample(mode='bicubic'), PyTorch CPU eager, torch.inference_mode()",
        "ort-gridsample-cubic": "ONNX Runtime CPU, deform_onnx.export(method='grid_sample', opset 17): one "
        "GridSample node, mode bicubic",
        "ort-gather": "ONNX Runtime CPU, deform_onnx.export(method='gather', opset 11): the 16-tap gather form "
        "(ops/grid_sample/lower_cubic.py)",
    },
    reference="ort-gridsample-cubic",
    ref_name="GridSample cubic",
    make_case=Bicubic,
    parse_shape=FormShape.parse,
    full_shapes=(FormShape(1, 64, 128), FormShape(1, 16, 128), FormShape(4, 32, 64)),
    quick_shapes=(FormShape(1, 32, 64),),
    markers=(
        "<!-- deform-onnx bench --op grid_sample_bicubic: begin (generated; edit outside these markers) -->",
        "<!-- deform-onnx bench --op grid_sample_bicubic: end -->",
    ),
    heading="## F.grid_sample bicubic",
    shape_note="N x C x H: input [N, C, H, H], grid [N, H, H, 2] unless `grid G` ([N, G, G, 2]); bicubic, "
    "padding zeros, align_corners=False",
    inputs_note="Input randn, grid uniform in [-1.1, 1.1]; seed 0",
)
