"""The deformable-convolution node kinds that :func:`deform_onnx.lower` knows, one :class:`SourceOp` each.

One :class:`SourceOp` per (domain, op_type), onnx2torch-style: each ``source_*.py``
module of this folder (``source_onnx.py``, ``source_mmcv.py``, ``source_openvino.py``,
``source_tensorrt.py``) describes its node kinds once: which input plays which role, which
attributes exist, and how they map to torchvision's arguments. Importing this module imports every
``source_*.py`` beside it (:func:`_discover`), so a new node kind is one new module and nothing else:
the file rewriter, the op's registry entry (its ``onnx_nodes``), the OpenVINO conversion extension,
``quantize`` and ``check`` all read :data:`SOURCE_OPS`, so the attribute rules live in one place.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

#: Input roles, in torchvision's vocabulary.
ROLES = ("input", "weight", "offset", "mask", "bias")


@dataclass(frozen=True)
class ConvAttrs:
    """Static arguments read from a node's attributes (torchvision's names).

    ``kernel`` is ``None`` when the node does not state it (it then comes
    from the weight's shape). ``groups`` / ``offset_groups`` are always given
    by the node kinds known here. ``padding`` is the begin (top, left) pad,
    ``padding_end`` the (bottom, right) pad (``None``: same as ``padding``).
    ``bilinear_interpolation_pad`` is OpenVINO's name for the border rule:
    ``True`` is torchvision's (see :class:`~deform_onnx.ops.deform_conv.spec.DeformConvSpec`).
    """

    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    offset_groups: int = 1
    kernel: tuple[int, int] | None = None
    padding_end: tuple[int, int] | None = None
    bilinear_interpolation_pad: bool = True


@dataclass(frozen=True)
class SourceOp:
    """How one node kind maps to torchvision's ``deform_conv2d``.

    Attributes:
        domain, op_type: the node kind (``""`` is the default ONNX domain).
        roles: role of each input position (see :data:`ROLES`).
        required: number of leading inputs that must be present.
        attr_kinds: every attribute the kind may carry: ``"int"``, ``"ints"`` or ``"string"``.
        parse: ``parse(attrs, where) -> ConvAttrs`` with ``attrs`` the
            attributes present (name -> int or list of ints) and ``where`` a
            description of the node for error messages. Raises ``ValueError``.
        torchvision_border: whether the kind samples with torchvision's border rule, so that
            ``lower(method="native")`` writes it as the standard ``DeformConv`` (OpenVINO's node does not).
    """

    domain: str
    op_type: str
    roles: tuple[str, ...]
    required: int
    attr_kinds: Mapping[str, str]
    parse: Callable[[Mapping[str, object], str], ConvAttrs]
    torchvision_border: bool = True

    @property
    def key(self) -> tuple[str, str]:
        """``(domain, op_type)``."""
        return (self.domain, self.op_type)

    def role_index(self, role: str) -> int | None:
        """Input position of ``role``, or ``None`` if this kind has no such input."""
        return self.roles.index(role) if role in self.roles else None

    def read_attrs(self, attrs: Mapping[str, object], where: str) -> ConvAttrs:
        """Check the attribute names, then :attr:`parse` them."""
        unknown = sorted(set(attrs) - set(self.attr_kinds))
        if unknown:
            raise ValueError(
                f"{where}: unknown attribute(s) {', '.join(unknown)} for {self.describe()}; "
                f"known: {', '.join(sorted(self.attr_kinds))}"
            )
        return self.parse(attrs, where)

    def describe(self) -> str:
        """``domain::op_type`` (``op_type`` alone in the default domain)."""
        return f"{self.domain}::{self.op_type}" if self.domain else self.op_type


SOURCE_OPS: dict[tuple[str, str], SourceOp] = {}


def register(op: SourceOp) -> SourceOp:
    """Add a node kind to :data:`SOURCE_OPS` (one call per (domain, op_type))."""
    if op.key in SOURCE_OPS:
        raise ValueError(f"{op.describe()} is registered twice")
    SOURCE_OPS[op.key] = op
    return op


def key_of(domain: str, op_type: str) -> tuple[str, str]:
    """A node's ``(domain, op_type)`` as :data:`SOURCE_OPS` keys it (``ai.onnx`` is the default domain ``""``)."""
    return ("" if domain == "ai.onnx" else domain, op_type)


def lookup(domain: str, op_type: str) -> SourceOp | None:
    """The :class:`SourceOp` for a node, or ``None``; ``ai.onnx`` is the default domain."""
    return SOURCE_OPS.get(key_of(domain, op_type))


# -- attribute helpers shared by the node-kind modules -------------------
def int_attr(attrs: Mapping[str, object], name: str, default: int, where: str, minimum: int = 1) -> int:
    """An int attribute >= ``minimum`` (a 1-element list counts); ``ValueError`` naming it otherwise."""
    value = attrs.get(name, default)
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{where}: attribute {name} must be an int >= {minimum}, got {value!r}")
    return value


def pair_attr(attrs: Mapping[str, object], name: str, default: int, where: str) -> tuple[int, int]:
    """A 2-D pair from an int, a 1-element or a 2-element list; more is a 3-D op."""
    value = attrs.get(name, default)
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    value = list(value)  # type: ignore[call-overload]
    if len(value) == 1:
        return (int(value[0]), int(value[0]))
    if len(value) == 2:
        return (int(value[0]), int(value[1]))
    raise ValueError(
        f"{where}: attribute {name}={value} has {len(value)} entries: only 2-D deformable "
        "convolution (torchvision's deform_conv2d) is supported"
    )


def pads_attr(attrs: Mapping[str, object], where: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """``pads = [h_begin, w_begin, h_end, w_end]`` (ONNX Conv order) as ``(begin, end)`` pairs."""
    pads = list(attrs.get("pads", [0, 0, 0, 0]))  # type: ignore[call-overload]
    if len(pads) != 4:
        raise ValueError(
            f"{where}: pads={pads} must have 4 entries [h_begin, w_begin, h_end, w_end]; "
            "only 2-D deformable convolution is supported"
        )
    if min(pads) < 0:
        raise ValueError(f"{where}: pads={pads} must be >= 0")
    return (int(pads[0]), int(pads[1])), (int(pads[2]), int(pads[3]))


def _discover() -> None:
    """Import every ``source_*`` module of this folder (each registers its node kinds on import)."""
    package = importlib.import_module(__package__ or "deform_onnx.ops.deform_conv")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("source_") and info.name != "source_kinds":
            importlib.import_module(f"{package.__name__}.{info.name}")


_discover()
