"""The deformable-convolution suite (``deform-onnx bench``, default ``--op deform_conv``).

For each shape one ``torchvision.ops.deform_conv2d`` layer (seeded weights
and inputs). Contenders (:data:`CONTENDERS`): torchvision eager (PyTorch
CPU); ONNX Runtime with the native ``DeformConv`` (opset 19), the grid_sample
lowering (opset 17), the gather lowering (opset 11) and the graph of the
older pip exporter ``deform-conv2d-onnx-exporter`` 1.2.0 (opset 12;
benchmark-only, used when installed, never a dependency); the limit: ONNX
Runtime running a plain dense ``Conv`` of the same shape and weights (issue
13: the sampling adds only a few percent of a 3x3 convolution's arithmetic,
so a dense ``Conv`` is the floor a lowering can aim at); OpenVINO CPU at f32
reading the native file with :func:`deform_onnx.openvino.extension`, and
reading the file after :func:`deform_onnx.lower`. Ratios are taken to ONNX
Runtime's native ``DeformConv`` and, in a second table, to the dense ``Conv``.

Per model it also records node count, file size, largest constant that is
not the layer's weight or bias, export time and the peak memory of one
inference (:func:`.harness.peak_memory`).
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from .deform_conv_goals import LIMIT, REFERENCE, evaluate_goals
from .harness import BenchResult, Contender, ModelStats, Prepared, Suite, Unavailable, run_suite
from .runtimes import file_stats, openvino_compile, openvino_feeds, ort_prepared

#: Offsets are drawn as ``randn * OFFSET_SCALE`` pixels (many samples near or past borders).
OFFSET_SCALE = 2.0
#: Old pip exporter benchmarked against (never a dependency of deform-onnx).
OLD_EXPORTER = "deform-conv2d-onnx-exporter"
OLD_EXPORTER_VERSION = "1.2.0"
OP_NAME = "torchvision::deform_conv2d"


@dataclass(frozen=True)
class BenchShape:
    """One benchmarked layer: ``DeformConv2d(C, C, 3, padding=1)`` on an ``[N, C, H, H]`` input.

    Attributes:
        batch: N.
        channels: C (in = out channels).
        size: H = W, pixels.
        offset_groups: offset groups G (offset has ``2*G*9`` channels).
        stride: stride (both axes).
        mask: DCNv2 modulation mask present.
    """

    batch: int
    channels: int
    size: int
    offset_groups: int = 1
    stride: int = 1
    mask: bool = True

    @property
    def label(self) -> str:
        """``"1x64x64"`` (N x C x H=W) plus ``og8`` / ``s2`` / ``no mask``."""
        parts = [f"{self.batch}x{self.channels}x{self.size}"]
        if self.offset_groups != 1:
            parts.append(f"og{self.offset_groups}")
        if self.stride != 1:
            parts.append(f"s{self.stride}")
        if not self.mask:
            parts.append("no mask")
        return " ".join(parts)

    @property
    def out_size(self) -> int:
        """Ho = Wo for kernel 3, padding 1."""
        return (self.size + 2 - 3) // self.stride + 1

    @property
    def out_pixels(self) -> int:
        """N * Ho * Wo: output pixels of one call."""
        return self.batch * self.out_size**2

    @classmethod
    def parse(cls, text: str) -> BenchShape:
        """Parse ``"N,C,H[,og=G][,stride=S][,mask=0]"`` (``x`` also separates N, C, H).

        Raises:
            ValueError: malformed text or non-positive numbers (message shows the format).
        """
        usage = "expected N,C,H[,og=G][,stride=S][,mask=0|1], e.g. 1,64,64 or 1,64,64,og=8"
        parts = [p.strip() for p in text.replace("x", ",").split(",") if p.strip()]
        dims = [p for p in parts if "=" not in p]
        opts = dict(p.split("=", 1) for p in parts if "=" in p)
        try:
            n, c, h = (int(d) for d in dims)
            og = int(opts.pop("og", 1))
            stride = int(opts.pop("stride", 1))
            mask = opts.pop("mask", "1").lower() not in ("0", "false", "no", "off")
        except ValueError:
            raise ValueError(f"bad shape {text!r}: {usage}") from None
        if opts or min(n, c, h, og, stride) < 1:
            raise ValueError(f"bad shape {text!r}: {usage}")
        if c % og:
            raise ValueError(f"bad shape {text!r}: channels ({c}) must be divisible by og ({og})")
        return cls(n, c, h, og, stride, mask)


#: The shapes of issue 5 (N, C_in = C_out, H = W; kernel 3, padding 1).
FULL_SHAPES: tuple[BenchShape, ...] = (
    BenchShape(1, 64, 64),
    BenchShape(1, 256, 32),
    BenchShape(1, 128, 128),
    BenchShape(4, 64, 32),
    BenchShape(1, 64, 64, offset_groups=8),
    BenchShape(1, 128, 64, stride=2),
    BenchShape(1, 64, 64, mask=False),
)
QUICK_SHAPES: tuple[BenchShape, ...] = (BenchShape(1, 64, 64), BenchShape(1, 64, 64, mask=False))


# -- the layer and its inputs -------------------------------------------------
class DeformConvCase:
    """Model, inputs and reference output of one shape; files go to ``workdir``."""

    def __init__(self, shape: BenchShape, workdir: Path, threads: int):
        import torch

        self.shape, self.workdir, self.threads = shape, workdir, threads
        workdir.mkdir(parents=True, exist_ok=True)
        s = shape
        g = torch.Generator().manual_seed(0)
        k = 9 * s.channels
        self.weight = torch.randn(s.channels, s.channels, 3, 3, generator=g) / math.sqrt(k)
        self.bias = torch.randn(s.channels, generator=g) * 0.1
        ho = s.out_size
        self.inputs = {
            "input": torch.randn(s.batch, s.channels, s.size, s.size, generator=g),
            "offset": torch.randn(s.batch, 2 * s.offset_groups * 9, ho, ho, generator=g) * OFFSET_SCALE,
        }
        if s.mask:
            self.inputs["mask"] = torch.sigmoid(torch.randn(s.batch, s.offset_groups * 9, ho, ho, generator=g))
        self.module = _deform_layer(self.weight, self.bias, s.stride).eval()
        self.args = tuple(self.inputs.values())
        self.feeds = {k: v.numpy() for k, v in self.inputs.items()}
        with torch.inference_mode():
            self.reference = self.module(*self.args).numpy()
        self.inputs_path = workdir / "inputs.npz"
        np.savez(
            self.inputs_path,
            **self.feeds,  # type: ignore[arg-type]  # numpy's stub: **kwds might fill allow_pickle (a bool)
            weight=self.weight.numpy(),
            bias=self.bias.numpy(),
            stride=np.array(s.stride),
        )
        w = self.weight.numel()
        #: Element counts of the weight, of one kernel row or tap of it, and of the bias:
        #: constants of these sizes are the layer's own weights, re-laid out by the exporter.
        self.weight_sizes = {w, w // 3, w // 9, self.bias.numel()}
        self._exports: dict[tuple[str, int], tuple[Path, ModelStats]] = {}

    def path(self, name: str) -> Path:
        """The ONNX file of export ``name`` in the work folder."""
        return self.workdir / f"{name}.onnx"

    def export(self, method: str, opset: int) -> tuple[Path, ModelStats]:
        """Export with :func:`deform_onnx.export` (TorchScript exporter, no verification), once per
        (method, opset): later calls (the same lowering at another ORT optimisation level) reuse the file.
        """
        from ..exporting.api import export

        if (method, opset) not in self._exports:
            path = self.path(f"{method}_opset{opset}")
            report = export(
                self.module,
                self.args,
                str(path),
                opset_version=opset,
                method=method,
                dynamo=False,
                input_names=list(self.inputs),
                output_names=["output"],
                verify=False,
            )
            self._exports[(method, opset)] = path, self.file_stats(path, report.export_seconds)
        path, stats = self._exports[(method, opset)]
        return path, replace(stats)

    def file_stats(self, path: Path, export_s: float | None) -> ModelStats:
        """Node count, size and largest non-weight constant of ``path``."""
        return file_stats(path, export_s, self.weight_sizes)


def _deform_layer(weight, bias, stride: int):
    """``deform_conv2d(input, offset, weight, bias, stride, padding=1, mask)`` with fixed weights."""
    import torch
    from torchvision.ops import deform_conv2d

    class DeformLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(weight, requires_grad=False)
            self.bias = torch.nn.Parameter(bias, requires_grad=False)

        def forward(self, input, offset, mask=None):
            return deform_conv2d(input, offset, self.weight, self.bias, stride=stride, padding=1, mask=mask)

    return DeformLayer()


# -- ONNX Runtime -------------------------------------------------------------
def _ort_lowering(method: str, opset: int):
    def prepare(case: DeformConvCase, opt_level: str | None = None) -> Prepared:
        path, stats = case.export(method, opset)
        return ort_prepared(path, case.feeds, case.threads, stats, opt_level)

    return prepare


def _prepare_dense(case: DeformConvCase, opt_level: str | None = None) -> Prepared:
    """The limit: ``torch.nn.Conv2d`` with the layer's weight, bias and stride (no offsets), in ORT."""
    import torch

    from ..exporting.api import export

    key = ("dense", 17)
    s = case.shape
    conv = torch.nn.Conv2d(s.channels, s.channels, 3, stride=s.stride, padding=1).eval()
    if conv.bias is None:  # Conv2d's default bias=True
        raise TypeError("the dense Conv2d limit has no bias")
    with torch.no_grad():
        conv.weight.copy_(case.weight)
        conv.bias.copy_(case.bias)
        want = conv(case.inputs["input"]).numpy()
    if key not in case._exports:
        path = case.path("dense_conv_opset17")
        report = export(
            conv,
            (case.inputs["input"],),
            str(path),
            opset_version=17,
            dynamo=False,
            input_names=["input"],
            output_names=["output"],
            verify=False,
        )
        case._exports[key] = path, case.file_stats(path, report.export_seconds)
    path, stats = case._exports[key]
    return ort_prepared(path, case.feeds, case.threads, replace(stats), opt_level, reference=want)


