"""The sampling suites: ``deform-onnx bench --op grid_sample`` and ``--op msda`` (issue 10, "Speed").

``grid_sample``: ``F.grid_sample`` (bilinear, zero padding,
``align_corners=False``) on ``[N, C, H, H]`` with an ``[N, G, G, 2]`` grid
whose points reach a little past the border: ONNX Runtime's ``GridSample``
(``method="grid_sample"``, opset 17), this project's gather lowering
(``method="gather"``, opset 11), PyTorch eager. Ratios to ``GridSample``.

``msda``: a Deformable-DETR-sized encoder layer's attention core (4 levels,
100x100 down to 13x13, 8 heads, 4 points, 256 channels, batch 1) with 1
query, 900 queries (a DETR decoder) and every pixel as a query (the
encoder): Deformable DETR's own PyTorch code
(:class:`deform_onnx.ops.MSDeformAttnReference`) exported at opset 17 with
``method="grid_sample"`` (what torch makes of it: one ``GridSample`` per
level) and ``method="gather"`` (one gather sampler per level), the fused
``deform_onnx.ops.ms_deform_attn`` export (:class:`~deform_onnx.ops.MSDeformAttnCore`:
four ``Gather`` + ``MatMul`` over all levels at once), and PyTorch eager on
the same code. Ratios to the plain ``GridSample`` graph.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .harness import BenchResult, Contender, Goal, ModelStats, Prepared, Suite
from .runtimes import file_stats, ort_prepared

if TYPE_CHECKING:
    import torch

OPSET = 17


class _ExportingCase:
    """Shared by both suites: a module, its named inputs, PyTorch's output, one export per (method, opset)."""

    module: torch.nn.Module
    inputs: dict

    def _setup(self, workdir: Path, threads: int) -> None:
        import torch

        self.workdir, self.threads = workdir, threads
        workdir.mkdir(parents=True, exist_ok=True)
        self.args = tuple(self.inputs.values())
        self.feeds = {k: v.numpy() for k, v in self.inputs.items()}
        with torch.inference_mode():
            self.reference = self.module(*self.args).numpy()
        self.inputs_path = workdir / "inputs.npz"
        np.savez(self.inputs_path, **self.feeds)
        self._exports: dict[tuple, tuple[Path, ModelStats]] = {}

    def export(self, name: str, module, method: str, opset: int) -> tuple[Path, ModelStats]:
        """Export ``module`` with :func:`deform_onnx.export` (TorchScript, no verification; checked by the harness)."""
        from ..exporting.api import export

        key = (name, method, opset)
        if key not in self._exports:
            path = self.workdir / f"{name}_{method}_opset{opset}.onnx"
            report = export(
                module,
                self.args,
                str(path),
                opset_version=opset,
                method=method,
                dynamo=False,
                input_names=list(self.inputs),
                output_names=["output"],
                verify=False,
            )
            self._exports[key] = path, file_stats(path, report.export_seconds)
        path, stats = self._exports[key]
        return path, replace(stats)


def _ort(module_attr: str, method: str, opset: int):
    def prepare(case, opt_level: str | None = None) -> Prepared:
        path, stats = case.export(module_attr, getattr(case, module_attr), method, opset)
        return ort_prepared(path, case.feeds, case.threads, stats, opt_level)

    return prepare


def _eager(case) -> Prepared:
    import torch

    def run():
        with torch.inference_mode():
            return case.module(*case.args)

    return Prepared(run=run, output=lambda: run().numpy(), memory_job=None, stats=ModelStats())


