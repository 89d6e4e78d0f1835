"""More ATen gap fillers: what Hugging Face deformable detectors call and torch's exporters lack.

Registered through :data:`deform_onnx.exporters.aten_gaps.SYMBOLICS` (TorchScript) and
:func:`dynamo_translations` (the dynamo table), each only where torch has none:

- ``aten::scaled_dot_product_attention`` at opsets 11-13 (torch's TorchScript
  symbolic starts at 14): transformers' default ``attn_implementation="sdpa"``
  (RT-DETR, Deformable DETR, DINO, Grounding DINO decoders' self-attention).
- ``aten::isin``, ``aten::cummax`` and ``aten::cummin`` at every opset, both exporters (torch
  has none): Grounding DINO's ``generate_masks_with_special_tokens_and_transfer_map``.
- ``aten::eye`` with ``dtype=torch.bool`` (TorchScript): torch writes a bool ``EyeLike`` that
  ONNX Runtime cannot run; here ``EyeLike`` in float, then ``Cast``.
- ``aten::_upsample_bicubic2d_aa`` / ``aten::_upsample_bilinear2d_aa`` at every
  TorchScript opset (``F.interpolate(..., antialias=True)``; RF-DETR's
  backbone): two ``MatMul`` by weight matrices computed as ATen's kernels do, so static H/W only;
  a dynamic size is a one-line :class:`~deform_onnx.core.errors.ExportError` (:mod:`.resize_aa_refusal`).
- ``aten._is_all_true`` in the dynamo table (RT-DETRv2, D-FINE, OneFormer:
  transformers' ``torch_compilable_check``, i.e. ``torch._check_tensor_all``, which torch.export records).
"""

from __future__ import annotations

import math

import numpy as np

from ..builder import Builder, Value
from ..core.errors import ExportError
from .resize_aa_refusal import resize_aa_refusal


