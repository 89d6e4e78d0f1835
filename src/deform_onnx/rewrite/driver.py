"""The rewrite driver: :func:`lower` replaces every file node of the registry's ops by a lowering.

Each op of :data:`deform_onnx.ops.registry.OPS` names the module of its file
nodes (:attr:`~deform_onnx.ops.registry.OpEntry.sources`; the interface is
:mod:`deform_onnx.ops.file_nodes`). :func:`lower` finds every op's nodes first,
converts the opset when asked (the nodes found kept out of the conversion,
:mod:`.opset`), then replaces each op's nodes in the registry's order by the
ops of the lowering its method resolves to (the same functions the exporters
call), using onnx-ir. Everything else in the model is kept as it was. File IO
lives in :mod:`.model_io`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import onnx
import onnx_ir as ir

from ..builder import written
from ..core.atomic_io import atomic_path
from ..ops import file_nodes
from ..ops.registry import check_method, file_node_domains, model_method, sources
from .graph import all_names, complete_outputs, forget_shapes, infer_shapes, unique_name, used_domains
from .model_io import _check_structure, _from_proto, _keep_value_info, default_opset, read_model
from .opset import REPAIRS, _convert


@dataclass(frozen=True)
class Replacement:
    """One replaced node: its name, its kind (``domain::op_type``) and the form its lowering wrote.

    The form is :func:`deform_onnx.builder.written.form_of` where the method does not decide it alone
    (under ``grid_sample`` a deformable convolution of a dynamic map is written as gather).
    """

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
    #: the method lowered with (the target's choice when none was given).
    method: str | None = None
    removed_domains: list[str] = field(default_factory=list)
    ir_version_before: int | None = None
    ir_version_after: int | None = None
    #: down-conversion adapters applied by ``opset=N`` (one line each; :mod:`deform_onnx.conversion`), then the
    #: target's value-preserving graph repairs (``"target 'ncnn': ..."``; :mod:`deform_onnx.targets.repairs`).
    repairs: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether the result differs from the input (nodes, opset or IR version)."""
        return (
            bool(self.replaced)
            or self.opset_before != self.opset_after
            or self.ir_version_before != self.ir_version_after
            or bool(self.repairs)
        )


# -- the rewrite ---------------------------------------------------------------


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
    from ..core.irversion import apply_ir_version_ir
    from ..targets import hooks as _target_hooks

    choice = _target_hooks.for_lower(target, method, opset, default_opset(model), force)
    ir_before = model.ir_version
    with choice.emitting():
        model, report = _lower_model(model, method=choice.method, opset=choice.opset)
    report.method = choice.method
    if choice.target is not None:
        proto = ir.to_proto(model)
        done = choice.repair_graph(proto)  # value-preserving rewrites the target needs (targets/repairs.py)
        if done:
            model = ir.from_proto(proto)
            report.repairs += [f"target {choice.target.name!r}: {line}" for line in done]
        choice.check_graph(proto)  # before the IR stamp, which clears the source lines a refusal names below IR 10
    apply_ir_version_ir(model, ir_version)
    report.ir_version_before, report.ir_version_after = ir_before, model.ir_version
    return model, report


def _found(model: ir.Model, method: str, opset: int | None) -> list[tuple[ModuleType, list[ir.Node]]]:
    """Every op's sources module with the nodes it lowers, in the registry's order (all found before any is replaced)."""
    return [(module, module.nodes_lowered(model, method, opset)) for module in sources()]


