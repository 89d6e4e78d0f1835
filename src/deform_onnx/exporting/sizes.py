"""Second sizes for dynamic exports: which input sizes a dynamic file is also checked at.

A file exported with dynamic axes claims to run at every size on those axes, but
both exporters record the example: a size the model's code turns into a Python
number, a ``torch.tensor`` built from shapes, a level size in a loop. Such a
file matches PyTorch at the example size and is wrong (or fails) at any other.
:func:`second_inputs` picks another size from the dynamic axes and draws inputs
there, so :func:`deform_onnx.export` (and the CLI) can run the file at it before
writing it. One implementation serves ``export()``, ``deform-onnx export`` and
``deform-onnx check``.

How a size is picked, per group of axes that move together (axes with the same
name; unnamed axes of equal example size):

- axis 0 (batch): ``n + 1``, then ``n + 2``, then ``n - 1``;
- any other axis of size ``s``: a step ``p``, the largest power of two that
  divides ``s``, at most 32 (the deepest stride of common backbones), so that
  the model's own stride arithmetic stays exact (``s + p`` is divisible by every
  stride that divides ``s``, up to ``p``): ``s + p``, ``s + 2p``, ``s - p``;
- the first candidate moves the spatial groups in alternate directions by
  different steps (H to ``s + 2p``, W to ``s - p``: 128x128 -> 192x96), so that
  a square example becomes a non-square one, an H/W mix-up shows, and neither
  ``H + W`` nor ``H * W`` keeps its value (a frozen sum or product would
  otherwise pass).

Candidates outside a ``torch.export.Dim``'s ``min``/``max`` are skipped; the first
candidate that PyTorch itself runs is used (a model may need sizes divisible by
its stride, or a minimum size). :func:`bound_inputs` gives the sizes at the declared
``min``/``max`` themselves (the torch.export formats check those too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

#: Largest step for a non-batch axis (the deepest stride of common detector backbones).
MAX_STEP = 32


@dataclass(frozen=True)
class Axis:
    """One dynamic axis: input ``index`` (position among the tensor inputs), ``axis``, its name and range."""

    index: int
    axis: int
    name: str | None
    size: int
    min: int | None = None
    max: int | None = None


def step_for(size: int, axis: int) -> int:
    """The step an axis moves by: 1 for the batch axis, else the largest power of two (<= 32) dividing ``size``."""
    if axis == 0 or size <= 0:
        return 1
    step = 1
    while size % (step * 2) == 0 and step * 2 <= MAX_STEP:
        step *= 2
    return step


def dynamic_axes_of(
    args: tuple, dynamic_shapes=None, dynamic_axes=None, input_names=None, forward_names=None
) -> list[Axis]:
    """The dynamic axes of the tensor inputs in ``args`` (dynamo ``dynamic_shapes`` or TorchScript ``dynamic_axes``).

    ``dynamic_shapes``: one entry per positional input (``None``, ``{axis: Dim}`` or a per-axis
    list), or a dict keyed by ``input_names``. ``dynamic_axes``: ``{input_name: {axis: name}}`` or
    ``{input_name: [axis, ...]}`` (output names are ignored). Returns an empty list when nothing is dynamic.

    Raises:
        ValueError: a ``dynamic_shapes`` dict keyed by axis numbers (one input's axes given without the
            per-input tuple), or naming inputs that ``forward`` does not have.
    """
    tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    names = list(input_names or [])
    specs: list = [None] * len(args)
    if dynamic_shapes is not None:
        if isinstance(dynamic_shapes, dict):
            keys = list(dynamic_shapes)
            if any(isinstance(k, int) for k in keys):
                raise ValueError(
                    f"dynamic_shapes={{{', '.join(map(str, keys))}: ...}} is keyed by axis numbers; give one entry "
                    "per input: a tuple such as ({0: Dim('N'), 2: Dim('H')},) or a dict keyed by input name"
                )
            if forward_names and not set(keys) <= set(names):  # torch keys them by forward's parameter names
                names = list(forward_names)
            unknown = [k for k in keys if k not in names]
            if names and unknown:
                raise ValueError(f"dynamic_shapes names {', '.join(map(str, unknown))}, but the inputs are "
                                 f"{', '.join(names)}")  # fmt: skip
            specs = [dynamic_shapes.get(names[i]) if i < len(names) else None for i in range(len(args))]
        else:
            specs = list(dynamic_shapes) + [None] * (len(args) - len(dynamic_shapes))
    elif dynamic_axes:
        specs = [dynamic_axes.get(names[i]) if i < len(names) else None for i in range(len(args))]
    out = []
    for i, tensor in tensors:
        spec = specs[i]
        if not spec:
            continue
        if isinstance(spec, dict):
            items = list(spec.items())
        elif all(isinstance(s, int) for s in spec):  # TorchScript list form: [axis, ...]
            items = [(a, None) for a in spec]
        else:  # dynamo per-axis form: a Dim or None for each axis
            items = [(a, d) for a, d in enumerate(spec) if d is not None]
        for axis, dim in items:
            axis = int(axis) % tensor.dim()
            name, low, high = _dim_name_range(dim)
            out.append(Axis(i, axis, name, int(tensor.shape[axis]), low, high))
    return out


def _dim_name_range(dim) -> tuple[str | None, int | None, int | None]:
    if isinstance(dim, str):
        return dim, None, None
    name = getattr(dim, "__name__", None)
    if name in (None, "DYNAMIC", "AUTO", "STATIC") or (isinstance(name, str) and name.startswith("_DimHint")):
        name = None
    low, high = getattr(dim, "min", None), getattr(dim, "max", None)
    low = low if isinstance(low, int) and low > 0 else None
    high = high if isinstance(high, int) and high < 2**31 else None
    return name, low, high


def _groups(axes: list[Axis]) -> list[list[Axis]]:
    """Axes that move together: same name, or (unnamed, e.g. ``Dim.AUTO``) the same axis of the same example
    size (an image's H and its offset's Ho); an unnamed H and W stay apart, so a square example gets a
    non-square second size as it does with named dims.
    """
    groups: dict[tuple, list[Axis]] = {}
    for a in axes:
        key = ("name", a.name) if a.name is not None else ("size", a.size, a.axis)
        groups.setdefault(key, []).append(a)
    return list(groups.values())


def candidate_sizes(axes: list[Axis]) -> list[dict[tuple[int, int], int]]:
    """Candidate second sizes, best first: each maps ``(input index, axis)`` to a new size."""
    groups = _groups(axes)
    plans: list[list[int]] = []
    for g in groups:
        a = g[0]
        step = step_for(a.size, a.axis)
        plans.append([a.size + step, a.size + 2 * step, a.size - step])
    candidates: list[dict] = []

    def add(choice: list[int]) -> None:
        sizes = {}
        for g, new in zip(groups, choice):
            low = max(a.min or 1 for a in g)
            high = min((a.max for a in g if a.max is not None), default=None)
            if new < max(low, 1) or (high is not None and new > high):
                return
            for a in g:
                sizes[(a.index, a.axis)] = new
        if sizes and sizes not in candidates:
            candidates.append(sizes)

    # First: spatial groups moved in alternate directions by different steps (s + 2p, then s - p), so
    # that a square example becomes a non-square one and neither H + W nor H * W keeps its value; where a
    # declared Dim range leaves that out (H, W in [s/2, 2s] with p = s: 3s and 0), the same with p halved
    # until it fits (32x32 in [16, 64]: 64x16), before the candidates that move every axis alike.
    firsts = []
    for div in (1, 2, 4, 8, 16, 32):
        spatial = 0
        first = []
        for g, plan in zip(groups, plans):
            if g[0].axis != 0:
                p = max(1, step_for(g[0].size, g[0].axis) // div)
                s_ = g[0].size
                down = spatial % 2 and s_ - p >= p
                first.append(s_ - p if down else s_ + 2 * p if spatial % 2 == 0 else s_ + p)
                spatial += 1
            else:
                first.append(plan[0])
        if first not in firsts:
            firsts.append(first)
    base = firsts[:1] + [[plan[k] for plan in plans] for k in range(3)]
    for first in firsts:  # the first that fits the declared ranges (unbounded: the first itself)
        add(first)
        if candidates:
            break
    for choice in base:
        add(choice)
    # Linked sizes: groups on the same axis of different inputs (an image's H and its offset's Ho = f(H))
    # scaled with the largest group on that axis (floor, then ceil of the ratio).
    drivers: dict[int, int] = {}
    for k, g in enumerate(groups):
        axis = g[0].axis
        if axis != 0 and (axis not in drivers or g[0].size > groups[drivers[axis]][0].size):
            drivers[axis] = k
    for rounding in (lambda v: int(v), lambda v: -int(-v // 1)):
        for choice in base:
            linked = []
            for k, (g, new) in enumerate(zip(groups, choice)):
                d = drivers.get(g[0].axis)
                if d is None or d == k:
                    linked.append(new)
                else:
                    linked.append(max(1, rounding(g[0].size * choice[d] / groups[d][0].size)))
            add(linked)
    # Last: the batch alone (sizes that PyTorch runs only with related axes moved together are unknown).
    add([plan[0] if g[0].axis == 0 else g[0].size for g, plan in zip(groups, plans)])
    return candidates


def resized_tensor(x: torch.Tensor, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """``x`` resized to ``shape``, axis by axis, keeping what the model saw: floating values are linearly
    interpolated along each resized axis (an image stays an image, masks stay in [0, 1], offsets keep
    their smoothness; no exact duplicates that would tie a top-k), integer and bool values are taken by
    nearest index; extra batch items are earlier ones flipped along the last axis (so a batch-mixing
    fault shows), in ``x``'s dtype. ``seed`` is kept for the signature (the result is deterministic).
    """
    del seed
    if tuple(shape) == tuple(x.shape):
        return x
    out = x.detach()
    for axis, new in enumerate(shape):
        old = out.shape[axis]
        if new == old:
            continue
        if old == 0:
            size = list(out.shape)
            size[axis] = new
            out = out.new_zeros(size)
        elif axis == 0 and out.dim() > 1:
            items = [out[i % old] if i < old else out[i % old].flip(-1) for i in range(new)]
            out = torch.stack(items, 0)
        else:
            out = _resize_axis(out, axis, new)
    return out


def _resize_axis(x: torch.Tensor, axis: int, new: int) -> torch.Tensor:
    moved = x.movedim(axis, -1)
    lead = moved.shape[:-1]
    flat = moved.reshape(1, -1, moved.shape[-1])
    if x.is_floating_point():
        work = flat.float() if flat.dtype in (torch.float16, torch.bfloat16) else flat
        res = torch.nn.functional.interpolate(work, size=new, mode="linear", align_corners=False).to(x.dtype)
    else:
        index = (torch.arange(new) * flat.shape[-1]) // new
        res = flat[..., index]
    return res.reshape(*lead, new).movedim(-1, axis)


def inputs_at(args: tuple, shapes: Sequence[tuple[int, ...] | None], seed: int = 0) -> tuple:
    """``args`` with each tensor input redrawn at its new shape (``None`` keeps it)."""
    out = []
    t = 0
    for a in args:
        if isinstance(a, torch.Tensor):
            shape = shapes[t] if t < len(shapes) else None
            out.append(a if shape is None else resized_tensor(a, tuple(shape), seed + t))
            t += 1
        else:
            out.append(a)
    return tuple(out)


def _shapes_for(args: tuple, sizes: dict[tuple[int, int], int]) -> list[tuple[int, ...]]:
    shapes = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            shape = list(a.shape)
            for axis in range(len(shape)):
                shape[axis] = sizes.get((i, axis), shape[axis])
            shapes.append(tuple(shape))
    return shapes


def second_inputs(model, args: tuple, axes: list[Axis], verify_shapes=None) -> tuple[list[tuple], str | None]:
    """Input sets to check a dynamic file at: ``[(args_at_size, shapes), ...]`` and a note when none runs.

    With ``verify_shapes`` (a list; each item one shape per tensor input, or one shape for a
    single-input model) those sizes are used as given. Otherwise the first of
    :func:`candidate_sizes` that ``model`` runs in PyTorch is used. Returns ``([], reason)`` when
    no candidate runs in PyTorch (the reason quotes PyTorch's error).

    Raises:
        ValueError: ``verify_shapes`` is empty, or an item has the wrong number of shapes or a rank
            that differs from the example's.
    """
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if verify_shapes is not None:
        sets = []
        items = list(verify_shapes)
        if not items:
            raise ValueError("verify_shapes is empty; give at least one size set, or verify=False")
        for item in items:
            item = list(item)
            if item and all(isinstance(d, int) for d in item):
                item = [tuple(item)]
            if len(item) != len(tensors):
                raise ValueError(f"verify_shapes item {item} gives {len(item)} shapes for {len(tensors)} tensor inputs")
            for shape, t in zip(item, tensors):
                if len(shape) != t.dim():
                    raise ValueError(
                        f"verify_shapes: shape {tuple(shape)} has rank {len(shape)}, the input has {t.dim()}"
                    )
            shapes = [tuple(int(d) for d in s) for s in item]
            sets.append((inputs_at(args, shapes), shapes))
        return sets, None
    from .verification import run_pytorch  # a bfloat16 DCN runs as its float32 copy, as verification does

    last = None
    for sizes in candidate_sizes(axes):
        shapes = _shapes_for(args, sizes)
        new = inputs_at(args, shapes)
        try:
            run_pytorch(model, new)
        except Exception as exc:  # noqa: BLE001 - the model's own code refuses this size: try the next
            last = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
            continue
        note = None
        others = [a for a in axes if a.axis != 0]  # no other dynamic axis: nothing was left unchecked
        if others and all(sizes[(a.index, a.axis)] == a.size for a in others):
            note = ("only the batch was checked at a second size: PyTorch ran none of the sizes tried on the other "
                    "dynamic axes; give verify_shapes= to check them")  # fmt: skip
        return [(new, shapes)], note
    tried = " | ".join(shown(_shapes_for(args, c)) for c in candidate_sizes(axes))
    return [], f"PyTorch ran none of the second sizes tried ({tried or 'none'}; last: {last})"


def bound_inputs(args: tuple, axes: list[Axis]) -> list[tuple[tuple, list[tuple[int, ...]], str]]:
    """Input sets at the bounds the file claims: ``[(args_at_size, shapes, label), ...]``.

    One set with every axis that has a declared ``min`` (a ``torch.export.Dim``'s) at it, one with every
    axis that has a declared ``max`` at it (the other axes keep the example's size); labels ``"lower
    bound"`` and ``"upper bound"``. A set equal to the example's sizes is left out. Inputs are rebuilt from
    the user's own (:func:`inputs_at`).
    """
    out = []
    for label, field in (("lower bound", "min"), ("upper bound", "max")):
        picked = {(a.index, a.axis): getattr(a, field) for a in axes if getattr(a, field) is not None}
        if not picked or all(picked[(a.index, a.axis)] == a.size for a in axes if (a.index, a.axis) in picked):
            continue
        shapes = _shapes_for(args, picked)
        out.append((inputs_at(args, shapes), shapes, label))
    return out


def declared_bounds(model, args: tuple, axes: list[Axis], taken: Sequence[Sequence[tuple[int, ...]]] = ()) -> list:
    """:func:`bound_inputs` less the size sets already in ``taken`` (the example, the second sizes), each run in
    PyTorch first: every export path checks a file at each size it claims, and a bound the model itself cannot
    run is the user's to fix, said before the (slow) export.

    Raises:
        ExportError: PyTorch fails at a declared bound (one line naming it and PyTorch's error).
    """
    from ..core.errors import ExportError
    from .verification import run_pytorch

    taken = [[tuple(s) for s in shapes] for shapes in taken]
    out = [b for b in bound_inputs(args, axes) if [tuple(s) for s in b[1]] not in taken]
    for bound_args, shapes, label in out:
        try:
            run_pytorch(model, bound_args)
        except Exception as exc:  # noqa: BLE001 - user code, at a size the dynamic_shapes declare
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            raise ExportError(
                f"the model does not run in PyTorch at its declared {label} {shown(shapes)}: {text}; declare "
                "bounds it runs at (torch.export.Dim min/max), no file was written"
            ) from None
    return out


def shown(shapes: list[tuple[int, ...]]) -> str:
    """``[(2, 3, 160, 96)]`` -> ``2,3,160,96`` (the CLI's ``--input-shape`` spelling); inputs joined by ``; ``."""
    return "; ".join(",".join(map(str, s)) for s in shapes)


def dynamic_shapes_to_axes(dynamic_shapes, input_names) -> dict | None:
    """Turn dynamo ``dynamic_shapes`` into TorchScript ``dynamic_axes`` (for the fallback)."""
    if input_names is None:
        raise ValueError("give input_names so that dynamic_shapes can be mapped for the TorchScript fallback")
    if isinstance(dynamic_shapes, dict):
        specs = [dynamic_shapes.get(n) for n in input_names]
    else:
        specs = list(dynamic_shapes)
    axes = {}
    for name, spec in zip(input_names, specs):
        if not spec:
            continue
        items = spec.items() if isinstance(spec, dict) else enumerate(spec)
        dims = {int(axis): getattr(dim, "__name__", None) or str(dim) for axis, dim in items if dim is not None}
        if dims:
            axes[name] = dims
    return axes or None