def _parse_opts(text: str) -> tuple[list[str], dict[str, str]]:
    """``"a,b,k=v"`` -> ``(["a", "b"], {"k": "v"})``."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    return [p for p in parts if "=" not in p], dict(p.split("=", 1) for p in parts if "=" in p)


# -- F.grid_sample --------------------------------------------------------------
@dataclass(frozen=True)
class GridSampleShape:
    """``F.grid_sample`` of an ``[N, C, H, H]`` map at an ``[N, G, G, 2]`` grid (``G`` = ``grid``, default H);
    the 5-D suites read it as an ``[N, C, H, H, H]`` volume at a ``[N, G, G, G, 3]`` grid.
    """

    batch: int
    channels: int
    size: int
    grid: int | None = None

    @property
    def grid_size(self) -> int:
        """G: the grid's height and width."""
        return self.size if self.grid is None else self.grid

    @property
    def label(self) -> str:
        """``"1x64x128"`` (N x C x H=W), plus ``grid 64`` when the grid is not H x H."""
        base = f"{self.batch}x{self.channels}x{self.size}"
        return base if self.grid_size == self.size else f"{base} grid {self.grid_size}"

    @classmethod
    def parse(cls, text: str) -> GridSampleShape:
        """Parse ``"N,C,H[,grid=G]"`` (``x`` also separates N, C, H).

        Raises:
            ValueError: malformed text or non-positive numbers (message shows the format).
        """
        usage = "expected N,C,H[,grid=G] (H: the map's side), e.g. 1,64,128 or 1,64,128,grid=64"
        dims, opts = _parse_opts(text.replace("x", ","))
        try:
            n, c, h = (int(d) for d in dims)
            grid = int(opts.pop("grid")) if "grid" in opts else None
        except ValueError:
            raise ValueError(f"bad shape {text!r}: {usage}") from None
        if opts or min(n, c, h, grid or 1) < 1:
            raise ValueError(f"bad shape {text!r}: {usage}")
        return cls(n, c, h, grid)


class GridSampleCase(_ExportingCase):
    """Input randn, grid uniform in [-1.1, 1.1] (about 10% of points outside the map), seed 0."""

    def __init__(self, shape: GridSampleShape, workdir: Path, threads: int):
        import torch

        self.shape = shape
        g = torch.Generator().manual_seed(0)
        n, gs = shape.batch, shape.grid_size
        self.inputs = {
            "input": torch.randn(n, shape.channels, shape.size, shape.size, generator=g),
            "grid": torch.rand(n, gs, gs, 2, generator=g) * 2.2 - 1.1,
        }
        self.module = _grid_sample_module().eval()
        self._setup(workdir, threads)


def _grid_sample_module():
    import torch
    import torch.nn.functional as F

    class GridSample(torch.nn.Module):
        def forward(self, input, grid):
            return F.grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=False)

    return GridSample()


GRID_SAMPLE = Suite(
    op="grid_sample",
    title="F.grid_sample (bilinear, zeros)",
    contenders=(
        Contender("torch", "PyTorch eager", _eager),
        Contender("ort-grid_sample", f"ORT GridSample (opset {OPSET})", _ort("module", "grid_sample", OPSET), ort=True),
        Contender("ort-gather", "ORT gather (opset 11)", _ort("module", "gather", 11), ort=True),
    ),
    legend={
        "torch": "F.grid_sample, PyTorch CPU eager, torch.inference_mode()",
        "ort-grid_sample": f"ONNX Runtime CPU, deform_onnx.export(method='grid_sample', opset {OPSET}): one "
        "GridSample node",
        "ort-gather": "ONNX Runtime CPU, deform_onnx.export(method='gather', opset 11): the gather form",
    },
    reference="ort-grid_sample",
    ref_name="GridSample",
    make_case=GridSampleCase,
    parse_shape=GridSampleShape.parse,
    full_shapes=(GridSampleShape(1, 64, 128), GridSampleShape(1, 256, 64), GridSampleShape(4, 64, 64)),
    quick_shapes=(GridSampleShape(1, 64, 64),),
    markers=(
        "<!-- deform-onnx bench --op grid_sample: begin (generated; edit outside these markers) -->",
        "<!-- deform-onnx bench --op grid_sample: end -->",
    ),
    heading="## F.grid_sample",
    shape_note="N x C x H: input [N, C, H, H], grid [N, H, H, 2] unless `grid G` ([N, G, G, 2]); "
    "bilinear, padding zeros, align_corners=False",
    inputs_note="Input randn, grid uniform in [-1.1, 1.1]; seed 0",
)