def old_exporter_module():
    """Import the old pip exporter (benchmark only), aliasing the torch module it expects.

    Raises:
        Unavailable: not installed.
    """
    if importlib.util.find_spec("deform_conv2d_onnx_exporter") is None:
        raise Unavailable(f"not installed: pip install {OLD_EXPORTER}=={OLD_EXPORTER_VERSION}")
    if "torch.onnx._type_utils" not in sys.modules:
        try:
            import torch.onnx._type_utils  # type: ignore[import-not-found]  # noqa: F401  (torch < 2.9 only)
        except ImportError:  # torch >= 2.9 moved it
            from torch.onnx._internal.torchscript_exporter import _type_utils

            sys.modules["torch.onnx._type_utils"] = _type_utils
    import deform_conv2d_onnx_exporter

    return deform_conv2d_onnx_exporter


def _prepare_old(case: DeformConvCase, opt_level: str | None = None) -> Prepared:
    import torch

    from ..exporters import torchscript as ts

    old = old_exporter_module()
    key = ("old", 12)
    if key not in case._exports:
        path = case.path("old_exporter_opset12")
        old.register_deform_conv2d_onnx_op()  # registers at opset 12 only
        try:
            start = time.perf_counter()
            torch.onnx.export(
                case.module,
                case.args,
                str(path),
                dynamo=False,
                opset_version=12,
                input_names=list(case.inputs),
                output_names=["output"],
            )
            seconds = time.perf_counter() - start
        finally:
            with warnings.catch_warnings():  # it registered opset 12 only: quiet "nothing at opset N"
                warnings.simplefilter("ignore", UserWarning)
                ts._uninstall()  # drop its symbolic; restore the user's registration, if any
            if ts._registered_method is not None:
                ts._install(ts._registered_method)
        case._exports[key] = path, case.file_stats(path, seconds)
    path, stats = case._exports[key]
    return ort_prepared(path, case.feeds, case.threads, replace(stats), opt_level)


