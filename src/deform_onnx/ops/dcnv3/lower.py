"""DCNv3 (InternImage) lowered onto the grid_sample samplers: standard ops only.

The same computation as :func:`deform_onnx.ops.dcnv3.dcnv3_core` (see there
for the formula and sources), written against the :class:`~.builder.Builder`
so the file rewriter (mmdeploy's ``TRTDCNv3`` node, :mod:`deform_onnx.ops.dcnv3.sources`)
emits it: zero-pad the NHWC input, per group and kernel point the pixel
position ``centre + (spread + offset) * offset_scale``, normalised for
``grid_sample`` (``align_corners=False``), one sampler call on the
``[N*G, group_channels, Hp, Wp]`` map with a ``[N*G, Ho*Wo, P, 2]`` grid, the
mask as given (mmdeploy's kernel does not softmax it), a sum over the points.

The sampler is the ``grid_sample`` op's lowering that ``method`` resolves to
(:mod:`deform_onnx.ops.registry`): one ``GridSample`` (opset >= 16) or the gather form (>= 11).
Coordinates are computed in the input's dtype (mmdeploy's plugin is float32-only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...builder import Builder, Value
from ..grid_sample.lower import GridSampleSpec


def kernel_points(
    kernel_h: int, kernel_w: int, dilation_h: int, dilation_w: int, remove_center: bool = False
) -> list[tuple[int, int]]:
    """The kernel's ``(dx, dy)`` pixel offsets from its centre, in InternImage's order (x outer, y inner).

    Raises:
        ValueError: ``remove_center`` with a kernel that is not square and odd (InternImage's rule).
    """
    if remove_center and (kernel_h % 2 == 0 or kernel_w % 2 == 0 or kernel_h != kernel_w):
        raise ValueError(
            f"DCNv3 remove_center needs a square odd kernel, got {kernel_h}x{kernel_w}; use remove_center=False"
        )
    cw, ch = dilation_w * (kernel_w - 1) // 2, dilation_h * (kernel_h - 1) // 2
    points = [(i * dilation_w - cw, j * dilation_h - ch) for i in range(kernel_w) for j in range(kernel_h)]
    if remove_center:
        del points[len(points) // 2]  # the centre of a square odd kernel, InternImage's index (K*K - 1) // 2
    return points


@dataclass(frozen=True)
class DCNv3Spec:
    """Static arguments of one DCNv3 sampling (InternImage's names; ``im2col_step`` has no effect on values).

    Raises:
        ValueError: a kernel, stride, dilation, group or group_channels below 1, a negative pad,
            or ``remove_center`` with a kernel that is not square and odd.
    """

    kernel_h: int = 3
    kernel_w: int = 3
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 1
    pad_w: int = 1
    dilation_h: int = 1
    dilation_w: int = 1
    group: int = 1
    group_channels: int = 16
    offset_scale: float = 1.0
    remove_center: bool = False

    def __post_init__(self):
        for name in (
            "kernel_h",
            "kernel_w",
            "stride_h",
            "stride_w",
            "dilation_h",
            "dilation_w",
            "group",
            "group_channels",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"DCNv3 {name}={getattr(self, name)} must be >= 1")
        if self.pad_h < 0 or self.pad_w < 0:
            raise ValueError(f"DCNv3 pads ({self.pad_h}, {self.pad_w}) must be >= 0")
        self.points()  # checks remove_center

    def points(self) -> list[tuple[int, int]]:
        """Kernel spread ``(dx, dy)`` per point, InternImage's order (:func:`kernel_points`)."""
        return kernel_points(self.kernel_h, self.kernel_w, self.dilation_h, self.dilation_w, self.remove_center)


def lower_dcnv3(b: Builder, spec: DCNv3Spec, x: Value, offset: Value, mask: Value, *, sampler) -> Value:
    """DCNv3 sampling with ``sampler(b, GridSampleSpec, map, grid)`` (a grid_sample lowering).

    Args:
        x: ``[N, H, W, group * group_channels]`` (NHWC).
        offset: ``[N, Ho, Wo, group * P * 2]`` (``(dx, dy)`` per group and point).
        mask: ``[N, Ho, Wo, group * P]``, used as given.

    Returns:
        ``[N, Ho, Wo, group * group_channels]``; ``Ho``, ``Wo`` are read from ``offset``.
    """
    G, gc = spec.group, spec.group_channels
    points = spec.points()
    P = len(points)
    C = G * gc
    H, W = b.dim(x, 1), b.dim(x, 2)
    Ho, Wo = b.dim(offset, 1), b.dim(offset, 2)
    Hp, Wp = b.add_dim(H, 2 * spec.pad_h), b.add_dim(W, 2 * spec.pad_w)
    pads = b.i64([0, spec.pad_h, spec.pad_w, 0, 0, spec.pad_h, spec.pad_w, 0])
    padded = b.op("Pad", x, pads) if spec.pad_h or spec.pad_w else x
    value = b.op("Transpose", b.reshape(padded, [0, Hp, Wp, G, gc]), perm=[0, 3, 4, 1, 2])
    value = b.reshape(value, [-1, gc, Hp, Wp])  # [N*G, gc, Hp, Wp]

    # Kernel centres of the outputs in the padded map, in pixels.
    cx = _centres(b, Wo, spec.stride_w, spec.dilation_w * (spec.kernel_w - 1) // 2, x)
    cy = _centres(b, Ho, spec.stride_h, spec.dilation_h * (spec.kernel_h - 1) // 2, x)
    off = b.reshape(offset, [0, 0, 0, G, P, 2])
    spread = b.float_const(np.asarray(points, dtype=np.float64), x)  # [P, 2]
    delta = b.op("Mul", b.op("Add", off, spread), b.float_const(spec.offset_scale, x))
    px = b.op("Add", b.op("Gather", delta, b.i64(0), axis=5), b.reshape(cx, [1, 1, -1, 1, 1]))
    py = b.op("Add", b.op("Gather", delta, b.i64(1), axis=5), b.reshape(cy, [1, -1, 1, 1, 1]))
    # grid_sample's align_corners=False normalisation: pixel p -> (2p + 1) / size - 1.
    gx, gy = _normalise(b, px, Wp, x), _normalise(b, py, Hp, x)
    grid = b.op("Concat", b.reshape(gx, [0, 0, 0, 0, 0, 1]), b.reshape(gy, [0, 0, 0, 0, 0, 1]), axis=5)
    HW = b.mul_dim(Ho, Wo)
    grid = b.reshape(b.op("Transpose", grid, perm=[0, 3, 1, 2, 4, 5]), [-1, HW, P, 2])
    # Casts the builder remembers: the sampler reads the map's and grid's dtypes, which new values lack in
    # the file rewriter's adapter (same-type Casts; runtimes drop them).
    value, grid = b.cast_like(value, x), b.cast_like(grid, x)
    sampled = sampler(b, GridSampleSpec("bilinear", "zeros", False), value, grid)  # [N*G, gc, Ho*Wo, P]
    weight = b.op("Transpose", b.reshape(mask, [0, -1, G, P]), perm=[0, 2, 1, 3])
    weight = b.reshape(weight, [-1, 1, HW, P])
    out = b.reduce_sum(b.op("Mul", sampled, weight), [3], keepdims=0)
    out = b.op("Transpose", b.reshape(out, [-1, C, HW]), perm=[0, 2, 1])
    return b.reshape(out, [-1, Ho, Wo, C])


def _centres(b: Builder, size, stride: int, first: int, like: Value) -> Value:
    """``first + stride * i`` for ``i`` in ``range(size)``, 1-D, in ``like``'s dtype (Range on int64, then Cast)."""
    i = b.op("Range", b.i64(0), b.scalar(size), b.i64(1))
    return b.cast_like(b.op("Add", b.op("Mul", i, b.i64(stride)), b.i64(first)), like)


def _normalise(b: Builder, p: Value, size, like: Value) -> Value:
    """``(2p + 1) / size - 1``: the grid_sample coordinate of pixel ``p`` (align_corners=False)."""
    s = b.float_const(float(size), like) if isinstance(size, int) else b.cast_like(b.scalar(size), like)
    one = b.float_const(1.0, like)
    return b.op("Sub", b.op("Div", b.op("Add", b.op("Add", p, p), one), s), one)
