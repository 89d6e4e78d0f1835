"""Rewrite existing ONNX files: replace deformable-convolution nodes by a lowering.

:func:`lower` finds every node kind registered in :mod:`.registry` (the
standard ``DeformConv``, mmcv's ``MMCVDeformConv2d`` and
``MMCVModulatedDeformConv2d`` in the ``mmcv`` and ``mmdeploy`` domains),
builds a :class:`~deform_onnx.semantics.DeformConvSpec` from its attributes and
the weight's shape, and replaces the node by the ops of the chosen lowering
(the same functions the exporters call), using onnx-ir. Everything else in the
model is kept as it was.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from .._io import atomic_path
from ..lowering import Lowering, resolve_method
from ..lowering.builder import TapeBuilder
from ..semantics import DeformConvSpec
from . import deform_conv, grid_sample_nodes, mmcv, openvino_node  # noqa: F401  (register the node kinds)
from .registry import ROLES, SOURCE_OPS, SourceOp, lookup

__all__ = ["lower", "lower_file", "read_model", "LowerReport", "Replacement", "ModelFileError", "find_nodes"]


class ModelFileError(ValueError):
    """A file that is missing or is not a readable ONNX model."""


@dataclass(frozen=True)
class Replacement:
    """One replaced node: its name, its kind (``domain::op_type``) and the lowering used."""

    node: str
    op: str
    lowering: str


@dataclass
class LowerReport:
    """What :func:`lower_file` / :func:`lower_model` did."""

    replaced: list[Replacement] = field(default_factory=list)
    opset_before: int | None = None
    opset_after: int | None = None
    lowering: str | None = None
    removed_domains: list[str] = field(default_factory=list)
    ir_version_before: int | None = None
    ir_version_after: int | None = None

    @property
    def changed(self) -> bool:
        return (
            bool(self.replaced)
            or self.opset_before != self.opset_after
            or self.ir_version_before != self.ir_version_after
        )


# -- reading ------------------------------------------------------------
def read_model(path: str | os.PathLike) -> ir.Model:
    """Load an ONNX file into onnx-ir; external data stays on disk (memory-mapped).

    Raises:
        ModelFileError: the file is missing, unreadable, truncated or not an
            ONNX model (one-line message naming the file).
    """
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: no such file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - protobuf raises DecodeError, RuntimeWarning, ...
        raise ModelFileError(f"{path}: not a readable ONNX model ({type(e).__name__}: {_first_line(e)})") from None
    _check_structure(proto, path)
    model = _from_proto(proto)
    ir.external_data.set_base_dir(model.graph, str(path.parent))
    return model


#: Key in ``ir.Model.meta``: names that had value_info in the file read.
_VALUE_INFO = "deform_onnx.value_info_names"


def _from_proto(proto: onnx.ModelProto) -> ir.Model:
    model = ir.serde.deserialize_model(proto)
    model.meta[_VALUE_INFO] = frozenset(vi.name for vi in proto.graph.value_info)
    return model


def _keep_value_info(model: ir.Model) -> None:
    """Serialize value_info only for the values that had it when read.

    onnx-ir writes value_info for every typed initializer; clearing the
    (redundant) type of the others keeps the file's value_info as it was.
    """
    names = model.meta.get(_VALUE_INFO)
    if names is None:
        return
    for value in model.graph.initializers.values():
        if value.name not in names and not value.is_graph_input():
            value.type = None
            value.shape = None


def _check_structure(proto: onnx.ModelProto, where) -> None:
    """Reject what protobuf parses without error but is no model (empty or cut files)."""
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.graph.output:
        raise ModelFileError(f"{where}: not an ONNX model (no ir_version, graph or graph outputs)")
    known = {i.name for i in proto.graph.input} | {t.name for t in proto.graph.initializer}
    for node in proto.graph.node:
        known.update(node.output)
    missing = [o.name for o in proto.graph.output if o.name not in known]
    if missing:
        raise ModelFileError(
            f"{where}: graph output(s) {', '.join(missing)} are produced by no node: the file looks truncated"
        )


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else ""


# -- finding nodes ------------------------------------------------------------
def find_nodes(model: ir.Model) -> list[tuple[ir.Node, SourceOp]]:
    """Every known deformable-convolution node of the main graph and its subgraphs.

    Raises:
        ValueError: such a node inside a model-local function (inline the
            functions first, e.g. with ``onnx.inliner.inline_local_functions``).
    """
    found = []
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        src = lookup(node.domain, node.op_type)
        if src is not None:
            found.append((node, src))
    for function in model.functions.values():
        for node in function:
            if lookup(node.domain, node.op_type) is not None:
                raise ValueError(
                    f"node {node.name or '<unnamed>'} ({node.op_type}) is inside function "
                    f"{function.name}: inline local functions first (onnx.inliner.inline_local_functions)"
                )
    return found


def default_opset(model: ir.Model) -> int | None:
    """The model's default-domain (``ai.onnx``) opset, or ``None`` if it imports none."""
    for key in ("", "ai.onnx"):
        if key in model.opset_imports:
            return int(model.opset_imports[key])
    return None


