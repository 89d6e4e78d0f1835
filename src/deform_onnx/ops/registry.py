"""Op -> lowerings -> min opsets: which torch ops and ONNX nodes each op covers, and one method check.

One :class:`OpEntry` per op. A ``method`` (``auto``, ``native``,
``grid_sample``, ``gather``) is the user's single choice for a whole model;
each op resolves it for itself with :func:`resolve`, the one method/opset
check every entry point calls (exporters, rewriter, targets, CLI):

- ``deform_conv2d`` (torchvision): ``native`` = ONNX ``DeformConv`` (19+),
  ``grid_sample`` = standard ops on GridSample (16+), ``gather`` (11+);
  ``auto`` is grid_sample at 16+, gather below (:mod:`.deform_conv`).
- ``grid_sample`` (``F.grid_sample``): its native form *is* GridSample, so
  ``native`` and ``grid_sample`` both mean one ``GridSample`` node (16+);
  ``gather`` (11+); ``auto`` is GridSample at 16+, gather below (:mod:`.grid_sample`).
- ``dcnv3`` (InternImage; mmdeploy's ``TRTDCNv3`` node): no ONNX op of its
  own, so each method picks the sampler ``grid_sample`` resolves it to
  (:mod:`.dcnv3`).
- ``ms_deform_attn`` (:func:`deform_onnx.ops.ms_deform_attn`, and mmdeploy's /
  TensorRT's MSDA nodes): one lowering, the fused gather form (11+), for
  every method (ONNX has no MSDA op; :mod:`.msda`).

The bounds themselves are named in :mod:`deform_onnx.core.opsets`; tests read them
from here (``OPS[op].lowerings[name].min_opset``, ``OPS[op].min_opset``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping, Protocol

from ..core.opsets import GRID_SAMPLE_ND_MIN_OPSET
from .dcnv3.lower import lower_dcnv3
from .deform_conv import lower_gather, lower_grid_sample, lower_native
from .grid_sample import lower as grid_sampler
from .msda import lower as msda


class LowerFn(Protocol):
    """A lowering: ``fn(builder, spec_or_first_input, *inputs) -> output``; the arguments are the op's own.

    Deformable convolution: ``fn(b, spec, x, weight, offset, mask, bias)``;
    grid_sample: ``fn(b, spec, x, grid)``; DCNv3: ``fn(b, spec, x, offset, mask)``;
    MSDA: ``fn(b, value, spatial_shapes, level_start_index, sampling_locations, attention_weights)``.
    """

    def __call__(self, b: Any, /, *args: Any) -> Any: ...


@dataclass(frozen=True)
class Lowering:
    """One lowering of one op: its name (the method), the lowest opset its graph is valid at, its function."""

    name: str
    min_opset: int
    fn: LowerFn
    summary: str


@dataclass(frozen=True)
class OpEntry:
    """One op of the family.

    Attributes:
        name: the op's name here.
        title: the op's name in error messages.
        torch_ops: the TorchScript op names its symbolic is registered for.
        onnx_nodes: ``(domain, op_type)`` of file nodes ``lower`` rewrites into it.
        lowerings: lowering name -> :class:`Lowering` (``fn``'s signature is the op's own).
        methods: method -> lowering name, for every method but ``auto``.
        auto: the lowering names ``auto`` tries, in order: the first the opset holds.
        binding: the module that holds its torch bindings (``make_symbolic``,
            ``translations``), or ``None`` (DCNv3 exports through ``F.grid_sample``).
        spells: how an error names what a lowering writes (``{}`` is the method).
        sources: the module of the file nodes that mean it; its ``nodes_lowered(model, method, opset)``
            lists the nodes ``lower`` replaces (:func:`sources`).
    """

    name: str
    title: str
    torch_ops: tuple[str, ...]
    onnx_nodes: tuple[tuple[str, str], ...]
    lowerings: Mapping[str, Lowering]
    methods: Mapping[str, str]
    auto: tuple[str, ...]
    binding: str | None = None
    spells: str = "method {!r}"
    sources: str | None = None

    @property
    def min_opset(self) -> int:
        """The lowest opset any lowering of this op holds."""
        return min(low.min_opset for low in self.lowerings.values())


#: Deformable convolution's lowerings (``deform_onnx.LOWERINGS``).
LOWERINGS: dict[str, Lowering] = {
    "native": Lowering("native", lower_native.MIN_OPSET, lower_native.lower_native, "ONNX DeformConv op"),
    "grid_sample": Lowering(
        "grid_sample", lower_grid_sample.MIN_OPSET, lower_grid_sample.lower_grid_sample, "standard ops on GridSample"
    ),
    "gather": Lowering("gather", lower_gather.MIN_OPSET, lower_gather.lower_gather, "standard ops on Gather"),
}

#: Every method a user can choose (the CLI keeps a copy that a test compares with this one).
METHODS = ("auto", *LOWERINGS)

GRID_SAMPLE_LOWERINGS: dict[str, Lowering] = {
    "native": Lowering("native", grid_sampler.NATIVE_MIN_OPSET, grid_sampler.lower_native, "ONNX GridSample op"),
    "gather": Lowering("gather", grid_sampler.GATHER_MIN_OPSET, grid_sampler.lower_gather, "standard ops on Gather"),
}

MSDA_LOWERINGS: dict[str, Lowering] = {
    "gather": Lowering("gather", msda.MIN_OPSET, msda.lower_gather, "standard ops on Gather, all levels at once"),
}


# -- DCNv3 (InternImage): a model-level op, sampled with the grid_sample lowerings ------------
def _dcnv3_lowering(sampler: Lowering) -> Lowering:
    return Lowering(
        sampler.name, sampler.min_opset, partial(lower_dcnv3, sampler=sampler.fn), f"DCNv3 on {sampler.summary}"
    )


DCNV3_LOWERINGS: dict[str, Lowering] = {name: _dcnv3_lowering(low) for name, low in GRID_SAMPLE_LOWERINGS.items()}

#: ``grid_sample`` (and DCNv3, sampled with it): both GridSample methods mean one GridSample node.
_SAMPLER_METHODS = {"native": "native", "grid_sample": "native", "gather": "gather"}

OPS: dict[str, OpEntry] = {
    "deform_conv2d": OpEntry(
        "deform_conv2d",
        "deformable convolution",
        ("torchvision::deform_conv2d",),
        (("", "DeformConv"),),
        LOWERINGS,
        {m: m for m in LOWERINGS},
        ("grid_sample", "gather"),
        binding="deform_onnx.ops.deform_conv.binding",
        sources="deform_onnx.ops.deform_conv.sources",
    ),
    "grid_sample": OpEntry(
        "grid_sample",
        "grid_sample",
        ("aten::grid_sampler",),
        (("", "GridSample"),),
        GRID_SAMPLE_LOWERINGS,
        _SAMPLER_METHODS,
        ("native", "gather"),
        binding="deform_onnx.ops.grid_sample.binding",
        sources="deform_onnx.ops.grid_sample.sources",
        spells="method {!r} writes F.grid_sample as GridSample, which",
    ),
    "ms_deform_attn": OpEntry(
        "ms_deform_attn",
        "ms_deform_attn",
        ("deform_onnx::ms_deform_attn",),
        (
            ("mmdeploy", "MMCVMultiScaleDeformableAttention"),
            ("mmcv", "MMCVMultiScaleDeformableAttention"),
            ("", "MultiscaleDeformableAttnPlugin_TRT"),
            ("trt", "MultiscaleDeformableAttnPlugin_TRT"),
        ),
        MSDA_LOWERINGS,
        {m: "gather" for m in LOWERINGS},
        ("gather",),
        binding="deform_onnx.ops.msda.binding",
        sources="deform_onnx.ops.msda.sources",
    ),
    "dcnv3": OpEntry(
        "dcnv3",
        "DCNv3",
        (),
        (("mmdeploy", "TRTDCNv3"),),
        DCNV3_LOWERINGS,
        _SAMPLER_METHODS,
        ("native", "gather"),
        spells="method {!r} samples DCNv3 with GridSample, which",
        sources="deform_onnx.ops.dcnv3.sources",
    ),
}


def bindings() -> list:
    """The binding module of every op that has one (:attr:`OpEntry.binding`; importing them imports torch).

    Each has ``TORCHSCRIPT_OP``, ``make_symbolic(method)`` and
    ``translations(method, opset, build_opset, builder)``; the exporters install them all.
    """
    return [importlib.import_module(entry.binding) for entry in OPS.values() if entry.binding is not None]


def sources() -> list:
    """The file-node module of every op that has one (:attr:`OpEntry.sources`), in :data:`OPS` order.

    Each has ``nodes_lowered(model, method, opset)``: the nodes of an onnx-ir model that
    ``lower`` replaces (:func:`deform_onnx.rewrite.lowerable.nodes_lowered` asks them all).
    """
    return [importlib.import_module(entry.sources) for entry in OPS.values() if entry.sources is not None]


def check_method(method: str) -> None:
    """Raise ``ValueError`` naming the choices when ``method`` is not one of :data:`METHODS`."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")


