"""ExecuTorch (``.pte``): torch.export, the op family decomposed, XNNPACK, proven in ExecuTorch's runtime.

``deform_onnx.export(model, args, "model.pte")`` exports with ``torch.export``, rewrites the family into
core ATen ops (:func:`deform_onnx.decompositions`), lowers with ``to_edge_transform_and_lower`` and the
XNNPACK partitioner (the portable kernels run what XNNPACK does not take), and runs the program in
ExecuTorch's Python runtime against PyTorch eager before writing it: at the example's size and, when
``dynamic_shapes`` has a dynamic dimension, at the sizes the ONNX path picks (a non-square second size)
and at every declared ``Dim`` bound (:func:`~deform_onnx.formats.torch_export.plan_sizes`). A program
that fails, or whose memory plan cannot hold a declared bound, is not written.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from ..builder.forms import graph_forms
from ..core.atomic_io import write_bytes_atomic
from ..core.errors import ExportError
from ..exporting.api import ExportReport
from . import fast_paths, patterns, retrace, schedule
from .plan_bounds import declared_bounds
from .provenance import shared_provenance
from .torch_export import Named, eval_mode, exported, first_error, plan_sizes, prepare, prove, quiet, report_for

TITLE = "ExecuTorch"
#: What ``method="auto"`` writes: the gather form, measured the faster here (BENCHMARKS.md, benchmarks/formats.py).
AUTO_METHOD = "gather"
#: The graph forms the .pte asks the lowerings for (:mod:`deform_onnx.builder.forms`): what XNNPACK takes.
FORMS = ("four corner gathers", "whole map", "float row index", "table by one Pad")
#: export()'s keyword arguments a .pte takes.
TAKEN = ("method", "dynamic_shapes", "verify", "rtol", "atol", "verify_shapes")


def missing_kernels(data: bytes) -> list[str]:
    """The operators the program ``data`` (a serialized ``.pte``) calls outside its delegates that this ExecuTorch
    runtime has no kernel for (``aten::avg_pool3d.out``), sorted; empty when none or when it cannot tell.

    ExecuTorch's ``load_method`` says only "error: 0x14" (``Error::OperatorMissing``); LivePortrait's dense motion
    (an ``nn.AvgPool3d`` in its hourglass) was refused so, without the op's name.
    """
    try:
        from executorch.exir._serialize._program import deserialize_pte_binary
        from executorch.extension.pybindings import portable_lib

        have = set(portable_lib._get_operator_names())
        program = deserialize_pte_binary(data)
        program = getattr(program, "program", program)  # executorch >= 1.0 wraps it with its named data
        called = {
            o.name + (f".{o.overload}" if o.overload else "") for p in program.execution_plan for o in p.operators
        }
    except Exception:  # noqa: BLE001 - private APIs of the runtime; without them the runtime's own error stands
        return []
    return sorted(called - have)


class ExecuTorchSession:
    """An ExecuTorch program loaded in its Python runtime, with ONNX Runtime's session API (for ``verify``)."""

    runtime = "ExecuTorch (XNNPACK)"

    def __init__(self, data: bytes):
        with quiet() as noise:
            try:
                from executorch.runtime import Runtime  # its import logs to stderr too

                # The method points into the program: keep both (a freed program crashes the method's run).
                self._program = Runtime.get().load_program(data)
                self._method = self._program.load_method("forward")
            except Exception as exc:  # noqa: BLE001 - the runtime's errors, any kind: its first line, said in one
                missing = missing_kernels(data)
                if missing:
                    raise ExportError(
                        f"ExecuTorch has no kernel for {', '.join(missing)} (an op of the model's own, not a "
                        "deformable one; the runtime refused the program with OperatorMissing): rewrite that part "
                        "with ops ExecuTorch runs, build your runtime with a kernel for it, or export to .onnx "
                        "instead"
                    ) from None
                why = _backend_failure(noise) or first_error(noise) or exc
                raise ExportError(f"ExecuTorch refused the program: {why}") from None
        meta = self._method.metadata
        counts = [meta.num_inputs, meta.num_outputs]
        n_in, n_out = (c() if callable(c) else c for c in counts)
        self._inputs = [Named(f"input_{i}") for i in range(n_in)]
        #: the largest input sizes ExecuTorch's memory plan holds (per input; a dynamic one at its declared
        #: bound, :mod:`.plan_bounds`: 160 of 256 on the bundled example's H before the plan was sized so).
        self.planned = [list(meta.input_tensor_meta(i).sizes()) for i in range(n_in)]
        self._outputs = [Named(f"output_{i}") for i in range(n_out)]

    def get_inputs(self) -> list[Named]:
        """The program's inputs, in order."""
        return self._inputs

    def get_outputs(self) -> list[Named]:
        """The program's outputs, in order."""
        return self._outputs

    def run(self, _names, feeds: dict) -> list[np.ndarray]:
        """Execute ``forward`` on ``feeds`` (by input name); numpy outputs."""
        tensors = [torch.from_numpy(np.ascontiguousarray(feeds[i.name])) for i in self._inputs]
        with quiet() as noise:
            try:
                outputs = self._method.execute(tensors)
            except Exception as exc:  # noqa: BLE001 - the runtime's errors, any kind: its first line, said in one
                at = ", ".join("x".join(map(str, t.shape)) for t in tensors)
                raise ExportError(
                    f"ExecuTorch could not run the program at {at}: {first_error(noise) or exc}"
                ) from None
        return [o.detach().numpy() if isinstance(o, torch.Tensor) else np.asarray(o) for o in outputs]