# -- the rewrite ---------------------------------------------------------------
class _RewriteBuilder(TapeBuilder):
    """:class:`TapeBuilder` that falls back to the weight's dtype for values without type info.

    DeformConv (and mmcv's ops) use one element type for input, offset, mask
    and weight, so a value missing from value_info has the weight's dtype.
    """

    def __init__(self, opset: int, name_prefix: str, dtype_hints: dict[int, np.dtype]):
        super().__init__(opset, name_prefix=name_prefix)
        self._hints = dtype_hints

    def dtype(self, value):
        dt = super().dtype(value)
        return dt if dt is not None else self._hints.get(id(value))


def _shape(value: ir.Value | None) -> tuple[int | None, ...] | None:
    """Static shape from value_info, an initializer or a ``Constant`` producer; ``None`` if unknown."""
    if value is None:
        return None
    shape = value.shape
    if shape is None and value.const_value is not None:
        shape = value.const_value.shape
    producer = value.producer()
    if shape is None and producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
        attr = producer.attributes.get("value")
        if attr is not None and attr.type == ir.AttributeType.TENSOR:
            shape = attr.value.shape
    if shape is None:
        return None
    return tuple(d if isinstance(d, int) else None for d in shape)


def _np_dtype(value: ir.Value) -> np.dtype | None:
    dt = value.dtype if value.dtype is not None else getattr(value.const_value, "dtype", None)
    try:
        return np.dtype(dt.numpy()) if dt is not None else None
    except (TypeError, ValueError):
        return None


def _node_inputs(node: ir.Node, src: SourceOp, where: str) -> dict[str, ir.Value | None]:
    inputs = list(node.inputs)
    if len(inputs) > len(src.roles):
        raise ValueError(f"{where}: {len(inputs)} inputs, but {src.describe()} takes at most {len(src.roles)}")
    inputs += [None] * (len(src.roles) - len(inputs))
    for i in range(src.required):
        if inputs[i] is None:
            raise ValueError(f"{where}: required input {i} ({src.roles[i]}) is missing")
    if len(node.outputs) != 1:
        raise ValueError(f"{where}: expected one output, got {len(node.outputs)}")
    values = dict.fromkeys(ROLES)
    values.update(zip(src.roles, inputs))
    return values