# -- scaled_dot_product_attention ------------------------------------------------------------
def emit_sdpa(
    b: Builder,
    query: Value,
    key: Value,
    value: Value,
    attn_mask: Value | None,
    mask_is_bool: bool,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> Value:
    """``F.scaled_dot_product_attention`` as ``MatMul``/``Softmax``/``MatMul`` (ONNX opset 11+).

    Shapes: ``query [..., Hq, L, E]``, ``key [..., Hk, S, E]``, ``value [..., Hk, S, Ev]`` ->
    ``[..., Hq, L, Ev]``; ``attn_mask`` broadcastable to ``[..., Hq, L, S]``, boolean (``True``
    takes part) or of the query's float dtype (added to the scores). Semantics from ATen's math
    path (``aten/src/ATen/native/transformers/attention.cpp``): ``scale`` defaults to
    ``1/sqrt(E)`` and multiplies query and key by ``sqrt(scale)`` each; ``is_causal`` keeps
    ``j <= i`` (``ones(L, S).tril()``); ``enable_gqa`` repeats each key/value head
    ``Hq/Hk`` times (``repeat_interleave`` on axis -3); a row with every score masked gives
    zeros (ATen's ``_safe_softmax``), not NaN.

    Raises:
        ValueError: ``dropout_p != 0`` (random at run time: export in eval mode or with
            dropout 0), ``is_causal`` together with a mask, an unknown rank, or
            ``enable_gqa`` with head counts that are unknown or do not divide.
    """
    if dropout_p != 0:
        raise ValueError(
            f"scaled_dot_product_attention with dropout_p={dropout_p} cannot be exported (random at run time); "
            "export the model in eval mode (model.eval()) or pass dropout_p=0"
        )
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: is_causal and attn_mask cannot both be set (as in PyTorch)")
    q_shape, k_shape = b.static_shape(query), b.static_shape(key)
    if q_shape is None or k_shape is None:
        raise ValueError("scaled_dot_product_attention: the rank of query and key must be known at export")
    rank = len(k_shape)
    if enable_gqa and rank >= 3:
        hq, hk = q_shape[-3], k_shape[-3]
        if hq is None or hk is None or hq % hk:
            raise ValueError(
                f"scaled_dot_product_attention(enable_gqa=True): query heads {hq} must be a known multiple "
                f"of key heads {hk}"
            )
        if hq != hk:
            key, value = (_repeat_heads(b, t, hq // hk) for t in (key, value))
    if scale is None:
        e = q_shape[-1]
        if e is None:
            e_f = b.op("Cast", b.dim(query, len(q_shape) - 1), to=1)
            root = b.op("Sqrt", b.op("Reciprocal", b.op("Sqrt", e_f)))  # sqrt(1/sqrt(E))
            root = b.cast_like(root, query)
        else:
            root = b.float_const(math.sqrt(1.0 / math.sqrt(e)), query)
    else:
        root = b.float_const(math.sqrt(scale), query)
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    scores = b.op("MatMul", b.op("Mul", query, root), b.op("Mul", b.op("Transpose", key, perm=perm), root))
    if is_causal:
        attn_mask, mask_is_bool = _causal_mask(b, query, key, q_shape, k_shape), True
    if attn_mask is not None:
        if mask_is_bool:
            attn_mask = b.op("Where", attn_mask, b.float_const(0.0, query), b.float_const(-np.inf, query))
        scores = b.op("Add", scores, attn_mask)
    weights = b.op("Softmax", scores, axis=-1)  # last axis: opset 11's 2-D coercion is the same softmax
    if attn_mask is not None:  # _safe_softmax: a fully masked row (all -inf) gives 0, not NaN
        weights = b.op("Where", b.op("IsNaN", weights), b.float_const(0.0, query), weights)
    return b.op("MatMul", weights, value)


def _repeat_heads(b: Builder, x: Value, n: int) -> Value:
    """``x.repeat_interleave(n, dim=-3)`` for ``[..., H, S, E]`` (static H)."""
    shape = b.static_shape(x)
    assert shape is not None  # emit_sdpa checked the rank
    rank = len(shape)
    dims = [b.dim(x, i) for i in range(rank)]
    wide = b.unsqueeze(x, [rank - 2])  # [..., H, 1, S, E]
    target = dims[:-2] + [n] + dims[-2:]
    wide = b.op("Expand", wide, b.shape_vector(target))
    return b.reshape(wide, dims[:-3] + [b.mul_dim(dims[-3], n)] + dims[-2:])


def _causal_mask(b: Builder, query, key, q_shape, k_shape) -> Value:
    """Boolean ``[L, S]``, ``True`` where ``j <= i`` (``torch.ones(L, S, dtype=bool).tril()``)."""
    length, source = q_shape[-2], k_shape[-2]
    if length is not None and source is not None:
        return b.const(np.tril(np.ones((length, source), dtype=bool)))
    rows = b.op("Range", b.i64(0), b.scalar(b.dim(query, len(q_shape) - 2)), b.i64(1))
    cols = b.op("Range", b.i64(0), b.scalar(b.dim(key, len(k_shape) - 2)), b.i64(1))
    return b.op("Not", b.op("Greater", b.unsqueeze(cols, [0]), b.unsqueeze(rows, [1])))


def _sdpa_symbolic(g, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    from torch.onnx import symbolic_helper as sh

    from ..builder.torchscript import TorchScriptBuilder, _keep_error_one_line

    mask = None if sh._is_none(attn_mask) else attn_mask
    mask_is_bool = mask is not None and mask.type().scalarType() == "Bool"
    scale_v = None if scale is None or sh._is_none(scale) else float(sh._maybe_get_const(scale, "f"))
    try:
        return emit_sdpa(
            TorchScriptBuilder(g),
            query,
            key,
            value,
            mask,
            mask_is_bool,
            float(sh._maybe_get_const(dropout_p, "f")),
            bool(sh._maybe_get_const(is_causal, "b")),
            scale_v,
            bool(sh._maybe_get_const(enable_gqa, "b")) if not isinstance(enable_gqa, bool) else enable_gqa,
        )
    except ValueError as exc:
        _keep_error_one_line(exc, g)
        raise


# -- isin --------------------------------------------------------------------------------------
def emit_isin(b: Builder, elements: Value, test_elements: Value, invert: bool) -> Value:
    """``torch.isin(elements, test_elements, invert=invert)``: boolean, ``elements``' shape.

    ``out[i] = any(elements[i] == test_elements.flatten())`` (``not`` of it with
    ``invert``): one ``Equal`` of ``elements[..., None]`` against the flattened
    test elements, reduced over the last axis. ``assume_unique`` changes only
    torch's algorithm, not the result. Semantics from ``torch.isin``.
    """
    flat = b.op("Reshape", test_elements, b.i64([-1]))
    want, have = b.value_dtype(elements), b.value_dtype(flat)
    if want is not None and have is not None and want != have:
        flat = b.cast_like(flat, elements)
    hits = b.op("Cast", b.op("Equal", b.unsqueeze(elements, [-1]), flat), to=6)  # int32: ReduceMax has no bool
    if b.opset >= 18:
        found = b.op("ReduceMax", hits, b.i64([-1]), keepdims=0)
    else:
        found = b.op("ReduceMax", hits, axes=[-1], keepdims=0)
    found = b.op("Cast", found, to=9)
    return b.op("Not", found) if invert else found


def _isin_symbolic(g, elements, test_elements, assume_unique=False, invert=False):
    from torch.onnx import symbolic_helper as sh

    from ..builder.torchscript import TorchScriptBuilder

    return emit_isin(TorchScriptBuilder(g), elements, test_elements, bool(sh._maybe_get_const(invert, "b")))


# -- cummax / cummin ----------------------------------------------------------------------------
def emit_cum_extreme(b: Builder, x: Value, dim: int, largest: bool, dtype) -> tuple[Value, Value]:
    """``torch.cummax(x, dim)`` (``largest``) or ``torch.cummin``: ``(values, indices)``, ``x``'s shape.

    ``values[..., i, ...] = max_{j <= i} x[..., j, ...]``, ``indices`` (int64) the last ``j``
    reaching it (ATen's ``cummax_cummin_helper`` keeps ``>=`` / ``<=`` matches: ties take the
    later index). As ``n x n`` masked reductions over ``dim`` (``n`` its size; Grounding DINO
    calls it over the text tokens, a few hundred at most). ``dtype`` (numpy) picks the fill
    value of the masked entries (the dtype's lowest/highest, ``-inf``/``inf`` for floats).
    NaN is not propagated as ATen does.

    Raises:
        ValueError: unknown rank.
    """
    shape = b.static_shape(x)
    if shape is None:
        raise ValueError("cummax/cummin: the input's rank must be known at export")
    rank = len(shape)
    d = dim % rank if rank else 0
    if rank == 0:
        return x, b.i64(0)
    n = shape[d]
    dt = np.dtype(dtype)
    info = np.finfo(dt) if dt.kind == "f" else np.iinfo(dt)
    fill = (-np.inf if largest else np.inf) if dt.kind == "f" else (info.min if largest else info.max)
    trailing = list(range(2, 2 + rank - 1 - d))
    if n is not None:
        lower = np.tril(np.ones((n, n), dtype=bool))
        mask = b.const(lower.reshape(lower.shape + (1,) * len(trailing)))
        cols = b.i64(np.arange(n).reshape((1, n) + (1,) * len(trailing)))
    else:
        size = b.scalar(b.dim(x, d))
        rng = b.op("Range", b.i64(0), size, b.i64(1))
        mask = b.op("Not", b.op("Greater", b.unsqueeze(rng, [0]), b.unsqueeze(rng, [1])))
        cols = b.unsqueeze(rng, [0])
        if trailing:
            mask, cols = b.unsqueeze(mask, trailing), b.unsqueeze(cols, trailing)
    wide = b.unsqueeze(x, [d])  # axis d: i (output position), axis d + 1: j (input position)
    filled = b.op("Where", mask, wide, b.const(np.asarray(fill, dtype=dt)))
    reduce = "ReduceMax" if largest else "ReduceMin"
    values = _reduce(b, reduce, filled, d + 1)
    hit = b.op("And", mask, b.op("Equal", filled, b.unsqueeze(values, [d + 1])))
    indices = _reduce(b, "ReduceMax", b.op("Where", hit, cols, b.i64(-1)), d + 1)
    return values, indices


def _reduce(b: Builder, op: str, x: Value, axis: int) -> Value:
    if b.opset >= 18:
        return b.op(op, x, b.i64([axis]), keepdims=0)
    return b.op(op, x, axes=[axis], keepdims=0)


_TS_DTYPES = {"Long": np.int64, "Int": np.int32, "Float": np.float32, "Double": np.float64, "Half": np.float16}


def _make_cum_symbolic(largest: bool):
    def symbolic(g, self, dim):
        from torch.onnx import symbolic_helper as sh

        from ..builder.torchscript import TorchScriptBuilder, _keep_error_one_line

        try:
            dtype = _TS_DTYPES.get(self.type().scalarType())
            if dtype is None:
                raise ValueError(f"cummax/cummin of {self.type().scalarType()} tensors is not supported here")
            return emit_cum_extreme(TorchScriptBuilder(g), self, int(sh._maybe_get_const(dim, "i")), largest, dtype)
        except ValueError as exc:
            _keep_error_one_line(exc, g)
            raise

    return symbolic


# -- eye(dtype=bool) ----------------------------------------------------------------------------
def _eye_symbolic(g, *args):
    """``torch.eye(n[, m], dtype=torch.bool)`` as ``EyeLike`` in float then ``Cast`` to bool.

    torch's own symbolic writes a bool ``EyeLike``, which ONNX Runtime has no kernel for
    (Grounding DINO's text attention mask: ``torch.eye(seq_len, dtype=torch.bool)``);
    other dtypes go to torch's symbolic unchanged.
    """
    from torch.onnx import symbolic_helper as sh
    from torch.onnx._internal.torchscript_exporter import symbolic_opset9

    given = list(args)
    dtype_at = len(given) - 4  # (n[, m], dtype, layout, device, pin_memory)
    if dtype_at < 1 or sh._is_none(given[dtype_at]) or sh._maybe_get_const(given[dtype_at], "i") != 11:
        return symbolic_opset9.eye(g, *given)  # 11: c10::ScalarType::Bool
    given[dtype_at] = g.op("Constant", value_t=_torch_tensor(6))  # c10::ScalarType::Float
    return g.op("Cast", symbolic_opset9.eye(g, *given), to_i=9)


def _torch_tensor(value):
    import torch

    return torch.tensor(value)


# -- antialiased resize ------------------------------------------------------------------------
def _filter_bilinear(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0).astype(x.dtype)


def _filter_bicubic(x: np.ndarray) -> np.ndarray:
    # ATen's aa filter uses a = -0.5 (PIL's), not the -0.75 of the plain bicubic resize.
    a = x.dtype.type(-0.5)
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0)).astype(x.dtype)


#: mode -> (interpolation size, filter): ATen's ``HelperInterpLinear`` / ``HelperInterpCubic``.
_AA_FILTERS = {"bilinear": (2, _filter_bilinear), "bicubic": (4, _filter_bicubic)}


def aa_weights(
    mode: str, in_size: int, out_size: int, align_corners: bool, scale: float | None, dtype=np.float32
) -> np.ndarray:
    """``[out_size, in_size]`` weights of one axis of ATen's antialiased resize.

    As ``_compute_weights_aa`` in ``aten/src/ATen/native/cpu/UpSampleKernel.cpp``,
    in the input's floating dtype: ``scale = area_pixel_compute_scale(...)``
    (``(in-1)/(out-1)`` with ``align_corners``, else ``1/scale`` if a scale
    factor was given, else ``in/out``); ``support = interp_size/2 * max(scale, 1)``;
    output ``i`` takes inputs ``[xmin, xmin + xsize)`` around
    ``center = scale * (i + 0.5)`` with ``filter((j - center + 0.5) / max(scale, 1))``,
    normalised to sum 1.
    """
    t = np.dtype(dtype).type
    interp, flt = _AA_FILTERS[mode]
    if align_corners:
        sc = t((in_size - 1) / (out_size - 1)) if out_size > 1 else t(0.0)
    elif scale is not None and scale > 0:
        sc = t(1.0 / scale)
    else:
        sc = t(in_size) / t(out_size)
    support = t(interp * 0.5) * sc if sc >= 1.0 else t(interp * 0.5)
    invscale = t(1.0) / sc if sc >= 1.0 else t(1.0)
    w = np.zeros((out_size, in_size), dtype=dtype)
    for i in range(out_size):
        center = sc * t(i + 0.5)
        xmin = max(int(center - support + t(0.5)), 0)
        xsize = min(int(center + support + t(0.5)), in_size) - xmin
        j = np.arange(xsize, dtype=dtype)
        vals = flt(((j + t(xmin)) - center + t(0.5)) * invscale)
        total = vals.sum(dtype=dtype)
        if total != 0:
            vals = vals / total
        w[i, xmin : xmin + xsize] = vals
    return w


def emit_resize_aa(
    b: Builder,
    x: Value,
    mode: str,
    out_hw: tuple[int, int],
    align_corners: bool,
    scales: tuple[float | None, float | None],
    in_shape=None,
) -> Value:
    """``F.interpolate(x, mode=mode, antialias=True)`` on ``[N, C, H, W]`` -> ``[N, C, Ho, Wo]``.

    A separable filter with data-independent weights: ``Wh [Ho, H] @ x @ Ww[Wo, W]^T``
    (two ``MatMul``, weights from :func:`aa_weights`), width first as ATen does.
    ``in_shape``: the input's sizes where the builder has lost them (traced sizes of a graph
    without dynamic axes).

    Raises:
        ValueError: input rank not 4.
        ExportError: a dynamic input H/W (the weights are computed at export):
            :func:`~deform_onnx.exporters.resize_aa_refusal.resize_aa_refusal`'s line.
    """
    seen = b.static_shape(x)
    shape = seen
    if shape is None or len(shape) != 4 or shape[2] is None or shape[3] is None:
        shape = in_shape  # the traced sizes, where the graph has no dynamic axis (``_traced_sizes``)
    if shape is None or len(shape) != 4 or shape[2] is None or shape[3] is None:
        if seen is not None and len(seen) != 4:
            raise ValueError(f"antialiased {mode} resize needs a 4-D [N, C, H, W] input, got rank {len(seen)}")
        raise ExportError(resize_aa_refusal(mode, "input", seen))
    dt = b.value_dtype(x) or np.dtype(np.float32)
    h, w = shape[2], shape[3]
    wh = aa_weights(mode, h, out_hw[0], align_corners, scales[0], dt)
    ww = aa_weights(mode, w, out_hw[1], align_corners, scales[1], dt)
    y = b.op("MatMul", x, b.const(np.ascontiguousarray(ww.T)))  # [N, C, H, Wo]
    return b.op("MatMul", b.const(wh), y)  # [Ho, H] @ [N, C, H, Wo] -> [N, C, Ho, Wo]


def _traced_sizes(g, output: bool, index: int = 0) -> list[int] | None:
    """Sizes of the traced node's input/output ``index`` when every graph input has a static shape.

    transformers computes resize sizes from the image's shape (RF-DETR's position embedding:
    ``size=(new_height, new_width)`` after a reshape chain that ONNX shape inference loses);
    the trace records them as ``Shape`` arithmetic. With no dynamic axis anywhere in the
    graph, the traced sizes are the only ones the file will see. ``None`` otherwise.
    """
    node = getattr(g, "original_node", None)
    if node is None:
        return None
    try:
        for value in g.graph.inputs():  # the model's inputs and parameters
            sizes = value.type().varyingSizes() if value.type().kind() == "TensorType" else []
            if sizes is None or any(d is None for d in sizes):
                return None
        values = list(node.outputs() if output else node.inputs())
        sizes = values[index].type().varyingSizes()
    except (AttributeError, RuntimeError, IndexError):
        return None
    if sizes is None or any(d is None for d in sizes):
        return None
    return [int(d) for d in sizes]


def _make_resize_aa_symbolic(mode: str):
    def symbolic(g, input, output_size, align_corners, *scales):
        # Two overloads: (..., scales_h, scales_w) with an output size, and ``.vec``
        # (..., scale_factors) with output_size None (F.interpolate(scale_factor=...)).
        from torch.onnx import symbolic_helper as sh

        from ..builder.torchscript import TorchScriptBuilder, _keep_error_one_line

        def opt_float(v):
            if v is None or sh._is_none(v):
                return None
            return float(sh._maybe_get_const(v, "f"))

        b = TorchScriptBuilder(g)
        try:
            if len(scales) == 1:  # .vec: sizes floor(in * factor), as ATen's compute_output_size
                factors = None if sh._is_none(scales[0]) else sh._maybe_get_const(scales[0], "fs")
                shape = b.static_shape(input)
                if sh._is_none(output_size) and isinstance(factors, (list, tuple)) and shape and None not in shape[2:]:
                    output_size = [int(shape[2] * factors[0]), int(shape[3] * factors[1])]
                    scale_hw: tuple[float | None, float | None] = (float(factors[0]), float(factors[1]))
                else:
                    output_size, scale_hw = sh._maybe_get_const(output_size, "is"), (None, None)
            else:
                output_size = sh._maybe_get_const(output_size, "is")
                scale_hw = (opt_float(scales[0]), opt_float(scales[1])) if scales else (None, None)
            if not isinstance(output_size, (list, tuple)) or len(output_size) != 2:
                traced = _traced_sizes(g, output=True)
                output_size = traced[2:] if traced is not None and len(traced) == 4 else None
            if output_size is None:
                seen = b.static_shape(input)
                static_in = seen is not None and len(seen) == 4 and None not in seen[2:]
                raise ExportError(resize_aa_refusal(mode, "output" if static_in else "input", seen))
            return emit_resize_aa(
                b,
                input,
                mode,
                (int(output_size[0]), int(output_size[1])),
                bool(sh._maybe_get_const(align_corners, "b")),
                scale_hw,
                _traced_sizes(g, output=False),
            )
        except (ValueError, ExportError) as exc:
            _keep_error_one_line(exc, g)
            raise

    return symbolic


def torchscript_symbolics(min_opset: int, max_opset: int) -> dict:
    """TorchScript op name -> (symbolic, opsets) for :data:`.aten_gaps.SYMBOLICS`."""
    every = range(min_opset, max_opset + 1)
    return {
        "aten::scaled_dot_product_attention": (_sdpa_symbolic, range(min_opset, 14)),
        "aten::isin": (_isin_symbolic, every),
        "aten::cummax": (_make_cum_symbolic(True), every),
        "aten::cummin": (_make_cum_symbolic(False), every),
        "aten::eye": (_eye_symbolic, every),
        "aten::_upsample_bicubic2d_aa": (_make_resize_aa_symbolic("bicubic"), every),
        "aten::_upsample_bilinear2d_aa": (_make_resize_aa_symbolic("bilinear"), every),
    }


# -- dynamo ------------------------------------------------------------------------------------
def dynamo_translations(build_opset, builder_cls) -> dict:
    """``torch.ops.aten`` overloads -> onnxscript translations for what torchlib lacks.

    ``build_opset(default)`` reads the opset being built, ``builder_cls(opset)`` is the
    :class:`Builder` over onnxscript's evaluator (both from :mod:`.dynamo`).
    """
    import torch

    def is_all_true(self):
        """``aten._is_all_true(self) -> bool[]``: ``self.all()`` (``True`` for an empty tensor)."""
        b = builder_cls(build_opset(18))
        as_int = b.op("Cast", self, to=6)  # int32: ReduceMin has no bool
        return b.op("Cast", b.op("ReduceMin", as_int, keepdims=0), to=9)  # no axes: all of them

    def isin(elements, test_elements, assume_unique: bool = False, invert: bool = False):
        return emit_isin(builder_cls(build_opset(18)), elements, test_elements, invert)

    def cum(largest):
        def fn(self, dim: int):
            b = builder_cls(build_opset(18))
            return emit_cum_extreme(b, self, dim, largest, b.value_dtype(self))

        return fn

    aten = torch.ops.aten
    return {
        aten._is_all_true.default: is_all_true,
        aten.isin.Tensor_Tensor: isin,
        aten.cummax.default: cum(True),
        aten.cummin.default: cum(False),
    }
