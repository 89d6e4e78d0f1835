"""Semantics of deformable convolution, in one place.

Every lowering, exporter and the rewriter take their shape arithmetic, offset
layout and argument checks from here. The oracle is torchvision's
``torchvision.ops.deform_conv2d`` (DCNv1, and DCNv2 "modulated" with a mask,
Zhu et al. 2019); the ONNX ``DeformConv`` operator (opset 19) has the same
semantics:

* ``input``  ``[N, C, H, W]``
* ``offset`` ``[N, 2 * G * kh * kw, Ho, Wo]``; channel ``g*2K + 2k`` is the
  row displacement (dy) and ``g*2K + 2k + 1`` the column displacement (dx) of
  kernel tap ``k = i*kw + j`` for offset group ``g`` (``K = kh*kw``), in pixels.
* ``mask``   ``[N, G * kh * kw, Ho, Wo]`` (DCNv2 modulation), optional.
* ``weight`` ``[Co, C / groups, kh, kw]``, ``bias`` ``[Co]`` optional.
* Sample point of output ``(y, x)``, tap ``(i, j)``:
  ``py = y*sh - ph + i*dh + dy``, ``px = x*sw - pw + j*dw + dx``, sampled
  bilinearly; each of the four corners outside the image contributes 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.opsets import DEFORM_CONV_MIN_OPSET

#: Lowest opset any lowering supports (the gather lowering).
MIN_OPSET = DEFORM_CONV_MIN_OPSET


def out_size(size: int, kernel: int, stride: int, padding: int, dilation: int, padding_end: int | None = None) -> int:
    """Output length along one spatial axis (torchvision / ONNX Conv formula).

    ``(size + padding + padding_end - (dilation*(kernel-1) + 1)) // stride + 1``
    (``padding_end`` defaults to ``padding``: torchvision pads both sides
    equally; ONNX ``DeformConv`` pads may differ). May be ``<= 0`` when the
    kernel does not fit; :meth:`DeformConvSpec.check_input` turns that into an error.
    """
    end = padding if padding_end is None else padding_end
    return (size + padding + end - (dilation * (kernel - 1) + 1)) // stride + 1


def _pair(name: str, value) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    try:
        pair = tuple(value)
    except TypeError:
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}") from None
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return pair


@dataclass(frozen=True)
class DeformConvSpec:
    """Static description of one deformable convolution.

    Everything a lowering needs that does not depend on the spatial size or
    batch (those may be dynamic and are read from ``Shape`` at run time).

    Attributes:
        in_channels: C.
        out_channels: Co.
        kernel: ``(kh, kw)``.
        stride, padding, dilation: ``(h, w)`` pairs, in pixels; ``padding`` is
            the begin (top, left) pad, which shifts every sampling point.
        bilinear_interpolation_pad: the border rule of the bilinear sampling.
            ``True`` (torchvision, ONNX ``DeformConv``): each corner outside the
            image is 0, so a sample fades out over the 1-pixel band around it.
            ``False`` (OpenVINO's ``DeformableConvolution`` default, its
            ``org.openvinotoolkit::DeformableConv2D`` node): a sample is 0
            unless ``0 <= p < size`` on both axes, and a corner past the last
            row/column repeats it.
        padding_end: ``(bottom, right)`` pads; ``None`` means equal to
            ``padding`` (torchvision). Only the output size depends on it
            (ONNX ``DeformConv`` ``pads = [top, left, bottom, right]``).
        groups: convolution groups (``C % groups == 0``, ``Co % groups == 0``).
        offset_groups: G, the number of offset groups (``C % G == 0``).
        has_mask: DCNv2 modulation mask present.
        has_bias: bias present.

    Raises:
        ValueError: from :meth:`validate` (called on construction) when an
            argument is out of range; the message names the argument and fix.
    """

    in_channels: int
    out_channels: int
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    offset_groups: int = 1
    has_mask: bool = False
    has_bias: bool = True
    padding_end: tuple[int, int] | None = None
    bilinear_interpolation_pad: bool = True

    def __post_init__(self):
        for name in ("kernel", "stride", "padding", "dilation"):
            object.__setattr__(self, name, _pair(name, getattr(self, name)))
        end = self.padding if self.padding_end is None else _pair("padding_end", self.padding_end)
        object.__setattr__(self, "padding_end", end)
        self.validate()

    # -- derived sizes -------------------------------------------------
    @property
    def taps(self) -> int:
        """K = kh * kw, the number of kernel taps."""
        return self.kernel[0] * self.kernel[1]

    @property
    def offset_channels(self) -> int:
        """2 * G * K, the offset tensor's channel count."""
        return 2 * self.offset_groups * self.taps

    @property
    def mask_channels(self) -> int:
        """G * K, the mask tensor's channel count."""
        return self.offset_groups * self.taps

    @property
    def channels_per_offset_group(self) -> int:
        """Input channels per offset group."""
        return self.in_channels // self.offset_groups

    @property
    def channels_per_group(self) -> int:
        """Input channels per group."""
        return self.in_channels // self.groups

    @property
    def pads(self) -> tuple[int, int, int, int]:
        """``(top, left, bottom, right)``, the order of ONNX ``DeformConv``'s ``pads``."""
        return (*self.padding, *self.padding_end)  # type: ignore[misc]

    @property
    def symmetric(self) -> bool:
        """Whether both sides are padded equally (torchvision's ``padding``)."""
        return self.padding == self.padding_end

    def out_len(self, axis: int, size: int) -> int:
        """Output length along ``axis`` (0 = rows, 1 = columns) for an input of ``size``."""
        return (size - self.span(axis)) // self.stride[axis] + 1

    def output_hw(self, h: int, w: int) -> tuple[int, int]:
        """``(Ho, Wo)`` for an ``H x W`` input."""
        return self.out_len(0, h), self.out_len(1, w)

    def span(self, axis: int) -> int:
        """``dilation*(kernel-1) + 1 - pad_begin - pad_end`` along ``axis`` (0 = rows):
        ``out = (size - span) // stride + 1``, the one formula dynamic sizes use too.
        """
        return self.dilation[axis] * (self.kernel[axis] - 1) + 1 - self.padding[axis] - self.padding_end[axis]  # type: ignore[index]  # set by __post_init__

    def tap_rows(self) -> list[int]:
        """Row displacement ``i*dh`` of each tap k = i*kw + j (row-major)."""
        kh, kw = self.kernel
        return [i * self.dilation[0] for i in range(kh) for _ in range(kw)]

    def tap_cols(self) -> list[int]:
        """Column displacement ``j*dw`` of each tap k = i*kw + j (row-major)."""
        kh, kw = self.kernel
        return [j * self.dilation[1] for _ in range(kh) for j in range(kw)]

    # -- checks --------------------------------------------------------
    def validate(self) -> None:
        """Check the static arguments; raise ``ValueError`` naming the fix."""
        kh, kw = self.kernel
        if kh < 1 or kw < 1:
            raise ValueError(f"kernel must be >= 1 on each side, got {self.kernel}")
        if min(self.stride) < 1:
            raise ValueError(f"stride must be >= 1, got {self.stride}")
        if min(self.dilation) < 1:
            raise ValueError(f"dilation must be >= 1, got {self.dilation}")
        if min(self.padding) < 0 or min(self.padding_end) < 0:  # type: ignore[arg-type]  # set by __post_init__
            raise ValueError(f"padding must be >= 0, got {self.pads if not self.symmetric else self.padding}")
        for name in ("in_channels", "out_channels", "groups", "offset_groups"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.in_channels % self.offset_groups:
            raise ValueError(
                f"input channels ({self.in_channels}) must be divisible by offset groups "
                f"({self.offset_groups}); offset channels are 2 * offset_groups * kh * kw"
            )
        if self.in_channels % self.groups:
            raise ValueError(f"input channels ({self.in_channels}) must be divisible by groups ({self.groups})")
        if self.out_channels % self.groups:
            raise ValueError(f"output channels ({self.out_channels}) must be divisible by groups ({self.groups})")

    def check_input(self, h: int | None, w: int | None) -> None:
        """Raise ``ValueError`` if a static ``H x W`` input leaves no output pixel."""
        if h is None or w is None:
            return
        ho, wo = self.output_hw(h, w)
        if ho < 1 or wo < 1:
            raise ValueError(
                f"kernel {self.kernel} with dilation {self.dilation} does not fit the padded "
                f"input {h}x{w} (padding {self.padding if self.symmetric else self.pads}): output would be {ho}x{wo}; "
                "use a larger input or more padding"
            )

    @classmethod
    def from_shapes(
        cls,
        input_shape,
        weight_shape,
        offset_shape,
        mask_shape=None,
        *,
        has_bias: bool = True,
        stride=1,
        padding=0,
        dilation=1,
        groups: int | None = None,
        offset_groups: int | None = None,
        padding_end=None,
        kernel=None,
        out_channels: int | None = None,
        bilinear_interpolation_pad: bool = True,
    ) -> DeformConvSpec:
        """Build a spec from tensor shapes (entries may be ``None`` if dynamic).

        ``weight_shape`` is ``[Co, C/groups, kh, kw]``; entries that are not
        static (a weight computed at run time) are taken from wherever else
        they are known: ``kernel`` (an op attribute), ``out_channels`` (the
        bias's length), the input's channels and ``groups``, and the kernel
        size from the offset's (or mask's) channel count when it implies one
        (``K = 1`` taps). ``groups`` defaults to ``C // weight_shape[1]`` and
        ``offset_groups`` to ``offset_shape[1] // (2*kh*kw)``, as torchvision
        infers them.

        Raises:
            ValueError: wrong ranks, offset channels not a multiple of
                ``2*kh*kw``, mask channels not ``G*kh*kw``, channel counts not
                divisible, a kernel larger than the padded input, offset or
                mask spatial sizes that differ from the conv arithmetic's output
                size, or a kernel size / channel count that is known nowhere.
        """
        if input_shape is None or len(input_shape) != 4:
            raise ValueError(f"input must be 4-D [N, C, H, W], got shape {input_shape}")
        if offset_shape is None or len(offset_shape) != 4:
            raise ValueError(f"offset must be 4-D [N, 2*G*kh*kw, Ho, Wo], got shape {offset_shape}")
        weight_shape = _complete_weight(
            weight_shape, input_shape, offset_shape, mask_shape, kernel, out_channels, groups, offset_groups
        )
        co, cpg, kh, kw = (int(d) for d in weight_shape)
        c = input_shape[1]
        if groups is None:
            if c is None:
                raise ValueError("input channel count must be static to infer groups")
            if c % cpg:
                raise ValueError(f"input channels ({c}) must be a multiple of weight.shape[1] ({cpg})")
            groups = c // cpg
        if c is None:
            c = cpg * groups
        elif c != cpg * groups:
            raise ValueError(f"input has {c} channels but weight expects {cpg} per group x {groups} groups")
        oc = offset_shape[1]
        if offset_groups is None:
            if oc is None:
                raise ValueError("offset channel count must be static")
            if oc % (2 * kh * kw) or oc == 0:
                raise ValueError(
                    f"offset has {oc} channels, which is not a positive multiple of "
                    f"2*kh*kw = {2 * kh * kw}; it must be 2 * offset_groups * kh * kw"
                )
            offset_groups = oc // (2 * kh * kw)
        spec = cls(
            in_channels=c,
            out_channels=co,
            kernel=(kh, kw),
            stride=stride,
            padding=padding,
            dilation=dilation,
            groups=groups,
            offset_groups=offset_groups,
            has_mask=mask_shape is not None,
            has_bias=has_bias,
            padding_end=padding_end,
            bilinear_interpolation_pad=bilinear_interpolation_pad,
        )
        if oc is not None and oc != spec.offset_channels:
            raise ValueError(f"offset has {oc} channels, expected 2 * offset_groups * kh * kw = {spec.offset_channels}")
        if mask_shape is not None:
            if len(mask_shape) != 4:
                raise ValueError(f"mask must be 4-D [N, G*kh*kw, Ho, Wo], got shape {mask_shape}")
            if mask_shape[1] is not None and mask_shape[1] != spec.mask_channels:
                raise ValueError(
                    f"mask has {mask_shape[1]} channels, expected offset_groups * kh * kw = {spec.mask_channels}"
                )
        h, w = input_shape[2], input_shape[3]
        spec.check_input(h, w)
        # The output size is conv arithmetic on the input; offset and mask must agree with it.
        expected = tuple(None if n is None else spec.out_len(axis, n) for axis, n in enumerate((h, w)))
        for role, shape in (("offset", offset_shape), ("mask", mask_shape)):
            if shape is None:
                continue
            for axis, name in ((0, "height"), (1, "width")):
                got, want = shape[2 + axis], expected[axis]
                if got is not None and want is not None and got != want:
                    raise ValueError(
                        f"{role} {name} {got} does not match the output {name} {want} of the convolution "
                        f"(input {h}x{w}, kernel {spec.kernel}, stride {spec.stride}, "
                        f"padding {spec.padding if spec.symmetric else spec.pads}, dilation {spec.dilation}); "
                        f"{role} must be [N, {spec.offset_channels if role == 'offset' else spec.mask_channels}, Ho, Wo]"
                    )
        return spec


def _complete_weight(weight_shape, input_shape, offset_shape, mask_shape, kernel, out_channels, groups, offset_groups):
    """``[Co, C/groups, kh, kw]`` with unknown entries filled from the other arguments (see ``from_shapes``)."""
    if weight_shape is not None and len(weight_shape) != 4:
        raise ValueError(f"weight must be 4-D [Co, C/groups, kh, kw], got shape {weight_shape}")
    co, cpg, kh, kw = weight_shape if weight_shape is not None else (None,) * 4
    if kernel is not None:
        kernel = _pair("kernel", kernel)
        if (kh is not None and kh != kernel[0]) or (kw is not None and kw != kernel[1]):
            raise ValueError(f"kernel {kernel} does not match the weight's shape {list(weight_shape)}")
        kh, kw = kernel
    if kh is None or kw is None:
        taps = None
        oc = offset_shape[1]
        if oc is not None and offset_groups:
            taps = oc // (2 * offset_groups)
        elif mask_shape is not None and mask_shape[1] is not None and offset_groups:
            taps = mask_shape[1] // offset_groups
        if taps == 1:
            kh = kw = 1
        elif taps is not None and kh is not None and taps % kh == 0:
            kw = taps // kh
        elif taps is not None and kw is not None and taps % kw == 0:
            kh = taps // kw
        else:
            raise ValueError(
                "the kernel size is unknown: the weight's shape is not static"
                + (f" and {taps} taps can be several kernel shapes" if taps else "")
                + "; give the weight a static shape (a parameter, or a view with constant sizes)"
            )
    if cpg is None and input_shape[1] is not None and groups:
        cpg = input_shape[1] // groups
    if co is None:
        co = out_channels
    missing = [name for name, v in (("output channels", co), ("input channels per group", cpg)) if v is None]
    if missing:
        raise ValueError(
            f"the weight's {' and '.join(missing)} are unknown (its shape is not static and nothing else "
            "states them); give the weight a static shape (a parameter, or a view with constant sizes)"
        )
    return (co, cpg, kh, kw)