def _lower_model(model: ir.Model, *, method: str, opset: int | None) -> tuple[ir.Model, LowerReport]:
    check_method(method)
    current = default_opset(model)
    report = LowerReport(opset_before=current, opset_after=current)
    to_opset = opset if opset is not None else current
    # The one decision of which nodes a method lowers (check and run_paths ask it too: lowerable.py).
    found = _found(model, method, to_opset)
    if not any(nodes for _, nodes in found) and (opset is None or opset == current):
        return model, report
    if to_opset is None:
        raise ValueError("the model imports no default-domain opset; pass opset=N (CLI: --opset N)")
    try:
        report.lowering = model_method(method, to_opset)
    except ValueError as e:
        if opset is None:
            raise ValueError(f"the model is at opset {current}: {e}; pass opset=N (CLI: --opset N)") from None
        raise
    if to_opset != current:
        model = _convert(model, to_opset, current, [n for _, nodes in found for n in nodes])
        report.repairs = list(model.meta.get(REPAIRS) or [])
        found = _found(model, method, to_opset)  # the converted model's nodes
    names = all_names(model)
    written_at: dict[str, str] = {}  # output value -> form written
    typed: list = []  # the shapes inference set, taken back after (the file's value_info is kept as it was)
    untyped = {v.name for _, nodes in found for n in nodes for v in n.outputs if v.shape is None}  # and theirs
    for module, nodes in found:
        if any(file_nodes.needs_shapes(module, node) for node in nodes):
            typed += infer_shapes(model)
        replaced = file_nodes.replace_nodes(module, nodes, method, to_opset, lambda base: unique_name(base, names))
        report.replaced += [Replacement(name, kind, form) for name, kind, form, _ in replaced]
        written_at.update((output, form) for _, _, form, output in replaced if output)
    if typed:
        outputs = {v.name: v for n in model.graph for v in n.outputs if v.name in untyped and v.shape is not None}
        forget_shapes(typed + [(v, True) for v in outputs.values()])
    written.refresh(model.metadata_props, written_at)  # an export's record of its calls stays true
    used = used_domains(model)
    for domain in sorted(file_node_domains() - used):
        if domain in model.opset_imports:
            del model.opset_imports[domain]
            report.removed_domains.append(domain)
    report.opset_after = default_opset(model)
    complete_outputs(model)  # a lowered plugin node's output now has a shape converters need
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
    ``mmcv`` and ``mmdeploy``), TensorRT's ``ModulatedDeformConv2d`` plugin node and
    CenterNet's ``DCNv2`` plugin node (:mod:`deform_onnx.ops.deform_conv.source_tensorrt`),
    and OpenVINO's ``org.openvinotoolkit::DeformableConv2D`` (lowered with OpenVINO's own
    border rule, so the result matches OpenVINO). Each is replaced by the ops
    of one lowering (``native``, ``grid_sample``, ``gather``; semantics of
    ``torchvision.ops.deform_conv2d``), the same functions the exporters use.
    A weight computed inside the graph gets its shape from ONNX shape
    inference. The output size is always the convolution's arithmetic on the
    input; an offset or mask of another size fails at run time. The replacement's output keeps the node's
    output name; graph inputs/outputs, other nodes, initializers, value_info,
    metadata and other opset imports are kept. Plugin domains (``mmcv``, ``trt``, ...) left
    unused are dropped from the opset imports. mmdeploy's ``TRTDCNv3`` (InternImage's
    DCNv3 plugin) and ``custom_op::DCNv4_Plugin`` (DCNv4's public TensorRT plugin) are replaced by standard ops on the sampler the method picks
    for ``grid_sample`` (:mod:`deform_onnx.ops.dcnv3.sources`). Default-domain ``GridSample`` nodes
    (``F.grid_sample``) are rewritten into standard ops on Gather when the
    method resolves to ``gather`` for them (``gather``, or ``auto`` below
    opset 16) and kept otherwise (:mod:`deform_onnx.ops.grid_sample.sources`). Multi-scale
    deformable attention plugin nodes (mmdeploy's
    ``MMCVMultiScaleDeformableAttention``, TensorRT's
    ``MultiscaleDeformableAttnPlugin_TRT``) are always replaced by the fused
    MSDA lowering (:mod:`deform_onnx.ops.msda.sources`).

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

    On any error ``dst`` is left as it was.

    Raises:
        ModelFileError: as :func:`lower`.
        ValueError: as :func:`lower`.
        OSError: on write errors.
    """
    src, dst = Path(src), Path(dst)
    model = read_model(src)
    in_place = dst.resolve() == src.resolve()
    external = [t for t in model.graph.initializers.values() if isinstance(t.const_value, ir.ExternalTensor)]
    src_data = {Path(t.const_value.path).resolve() for t in external}  # type: ignore[union-attr]
    model, report = lower_model(model, method=method, opset=opset, target=target, force=force, ir_version=ir_version)
    if in_place and not report.changed:
        return report
    data_name = None
    if external:
        if in_place and len({t.const_value.location for t in external}) == 1:  # type: ignore[union-attr]
            data_name = external[0].const_value.location  # type: ignore[union-attr]
        else:
            data_name = unique_name(f"{dst.name}.data", {p.name for p in src_data if p.parent == dst.parent.resolve()})
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