# -- multi-scale deformable attention ---------------------------------------------
#: Deformable DETR's encoder levels (a 800x800 image at strides 8 to 64).
MSDA_LEVELS = ((100, 100), (50, 50), (25, 25), (13, 13))
MSDA_QUICK_LEVELS = ((24, 24), (12, 12), (6, 6), (3, 3))
MSDA_NAMES = ("value", "sampling_locations", "attention_weights")


@dataclass(frozen=True)
class MSDAShape:
    """One attention core: ``queries`` (``None``: every pixel of every level), levels, heads, points, channels."""

    queries: int | None
    levels: tuple[tuple[int, int], ...] = MSDA_LEVELS
    heads: int = 8
    points: int = 4
    channels: int = 256

    @property
    def pixels(self) -> int:
        """S = sum of H_l * W_l: rows of ``value``."""
        return sum(h * w for h, w in self.levels)

    @property
    def num_queries(self) -> int:
        """Lq: ``queries``, or every pixel when it is ``None``."""
        return self.pixels if self.queries is None else self.queries

    @property
    def label(self) -> str:
        """``"900 q"``, ``"13294 q (all)"``, plus levels/heads/points/channels that differ from Deformable DETR's."""
        parts = [f"{self.num_queries} q" + (" (all)" if self.queries is None else "")]
        if self.levels != MSDA_LEVELS:
            parts.append("L " + "/".join(f"{h}x{w}" for h, w in self.levels))
        if (self.heads, self.points, self.channels) != (8, 4, 256):
            parts.append(f"M{self.heads} P{self.points} C{self.channels}")
        return " ".join(parts)

    @classmethod
    def parse(cls, text: str) -> MSDAShape:
        """Parse ``"Q[,levels=100x100/50x50/...][,heads=8][,points=4][,channels=256]"``; Q an int or ``all``.

        Raises:
            ValueError: malformed text, non-positive numbers, or channels not divisible by heads.
        """
        usage = (
            "expected Q[,levels=HxW/HxW/...][,heads=M][,points=P][,channels=C] for --op msda "
            "(Q: queries or 'all'), e.g. 900 or all,levels=24x24/12x12"
        )
        dims, opts = _parse_opts(text)
        try:
            (q,) = dims
            queries = None if q == "all" else int(q)
            levels: tuple[tuple[int, int], ...] = MSDA_LEVELS
            if "levels" in opts:
                parsed = [tuple(int(v) for v in lv.split("x")) for lv in opts.pop("levels").split("/")]
                if any(len(lv) != 2 for lv in parsed):
                    raise ValueError
                levels = tuple((lv[0], lv[1]) for lv in parsed)
            heads, points, channels = (int(opts.pop(k, d)) for k, d in (("heads", 8), ("points", 4), ("channels", 256)))
        except ValueError:
            raise ValueError(f"bad shape {text!r}: {usage}") from None
        if opts or min(queries or 1, heads, points, channels, *(v for lv in levels for v in lv)) < 1:
            raise ValueError(f"bad shape {text!r}: {usage}")
        if channels % heads:
            raise ValueError(f"bad shape {text!r}: channels ({channels}) must be divisible by heads ({heads})")
        return cls(queries, levels, heads, points, channels)


