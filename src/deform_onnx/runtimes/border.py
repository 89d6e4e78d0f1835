"""A border-sensitive input for ``deform-onnx check``: every sample in the 1-pixel band around the image.

Bilinear sampling rules differ only there. torchvision (and ONNX
``DeformConv``) weight each of the four corners and drop those outside the
image, so a sample at ``-1 < p < 0`` or ``size - 1 < p < size`` still takes
part of the edge pixel. OpenVINO's ``DeformableConvolution`` with
``bilinear_interpolation_pad=false`` (the default its ONNX frontend uses for
``org.openvinotoolkit::DeformableConv2D``, and possibly for ``DeformConv`` in
newer releases: issue 12) gives 0 below the image and the whole edge pixel
past its last row or column: up to ~1.4 apart on unit-scale data (measured
here, c21). Random offsets put only some samples there, so a runtime with the
other rule can pass a random check; this input puts all of them there.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BAND", "border_feeds", "border_offsets"]

#: What the border input is, for the table's caption.
BAND = "every sample in the 1-pixel band around the image, where border rules differ"


def border_offsets(spec, batch: int, size: tuple[int, int], out_size: tuple[int, int], rng) -> np.ndarray:
    """Offsets ``[N, 2*G*K, Ho, Wo]`` (float64) moving each sample into the 1-pixel band around the image.

    For each (offset group, tap, output pixel) the sample lands at a point
    ``-1 < p < 0`` or ``size - 1 < p < size`` (0.1 to 0.9 px into the band)
    along its rows, its columns, or both (drawn at random); the other axis,
    if not in the band, lands anywhere in ``[0, size - 1]``. Positions follow
    torchvision's ``p = o*stride - pad + tap*dilation + offset``, offset
    channel ``g*2K + 2k`` (dy) and ``g*2K + 2k + 1`` (dx).

    Args:
        spec: the node's :class:`~deform_onnx.ops.deform_conv.spec.DeformConvSpec`.
        batch, size, out_size: N, the input's (H, W) and the output's (Ho, Wo).
        rng: a ``numpy.random.Generator``.
    """
    (H, W), (Ho, Wo) = size, out_size
    G, K = spec.offset_groups, spec.taps
    by = (np.arange(Ho) * spec.stride[0] - spec.padding[0])[None, :, None] + np.asarray(spec.tap_rows())[:, None, None]
    bx = (np.arange(Wo) * spec.stride[1] - spec.padding[1])[None, None, :] + np.asarray(spec.tap_cols())[:, None, None]
    shape = (batch, G, K, Ho, Wo)

    def band(n: int) -> np.ndarray:
        depth = rng.uniform(0.1, 0.9, shape)
        return np.where(rng.random(shape) < 0.5, -depth, n - 1 + depth)

    which = rng.integers(0, 3, shape)  # 0: rows in the band, 1: columns, 2: both
    ty = np.where(which != 1, band(H), rng.uniform(0, H - 1, shape))
    tx = np.where(which != 0, band(W), rng.uniform(0, W - 1, shape))
    off = np.stack([ty - by, tx - bx], axis=3)  # [N, G, K, (dy, dx), Ho, Wo]
    return off.reshape(batch, 2 * G * K, Ho, Wo)


def border_feeds(model, feeds: dict[str, np.ndarray], seed: int = 0) -> tuple[dict[str, np.ndarray] | None, str]:
    """``feeds`` with each deformable node's offset (and mask) replaced so that every sample is in the band.

    Only nodes whose offset is a graph input can be steered (an offset the
    model computes is not); their masks, when graph inputs, become 1 so that
    no sample is scaled down. Other inputs stay as they are.

    Args:
        model: the ``onnx_ir.Model`` being checked.
        feeds: its inputs by name (the normal check's).

    Returns:
        ``(feeds, "")``, or ``(None, why)`` when no node's offset is a graph input.
    """
    from ..ops.deform_conv.sources import find_nodes, spec_for_node

    rng = np.random.default_rng(seed + 1)
    out = dict(feeds)
    steered = 0
    for node, src in find_nodes(model):
        spec, values = spec_for_node(node, src)
        x, offset, mask = values["input"], values["offset"], values.get("mask")
        if offset is None or offset.name not in feeds:
            continue
        N, _, Ho, Wo = feeds[offset.name].shape
        if x is not None and x.name in feeds:
            H, W = feeds[x.name].shape[2:]
        elif x is not None and x.shape is not None and all(isinstance(d, int) for d in list(x.shape)[2:]):
            H, W = list(x.shape)[2:]
        else:
            continue
        dtype = feeds[offset.name].dtype
        out[offset.name] = border_offsets(spec, N, (H, W), (Ho, Wo), rng).astype(dtype)
        if mask is not None and mask.name in feeds:
            out[mask.name] = np.ones_like(feeds[mask.name])
        steered += 1
    if not steered:
        return None, "no deformable node takes its offset as a graph input (offsets computed inside the model)"
    return out, ""