def spec_for_node(node: ir.Node, src: SourceOp) -> tuple[DeformConvSpec, dict[str, ir.Value | None]]:
    """The :class:`DeformConvSpec` and input values (by role) of one node.

    Raises:
        ValueError: unknown attributes, a 3-D deformable convolution, a
            weight without a static shape, or inconsistent shapes; the message
            names the node.
    """
    where = f"node {node.name or '<unnamed>'} ({src.describe()})"
    values = _node_inputs(node, src, where)
    attrs = src.read_attrs({name: attr.value for name, attr in node.attributes.items()}, where)
    w_shape = _shape(values["weight"])
    shapes = {role: _shape(v) for role, v in values.items()}
    for role in ("weight", "input", "offset", "mask"):
        s = shapes[role]
        if s is not None and len(s) != 4:
            raise ValueError(
                f"{where}: {role} has rank {len(s)}; only 2-D deformable convolution (4-D tensors, "
                "torchvision's deform_conv2d) is supported"
            )
    b_shape = shapes["bias"]
    if b_shape is not None and w_shape is not None and w_shape[0] is not None and None not in b_shape \
            and b_shape != (w_shape[0],):
        raise ValueError(f"{where}: bias has shape {list(b_shape)}, expected [{w_shape[0]}]")
    unknown = (None, None, None, None)
    try:
        spec = DeformConvSpec.from_shapes(
            shapes["input"] or unknown,
            w_shape,
            shapes["offset"] or unknown,
            (shapes["mask"] or unknown) if values["mask"] is not None else None,
            has_bias=values["bias"] is not None,
            stride=attrs.stride,
            padding=attrs.padding,
            dilation=attrs.dilation,
            groups=attrs.groups,
            offset_groups=attrs.offset_groups,
            padding_end=attrs.padding_end,
            kernel=attrs.kernel,
            out_channels=b_shape[0] if b_shape is not None and len(b_shape) == 1 else None,
            bilinear_interpolation_pad=attrs.bilinear_interpolation_pad,
        )
    except ValueError as e:
        hint = ""
        if w_shape is None or None in w_shape:
            hint = " (the weight's shape is not static: make it an initializer or add its shape to value_info)"
        raise ValueError(f"{where}: {e}{hint}") from None
    return spec, values


def _needs_shapes(node: ir.Node, src: SourceOp) -> bool:
    """Whether a node's weight has no static shape in the file (e.g. computed by other nodes)."""
    i = src.role_index("weight")
    value = node.inputs[i] if i is not None and i < len(node.inputs) else None
    shape = _shape(value)
    return value is not None and (shape is None or None in shape)


def _infer_shapes(model: ir.Model) -> None:
    """Fill unknown shapes from ONNX shape inference with data propagation.

    A weight computed in the graph (``ConstantOfShape`` of a ``Shape``-built
    vector, a ``Reshape`` to constant sizes) has no value_info; ONNX's shape
    inference with ``data_prop`` follows such shape computations. Only shapes
    missing in ``model`` are set; nothing else changes.
    """
    proto = ir.to_proto(model)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is best effort; the spec check then names the problem
        return
    shapes = {}
    for vi in inferred.graph.value_info:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            shapes[vi.name] = (
                vi.type.tensor_type.elem_type,
                [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in dims],
            )
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for value in node.outputs:
            if value.shape is None and value.name in shapes:
                elem, dims = shapes[value.name]
                if value.type is None and elem:
                    value.type = ir.TensorType(ir.DataType(elem))
                value.shape = ir.Shape(dims)


def _replace(node: ir.Node, src: SourceOp, lowering: Lowering, opset: int, names: set[str], index: int) -> None:
    spec, v = spec_for_node(node, src)
    prefix = node.name or f"deform_onnx_{index}"
    hints = {}
    w_dtype = _np_dtype(v["weight"])
    if w_dtype is not None:
        hints = {id(v[r]): w_dtype for r in ("input", "offset", "mask") if v[r] is not None}
    b = _RewriteBuilder(opset, prefix, hints)
    out = lowering.fn(b, spec, v["input"], v["weight"], v["offset"], v["mask"], v["bias"])
    new_nodes = list(b.tape.nodes)
    for n in new_nodes:
        for i, value in enumerate(n.outputs):
            if value is not out and value.name is None:
                value.name = _unique(f"{n.name}_out{i}" if n.name else f"{prefix}/v", names)
    old = node.outputs[0]
    ir.convenience.replace_nodes_and_values(
        node.graph, insertion_point=node, old_nodes=[node], new_nodes=new_nodes, old_values=[old], new_values=[out]
    )


def _unique(name: str, names: set[str]) -> str:
    candidate, k = name, 1
    while candidate in names:
        candidate = f"{name}_{k}"
        k += 1
    names.add(candidate)
    return candidate