def lower(ep) -> bytes:
    """An exported, decomposed program as ExecuTorch bytes (XNNPACK partitioner, portable kernels for the rest).

    XNNPACK's partitions are cut so that each delegate reads a few megabytes of portable results at most,
    and the program runs each portable result right before the delegate that reads it
    (:mod:`~deform_onnx.formats.schedule`: each gather's rows weighted while still in the caches).

    The program's constant subgraphs are folded first (ExecuTorch's ``constant_prop_pass``): XNNPACK takes a
    ``mm``/``linear`` only when its weight is a constant, and the lowerings reshape and slice the layer's
    weight per tap (measured on a DCNv2 layer: every ``mm`` ran on the portable kernels before). A folded
    constant that is a view into a larger storage is copied (:func:`compact_constants`: XNNPACK read it from
    the storage's start). Then a ``where`` with a one-element constant branch gets it as ``full_like`` of the other branch
    (:func:`~deform_onnx.formats.fast_paths.full_where_branches`: the portable kernel's fast path), and the NaN
    guards' ``where(eq(p, p), ...)`` test ``isnan(p)`` instead (:func:`~deform_onnx.formats.fast_paths.isnan_guards`).

    The memory plan is sized from the declared ``Dim`` ranges (:mod:`~deform_onnx.formats.plan_bounds`: a
    backend retrace's fake convolution narrowed them). While it lowers, node provenance is shared rather than
    deep-copied (:mod:`~deform_onnx.formats.provenance`), XNNPACK's example subgraphs that the program cannot
    match are not built (:mod:`~deform_onnx.formats.patterns`) and ExecuTorch's traces of the program that would
    decompose nothing are skipped (:mod:`~deform_onnx.formats.retrace`): the same program, written sooner.

    Measured with executorch 1.5.1: XNNPACK refuses a reshape with more than one dynamic dimension
    ("XNNPACK reshape only supports 1 dynamic dimension"): an error naming the limit, not a fallback. The
    lowerings reshape the sampled map as one ``N*H*W`` axis, so a DCNv2 layer with N, H and W dynamic
    lowers and runs at its bounds; a model's own reshape with two dynamic dimensions meets the limit. A trailing
    ``unsqueeze_copy`` that XNNPACK's partitioner takes but its serializer refuses for the same reason stays on
    the portable kernels (:func:`~deform_onnx.formats.schedule.xnnpack_can_serialize`).
    """
    with quiet():
        from executorch.exir.passes.constant_prop_pass import constant_prop_pass

    with torch.no_grad():  # folded from parameters: plain tensors (the lowering deep-copies them)
        ep = constant_prop_pass(ep)
    compact_constants(ep)
    fast_paths.full_where_branches(ep)
    fast_paths.isnan_guards(ep)
    ops = patterns.Ops()  # the edge program's ops: XNNPACK's examples it cannot match are not built
    with quiet():
        cut = schedule.partitioner(ops)  # records them before it partitions
    try:
        # shared: no deep copy of node histories; the program is functional: no trace that would change nothing
        with shared_provenance(), patterns.unmatchable_skipped(ops), retrace.idle_retraces_skipped(ep):
            return _lowered(ep, [cut])
    except ExportError as exc:
        if "dynamic dimension" in str(exc):  # XNNPACK's sentence, without the one it leaves unfinished
            head = str(exc).split(". This may occur")[0]
            raise ExportError(
                f"{head}: a reshape of the model's has two dynamic dimensions (make one dimension dynamic, e.g. H"
                " only: deform_onnx.export(..., dynamic_shapes=...), or export to .onnx)"
            ) from None
        raise


def _backend_failure(lines: list[str]) -> str | None:
    """The XNNPACK backend's first failure line in captured output: why a method did not load.

    ExecuTorch's own error says only "Failed to load method forward, error: 0x:1"; the backend's log line before
    it names the cause ("[XNNCompiler.cpp:664] Failed to define tensor 85 with code:
    xnn_status_unsupported_parameter").
    """
    return next((ln.strip() for ln in lines if "XNN" in ln and "fail" in ln.lower()), None)