class MSDACase(_ExportingCase):
    """value randn; locations uniform in [-0.1, 1.1] (some outside); weights softmax over levels x points; seed 0."""

    def __init__(self, shape: MSDAShape, workdir: Path, threads: int):
        import torch

        from ..ops import MSDeformAttnCore, MSDeformAttnReference

        self.shape = shape
        g = torch.Generator().manual_seed(0)
        q, m, lv, p, d = shape.num_queries, shape.heads, len(shape.levels), shape.points, shape.channels // shape.heads
        attn = torch.randn(1, q, m, lv * p, generator=g).softmax(-1).view(1, q, m, lv, p)
        self.inputs = dict(
            zip(
                MSDA_NAMES,
                (
                    torch.randn(1, shape.pixels, m, d, generator=g),
                    torch.rand(1, q, m, lv, p, 2, generator=g) * 1.2 - 0.1,
                    attn,
                ),
            )
        )
        self.module = MSDeformAttnReference(shape.levels).eval()  # the code as Deformable DETR ships it
        self.fused = MSDeformAttnCore(shape.levels).eval()
        self._setup(workdir, threads)


def evaluate_msda_goals(result: BenchResult) -> list[Goal]:
    """Issue 10's speed goals for MSDA, from this run (each must hold at every query count)."""
    out = []
    for name, key, to in (
        (
            "gather form (plain export, method gather) at least as fast as the plain GridSample graph",
            "ort-plain-gather",
            "ort-plain-grid_sample",
        ),
        ("fused lowering at least as fast as the plain GridSample graph", "ort-fused", "ort-plain-grid_sample"),
        ("fused lowering faster than PyTorch eager", "ort-fused", "torch"),
    ):
        worst = result.worst_ratio(key, to)
        out.append(
            Goal(
                name,
                "n/a" if worst is None else f"worst {worst:.2f}x its time",
                None if worst is None else worst <= 1.0,
            )
        )
    return out


MSDA = Suite(
    op="msda",
    title="multi-scale deformable attention",
    contenders=(
        Contender("torch", "PyTorch eager", _eager),
        Contender(
            "ort-plain-grid_sample",
            "ORT plain export, GridSample per level",
            _ort("module", "grid_sample", OPSET),
            ort=True,
        ),
        Contender("ort-plain-gather", "ORT plain export, gather per level", _ort("module", "gather", OPSET), ort=True),
        Contender("ort-fused", "ORT fused ms_deform_attn", _ort("fused", "auto", OPSET), ort=True),
    ),
    legend={
        "torch": "Deformable DETR's ms_deform_attn_core_pytorch (deform_onnx.ops.ms_deform_attn_reference), "
        "PyTorch CPU eager, torch.inference_mode()",
        "ort-plain-grid_sample": f"ONNX Runtime CPU, that code exported with deform_onnx.export(method='grid_sample', "
        f"opset {OPSET}): one GridSample per level, what a plain torch export gives",
        "ort-plain-gather": f"ONNX Runtime CPU, the same code exported with method='gather' (opset {OPSET}): "
        "one gather sampler per level",
        "ort-fused": f"ONNX Runtime CPU, deform_onnx.ops.MSDeformAttnCore (the ms_deform_attn op) exported at "
        f"opset {OPSET}: the fused gather lowering over all levels",
    },
    reference="ort-plain-grid_sample",
    ref_name="plain GridSample",
    make_case=MSDACase,
    parse_shape=MSDAShape.parse,
    full_shapes=(MSDAShape(1), MSDAShape(900), MSDAShape(None)),
    quick_shapes=(
        MSDAShape(1, MSDA_QUICK_LEVELS),
        MSDAShape(900, MSDA_QUICK_LEVELS),
        MSDAShape(None, MSDA_QUICK_LEVELS),
    ),
    markers=("<!-- msda: begin (generated by benchmarks/msda.py) -->", "<!-- msda: end -->"),
    heading="## Multi-scale deformable attention",
    shape_note="queries (`q`; `(all)`: every pixel of every level, the encoder), batch 1; levels "
    + ", ".join(f"{h}x{w}" for h, w in MSDA_LEVELS)
    + ", 8 heads, 4 points, 256 channels unless the label "
    "says otherwise (`L` levels, `M` heads, `P` points, `C` channels)",
    inputs_note="value randn; sampling locations uniform in [-0.1, 1.1]; attention weights softmax(randn) over "
    "levels x points; seed 0",
    goals=evaluate_msda_goals,
)
