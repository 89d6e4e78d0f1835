"""Size tensors: ``torch.as_tensor`` / ``torch.tensor`` of feature-map sizes, and the integer ops applied to them.

Patterns served (each read from the repository's own code):

- Deformable DETR (fundamentalvision/Deformable-DETR ``models/deformable_transformer.py``
  ``DeformableTransformer.forward``; IDEA-Research/DINO ``models/dino/deformable_transformer.py``
  the same): ``spatial_shapes = torch.as_tensor([(h, w), ...])`` from the maps' shapes,
  ``level_start_index = torch.cat((spatial_shapes.new_zeros((1,)), spatial_shapes.prod(1).cumsum(0)[:-1]))``,
  then ``for H_, W_ in spatial_shapes`` (``get_reference_points``), ``value.split([H_ * W_ for H_, W_ in
  value_spatial_shapes])`` (``models/ops/functions/ms_deform_attn_func.py`` ``ms_deform_attn_core_pytorch``)
  and ``assert (input_spatial_shapes[:, 0] * input_spatial_shapes[:, 1]).sum() == Len_in``
  (``models/ops/modules/ms_deform_attn.py`` ``MSDeformAttn.forward``).
- Hugging Face transformers (``modeling_deformable_detr.py``, ``modeling_rt_detr.py``,
  ``modeling_mask2former.py``): ``torch.as_tensor(spatial_shapes_list, dtype=torch.long)``, the
  attention's offset normaliser.
- InternImage (OpenGVLab/InternImage ``ops_dcnv3/functions/dcnv3_func.py`` ``dcnv3_core_pytorch``):
  ``spatial_norm = torch.tensor([W_in, H_in])``.

Without this, ``torch.export`` specialises the sizes to the example's (a constraint violation when H/W
are dynamic) and the TorchScript tracer stores the tensor as a constant. Here the tensor is stacked
from the sizes (``aten.scalar_tensor`` of each ``SymInt``; the traced sizes themselves under TorchScript),
so the file computes it from its input's shape, and under ``torch.export`` it records the ``SymInt``s
(:class:`.rewriters.SizeMode`) so that numbers read back from it stay size expressions.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .rewriters import UNKNOWN, SizeMode, is_symbolic, is_traced_size, register

_SOURCE = (
    "fundamentalvision/Deformable-DETR models/deformable_transformer.py DeformableTransformer.forward; "
    "OpenGVLab/InternImage ops_dcnv3/functions/dcnv3_func.py dcnv3_core_pytorch; "
    "transformers modeling_deformable_detr.py / modeling_rt_detr.py / modeling_mask2former.py"
)


def _leaves(mode: SizeMode, data, out: list) -> bool:
    """Flatten nested lists/tuples into ``out`` (recorded sizes replaced); ``False`` if something is not a number."""
    if isinstance(data, (list, tuple)):
        return all(_leaves(mode, d, out) for d in data) and len(data) > 0
    value = mode.scalar(data)
    if isinstance(value, (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool)) or is_traced_size(value):
        out.append(value)
        return True
    return False


def _leaf_dtype(value) -> torch.dtype:
    if isinstance(value, torch.Tensor):
        return value.dtype
    if isinstance(value, (bool, torch.SymBool)):
        return torch.bool
    if isinstance(value, (int, torch.SymInt)):
        return torch.int64
    return torch.get_default_dtype()


def _from_sizes(mode: SizeMode, original, data, *args, dtype=None, device=None, **kwargs):
    """``torch.as_tensor(data)`` / ``torch.tensor(data)`` stacked from sizes when ``data`` holds a symbolic one."""
    if args and original is torch.as_tensor:  # as_tensor(data, dtype, device) positionally
        dtype = args[0]
        device = args[1] if len(args) > 1 else device
    elif args:
        return NotImplemented
    leaves: list = []
    if not isinstance(data, (list, tuple)) or not _leaves(mode, data, leaves):
        return NotImplemented
    traced = any(is_traced_size(v) for v in leaves)
    if kwargs.get("requires_grad") or kwargs.get("pin_memory"):
        return NotImplemented
    if dtype is None:  # as torch.tensor infers it: the promotion of every element's own type
        dtype = functools.reduce(torch.promote_types, map(_leaf_dtype, leaves))
    if not traced and not any(is_symbolic(v) for v in leaves):
        return _static(mode, original, data, leaves, dtype, device, kwargs)

    def build(d):
        if isinstance(d, (list, tuple)):
            return torch.stack([build(x) for x in d])
        v = mode.scalar(d)
        if isinstance(v, torch.Tensor):
            return v.to(dtype=dtype, device=device)
        return torch.scalar_tensor(v, dtype=dtype, device=device)

    tensor = build(data)
    if not traced and not dtype.is_floating_point:
        values = np.empty(len(leaves), dtype=object)
        values[:] = leaves
        mode.record(tensor, values.reshape(tuple(tensor.shape)))
    return tensor


#: At most this many numbers in a static size tensor that is recorded (feature-map sizes: 2 per level).
STATIC_MAX = 64


def _static(mode: SizeMode, original, data, leaves: list, dtype, device, kwargs):
    """``original(data)`` as torch makes it, recorded (:meth:`.rewriters.SizeMode.record`) when it is a small
    integer tensor of plain Python ints: static sizes (``torch.as_tensor([(h, w), ...])`` with ``h``, ``w`` the
    example's ints). ``torch.export`` makes such a tensor a constant whose values it cannot read back ("Could
    not guard on data-dependent expression", measured on RF-DETR 1.4.1's ``assert (...).sum() == Len_in``);
    recorded, the numbers read back are the same ints eager PyTorch reads.
    """
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool or len(leaves) > STATIC_MAX:
        return NotImplemented
    if not all(type(v) is int for v in leaves):
        return NotImplemented
    out = original(mode.substitute(data), dtype=dtype, device=device, **kwargs)  # [H_, W_]: their ints, not tensors
    if out.numel() == len(leaves):
        values = np.empty(len(leaves), dtype=object)
        values[:] = leaves
        mode.record(out, values.reshape(tuple(out.shape)))
    return out


@register("torch._shape_as_tensor", "roboflow/rf-detr rfdetr/models/transformer.py Transformer.forward (a release that "
          "builds spatial_shapes = torch.stack([torch._shape_as_tensor(src)[2:4] for src in srcs]))")  # fmt: skip
def shape_as_tensor(mode, original, tensor):
    """``torch._shape_as_tensor(x)`` (1-D int64, CPU) stacked from ``x``'s sizes and recorded; under the TorchScript
    tracer torch's own (its symbolic writes ``Shape``). ``torch.export`` cannot run torch's own on a fake tensor
    ("The tensor has a non-zero number of elements, but its data is not allocated yet", torch 2.14).
    """
    if torch._C._get_tracing_state() is not None or not isinstance(tensor, torch.Tensor):
        return NotImplemented
    sizes = list(tensor.shape)
    if not sizes:
        return original(tensor)
    out = torch.stack([torch.scalar_tensor(s, dtype=torch.long) for s in sizes])
    values = np.empty(len(sizes), dtype=object)
    values[:] = sizes
    return mode.record(out, values)


@register("torch.as_tensor", _SOURCE)
def as_tensor(mode, original, data, *args, **kwargs):
    """``torch.as_tensor(data, dtype, device)``; a nested list holding sizes gives an ``[...]`` tensor stacked
    from them (dtype as torch infers it: int64 for sizes), else ``NotImplemented`` (torch's own).
    """
    return _from_sizes(mode, original, data, *args, **kwargs)


@register("torch.tensor", _SOURCE)
def tensor(mode, original, data, *args, **kwargs):
    """``torch.tensor(data, *, dtype, device)``: as :func:`as_tensor`."""
    return _from_sizes(mode, original, data, *args, **kwargs)


@register("torch.Tensor.__setitem__", _SOURCE + "; RT-DETR / RT-DETRv2 / D-FINE spatial_shapes[level, 0] = height")
def setitem(mode, original, target, index, value):
    """``spatial_shapes[level, 0] = height`` into a small integer tensor (transformers' RT-DETR family builds
    ``spatial_shapes = torch.empty((L, 2), dtype=torch.long)`` so): remember the size written there.
    """
    value = mode.scalar(value)
    known = mode.values(target, partial=True)
    # a static size (a plain int) too: the record is complete, and read back, only once every entry is written
    if not (is_symbolic(value) or type(value) is int or (known is not None and isinstance(value, int))):
        return NotImplemented
    if target.is_floating_point() or target.is_complex() or target.dim() > 2 or target.numel() > 64:
        return NotImplemented
    index = mode.substitute(index)
    if any(isinstance(i, torch.Tensor) for i in (index if isinstance(index, tuple) else (index,))):
        return NotImplemented
    original(target, index, value)
    if known is None:
        known = np.empty(tuple(target.shape), dtype=object)
        known.fill(UNKNOWN)
    known = known.copy()
    known[index] = value
    mode.record(target, known)
    return None


# --- carrying recorded sizes through integer ops (torch.export only) --------------------------------

_BINARY = {
    "__mul__": operator.mul,
    "mul": operator.mul,
    "__add__": operator.add,
    "add": operator.add,
    "__sub__": operator.sub,
    "sub": operator.sub,
    "__floordiv__": operator.floordiv,
    "floor_divide": operator.floordiv,
    "__eq__": operator.eq,
    "eq": operator.eq,
    "__ne__": operator.ne,
    "ne": operator.ne,
    "__ge__": operator.ge,
    "ge": operator.ge,
    "__gt__": operator.gt,
    "gt": operator.gt,
    "__le__": operator.le,
    "le": operator.le,
    "__lt__": operator.lt,
    "lt": operator.lt,
}
_REVERSED = {
    "__rmul__": operator.mul,
    "__radd__": operator.add,
    "__rsub__": operator.sub,
    "__rfloordiv__": operator.floordiv,
}
_REDUCE = {"sum": operator.add, "prod": operator.mul}
_SAME = {"long", "int", "clone", "contiguous", "detach", "to", "type", "cpu"}
_READ = {"__int__", "__index__", "item", "__bool__", "__float__"}


def _operand(mode: SizeMode, value):
    """A recorded size array, or a plain/symbolic integer, or ``None`` (not a size operand)."""
    found = mode.values(value)
    if found is not None:
        return found
    if isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool):
        return np.asarray(value, dtype=object)
    return None


def _record_if_integral(mode: SizeMode, out, values):
    if isinstance(out, torch.Tensor) and not out.is_floating_point() and not out.is_complex():
        values = np.asarray(values, dtype=object) if not isinstance(values, np.ndarray) else values
        if tuple(values.shape) == tuple(out.shape):
            mode.record(out, values)
    return out


def propagate(mode: SizeMode, func, args, kwargs):
    """Run ``func`` and record the sizes of its result when it is an integer op on size tensors.

    Returns ``NotImplemented`` when ``func`` is not such an op (the caller substitutes sizes and runs it).
    """
    name = getattr(func, "__name__", "")
    if name in ("cat", "stack", "concat", "concatenate"):
        return _join(mode, func, name, args, kwargs)
    values = mode.values(args[0] if args else None)
    if values is None:
        if not (name in _REVERSED or name in _BINARY):
            return NotImplemented
        other = mode.values(args[1]) if len(args) > 1 else None
        if other is None:
            return NotImplemented
    call = _Call(mode, func, name, args, kwargs, values)
    for names, handler in _HANDLERS:
        if name in names:
            return handler(call)
    return NotImplemented


@dataclass(frozen=True)
class _Call:
    """One torch call seen by :func:`propagate`: the mode, the function, its arguments, the sizes of the first."""

    mode: SizeMode
    func: Any
    name: str
    args: tuple
    kwargs: Any
    values: Any  # np.ndarray of the first argument's sizes (None for a reversed operator's)

    @property
    def first(self):
        return self.args[0] if self.args else None

    def record(self, out, values):
        return _record_if_integral(self.mode, out, values)


def _join(mode: SizeMode, func, name: str, args, kwargs):
    parts = args[0] if args else kwargs.get("tensors")
    if not isinstance(parts, (list, tuple)) or not parts:
        return NotImplemented
    values = [mode.values(p) for p in parts]
    if any(v is None for v in values):
        return NotImplemented
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    out = func(*args, **kwargs)
    joined = np.stack(values, axis=dim) if name == "stack" else np.concatenate(values, axis=dim)
    return _record_if_integral(mode, out, joined)


def _read(c: _Call):
    if len(c.args) != 1 or c.values.ndim != 0:
        return NotImplemented
    value = c.values.item()
    if c.name == "__bool__":
        return bool(value)
    if c.name == "__float__":
        return float(value) if isinstance(value, int) else torch.sym_float(value)
    return value


def _all_true(c: _Call):
    # torch._check_tensor_all(cond) (transformers' torch_compilable_check on spatial_shapes, RT-DETRv2,
    # D-FINE) reads cond._is_all_true().item(): give it the size condition, and compute the tensor with
    # aten.all/any (aten._is_all_true has no ONNX translation in torch 2.14)
    if len(c.args) != 1 or c.kwargs:
        return NotImplemented
    combine = operator.or_ if c.name == "any" else operator.and_
    flat = list(c.values.reshape(-1))
    value = flat[0] if flat else c.name != "any"
    for v in flat[1:]:
        value = combine(value, v)
    assert isinstance(c.first, torch.Tensor)  # mode.values() recorded it, so it is a tensor
    out = torch.any(c.first) if c.name == "any" else torch.all(c.first)
    return c.record(out, value)


def _tolist(c: _Call):
    return c.values.tolist() if len(c.args) == 1 else NotImplemented


def _iter(c: _Call):
    parts = list(c.func(*c.args, **c.kwargs))
    for i, part in enumerate(parts):
        c.mode.record(part, c.values[i])
    return iter(parts)


def _unbind(c: _Call):
    dim = c.args[1] if len(c.args) > 1 else c.kwargs.get("dim", 0)
    parts = c.func(*c.args, **c.kwargs)
    moved = np.moveaxis(c.values, dim, 0)
    for i, part in enumerate(parts):
        c.mode.record(part, moved[i])
    return parts


def _getitem(c: _Call):
    index = c.mode.substitute(c.args[1])
    if any(isinstance(i, torch.Tensor) for i in (index if isinstance(index, tuple) else (index,))):
        return NotImplemented
    return c.record(c.func(c.first, index), c.values[index])


def _select(c: _Call):
    dim, index = c.mode.substitute(c.args[1]), c.mode.substitute(c.args[2])
    return c.record(c.func(c.first, dim, index), np.take(c.values, index, axis=dim))


def _binary(c: _Call):
    if len(c.args) != 2 or c.kwargs:
        return NotImplemented
    a, b = _operand(c.mode, c.args[0]), _operand(c.mode, c.args[1])
    if a is None or b is None:
        return NotImplemented
    op = np.frompyfunc(_BINARY.get(c.name) or _REVERSED[c.name], 2, 1)
    out = c.func(*c.args)
    return c.record(out, op(b, a) if c.name in _REVERSED else op(a, b))


def _reduce(c: _Call):
    dim = c.args[1] if len(c.args) > 1 else c.kwargs.get("dim")
    if c.kwargs.get("keepdim") or (len(c.args) > 2 and c.name != "cumsum"):
        return NotImplemented
    ufunc = np.frompyfunc(_REDUCE.get(c.name, operator.add), 2, 1)
    out = c.func(*c.args, **c.kwargs)
    values = c.values
    if c.name == "cumsum":
        result = ufunc.accumulate(values, axis=dim) if values.ndim else values
    elif dim is None:
        result = ufunc.reduce(values.reshape(-1)) if values.size else 0
    else:
        result = ufunc.reduce(values, axis=dim)
    return c.record(out, result)


def _new_filled(c: _Call):
    out = c.func(*c.args, **c.kwargs)
    return c.record(out, np.full(tuple(out.shape), int(c.name == "new_ones"), dtype=object))


def _same(c: _Call):
    return c.record(c.func(*c.args, **c.kwargs), c.values)


def _flip(c: _Call):
    dims = c.args[1] if len(c.args) > 1 else c.kwargs.get("dims")
    return c.record(c.func(*c.args, **c.kwargs), np.flip(c.values, axis=tuple(dims)))


def _reshape(c: _Call):
    out = c.func(*c.args, **c.kwargs)
    if all(isinstance(n, int) for n in out.shape):
        return c.record(out, c.values.reshape(tuple(out.shape)))
    return out


#: (function names, handler), in the order :func:`propagate` asks them (the first that names the call).
_HANDLERS: tuple[tuple[Any, Callable[[_Call], Any]], ...] = (
    (_READ, _read),
    (("_is_all_true", "all", "any"), _all_true),
    (("tolist",), _tolist),
    (("__iter__",), _iter),
    (("unbind",), _unbind),
    (("__getitem__",), _getitem),
    (("select",), _select),
    ((*_BINARY, *_REVERSED), _binary),
    ((*_REDUCE, "cumsum"), _reduce),
    (("new_zeros", "new_ones"), _new_filled),
    (_SAME, _same),
    (("flip",), _flip),
    (("reshape", "view", "flatten"), _reshape),
)
