"""Core ML (``.mlpackage``) through coremltools: converted and validated, **not run** (no Core ML on Linux).

``deform_onnx.export(model, args, "model.mlpackage")`` exports with ``torch.export``, rewrites the family
into core ATen ops (:func:`deform_onnx.decompositions`), writes bicubic 4-D ``grid_sample`` as its 16-tap
gather form (Core ML samples bilinear and nearest only:
:func:`~deform_onnx.ops.grid_sample.decompose.bicubic_decompositions`), carries rank-6 tensors at rank 5
(Core ML's limit; :func:`~deform_onnx.formats.rank.lower_rank`) and converts the program with
``coremltools.convert`` (ML program, iOS 17), which builds and validates the MIL program. Core ML
predictions need macOS, so the package is never run here: the report says ``verified=False`` and notes
it; instead the exact program converted is run in PyTorch against the model before the conversion
(:class:`ProgramSession`, the same comparison as every file), and a note gives its error.
coremltools 9.0's torch.export frontend has no ``grid_sampler_2d`` entry (only TorchScript's
``grid_sampler``; :func:`_alias_grid_sampler_2d` maps it) and no ``prod`` (:func:`_register_prod`), and takes
no max pooling without a stride (:func:`explicit_pool_strides`).
The package computes in float32 (``compute_precision=FLOAT32``; coremltools' own default is float16)
unless ``precision="float16"``. A region of rank-6 tensors the rewrite cannot carry and a rank-6 input are
refused in one line.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from ..core.errors import ExportError
from ..exporting.api import ExportReport
from .rank import MAX_RANK, lower_rank
from .torch_export import (
    Named,
    check_inputs,
    check_settings,
    eval_mode,
    exported,
    first_error,
    plan_sizes,
    prove,
    quiet,
    report_for,
    resolved,
)

TITLE = "Core ML"
#: export()'s keyword arguments a .mlpackage takes.
TAKEN = ("method", "verify", "verify_shapes", "precision", "rtol", "atol")
NOTE = "Core ML: converted and validated by coremltools, not run (Core ML predictions need macOS)"
#: What ``method="auto"`` writes (the gather form's rank-6 tensors are beyond Core ML's rank 5).
AUTO_METHOD = "grid_sample"
#: ``precision=`` values (coremltools' compute precisions) and what the report says of each.
PRECISION_NOTES = {
    "float32": "Core ML: computes in float32 (compute_precision=FLOAT32; coremltools' default is float16)",
    "float16": "Core ML: computes in float16 (precision='float16'): outputs are float16, about 1e-3 relative",
}
PRECISIONS = tuple(PRECISION_NOTES)


def _alias_grid_sampler_2d() -> None:
    """Let coremltools' torch.export frontend convert ``aten.grid_sampler_2d`` with its ``grid_sampler`` op."""
    from coremltools.converters.mil.frontend.torch import ops
    from coremltools.converters.mil.frontend.torch.torch_op_registry import _TORCH_OPS_REGISTRY, register_torch_op

    if "grid_sampler_2d" in _TORCH_OPS_REGISTRY:
        return

    def grid_sampler_2d(context, node):
        return ops.grid_sampler(context, node)

    register_torch_op(grid_sampler_2d)


def _register_prod() -> None:
    """Let coremltools convert ``aten.prod.dim_int`` (``reduce_prod``): 9.0 has no ``prod`` conversion, and
    Deformable DETR's ``level_start_index`` is ``spatial_shapes.prod(1).cumsum(0)``.
    """
    from coremltools.converters.mil import Builder
    from coremltools.converters.mil.frontend.torch.ops import _get_inputs
    from coremltools.converters.mil.frontend.torch.torch_op_registry import _TORCH_OPS_REGISTRY, register_torch_op

    if "prod.dim_int" in _TORCH_OPS_REGISTRY:
        return

    def prod(context, node):
        inputs = _get_inputs(context, node, min_expected=1)
        axes = None if len(inputs) < 2 else [int(inputs[1].val)]
        keep = bool(inputs[2].val) if len(inputs) > 2 and inputs[2] is not None else False
        context.add(Builder.reduce_prod(x=inputs[0], axes=axes, keep_dims=keep, name=node.name))

    register_torch_op(prod, torch_alias=["prod.dim_int"])


