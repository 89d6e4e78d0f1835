"""``export(model, args, "m.xml")``: OpenVINO IR (``.xml`` + ``.bin``), verified in OpenVINO against PyTorch.

The model is exported to ONNX through the normal path (verified in ONNX Runtime; a dynamic
file also at a second size) with target :data:`ONNX_TARGET` unless a target is given. The IR
is then, for a static export without a target, ``openvino.convert_model`` of the PyTorch module
(the fastest correct form measured: BENCHMARKS.md's deployed-runtimes block); otherwise, or when
that conversion fails or differs from PyTorch, the ONNX file converted with ``openvino``
(:func:`deform_onnx.openvino.read_model`: the conversion extension maps ``DeformConv`` to
OpenVINO's own ``DeformableConvolution``, so the IR needs no extension to load). Either is
saved uncompressed (float32 weights) with its precision written in (:func:`pin_f32`: a plain
``Core().compile_model(xml, "CPU")`` runs it in f32 also on CPUs whose default is bf16), read back
by a plain ``openvino.Core`` with no config and run on the same inputs as PyTorch (and at each
second size the ONNX check used); every output is compared in its own dtype (integers exactly,
float64 at 1e-8), and the report's errors are the IR's own. ``report.notes`` says which form
was written. ``.xml`` and ``.bin`` are written both or neither.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..core.atomic_io import commit_copies
from ..core.errors import VerificationError

__all__ = ["FASTEST_FORM", "ONNX_TARGET", "pin_f32", "plugin_forms", "write"]

#: The IR form a static ``.xml`` export without a target takes first: ``openvino.convert_model`` of the
#: PyTorch module. BENCHMARKS.md's deployed-runtimes block times the three forms on the DCNv2 shapes (one run):
#: convert_model 0.56x ONNX Runtime's native time (geomean), the extension's DeformableConvolution 0.72x,
#: the standard-op file (target ``openvino``) 0.78x; all three within 1e-4 of PyTorch.
FASTEST_FORM = "convert_model"
#: The ONNX file's target (and the IR's form when convert_model does not serve: dynamic sizes, a target
#: given, a conversion that fails or differs): DCN as OpenVINO's native DeformableConvolution (the extension).
ONNX_TARGET = "openvino-extension"


def write(model, args, path, **settings: Any):
    """Export ``model`` to ONNX, convert it to OpenVINO IR, verify the IR in OpenVINO, write ``.xml`` + ``.bin``.

    Args:
        model: the module (as for :func:`deform_onnx.export`).
        args: its example inputs.
        path: the ``.xml`` path; the weights go to the same name with ``.bin``.
        **settings: :func:`deform_onnx.export`'s other keywords (``target`` defaults to :data:`ONNX_TARGET`;
            ``verify=False`` skips both the ONNX Runtime and the OpenVINO check, and the IR is the ONNX file's).

    Returns:
        The ONNX export's :class:`~deform_onnx.ExportReport` with ``path`` (the ``.xml``), ``format="openvino"``,
        ``file_size`` (``.xml`` + ``.bin``) and ``runtimes`` (a line saying the OpenVINO check's version and error).

    Raises:
        VerificationError: OpenVINO's result differs from PyTorch's beyond the export's tolerance (nothing written).
        ExportError, ValueError: as :func:`deform_onnx.export`.
    """
    import openvino as ov

    from ..core.atomic_io import check_output_path
    from ..exporting.api import export
    from ..runtimes.openvino import read_model

    path = Path(path)
    check_output_path(path)
    args = args if isinstance(args, tuple) else (args,)
    verify = settings.get("verify", True)
    static = settings.get("dynamic_shapes") is None and settings.get("dynamic_axes") is None
    first = verify and static and settings.get("target") is None  # convert_model: only where it is proved
    settings["target"] = settings.get("target") or ONNX_TARGET
    settings.pop("format", None)
    if settings.get("verify_runtimes") is None:  # the IR itself runs in OpenVINO below: no second OpenVINO run
        settings["verify_runtimes"] = ()
    tol = settings.get("rtol"), settings.get("atol")
    with tempfile.TemporaryDirectory(prefix="deform-onnx-ir-") as tmp:
        onnx_path = Path(tmp) / f"{path.stem}.onnx"
        report = export(model, args, onnx_path, format="onnx", **settings)
        xml = Path(tmp) / f"{path.stem}.xml"
        if first:
            first = _try_convert_model(model, args, xml, report, tol)
        if not first:
            ir = read_model(onnx_path)
            pin_f32(ir)
            ov.save_model(ir, str(xml), compress_to_fp16=False)
            if verify:
                report.runtimes.append(_verify(xml, model, args, report, *tol))
            report.notes.append(f"OpenVINO IR: the ONNX file (target {settings['target']!r}) converted by OpenVINO")
        _commit([(xml, path), (xml.with_suffix(".bin"), path.with_suffix(".bin"))])
    report.path, report.format = path, "openvino"
    report.runtime, report.verified = (f"OpenVINO {ov.__version__}", True) if verify else (None, False)
    report.file_size = path.stat().st_size + path.with_suffix(".bin").stat().st_size
    return report


def _try_convert_model(model, args: tuple, xml: Path, report, tol: tuple) -> bool:
    """Write ``openvino.convert_model`` of the module to ``xml`` and verify it; ``False`` (with a note) if not."""
    import openvino as ov

    from ..exporters.calls import quiet

    try:
        with quiet():  # convert_model traces the module: torch.jit's FutureWarnings and the model's TracerWarnings
            ir = ov.convert_model(model, example_input=args)
        pin_f32(ir)
        ov.save_model(ir, str(xml), compress_to_fp16=False)
        report.runtimes.append(_verify(xml, model, args, report, *tol))
    except Exception as exc:  # noqa: BLE001 - the ONNX file's IR is the fallback; the note says why
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        report.notes.append(f"OpenVINO IR: convert_model of the PyTorch module did not serve ({why}); the ONNX "
                            "file's IR instead")  # fmt: skip
        return False
    report.notes.append("OpenVINO IR: openvino.convert_model of the PyTorch module (the fastest correct form "
                        "measured, BENCHMARKS.md), verified against PyTorch; the ONNX file was verified too")  # fmt: skip
    return True


def _verify(xml: Path, model, args: tuple, report, rtol: float | None, atol: float | None) -> str:
    """Run the IR as a user does (a plain ``openvino.Core``, no config) at each size the ONNX check used; one line.

    Every output is compared in its own dtype (:func:`_compare`: integers exactly, float64 at 1e-8, ...), and the
    report's ``max_error``/``worst_output``/``tolerances``/``checks`` become the IR's own (the ONNX file's worst
    error stays in ``notes``).
    """
    import openvino as ov
    import torch

    from ..exporting.sizes import inputs_at
    from ..exporting.verification import OutputCheck, tolerance_for
    from ..runtimes.sessions import _numpy, output_tensors

    compiled = ov.Core().compile_model(str(xml), "CPU")  # no config: the IR's own markers keep it in f32 (pin_f32)
    version = ov.get_version().split("-")[0]
    shapes = report.checked_shapes[1:]  # the second sizes the ONNX file was checked at (dynamic exports)
    names = list(report.tolerances)
    worst, worst_name, tolerances, checks = 0.0, None, {}, {}
    for call in [args, *(inputs_at(args, s) for s in shapes)]:
        with torch.no_grad():
            want = [_numpy(t) for _, t in output_tensors(model(*call))]
        feeds = [t.detach().numpy() for t in call if isinstance(t, torch.Tensor)]
        got = _run_ir(compiled, feeds)
        if len(got) != len(want):
            raise VerificationError(f"OpenVINO IR has {len(got)} outputs, PyTorch {len(want)}; nothing was written")
        names = names if len(names) == len(want) else [f"output {i}" for i in range(len(want))]
        for name, g, w in zip(names, got, want, strict=True):
            tol = tolerance_for(w.dtype, rtol, atol)
            ok, err = _compare(g, w, tol)
            rescued = not ok and _by_export_rules(model, call, feeds, names, got, version, rtol, atol)
            if not ok and not rescued:
                raise VerificationError(
                    f"OpenVINO {version} (a plain Core{_precision_note(compiled)}) runs the IR's output {name!r} "
                    f"{'with shape ' + str(g.shape) if g.shape != w.shape else f'{err:.3g} off'} PyTorch "
                    f"(its {g.dtype} vs PyTorch's {w.dtype}; tolerance {tol.atol:g} + {tol.rtol:g}*|torch|, "
                    f"{tol.dtype} rule) at input shapes {[tuple(t.shape) for t in feeds]}; nothing was written"
                )
            tolerances[name] = tol
            if call is args:
                rule = (
                    "export's float64 rule (PyTorch float32 is as far off)" if rescued else f"the {tol.dtype} tolerance"
                )
                checks[name] = OutputCheck("pytorch", err, None, f"OpenVINO {version} (IR, plain Core): within {rule} "
                                           "of PyTorch")  # fmt: skip
            if err >= worst:
                worst, worst_name = err, name
    if report.max_error is not None:
        report.notes.append(f"the ONNX file the IR came from: max abs error {report.max_error:.2g} in ONNX Runtime")
    report.max_error, report.worst_output, report.tolerances, report.checks = worst, worst_name, tolerances, checks
    return f"openvino {version} (IR, plain Core): max abs error {worst:.2g}"


def _by_export_rules(model, call: tuple, feeds: list, names: list, got: list, version: str, rtol, atol) -> bool:
    """Whether the IR's outputs on ``call`` pass the rules ``export`` holds ONNX Runtime to (a float32 output within 2x
    PyTorch float32's own error against a float64 copy: ASTER's ill-conditioned TPS rectifier, 3.4e-4 off PyTorch
    float32 like the ONNX file ONNX Runtime passed), judged by :func:`~deform_onnx.exporting.verification.verify`.
    """
    from ..core.errors import ExportError
    from ..exporting.verification import verify
    from ..runtimes.sessions import ReplaySession

    if any(g.dtype != np.float32 for g in got) or len(names) != len(got):
        return False
    session = ReplaySession([f"input {i}" for i in range(len(feeds))], list(zip(names, got)), f"OpenVINO {version}")
    try:
        verify(model, call, b"", rtol, atol, session=session)
    except (VerificationError, ExportError):
        return False
    return True


def _precision_note(compiled) -> str:
    """``", whose default on this CPU is bf16: ..."`` naming the layers that ran below f32 and the file's nodes they
    came from, when the plain Core's default precision is not f32, else ``""``.
    """
    from ..runtimes.openvino import inference_precision

    used = inference_precision(compiled)
    if used in ("f32", "float32", "default"):
        return ""
    layers = _layers_at(compiled, used)
    which = f"; here {', '.join(layers)} ran {used}" if layers else ""
    return (f", whose default on this CPU is {used}: the IR's f32 marks (pin_f32) hold only on the nodes the file "
            "holds (and on the standard ops plugin_forms writes for the plugin's own rewrites), not on nodes "
            "OpenVINO's CPU plugin makes of its internal ops or by fusing while compiling (FullyConnected from a "
            f"Linear's MatMul and bias Add, attention's snippets Subgraph, PowerStatic from a Divide){which}; write "
            "the .onnx file instead and compile it with INFERENCE_PRECISION_HINT=f32, or pass rtol/atol for that "
            "precision (Python)")  # fmt: skip


def _layers_at(compiled, precision: str) -> list[str]:
    """``"FullyConnected (from '__module.l/aten::linear/Add')"`` for each layer type of ``compiled``'s runtime model
    that ran at ``precision``, with the first of the file's nodes it came from (and how many more); ``[]`` where it
    cannot tell.
    """
    try:
        found: dict[str, list[str]] = {}
        for op in compiled.get_runtime_model().get_ordered_ops():
            info = op.get_rt_info()
            kind, ran = info["layerType"].astype(str), info["runtimePrecision"].astype(str)
            if ran == precision and kind not in ("Reorder", "Const", "Input", "Output"):
                origin = info["originalLayersNames"].astype(str).split(",")[0] or op.get_friendly_name()
                found.setdefault(kind, []).append(origin)
    except Exception:  # noqa: BLE001 - an OpenVINO without these rt_info keys: the note stays general
        return []
    return [f"{kind} (from {names[0]!r}{f' and {len(names) - 1} more' if len(names) > 1 else ''})"
            for kind, names in sorted(found.items())]  # fmt: skip


def _compare(got: np.ndarray, want: np.ndarray, tol) -> tuple[bool, float]:
    """Whether ``got`` matches ``want`` under ``tol`` (:func:`deform_onnx.proof.compare.compare_output`: shape,
    precision, every element), and the max abs error.
    """
    from ..proof.compare import compare_output

    result = compare_output("", got, want, tol)
    return result.ok, result.max_error


def pin_f32(ov_model) -> None:
    """Write float32 inference into ``ov_model`` so that a plain ``Core().compile_model(xml, "CPU")`` honours it.

    Two marks: the model's ``runtime_options`` get ``INFERENCE_PRECISION_HINT=f32`` (what the IR asks for, read by
    tools; OpenVINO 2026.4's CPU plugin does not apply it: its ``Config::applyRtInfo`` reads only the KV-cache and
    dynamic-quantization keys of ``runtime_options``, and OpenVINO documents the precision as a compile-time hint,
    "Precision Control" at docs.openvino.ai), and every node gets OpenVINO's ``disable_fp16_compression`` mark
    (rt_info key ``precise_0``; saved as ``DisablePrecisionConversion``), which the CPU plugin honours: on a CPU with
    bf16 (AMX) a plain Core then keeps each node in f32. Measured here (Xeon with AMX, OpenVINO 2026.4.1, a 3-layer
    conv net): plain Core 3.4e-3 to 4.7e-3 off PyTorch without the marks, 4.2e-7 with them. Issue 35 measured a
    DCNv2 block's ONNX file 0.07-0.16 off (0.30 at a second size) and its .xml 0.048 under a plain Core there.

    The mark is not copied to nodes the plugin's transformations make while compiling, so those run bf16. Where a
    transformation only rewrites an op into another standard op, the file holds that op already
    (:func:`plugin_forms`: ``MaxPool`` v8/v14 without its indices as v1, a ResNet-vd stem's; ``Softmax`` v8 as v1;
    ``Interpolate`` v11 as v4; grouped ``Slice``s as one ``VariadicSplit``; ``GroupNormalization`` as its ``MVN``
    decomposition), or a form the plugin runs as it stands (a channels-last LayerNorm's ``MVN`` over a rank-3 view),
    and it keeps the mark. Nodes the plugin makes of its own internal ops, or by fusing, stay unmarked (measured
    there): a Linear's ``MatMul`` with its bias ``Add`` (``FullyConnected``), attention (a snippets ``Subgraph``
    with a ``Transpose``, from ``ScaledDotProductAttention``'s decomposition or ``MatMul``/``Softmax``), a
    ``Divide`` by a tensor (``Power`` -1, then the internal ``PowerStatic``; a ``Power`` in the file too), a
    per-channel ``Multiply``/``Divide`` by a constant after a conv (a depthwise ``Convolution``), and in a dynamic
    ``grid_sample`` form the ``Eltwise`` made of ``Broadcast``; :func:`write` then refuses, naming them.
    """
    plugin_forms(ov_model)
    ov_model.set_rt_info("f32", ["runtime_options", "INFERENCE_PRECISION_HINT"])
    for op in ov_model.get_ops():
        op.get_rt_info()["precise_0"] = ""


def plugin_forms(ov_model) -> int:
    """Replace, in place, the ops OpenVINO's CPU plugin would rewrite into other standard ops while compiling (where
    the new node would lose :func:`pin_f32`'s mark) by what it makes of them; the number of ops replaced.

    ``MaxPool`` v8/v14 whose indices nothing reads becomes ``MaxPool`` v1 (rounding ``floor`` or ``ceil``, no
    dilation: the plugin keeps v14's ``ceil_torch``, and its mark), ``Softmax`` v8 becomes v1 (axis made
    non-negative; a static rank), ``Interpolate`` v11 becomes v4 (:func:`_interpolate_v4`), ``Slice``s tiling an
    axis become a ``VariadicSplit`` (:func:`_grouped_slices_to_split`), ``GroupNormalization`` becomes
    ``Reshape``/``MVN``/``Reshape``/``Multiply``/``Add`` (:func:`_group_norm_decomposed`), and an ``MVN`` over the
    last axis of a rank-4 tensor is written over a rank-3 view, which the plugin runs as it stands
    (:func:`_mvn_last_axis_3d`). Same semantics (the new op's output shape is checked against the old one's),
    friendly name and tensor names; an op this OpenVINO cannot rewrite so (another version's attributes) stays as
    it is (the IR is verified either way). The model is constant-folded first, as the plugin does (the ONNX
    exporter computes a chunk's bounds and a LayerNorm's axes from shapes).

    Measured (Xeon with AMX, OpenVINO 2026.4.1, plain Core, conv-op-conv nets): a ResNet-vd stem's ``MaxPool`` v14
    ran bf16, 3.5e-3 off PyTorch, as v1 f32 and 3.6e-7 off; ``Softmax`` v8 between two bias-free Linears 1.3e-4,
    as v1 7e-9; a bilinear ``Interpolate`` v11 2.1e-3, as v4 1.2e-7; two channel ``Slice``s 3.3e-3, as a
    ``VariadicSplit`` 3.6e-7; ``GroupNorm`` 5.4e-3, decomposed 4.8e-7; a channels-last LayerNorm 7.3e-3, over a
    rank-3 view 3.6e-7; TinyDCN's ``grid_sample`` form (target openvino, static) was refused, now 7.7e-7.
    """
    from openvino.passes import ConstantFolding, Manager

    manager = Manager()
    manager.register_pass(ConstantFolding())
    manager.run_passes(ov_model)
    replaced = 0
    for op in ov_model.get_ordered_ops():
        try:
            new = _plugin_form(op)
        except Exception:  # noqa: BLE001 - another OpenVINO's attribute names or signatures: the op stays
            new = None
        if new is None or new.get_output_partial_shape(0) != op.get_output_partial_shape(0):
            continue
        new.set_friendly_name(op.get_friendly_name())
        names = op.output(0).get_names()
        op.output(0).replace(new.output(0))
        new.output(0).get_tensor().set_names(names)
        replaced += 1
    replaced += _grouped_slices_to_split(ov_model)
    if replaced:
        ov_model.validate_nodes_and_infer_types()
    return replaced


def _plugin_form(op):
    """The node :func:`plugin_forms` writes for ``op`` (its output 0 replaces ``op``'s), or ``None``."""
    import openvino.opset1 as ops1

    kind, version = op.get_type_name(), op.get_type_info().version_id
    if kind == "MaxPool" and version != "opset1" and not op.output(1).get_target_inputs():
        a = op.get_attributes()
        if str(a["rounding_type"]).lower() in ("floor", "ceil") and all(d == 1 for d in a["dilations"]):
            return ops1.max_pool(op.input_value(0), a["strides"], a["pads_begin"], a["pads_end"], a["kernel"],
                                 str(a["rounding_type"]).lower(), a["auto_pad"])  # fmt: skip
    elif kind == "Softmax" and version != "opset1" and op.get_input_partial_shape(0).rank.is_static:
        rank = op.get_input_partial_shape(0).rank.get_length()
        return ops1.softmax(op.input_value(0), int(op.get_attributes()["axis"]) % rank)
    elif kind == "Interpolate" and version == "opset11":
        return _interpolate_v4(op)
    elif kind == "GroupNormalization" and op.get_input_partial_shape(0).rank.is_static:
        return _group_norm_decomposed(op)
    elif kind == "MVN" and version == "opset6":
        return _mvn_last_axis_3d(op)
    return None


def _grouped_slices_to_split(ov_model) -> int:
    """OpenVINO's ``GroupedSliceToVSplitOptimization`` written into the file: ``Slice``s (v8) of one tensor along one
    axis with constant scalar start/stop, step 1, that tile that axis (a static dimension) without gap or overlap
    become one ``VariadicSplit``; the number of Slices replaced.
    """
    import openvino.opset1 as ops1

    groups: dict[tuple[int, int, int], list[tuple[int, int, Any]]] = {}
    for op in ov_model.get_ordered_ops():
        try:
            found = _slice_span(op)
        except Exception:  # noqa: BLE001 - as in plugin_forms: the Slice stays
            found = None
        if found is not None:
            source = op.input_value(0)
            key = (source.get_node().get_instance_id(), source.get_index(), found[0])
            groups.setdefault(key, []).append((found[1], found[2], op))
    replaced = 0
    for (_, _, axis), slices in groups.items():
        slices.sort(key=lambda item: (item[0], item[1]))
        source = slices[0][2].input_value(0)
        size = source.get_partial_shape()[axis].get_length()
        edges = [0] + [stop for _, stop, _ in slices]
        if len(slices) < 2 or [start for start, _, _ in slices] != edges[:-1] or edges[-1] != size:
            continue
        lengths = np.diff(np.array(edges, np.int64))
        split = ops1.variadic_split(source, np.int64(axis), lengths)
        for i, (_, _, op) in enumerate(slices):
            names = op.output(0).get_names()
            op.output(0).replace(split.output(i))
            split.output(i).get_tensor().add_names(names)
        replaced += len(slices)
    return replaced


def _slice_span(op) -> tuple[int, int, int] | None:
    """``(axis, start, stop)`` of ``op`` if it is a ``Slice`` (v8) with constant scalar start/stop/axis and step 1
    along a static dimension (start and stop made non-negative and clamped as OpenVINO does), else ``None``.
    """
    if op.get_type_name() != "Slice" or op.get_type_info().version_id != "opset8" or op.get_input_size() != 5:
        return None
    shape = op.get_input_partial_shape(0)
    if shape.rank.is_dynamic:
        return None
    values = []
    for i in (1, 2, 3, 4):
        node = op.input_value(i).get_node()
        if node.get_type_name() != "Constant" or node.get_output_shape(0) not in ([1], []):
            return None
        values.append(int(np.asarray(node.data).reshape(-1)[0]))
    start, stop, step, axis = values
    axis = axis % shape.rank.get_length()
    if step != 1 or shape[axis].is_dynamic:
        return None
    size = shape[axis].get_length()
    start, stop = (min(max(v + size if v < 0 else v, 0), size) for v in (start, stop))
    return axis, start, stop


def _interpolate_v4(op):
    """The ``Interpolate`` v4 that OpenVINO's ``ConvertInterpolate11ToInterpolate4`` makes of the v11 ``op`` (the unused
    sizes or scales input all ones), or ``None`` where it would not (a mode v4 lacks, an axes or rank not static).
    """
    import openvino.opset1 as ops1
    import openvino.opset10 as ops10

    a = op.get_attributes()
    axes = op.input_value(2) if op.get_input_size() == 3 else None
    shape = axes.get_partial_shape() if axes is not None else _rank_shape(op.get_input_partial_shape(0))
    if str(a["mode"]) not in ("nearest", "linear", "linear_onnx", "cubic") or shape is None or not shape.is_static:
        return None
    count = shape.to_shape()[0]
    if str(a["shape_calculation_mode"]) == "scales":
        sizes, scales = ops1.constant(np.ones(count, np.int32)), op.input_value(1)
    else:
        sizes, scales = op.input_value(1), ops1.constant(np.ones(count, np.float32))
    keys = ("mode", "shape_calculation_mode", "pads_begin", "pads_end", "coordinate_transformation_mode",
            "nearest_mode", "antialias", "cube_coeff")  # fmt: skip
    return ops10.interpolate(op.input_value(0), sizes, scales, axes=axes, **{k: a[k] for k in keys})


def _group_norm_decomposed(op):
    """OpenVINO's ``GroupNormalizationDecomposition`` of the ``GroupNormalization`` ``op`` (data ``[N, C, ...]``
    reshaped to ``[N * groups, C / groups, ...]``, ``MVN`` v6 over all but the first axis, eps inside the square root,
    reshaped back, times scale plus bias as ``[C, 1, ...]``), or ``None`` below rank 3.
    """
    import openvino.opset1 as ops1
    import openvino.opset3 as ops3
    import openvino.opset6 as ops6

    rank = op.get_input_partial_shape(0).rank.get_length()
    if rank < 3:
        return None
    a = op.get_attributes()
    data, groups = op.input_value(0), np.array([int(a["num_groups"])], np.int64)
    shape = ops3.shape_of(data, "i64")
    dims = ops1.split(shape, np.int64(0), rank).outputs()
    grouped = ops1.concat([ops1.multiply(dims[0], groups), ops1.divide(dims[1], groups), *dims[2:]], 0)
    normed = ops6.mvn(ops1.reshape(data, grouped, True), np.arange(1, rank, dtype=np.int64), True,
                      float(np.float32(a["epsilon"])), "inside_sqrt")  # fmt: skip
    spread = np.arange(1, rank - 1, dtype=np.int64)
    scaled = ops1.multiply(ops1.reshape(normed, shape, True), ops1.unsqueeze(op.input_value(1), spread))
    return ops1.add(scaled, ops1.unsqueeze(op.input_value(2), spread))


def _mvn_last_axis_3d(op):
    """An ``MVN`` v6 over only the last axis of a rank-4+ tensor (a channels-last LayerNorm: InternImage's, ConvNeXt's)
    as the same ``MVN`` over the last axis of that tensor reshaped to ``[N, -1, C]`` and reshaped back, or ``None``.
    OpenVINO's CPU plugin decomposes the rank-4 form while compiling (``ReduceMean``, ``Subtract``, its internal
    ``RMS``: unmarked, bf16 under a plain Core on an AMX CPU) and runs the rank-3 one as it stands.
    """
    import openvino.opset1 as ops1
    import openvino.opset3 as ops3
    import openvino.opset6 as ops6

    shape, axes = op.get_input_partial_shape(0), op.input_value(1).get_node()
    if shape.rank.is_dynamic or shape.rank.get_length() < 4 or axes.get_type_name() != "Constant":
        return None
    rank = shape.rank.get_length()
    if [int(a) % rank for a in np.asarray(axes.data).reshape(-1)] != [rank - 1] or shape[rank - 1].is_dynamic:
        return None
    a = op.get_attributes()
    flat = ops1.reshape(op.input_value(0), np.array([0, -1, shape[rank - 1].get_length()], np.int64), True)
    normed = ops6.mvn(flat, np.array([2], np.int64), a["normalize_variance"], a["eps"], a["eps_mode"])
    return ops1.reshape(normed, ops3.shape_of(op.input_value(0), "i64"), False)


def _rank_shape(shape):
    """``[rank]`` as an OpenVINO shape for a static-rank ``shape``, else ``None``."""
    import openvino as ov

    return ov.PartialShape([shape.rank.get_length()]) if shape.rank.is_static else None


def _run_ir(compiled, feeds: list[np.ndarray]) -> list[np.ndarray]:
    """The compiled IR's outputs on ``feeds``, in order."""
    result = compiled(feeds)
    return [np.asarray(result[o]) for o in compiled.outputs]


def _commit(pairs: list[tuple[Path, Path]]) -> None:
    """Copy each ``(source, destination)`` beside its destination under a temporary name, then rename all
    (:func:`~deform_onnx.core.atomic_io.commit_copies`: a new file's mode, not the temporary file's 0600).
    """
    commit_copies(pairs[::-1])  # the .bin first: an .xml never points at missing weights