def _all_names(model: ir.Model) -> set[str]:
    names = {v.name for v in model.graph.inputs if v.name}
    names |= set(model.graph.initializers)
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        names.add(node.name or "")
        names.update(o.name for o in node.outputs if o.name)
    return names


def _used_domains(model: ir.Model) -> set[str]:
    used = {n.domain for n in ir.traversal.RecursiveGraphIterator(model.graph)}
    for function in model.functions.values():
        used.add(function.domain)
        used.update(n.domain for n in function)
    return used


#: Private domain that hides default-domain deformable nodes from the version converter.
_HIDDEN = "deform_onnx.hidden"


def _converter_reason(exc: BaseException) -> str:
    """The converter's C++ assertion as a short phrase, e.g. 'no adapter from version 15 for BatchNormalization'."""
    import re

    found = re.search(r"No Adapter (From|To) Version \$?(\d+) for (\w+)", str(exc))
    if found:
        return f"no adapter {found.group(1).lower()} version {found.group(2)} for {found.group(3)}"
    return _first_line(exc)


def _converts(proto: onnx.ModelProto, opset: int) -> bool:
    from onnx import version_converter

    try:
        version_converter.convert_version(proto, opset)
    except Exception:  # noqa: BLE001
        return False
    return True


def _convert(model: ir.Model, target: int, current: int | None, hide_grid_samples: bool = False) -> ir.Model:
    """Convert the default domain to ``target`` with onnx's version converter.

    The deformable nodes are moved to a private domain for the conversion
    (the converter has no DeformConv adapter below 19) and back afterwards;
    they are lowered at ``target`` later, so no lowering op is ever converted
    (the converter lacks e.g. the GridSample 20->19 and Reshape 14->13 adapters).
    """
    from onnx import version_converter

    hidden = [node for node, _ in find_nodes(model) if node.domain in ("", "ai.onnx")]
    if hide_grid_samples:  # lowered to gather at ``target`` afterwards (no GridSample adapter below 16)
        hidden += [n for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.op_type == "GridSample"
                   and n.domain in ("", "ai.onnx")]
    for node in hidden:
        node.domain = _HIDDEN
    if hidden:
        model.opset_imports[_HIDDEN] = 1
    ir.external_data.load_to_model(model)  # the converter works on an in-memory proto
    proto = ir.to_proto(model)
    for node in hidden:  # leave the caller's model as it was
        node.domain = ""
    model.opset_imports.pop(_HIDDEN, None)
    try:
        converted_proto = version_converter.convert_version(proto, target)
    except Exception as e:  # noqa: BLE001 - the converter raises RuntimeError/IndexError/...
        hint = "choose another opset"
        if current is not None and target < current:
            lowest = next((o for o in range(target + 1, current) if _converts(proto, o)), current)
            hint = f"the lowest opset this model converts to is {lowest}"
        raise ValueError(
            f"onnx's version converter cannot convert this model from opset {current} to {target} "
            f"({_converter_reason(e)}); {hint}"
        ) from None
    proto = converted_proto
    converted = ir.serde.deserialize_model(proto)
    converted.meta[_VALUE_INFO] = model.meta.get(_VALUE_INFO)
    for node in ir.traversal.RecursiveGraphIterator(converted.graph):
        if node.domain == _HIDDEN:
            node.domain = ""
    converted.opset_imports.pop(_HIDDEN, None)
    return converted


def lower_model(
    model: ir.Model,
    *,
    method: str | None = None,
    opset: int | None = None,
    target: str | None = None,
    force: bool = False,
    ir_version: int | None = None,
) -> tuple[ir.Model, LowerReport]:
    """Lower every known deformable-convolution node of an onnx-ir model.

    Edits ``model`` in place and returns it (or, when the opset is converted,
    a new model) with a :class:`LowerReport`. See :func:`lower`.
    """
    # Hooks (issue 12): a runtime target picks method/opset and checks the result; IR version.
    from ..irversion import apply_ir_version_ir
    from ..targets import hooks as _target_hooks

    choice = _target_hooks.for_lower(target, method, opset, default_opset(model), force)
    ir_before = model.ir_version
    model, report = _lower_model(model, method=choice.method, opset=choice.opset)
    apply_ir_version_ir(model, ir_version)
    report.ir_version_before, report.ir_version_after = ir_before, model.ir_version
    if choice.target is not None:
        choice.check_graph(ir.to_proto(model))
    return model, report


