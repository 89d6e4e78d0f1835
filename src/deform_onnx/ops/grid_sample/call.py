"""Which lowering one ``F.grid_sample`` call (or one file ``GridSample`` node) takes: the method's, then per call."""

from __future__ import annotations

from ...core.opsets import GRID_SAMPLE_ND_MIN_OPSET
from ..registry import Lowering, resolve
from .lower import GridSampleSpec


def grid_sample_call(method: str, opset: int, spec: GridSampleSpec, rank: int) -> Lowering:
    """The lowering of one ``F.grid_sample`` call (``rank`` 4 or 5, the input's): :func:`resolve`, then per call.

    The method's GridSample form is kept unless the call cannot be one at
    ``opset`` (5-D below GridSample-20) or the active target's forms
    (:mod:`deform_onnx.builder.forms`) say its runtime does not run it: ``"GridSample 4-D only"``
    (5-D calls), ``"no GridSample cubic"`` (bicubic calls), ``"no GridSample reflection"``
    (``padding_mode="reflection"`` calls). Those calls take
    the gather form when the method is ``auto`` or a target is active
    (``"gather where GridSample cannot"``, set by every target).

    Raises:
        ValueError: what :func:`~deform_onnx.ops.registry.resolve` raises; an explicit ``native``/``grid_sample``
            for 5-D input below opset 20 without a target; 5-D bicubic with the gather form.
    """
    from ...builder.forms import wants

    lowering = resolve("grid_sample", method, opset)
    gather = resolve("grid_sample", "gather", opset)
    if lowering.name == "native":
        if rank == 5 and wants("GridSample 4-D only"):
            return gather
        if spec.mode == "bicubic" and wants("no GridSample cubic"):
            return gather
        if spec.padding_mode == "reflection" and wants("no GridSample reflection"):
            return gather
        if rank == 5 and opset < GRID_SAMPLE_ND_MIN_OPSET:
            if method == "auto" or wants("gather where GridSample cannot"):
                return gather
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