def _edge_config():
    """ExecuTorch's edge settings, its Python size functions (``torch.sym_float``, ``torch.sym_max``, ...) let through.

    executorch 1.5.1's edge verifier refuses every Python function in the graph but ``alloc``
    ("AssertionError" from ``check_valid_edge_op``), also the size functions that its own ``to_executorch``
    maps to ``executorch_prim`` ops (``EdgeToBackendOpsPass``) and its runtime runs. A dynamic size reaches
    them through model code (``torch.linspace(0.5, h - 0.5, h)`` of a level's size ``h``: ``sym_float``) and
    through :mod:`deform_onnx.exporters.size_ranges` (``sym_max``). The verifier's exception list takes them;
    every other check stays.
    """
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.passes.executorch_prim_ops_registry import _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS

    functions = [op for op in _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS if callable(op) and op.__module__ == "torch"]
    return EdgeCompileConfig(_core_aten_ops_exception_list=functions)


def compact_constants(ep) -> None:
    """Give each constant of ``ep`` that is a view into a larger storage its own copy (in place).

    ``constant_prop_pass`` folds a split of a parameter into views of the parameter's storage: the value part
    of ``nn.MultiheadAttention``'s ``in_proj_weight`` (``w.split([E, 2 * E])`` in ``_in_projection_packed``,
    self-attention of every DETR decoder layer) is ``in_proj_weight[E:]``, at a storage offset. XNNPACK
    serializes such a weight from the start of its storage (measured with executorch 1.5.1: a ``linear`` on
    the second part of a split parameter ran 4.2 off PyTorch, a Deformable-DETR decoder layer's output 1.3 off;
    ExecuTorch's portable kernels read it right). A copy of each such view has its own storage.
    """
    for name, tensor in list(ep.constants.items()):
        if isinstance(tensor, torch.Tensor) and _is_view(tensor):
            ep.constants[name] = tensor.detach().clone(memory_format=torch.contiguous_format)


def _is_view(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is not the whole storage it holds.

    A permuted whole storage is not a view here: the program's later views were traced on its strides, and a
    contiguous copy broke RF-DETR's decoder (case c36).
    """
    whole = tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
    return bool(tensor.storage_offset() != 0 or not whole)


def _lowered(ep, partitioner: list, passes: list | None = None) -> bytes:
    declared = dict(ep.range_constraints)  # the Dim ranges: what the memory plan must hold (plan_bounds)
    with quiet() as noise:
        try:
            from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

            with torch.no_grad():  # the passes fold constants from parameters: plain tensors (deep-copied later)
                edge = to_edge_transform_and_lower(
                    ep, transform_passes=passes, partitioner=partitioner, compile_config=_edge_config()
                )
                schedule.reorder(edge.exported_program().graph_module)
                program = edge.to_executorch(ExecutorchBackendConfig(sym_shape_eval_pass=declared_bounds(declared)))
        except Exception as exc:  # noqa: BLE001 - the runtime's errors, any kind: its first line, said in one
            line = " ".join(str(exc).strip().split())[:200] or type(exc).__name__
            raise ExportError(f"ExecuTorch could not lower the program: {first_error(noise) or line}") from None
    return bytes(program.buffer)


def write(model, args, path, **settings) -> ExportReport:
    """Write ``model`` as an ExecuTorch program to ``path`` (``.pte``), proven in ExecuTorch first.

    Takes ``method`` (``auto`` = ``gather`` here, ``grid_sample``, ``gather``), ``dynamic_shapes`` (torch.export Dims with
    bounds), ``verify``, ``rtol``, ``atol``, ``verify_shapes``; other settings of :func:`deform_onnx.export` are
    refused. With dynamic dimensions the program is proven at the sizes of
    :func:`~deform_onnx.formats.torch_export.plan_sizes` (a non-square second size, each declared ``Dim``
    bound). The model's training mode is restored after.

    Raises:
        ValueError: a setting a .pte does not take, a Python number or bfloat16 input.
        ExportError: export, decomposition or lowering failed, ExecuTorch refused the program, or its memory
            plan does not hold a declared upper bound (the message names the largest size that runs).
        VerificationError: ExecuTorch's outputs differ from PyTorch's at a checked size (nothing written).
    """
    started = time.perf_counter()
    opts, args, method = prepare(TITLE, settings, TAKEN, path, args, AUTO_METHOD)
    notes: list[str] = []
    with eval_mode(model):
        plan = plan_sizes(model, args, opts["dynamic_shapes"], opts["verify_shapes"], opts["verify"])
        with graph_forms(FORMS):
            ep = exported(model, args, opts["dynamic_shapes"], method, TITLE, core=False, notes=notes)
        data = lower(ep)
        checks = prove(ExecuTorchSession(data), model, plan, opts) if opts["verify"] else []
    written = write_bytes_atomic(path, data)
    report = report_for(written, "executorch", method, checks, len(data), started, ep, plan)
    report.verified = bool(checks)
    report.notes.extend(notes)
    return report