def _lower_model(model: ir.Model, *, method: str, opset: int | None) -> tuple[ir.Model, LowerReport]:
    current = default_opset(model)
    report = LowerReport(opset_before=current, opset_after=current)
    nodes = find_nodes(model)
    to_opset = opset if opset is not None else current
    samplers = grid_sample_nodes.nodes_to_lower(model, method, to_opset) if to_opset is not None else []
    if not nodes and not samplers and (opset is None or opset == current):
        return model, report
    if to_opset is None:
        raise ValueError("the model imports no default-domain opset; pass opset=N (CLI: --opset N)")
    try:
        lowering = resolve_method(method, to_opset)
    except ValueError as e:
        if opset is None:
            raise ValueError(f"the model is at opset {current}: {e}; pass opset=N (CLI: --opset N)") from None
        raise
    if to_opset != current:
        model = _convert(model, to_opset, current, hide_grid_samples=bool(samplers))
        samplers = grid_sample_nodes.nodes_to_lower(model, method, to_opset)
    report.lowering = lowering.name
    names = _all_names(model)
    found = find_nodes(model)
    if any(_needs_shapes(node, src) for node, src in found):
        _infer_shapes(model)
    for index, (node, src) in enumerate(found):
        report.replaced.append(Replacement(node.name or f"<unnamed #{index}>", src.describe(), lowering.name))
        _replace(node, src, lowering, to_opset, names, index)
    for node in samplers:
        report.replaced.append(Replacement(node.name or "<unnamed GridSample>", "GridSample", "gather"))
    if any(_shape(n.inputs[0]) is None or n.inputs[0].dtype is None for n in samplers):
        _infer_shapes(model)
    grid_sample_nodes.replace_all(samplers, to_opset, lambda base: _unique(base, names))
    used = _used_domains(model)
    for domain in sorted({d for d, _ in SOURCE_OPS if d} - used):
        if domain in model.opset_imports:
            del model.opset_imports[domain]
            report.removed_domains.append(domain)
    report.opset_after = default_opset(model)
    _keep_value_info(model)
    return model, report