def explicit_pool_strides(ep) -> None:
    """Give each max pooling of ``ep`` without a stride its stride (the kernel size, PyTorch's default), in place.

    ``F.max_pool2d(x, 2)`` (the Spatial Transformer tutorial's, and many classifiers') is
    ``max_pool2d_with_indices(x, [2, 2])`` in the program, its default arguments dropped; coremltools 9.0's
    converter takes three arguments at least ("node max_pool2d_with_indices got 2 input(s), expected minimum 3
    inputs"). The same op with the stride written computes the same values.
    """
    aten = torch.ops.aten
    pools = {aten.max_pool1d.default, aten.max_pool2d.default, aten.max_pool3d.default,
             aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default}  # fmt: skip
    changed = False
    for node in ep.graph.nodes:
        if node.op == "call_function" and node.target in pools and len(node.args) == 2 and "stride" not in node.kwargs:
            node.args = (*node.args, list(node.args[1]))
            changed = True
    if changed:
        ep.graph_module.recompile()


def convert(ep, folder: Path, precision: str = "float32") -> None:
    """Convert the decomposed program and save it as the ``.mlpackage`` ``folder``.

    ``precision``: the ML program's compute precision, ``"float32"`` or ``"float16"`` (coremltools'
    default is float16: a float32 model would compute and return float16).
    """
    with quiet() as noise:
        try:
            import coremltools as ct

            _alias_grid_sampler_2d()
            _register_prod()
            compute = ct.precision.FLOAT32 if precision == "float32" else ct.precision.FLOAT16
            mlmodel = ct.convert(
                ep, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17, compute_precision=compute
            )
            mlmodel.save(str(folder))
        except Exception as exc:  # noqa: BLE001 - the runtime's errors, any kind: its first line, said in one
            line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ExportError(f"coremltools could not convert the program: {first_error(noise) or line}") from None


class ProgramSession:
    """The exact program handed to coremltools, run in PyTorch, with ONNX Runtime's session API (for ``verify``).

    Core ML does not run here; what can be proven is that the program converted (decomposed, rank-lowered:
    :mod:`.rank`) computes what the model computes.
    """

    runtime = "PyTorch (the program converted to Core ML)"

    def __init__(self, ep, args: tuple):
        from torch.utils._pytree import tree_flatten

        self._module = ep.module()
        leaves, self._spec = tree_flatten(args)
        self._tensor_at = [i for i, a in enumerate(leaves) if isinstance(a, torch.Tensor)]
        self._leaves = leaves
        self._inputs = [Named(f"input_{i}") for i in range(len(self._tensor_at))]
        self._outputs = [Named(f"output_{i}") for i in range(len(ep.graph_signature.user_outputs))]

    def get_inputs(self) -> list[Named]:
        """The program's tensor inputs, in order."""
        return self._inputs

    def get_outputs(self) -> list[Named]:
        """The program's outputs, in order."""
        return self._outputs

    def run(self, _names, feeds: dict) -> list[np.ndarray]:
        """Run the program on ``feeds`` (by input name); numpy outputs, flattened as the model's are."""
        from torch.utils._pytree import tree_unflatten

        from ..runtimes.sessions import output_tensors

        leaves = list(self._leaves)
        for at, named in zip(self._tensor_at, self._inputs, strict=True):
            leaves[at] = torch.from_numpy(np.ascontiguousarray(feeds[named.name]))
        with torch.no_grad():
            out = output_tensors(self._module(*tree_unflatten(leaves, self._spec)))
        return [t.numpy() for _, t in out]


def check_ranks(args: tuple) -> None:
    """A one-line ``ValueError`` for an input of rank > 5, which a Core ML model cannot take (before any work)."""
    from ..runtimes.sessions import input_tensors

    for i, t in enumerate(input_tensors(args)):
        if t.dim() > MAX_RANK:
            raise ValueError(
                f"{TITLE}: input {i} has rank {t.dim()} ({'x'.join(map(str, t.shape))}); Core ML takes tensors of "
                f"rank <= {MAX_RANK}: pass it with two axes merged and split them in the model, or export to .onnx"
            )