def resolve(op: str, method: str, opset: int, *, path_min_opset: int | None = None) -> Lowering:
    """The lowering of ``op`` (a key of :data:`OPS`) for ``method`` at ``opset``: the one method/opset check.

    ``auto`` is the first of the op's :attr:`OpEntry.auto` lowerings that the
    opset holds. ``path_min_opset``: the lowest opset the caller's export path
    reaches (e.g. 14 on the dynamo path); below it, the error suggests no other
    method, since none would work on that path either.

    Raises:
        ValueError: unknown method, an opset below the op's lowest, or a method
            whose ops the opset does not have (e.g. ``native`` below 19), naming the fix.
    """
    entry = OPS[op]
    check_method(method)
    if not isinstance(opset, int) or opset < entry.min_opset:
        raise ValueError(f"opset {opset!r} is not supported: {entry.title} lowers at opset >= {entry.min_opset}")
    if method == "auto":
        return next(entry.lowerings[n] for n in entry.auto if entry.lowerings[n].min_opset <= opset)
    lowering = entry.lowerings[entry.methods[method]]
    if opset < lowering.min_opset:
        usable = [m for m in LOWERINGS if entry.lowerings[entry.methods[m]].min_opset <= opset]
        if path_min_opset is not None and opset < path_min_opset:
            usable = []  # no method works at this opset on the caller's path
        fix = (
            f"raise the opset or use one of: {', '.join(usable)}"
            if usable
            else f"raise the opset to {lowering.min_opset} or more"
        )
        raise ValueError(
            f"{entry.spells.format(method)} needs opset >= {lowering.min_opset} but opset {opset} was requested; {fix}"
        )
    return lowering