def lower(
    model: str | os.PathLike | onnx.ModelProto,
    *,
    method: str | None = None,
    opset: int | None = None,
    target: str | None = None,
    force: bool = False,
    ir_version: int | None = None,
) -> onnx.ModelProto:
    """Replace deformable-convolution nodes (and, for ``gather``, GridSample nodes) of an ONNX model by a lowering.

    Known nodes: the standard ``DeformConv`` (at any opset, also the invalid
    opset-17/18 files of the dynamo exporter; asymmetric ``pads`` too),
    mmcv's ``MMCVDeformConv2d`` and ``MMCVModulatedDeformConv2d`` (domains
    ``mmcv`` and ``mmdeploy``), and OpenVINO's
    ``org.openvinotoolkit::DeformableConv2D`` (lowered with OpenVINO's own
    border rule, so the result matches OpenVINO). Each is replaced by the ops
    of one lowering (``native``, ``grid_sample``, ``gather``; semantics of
    ``torchvision.ops.deform_conv2d``), the same functions the exporters use.
    A weight computed inside the graph gets its shape from ONNX shape
    inference. The output size is always the convolution's arithmetic on the
    input; an offset or mask of another size fails at run time. The replacement's output keeps the node's
    output name; graph inputs/outputs, other nodes, initializers, value_info,
    metadata and other opset imports are kept. mmcv domains left unused are
    dropped from the opset imports. Default-domain ``GridSample`` nodes
    (``F.grid_sample``) are rewritten into standard ops on Gather when the
    method resolves to ``gather`` for them (``gather``, or ``auto`` below
    opset 16) and kept otherwise (:mod:`.grid_sample_nodes`).

    Args:
        model: a path to an ``.onnx`` file (external data is read into the
            returned proto, as ``onnx.load`` does) or an ``onnx.ModelProto``
            (not modified).
        method: ``"auto"`` (grid_sample at opset >= 16, else gather),
            ``"native"`` (opset >= 19), ``"grid_sample"`` (>= 16), ``"gather"`` (>= 11).
        opset: default-domain opset of the result. ``None`` keeps the model's
            opset. Otherwise the model is first converted with onnx's
            version converter (the deformable nodes are kept out of the
            conversion) and then lowered at ``opset``.
        target: a runtime (``deform_onnx.TARGETS``, e.g. ``"tensorrt"``): picks
            the method (explicit ``method`` wins) and the opset when the model's
            own cannot hold it or the target mishandles it; the result is checked
            against the target's rules (see :mod:`deform_onnx.targets`).
        force: turn what the target is known to mishandle into warnings.
        ir_version: IR version of the result; default: the lowest its opsets need.

    Returns:
        The rewritten ``onnx.ModelProto``; a model without such nodes (and no
        ``opset`` or IR version change) comes back unchanged.

    Raises:
        ModelFileError: the path is missing or not an ONNX model.
        ValueError: unknown method; an opset the method cannot use (the
            message names the fix, ``opset=``/``--opset``); a node with unknown
            attributes, 3-D deformable convolution or a weight whose shape
            no shape inference finds (the message names the node); ``native``
            for OpenVINO's node; a failed opset conversion; an unknown target,
            or a result the target mishandles (without ``force``); an
            ``ir_version`` below what the opsets need.
    """
    if isinstance(model, onnx.ModelProto):
        _check_structure(model, "model")
        ir_model = _from_proto(model)
        original = model
    else:
        ir_model = read_model(model)
        original = None
    ir_model, report = lower_model(
        ir_model, method=method, opset=opset, target=target, force=force, ir_version=ir_version
    )
    if not report.changed:
        if original is not None:
            copy = onnx.ModelProto()
            copy.CopyFrom(original)
            return copy
        return onnx.load(str(model))
    ir.external_data.load_to_model(ir_model)
    return ir.to_proto(ir_model)


def lower_file(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    method: str | None = None,
    opset: int | None = None,
    target: str | None = None,
    force: bool = False,
    ir_version: int | None = None,
) -> LowerReport:
    """:func:`lower` a file and write the result atomically (temp file, then rename).

    If the input keeps initializers in external data, so does the output: in
    ``<dst name>.data`` next to ``dst`` (or the input's own data file when
    ``dst`` is ``src``). ``src`` is only written when ``dst`` is ``src``. When
    nothing changes and ``dst`` is ``src``, nothing is written.

    Raises:
        ModelFileError, ValueError: as :func:`lower`; ``OSError`` on write
        errors. On any error ``dst`` is left as it was.
    """
    src, dst = Path(src), Path(dst)
    model = read_model(src)
    in_place = dst.resolve() == src.resolve()
    external = [
        t for t in model.graph.initializers.values() if isinstance(t.const_value, ir.ExternalTensor)
    ]
    src_data = {Path(t.const_value.path).resolve() for t in external}  # type: ignore[union-attr]
    model, report = lower_model(model, method=method, opset=opset, target=target, force=force, ir_version=ir_version)
    if in_place and not report.changed:
        return report
    data_name = None
    if external:
        if in_place and len({t.const_value.location for t in external}) == 1:  # type: ignore[union-attr]
            data_name = external[0].const_value.location  # type: ignore[union-attr]
        else:
            data_name = _unique(f"{dst.name}.data", {p.name for p in src_data if p.parent == dst.parent.resolve()})
        ir.external_data.load_to_model(model)  # never read from a file being rewritten
    dst.parent.mkdir(parents=True, exist_ok=True)
    data_path = dst.parent / data_name if data_name else None
    data_existed = data_path is not None and data_path.exists()
    try:
        with atomic_path(dst) as tmp:
            ir.save(model, tmp, format="protobuf", external_data=data_name)
    except BaseException:
        if data_path is not None and not data_existed:
            data_path.unlink(missing_ok=True)
        raise
    return report