def _without_bicubic(ep, notes: list[str]):
    """``ep`` with bicubic 4-D ``grid_sample`` decomposed (Core ML samples bilinear and nearest only), or as it is."""
    from ..ops.grid_sample.decompose import BICUBIC, bicubic_decompositions
    from .decompose import eager_strides

    if not any(n.target is torch.ops.aten.grid_sampler_2d.default and n.args[2] == BICUBIC for n in ep.graph.nodes):
        return ep
    try:
        ep = ep.run_decompositions({op: eager_strides(fn) for op, fn in bicubic_decompositions().items()})
    except Exception as exc:
        raise ExportError(f"{TITLE}: decomposing bicubic grid_sample failed: {str(exc).strip()[:300]}") from exc
    notes.append(
        "Core ML: bicubic grid_sample written as its 16-tap gather form (Core ML samples bilinear/nearest only)"
    )
    return ep


def _rank_lowered(ep) -> list[str]:
    """:func:`~.rank.lower_rank` on ``ep``; the report's note, or a one-line ``ExportError`` for a rank-6 region left."""
    done, left = lower_rank(ep)
    if left:
        raise ExportError(
            f"{TITLE}: the program holds tensors of rank > {MAX_RANK}, which Core ML cannot hold, and deform-onnx "
            f"cannot carry them at rank {MAX_RANK} ({'; '.join(left)}); merge two axes in the model there, "
            "or export to .onnx / .pte / .tflite; nothing was written"
        )
    return [f"Core ML: {done} region(s) of rank-6 tensors carried at rank 5 (two axes merged)"] if done else []


def _program_note(checks) -> str:
    worst = max(c.max_error for c in checks)
    return (
        f"the program converted (decomposed, rank <= {MAX_RANK}) ran in PyTorch and matched the model within its "
        f"tolerance (max error {worst:.3g}); Core ML itself did not run it"
    )


def _folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def write(model, args, path, **settings) -> ExportReport:
    """Convert ``model`` to a Core ML package at ``path`` (``.mlpackage``); it is not run (see the module).

    Takes ``method`` (``auto`` = ``grid_sample``), ``precision`` (``"float32"``, the default, or ``"float16"``:
    the package's compute precision, said in the report's notes), ``verify``, ``rtol``, ``atol``. Core ML
    cannot run here: ``verify`` runs the exact program handed to coremltools (decomposed, and with rank-6
    tensors carried at rank 5: :mod:`.rank`) in PyTorch against the model, before the conversion, and a note
    gives its error; ``report.verified`` stays ``False`` (the package itself did not run). The package is written to a temporary folder beside ``path`` and renamed:
    complete or absent. The model's training mode is restored after.

    Raises:
        ValueError: a setting a .mlpackage does not take, an unknown ``precision``, a Python number,
            bfloat16 or rank > 5 input.
        ExportError: export, decomposition or conversion failed, or rank-6 tensors the rank rewrite cannot
            carry (nothing written).
        VerificationError: the converted program differs from the model in PyTorch (nothing written).
    """
    started = time.perf_counter()
    opts = check_settings(TITLE, settings, TAKEN)
    precision = opts["precision"] or "float32"
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: a Core ML package computes in one of {', '.join(PRECISIONS)}")
    if not isinstance(path, str | os.PathLike):
        raise ValueError(f"{TITLE} packages are written to a path, not a file object")
    target = Path(path)
    if not target.parent.is_dir():
        raise FileNotFoundError(f"output folder {target.parent} does not exist; create it first")
    args = args if isinstance(args, tuple) else (args,)
    check_inputs(TITLE, args)
    check_ranks(args)
    method = resolved(opts["method"], AUTO_METHOD)
    notes: list[str] = []
    with eval_mode(model):
        plan = plan_sizes(model, args, None, opts["verify_shapes"], False)  # verify_shapes= as for a static file
        ep = exported(model, args, None, method, TITLE, notes=notes)
        ep = _without_bicubic(ep, notes)
        explicit_pool_strides(ep)
        notes.extend(_rank_lowered(ep))
        if opts["verify"]:
            notes.append(_program_note(prove(ProgramSession(ep, args), model, plan, opts)))
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            convert(ep, staging / target.name, precision)
            old = staging / "previous"
            if target.exists():
                os.replace(target, old)
            os.replace(staging / target.name, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    report = report_for(target, "coreml", method, [], _folder_size(target), started, ep)
    report.verified = False
    report.notes.append(NOTE)
    report.notes.append(PRECISION_NOTES[precision])
    report.notes.extend(notes)
    return report