# -- torchvision --------------------------------------------------------------
def _prepare_torch(case: DeformConvCase) -> Prepared:
    import torch

    def run():
        with torch.inference_mode():
            return case.module(*case.args)

    return Prepared(run=run, output=lambda: run().numpy(), memory_job={"kind": "torch"}, stats=ModelStats())


# -- OpenVINO -----------------------------------------------------------------
def _openvino_api():
    if importlib.util.find_spec("openvino") is None:
        raise Unavailable("openvino not installed (pip install openvino)")
    try:
        from .. import openvino as dov
    except ImportError as e:
        raise Unavailable(f"not yet available ({e})") from None
    if not hasattr(dov, "extension") or not hasattr(dov, "read_model"):
        raise Unavailable("not yet available (deform_onnx.openvino.extension)")
    reason = dov.available() if hasattr(dov, "available") else None
    if reason:
        raise Unavailable(reason)
    return dov


def _ov_prepared(case: DeformConvCase, path: Path, stats: ModelStats, with_extension: bool) -> Prepared:
    compiled = openvino_compile(path, case.threads, with_extension)
    request = compiled.create_infer_request()
    feeds = openvino_feeds(compiled, case.feeds)

    def output():
        request.infer(feeds)
        return np.array(request.get_output_tensor(0).data)

    return Prepared(
        run=lambda: request.infer(feeds),
        output=output,
        memory_job={"kind": "ov", "model": str(path), "extension": with_extension},
        stats=stats,
    )


def _prepare_ov_extension(case: DeformConvCase) -> Prepared:
    _openvino_api()
    path, stats = case.export("native", 19)
    stats.export_s = None  # reads the native file as exported
    return _ov_prepared(case, path, stats, with_extension=True)