def grid_sample_call(method: str, opset: int, spec: grid_sampler.GridSampleSpec, rank: int) -> Lowering:
    """The lowering of one ``F.grid_sample`` call (``rank`` 4 or 5, the input's): :func:`resolve`, then per call.

    The method's GridSample form is kept unless the call cannot be one at
    ``opset`` (5-D below GridSample-20) or the active target's forms
    (:mod:`.forms`) say its runtime does not run it: ``"GridSample 4-D only"``
    (5-D calls), ``"no GridSample cubic"`` (bicubic calls), ``"no GridSample reflection"``
    (``padding_mode="reflection"`` calls). Those calls take
    the gather form when the method is ``auto`` or a target is active
    (``"gather where GridSample cannot"``, set by every target).

    Raises:
        ValueError: what :func:`resolve` raises; an explicit ``native``/``grid_sample`` for 5-D input below
            opset 20 without a target; 5-D bicubic with the gather form.
    """
    from ..builder.forms import wants

    lowering = resolve("grid_sample", method, opset)
    if lowering.name == "native":
        if rank == 5 and wants("GridSample 4-D only"):
            return GRID_SAMPLE_LOWERINGS["gather"]
        if spec.mode == "bicubic" and wants("no GridSample cubic"):
            return GRID_SAMPLE_LOWERINGS["gather"]
        if spec.padding_mode == "reflection" and wants("no GridSample reflection"):
            return GRID_SAMPLE_LOWERINGS["gather"]
        if rank == 5 and opset < GRID_SAMPLE_ND_MIN_OPSET:
            if method == "auto" or wants("gather where GridSample cannot"):
                return GRID_SAMPLE_LOWERINGS["gather"]
            raise ValueError(
                f"method {method!r} writes 5-D F.grid_sample as GridSample, which needs opset >= "
                f"{GRID_SAMPLE_ND_MIN_OPSET} (GridSample-20) but opset {opset} was requested; "
                f"export at opset {GRID_SAMPLE_ND_MIN_OPSET} or use method 'gather' (or 'auto')"
            )
    if rank == 5 and spec.mode == "bicubic" and lowering.name == "gather":
        raise ValueError(
            "grid_sample: mode 'bicubic' is 4-D only (PyTorch and ONNX Runtime have no 5-D cubic); "
            "keep the GridSample node with method 'native' at opset >= 20"
        )
    return lowering


def resolve_method(method: str, opset: int, *, path_min_opset: int | None = None) -> Lowering:
    """Pick deformable convolution's lowering for ``method`` at ``opset`` (:func:`resolve` for ``deform_conv2d``).

    ``"auto"`` is grid_sample at opset >= 16 and gather below.
    ``path_min_opset``: the lowest opset the caller's export path reaches
    (e.g. 14 on the dynamo path); below it, the error suggests no other
    method, since none would work on that path either.

    Raises:
        ValueError: unknown method, opset below 11, or a method whose ops the
            opset does not have (e.g. ``native`` below 19).
    """
    return resolve("deform_conv2d", method, opset, path_min_opset=path_min_opset)
