"""TorchScript symbolics for ``F.pad`` (``aten::pad``, ``aten::constant_pad_nd``) that write constant pads.

torch's own (``symbolic_opset11``, opset >= 11) builds a ``Pad``'s pads in the graph from the padding list:
``Concat(pads, ConstantOfShape(...))``, ``Reshape``, ``Slice``, ``Transpose``, ``Reshape``, ``Cast``, even
when the list is constant, and its constant folding keeps the ``ConstantOfShape``. Its per-node shape
inference then has no sizes for the ``Pad``'s output nor anything after it, so a deformable call after an
``F.pad`` saw a map of unknown size: ``deform_conv2d`` took the dynamic-map sampler (a fully static model
too), the ``grid_sample`` of a DCNv3 / DCNv4 layer (which pads its input) wrote its gather form with bounds
computed at run time (target ``onnx2torch`` refused: "Dynamic value of min/max"), and TVM refused the
``Pad`` itself ("Dynamic pads are not supported yet").

Here a ``constant``, ``reflect`` or ``replicate`` pad whose list is Python ints and whose input rank is
known is one ``Pad`` with a constant ``int64`` pads tensor (ONNX order: every axis' begin, then every end;
PyTorch's list starts at the last axis) and the mode torch writes (``constant``, ``reflect``, ``edge``), so
the exporter infers its output's sizes; the same node as torch's after folding (negative pads crop in both).
Anything else (``circular``, a padding computed in the graph, an unknown rank) is torch's own symbolic.
"""

from __future__ import annotations

#: Lowest opset of these symbolics: torch's opset-9/10 ones write ``Pad-2`` with a ``pads`` attribute already.
MIN_OPSET = 11


def onnx_pads(padding: list[int], rank: int) -> list[int]:
    """PyTorch's ``F.pad`` list (last axis first, ``(begin, end)`` pairs) as ONNX ``Pad``'s ``pads`` for ``rank`` axes.

    Raises:
        ValueError: an odd-length list, or one that pads more axes than ``rank``.
    """
    if len(padding) % 2 or len(padding) // 2 > rank:
        raise ValueError(
            f"F.pad: padding {list(padding)} must hold (begin, end) pairs for at most {rank} axes (the input's rank)"
        )
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(padding) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = padding[2 * i], padding[2 * i + 1]
    return begins + ends


def _constant_list(value) -> list[int] | None:
    """The traced padding list as ints when every element is a constant, else ``None``."""
    from torch.onnx import symbolic_helper

    try:
        ints = symbolic_helper._parse_arg(value, "is")
    except (RuntimeError, TypeError, ValueError):  # an element computed in the graph (a size read with Shape)
        return None
    return [int(i) for i in ints] if isinstance(ints, list | tuple) else None


#: ``F.pad`` mode -> ONNX ``Pad`` mode, as torch's own symbolics write them (``circular`` stays torch's).
MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


def _constant_pad(g, input, padding, value, mode: str = "constant"):
    """``Pad`` with constant pads, or ``None`` where torch's symbolic must serve (see the module docstring)."""
    import torch
    from torch.onnx import symbolic_helper

    rank = symbolic_helper._get_tensor_rank(input)
    ints = _constant_list(padding)
    if rank is None or ints is None or len(ints) % 2 or len(ints) // 2 > rank:
        return None
    pads = g.op("Constant", value_t=torch.tensor(onnx_pads(ints, rank), dtype=torch.int64))
    if mode != "constant":  # torch's reflection_pad / replication_pad: no value
        return g.op("Pad", input, pads, mode_s=MODES[mode])
    value = symbolic_helper._if_scalar_type_as(symbolic_helper._maybe_get_scalar(value), input)
    return g.op("Pad", input, pads, value, mode_s="constant")


def _pad_symbolic(g, input, pad, mode, value):
    from torch.onnx import symbolic_helper
    from torch.onnx._internal.torchscript_exporter import symbolic_opset11

    name = symbolic_helper._parse_arg(mode, "s")
    if name in MODES:
        out = _constant_pad(g, input, pad, value, name)
        if out is not None:
            return out
    return symbolic_opset11.pad(g, input, pad, mode, value)


def _constant_pad_nd_symbolic(g, input, padding, value=None):
    from torch.onnx._internal.torchscript_exporter import symbolic_opset11

    out = _constant_pad(g, input, padding, value)
    return out if out is not None else symbolic_opset11.constant_pad_nd(g, input, padding, value)


def torchscript_symbolics(max_opset: int) -> dict:
    """TorchScript op name -> (symbolic, opsets) for :data:`.aten_gaps.SYMBOLICS`: opsets 11 to ``max_opset``."""
    every = range(MIN_OPSET, max_opset + 1)
    return {"aten::pad": (_pad_symbolic, every), "aten::constant_pad_nd": (_constant_pad_nd_symbolic, every)}