def _prepare_ov_lowered(case: DeformConvCase) -> Prepared:
    _openvino_api()
    import onnx

    from .. import lower

    native, _ = case.export("native", 19)
    start = time.perf_counter()
    proto = lower(str(native))  # "auto" at the file's opset 19: the grid_sample lowering
    seconds = time.perf_counter() - start
    path = case.path("lowered_auto")
    onnx.save(proto, str(path))
    return _ov_prepared(case, path, case.file_stats(path, seconds), with_extension=False)


CONTENDERS: tuple[Contender, ...] = (
    Contender("torch", "torchvision eager", _prepare_torch),
    Contender("ort-native", "ORT native (opset 19)", _ort_lowering("native", 19), ort=True),
    Contender("ort-grid_sample", "ORT grid_sample (opset 17)", _ort_lowering("grid_sample", 17), ort=True),
    Contender("ort-gather", "ORT gather (opset 11)", _ort_lowering("gather", 11), ort=True),
    Contender("ort-old", "ORT old exporter (opset 12)", _prepare_old, ort=True),
    Contender(LIMIT, "ORT dense Conv (limit)", _prepare_dense, ort=True),
    Contender("ov-extension", "OpenVINO + extension", _prepare_ov_extension),
    Contender("ov-lowered", "OpenVINO after lower()", _prepare_ov_lowered),
)
#: What each row is (for the report).
LEGEND = {
    "torch": "torchvision.ops.deform_conv2d, PyTorch CPU eager, torch.inference_mode()",
    "ort-native": "ONNX Runtime CPU, deform_onnx.export(method='native', opset 19): one DeformConv node",
    "ort-grid_sample": "ONNX Runtime CPU, deform_onnx.export(method='grid_sample', opset 17)",
    "ort-gather": "ONNX Runtime CPU, deform_onnx.export(method='gather', opset 11)",
    "ort-old": f"ONNX Runtime CPU, graph of pip {OLD_EXPORTER}=={OLD_EXPORTER_VERSION} "
    "(register_deform_conv2d_onnx_op(), torch.onnx.export(dynamo=False, opset 12))",
    LIMIT: "ONNX Runtime CPU, a plain torch.nn.Conv2d with the layer's weight, bias and stride (no offsets, "
    "no mask; opset 17, one Conv node): the floor a lowering can aim at (issue 13); its error is "
    "against torch's Conv2d",
    "ov-extension": "OpenVINO CPU f32, the native file read with deform_onnx.openvino.extension() "
    "(DeformableConvolution-8)",
    "ov-lowered": "OpenVINO CPU f32, the native file after deform_onnx.lower() (auto at opset 19: grid_sample)",
}
CONTENDER_KEYS = tuple(c.key for c in CONTENDERS)


MARK_BEGIN = "<!-- deform-onnx bench: begin (generated; edit outside these markers) -->"
MARK_END = "<!-- deform-onnx bench: end -->"

SUITE = Suite(
    op="deform_conv",
    title="deformable convolution",
    contenders=CONTENDERS,
    legend=LEGEND,
    reference=REFERENCE,
    ref_name="native",
    make_case=DeformConvCase,
    parse_shape=BenchShape.parse,
    full_shapes=FULL_SHAPES,
    quick_shapes=QUICK_SHAPES,
    markers=(MARK_BEGIN, MARK_END),
    heading=None,
    shape_note="N x C x H (C_in = C_out, H = W, kernel 3x3, padding 1, mask on unless `no mask`; "
    "`og8` = 8 offset groups, `s2` = stride 2)",
    inputs_note="Offsets are randn * 2 pixels, mask sigmoid(randn), input randn; weights randn / sqrt(9 C); seed 0",
    oracle="torchvision",
    limit=LIMIT,
    goals=evaluate_goals,
)


def select_contenders(keys: Sequence[str] | None, opt_levels: Sequence[str] = ()) -> tuple[Contender, ...]:
    """:meth:`Suite.select` of this suite: contenders by key (``None``: all), plus ``KEY@level`` variants.

    Raises:
        ValueError: an unknown key or level (the message lists the known ones).
    """
    return SUITE.select(keys, opt_levels)


def run_benchmark(
    shapes: Sequence[BenchShape] = FULL_SHAPES, contenders: Sequence[Contender] = CONTENDERS, **kwargs
) -> BenchResult:
    """:func:`.harness.run_suite` on deformable convolution (keyword arguments as there).

    Returns:
        :class:`.harness.BenchResult`; errors are checked against torchvision on the same tensors.
    """
    return run_suite(SUITE, shapes, contenders, **kwargs)
