"""Op -> lowerings: which torch ops and ONNX nodes each op covers, and how a method resolves for it.

One :class:`OpEntry` per op. A ``method`` (``auto``, ``native``,
``grid_sample``, ``gather``) is the user's single choice for a whole model;
each op resolves it for itself with :func:`resolve`:

- ``deform_conv2d`` (torchvision): ``native`` = ONNX ``DeformConv`` (19+),
  ``grid_sample`` = standard ops on GridSample (16+), ``gather`` (11+);
  :func:`deform_onnx.lowering.resolve_method`.
- ``grid_sample`` (``F.grid_sample``): its native form *is* GridSample, so
  ``native`` and ``grid_sample`` both mean one ``GridSample`` node (16+);
  ``gather`` (11+); ``auto`` is GridSample at 16+, gather below.
- ``dcnv3`` (InternImage; mmdeploy's ``TRTDCNv3`` node): no ONNX op of its
  own, so each method picks the sampler ``grid_sample`` resolves it to
  (:mod:`.dcnv3`).
- ``ms_deform_attn`` (:mod:`deform_onnx.ops.ms_deform_attn`, and mmdeploy's /
  TensorRT's MSDA nodes): one lowering, the fused gather form (11+), for
  every method (ONNX has no MSDA op; :mod:`.msda`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from . import LOWERINGS, METHODS, Lowering, resolve_method
from . import grid_sampler, msda

GRID_SAMPLE_LOWERINGS: dict[str, Lowering] = {
    "native": Lowering("native", grid_sampler.NATIVE_MIN_OPSET, grid_sampler.lower_native, "ONNX GridSample op"),
    "gather": Lowering("gather", grid_sampler.GATHER_MIN_OPSET, grid_sampler.lower_gather, "standard ops on Gather"),
}


def _resolve_grid_sample(method: str, opset: int) -> Lowering:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if not isinstance(opset, int) or opset < grid_sampler.GATHER_MIN_OPSET:
        raise ValueError(f"opset {opset!r} is not supported: grid_sample lowers at opset >= {grid_sampler.GATHER_MIN_OPSET}")
    if method == "gather" or (method == "auto" and opset < grid_sampler.NATIVE_MIN_OPSET):
        return GRID_SAMPLE_LOWERINGS["gather"]
    if opset < grid_sampler.NATIVE_MIN_OPSET:
        raise ValueError(
            f"method {method!r} writes F.grid_sample as GridSample, which needs opset >= {grid_sampler.NATIVE_MIN_OPSET} "
            f"but opset {opset} was requested; raise the opset or use method 'gather' (or 'auto')"
        )
    return GRID_SAMPLE_LOWERINGS["native"]


def grid_sample_call(method: str, opset: int, spec: grid_sampler.GridSampleSpec, rank: int) -> Lowering:
    """The lowering of one ``F.grid_sample`` call (``rank`` 4 or 5, the input's): :func:`resolve`, then per call.

    The method's GridSample form is kept unless the call cannot be one at
    ``opset`` (5-D below GridSample-20) or the active target's forms
    (:mod:`.forms`) say its runtime does not run it: ``"GridSample 4-D only"``
    (5-D calls), ``"no GridSample cubic"`` (bicubic calls). Those calls take
    the gather form when the method is ``auto`` or a target is active
    (``"gather where GridSample cannot"``, set by every target).

    Raises:
        ValueError: what :func:`resolve` raises; an explicit ``native``/``grid_sample`` for 5-D input below
            opset 20 without a target; 5-D bicubic with the gather form.
    """
    from .forms import wants

    lowering = _resolve_grid_sample(method, opset)
    if lowering.name == "native":
        if rank == 5 and wants("GridSample 4-D only"):
            return GRID_SAMPLE_LOWERINGS["gather"]
        if spec.mode == "bicubic" and wants("no GridSample cubic"):
            return GRID_SAMPLE_LOWERINGS["gather"]
        if rank == 5 and opset < grid_sampler.ND_MIN_OPSET:
            if method == "auto" or wants("gather where GridSample cannot"):
                return GRID_SAMPLE_LOWERINGS["gather"]
            raise ValueError(
                f"method {method!r} writes 5-D F.grid_sample as GridSample, which needs opset >= "
                f"{grid_sampler.ND_MIN_OPSET} (GridSample-20) but opset {opset} was requested; "
                f"export at opset {grid_sampler.ND_MIN_OPSET} or use method 'gather' (or 'auto')"
            )
    if rank == 5 and spec.mode == "bicubic" and lowering.name == "gather":
        raise ValueError("grid_sample: mode 'bicubic' is 4-D only (PyTorch and ONNX Runtime have no 5-D cubic); "
                         "keep the GridSample node with method 'native' at opset >= 20")
    return lowering


MSDA_LOWERINGS: dict[str, Lowering] = {
    "gather": Lowering("gather", msda.MIN_OPSET, msda.lower_gather, "standard ops on Gather, all levels at once"),
}


def _resolve_msda(method: str, opset: int) -> Lowering:
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if not isinstance(opset, int) or opset < msda.MIN_OPSET:
        raise ValueError(f"opset {opset!r} is not supported: ms_deform_attn lowers at opset >= {msda.MIN_OPSET}")
    return MSDA_LOWERINGS["gather"]


@dataclass(frozen=True)
class OpEntry:
    """One op of the family.

    Attributes:
        name: the op's name here.
        torch_ops: the TorchScript op names its symbolic is registered for.
        onnx_nodes: ``(domain, op_type)`` of file nodes ``lower`` rewrites into it.
        lowerings: lowering name -> :class:`Lowering` (``fn``'s signature is the op's own).
        resolve: ``resolve(method, opset) -> Lowering``; raises ``ValueError`` naming the fix.
    """

    name: str
    torch_ops: tuple[str, ...]
    onnx_nodes: tuple[tuple[str, str], ...]
    lowerings: Mapping[str, Lowering]
    resolve: Callable[[str, int], Lowering]


OPS: dict[str, OpEntry] = {
    "deform_conv2d": OpEntry(
        "deform_conv2d", ("torchvision::deform_conv2d",), (("", "DeformConv"),), LOWERINGS, resolve_method
    ),
    "grid_sample": OpEntry(
        "grid_sample", ("aten::grid_sampler",), (("", "GridSample"),), GRID_SAMPLE_LOWERINGS, _resolve_grid_sample
    ),
    "ms_deform_attn": OpEntry(
        "ms_deform_attn", ("deform_onnx::ms_deform_attn",),
        (("mmdeploy", "MMCVMultiScaleDeformableAttention"), ("mmcv", "MMCVMultiScaleDeformableAttention"),
         ("", "MultiscaleDeformableAttnPlugin_TRT"), ("trt", "MultiscaleDeformableAttnPlugin_TRT")),
        MSDA_LOWERINGS, _resolve_msda,
    ),
}


def resolve(op: str, method: str, opset: int) -> Lowering:
    """The lowering of ``op`` (a key of :data:`OPS`) for ``method`` at ``opset``.

    Raises:
        ValueError: unknown method, or a method the opset cannot hold for this op.
    """
    return OPS[op].resolve(method, opset)


# -- DCNv3 (InternImage): a model-level op, sampled with the grid_sample lowerings ------------
def _dcnv3_lowering(sampler: Lowering) -> Lowering:
    from functools import partial

    from .dcnv3 import lower_dcnv3

    return Lowering(sampler.name, sampler.min_opset, partial(lower_dcnv3, sampler=sampler.fn),
                    f"DCNv3 on {sampler.summary}")


def _resolve_dcnv3(method: str, opset: int) -> Lowering:
    """DCNv3 has no ONNX op: every method picks the grid_sample sampler it resolves to (GridSample or gather)."""
    return _dcnv3_lowering(_resolve_grid_sample(method, opset))


OPS["dcnv3"] = OpEntry(
    "dcnv3", (), (("mmdeploy", "TRTDCNv3"),),
    {name: _dcnv3_lowering(low) for name, low in GRID_SAMPLE_LOWERINGS.items()}, _resolve_dcnv3,
)
