"""LiteRT (``.tflite``) through litert-torch, proven in ai-edge-litert's interpreter.

``deform_onnx.export(model, args, "model.tflite")`` exports with ``torch.export``, rewrites the family into
core ATen ops (:func:`deform_onnx.decompositions`), converts the decomposed program with
``litert_torch.convert`` and runs the flatbuffer in ai-edge-litert's interpreter against PyTorch eager
before writing it. A file that fails is not written.
"""

from __future__ import annotations

import re
import time

import numpy as np

from ..builder.forms import graph_forms
from ..core.atomic_io import write_bytes_atomic
from ..core.errors import ExportError
from ..exporting.api import ExportReport
from .provenance import shared_provenance
from .torch_export import Named, eval_mode, exported, first_error, plan_sizes, prepare, prove, quiet, report_for

TITLE = "LiteRT"
#: What ``method="auto"`` writes: the gather form, measured the faster here (BENCHMARKS.md, benchmarks/formats.py).
AUTO_METHOD = "gather"
#: The graph forms the .tflite asks the lowerings for (:mod:`deform_onnx.builder.forms`): the .pte's, measured
#: faster in LiteRT too (interleaved in one process: about 15% on 64- and 256-channel DCNv2 layers). The ONNX
#: ``tflite`` target's corner-major gather and int32 rows, and the .pte's one Pad, were no faster here, and the
#: ``"quad table"`` ran slower on some DCNv2 layers (scripts/repro/litert_forms.py; BENCHMARKS.md).
FORMS = ("four corner gathers", "whole map")
#: export()'s keyword arguments a .tflite takes (litert-torch 0.10 writes static shapes here).
TAKEN = ("method", "verify", "rtol", "atol", "verify_shapes")


def output_order(ep) -> list[str] | None:
    """The names litert-torch gives the outputs of ``ep`` (converted as ``ep.module()``), in the model's order, or
    ``None`` for plain ``output_<i>`` names (a tensor, tuple or list) or when its helpers are not there.

    litert-torch names a dict's outputs by key (``_get_output_names``: ``flat_dict_names`` of the out spec), and
    the signature runner lists them sorted by name: LivePortrait's warping network returns ``{'occlusion_map',
    'deformation', 'out'}``, and its outputs were compared in the order ``deformation, occlusion_map, out``
    (refused: "LiteRT shape (1, 4, 16, 16, 3) != PyTorch shape (1, 1, 16, 16)").
    """
    try:
        from litert_torch.backend import export_utils

        spec = ep.call_spec.out_spec
        if not spec or not spec.context:
            return None
        return list(export_utils.flat_dict_names(export_utils.get_children(spec), spec.context))
    except Exception:  # noqa: BLE001 - litert-torch's private helpers: without them, the index order
        return None


def _index(name: str) -> int:
    found = re.search(r"(\d+)$", name)
    return int(found.group(1)) if found else 0


class LiteRTSession:
    """A ``.tflite`` flatbuffer in ai-edge-litert's interpreter, with ONNX Runtime's session API (for ``verify``)."""

    runtime = "LiteRT"

    def __init__(self, data: bytes, num_threads: int | None = None, output_names: list[str] | None = None):
        """``output_names``: litert-torch's names of the outputs in the model's order (:func:`output_order`); without
        them the outputs are ordered by their ``output_<i>`` index.
        """
        with quiet() as noise:
            try:
                from ai_edge_litert.interpreter import Interpreter

                interpreter = Interpreter(model_content=data, num_threads=num_threads)
                self._interpreter = interpreter  # the runner runs on it: keep it alive with the session
                self._runner = interpreter.get_signature_runner()
            except Exception as exc:  # noqa: BLE001 - the runtime's errors, any kind: its first line, said in one
                raise ExportError(f"LiteRT refused the file: {first_error(noise) or exc}") from None
        details = self._runner.get_input_details()
        self._inputs = [Named(n) for n in sorted(details, key=_index)]
        #: the dtype the file takes, per input name (litert-torch writes int64 inputs as int32)
        self._dtypes = {n: np.dtype(d["dtype"]) for n, d in details.items()}
        #: what the report says about inputs fed in another dtype than the model's
        self.notes: list[str] = []
        found = self._runner.get_output_details()
        # a dict's outputs are named by key, and the runner lists them sorted by name, not in the model's order
        ordered = output_names if output_names and sorted(output_names) == sorted(found) else sorted(found, key=_index)
        self._outputs = [Named(n) for n in ordered]

    def get_inputs(self) -> list[Named]:
        """The signature's inputs, in argument order."""
        return self._inputs

    def get_outputs(self) -> list[Named]:
        """The signature's outputs, in order."""
        return self._outputs

    def run(self, _names, feeds: dict) -> list[np.ndarray]:
        """Run the signature on ``feeds`` (by input name); numpy outputs.

        An integer feed the file takes in a narrower integer type (int64 written as int32 by litert-torch)
        is cast to it when every value fits (noted once in :attr:`notes`); one that does not fit is refused.
        """
        with quiet() as noise:
            try:
                out = self._runner(**{k: self._cast(k, np.ascontiguousarray(v)) for k, v in feeds.items()})
            except Exception as exc:  # noqa: BLE001 - the runtime's errors, any kind: its first line, said in one
                raise ExportError(f"LiteRT could not run the file: {first_error(noise) or exc}") from None
        return [np.asarray(out[o.name]) for o in self._outputs]

    def _cast(self, name: str, value: np.ndarray) -> np.ndarray:
        want = self._dtypes.get(name, value.dtype)
        if want == value.dtype or value.dtype.kind not in "iu" or want.kind not in "iu":
            return value
        info = np.iinfo(want)
        if value.size and (value.min() < info.min or value.max() > info.max):
            raise ExportError(f"LiteRT: input {name!r} is {want} in the file, and the {value.dtype} values fed "
                              f"({value.min()}..{value.max()}) do not fit it")  # fmt: skip
        note = f"LiteRT: input {name!r} is {want} in the file (the model's is {value.dtype}): feed it as {want}"
        if note not in self.notes:
            self.notes.append(note)
        return value.astype(want)


#: What a float16 model that litert-torch 0.10 cannot convert is told to do.
FLOAT16_FIX = "a float16 model does not convert here: write the float32 model (or a .pte / .onnx)"


def compact_repeat(x, repeats):
    """``x.repeat(*repeats)`` by one ``expand`` of at most ``len(repeats)`` plus one dimension per axis that is
    repeated and longer than 1 (torch's decomposition, and litert-torch's own lowering of ``aten.repeat``, expand
    over ``2 * len(repeats)`` dimensions, which LiteRT refuses above 8: "'tfl.broadcast_to' op failed to verify
    that operand 0 is at most 8-D", litert-torch 0.10.0, on InternImage's ``center_feature_scale[..., None]
    .repeat(1, 1, 1, 1, channels // group)``).
    """
    import torch

    repeats = list(repeats)
    x = x.reshape([1] * (len(repeats) - x.dim()) + list(x.shape))
    held, spread, out = [], [], []
    for size, times in zip(x.shape, repeats, strict=True):
        if times == 1 or size == 1:
            held.append(size)
            spread.append(size * times)
        else:  # a copy axis in front of the axis
            held += [1, size]
            spread += [times, size]
        out.append(size * times)
    return torch.ops.aten.clone.default(x.reshape(held).expand(spread)).reshape(out)


def square_as_mul(x, exponent):
    """``x ** exponent``, as ``x * x`` when the exponent is 2 (the value PyTorch's CPU ``pow`` computes for it).

    LiteRT's ``tfl.pow`` takes at most 4-D operands: litert-torch 0.10.0 refused LivePortrait's and First Order
    Motion Model's ``kp2gaussian`` (``(mean_sub ** 2).sum(-1)`` over ``[B, K, D, H, W, 3]``) with "failed to
    legalize operation 'tfl.pow' that was explicitly marked illegal"; ``tfl.mul`` takes up to 6-D.
    """
    import torch

    if not isinstance(exponent, bool) and exponent == 2:
        return torch.ops.aten.mul.Tensor(x, x)
    return NotImplemented  # torch.export keeps the op as it is


def argmax_of_one(x, dim=None, keepdim=False):
    """``x.argmax(dim, keepdim)`` as zeros when the axis has length 1 (every index there is 0).

    litert-torch 0.10.0 lowers an ``argmax`` over a length-1 axis to a two-result ``mhlo.reduce`` it cannot
    legalize ("failed to legalize operation 'mhlo.reduce' that was explicitly marked illegal"): S2ANet's
    ``refine_bboxes`` picks the best of ``num_anchors=1`` anchors with ``cls_score.argmax(dim=-2, keepdim=True)``
    of ``[N, H*W, 1, 1]``. Other axes keep the op (measured: it converts).
    """
    import torch

    if dim is None or x.dim() == 0 or not isinstance(x.shape[dim], int) or x.shape[dim] != 1:
        return NotImplemented
    zeros = torch.ops.aten.zeros_like.default(x, dtype=torch.int64)
    return zeros if keepdim else torch.ops.aten.squeeze.dim(zeros, dim)


def refuse_float16_conv(ep) -> None:
    """Refuse, before litert-torch runs, a program that convolves or pads a float16 tensor.

    Measured with litert-torch 0.10.0: a float16 ``convolution`` ("failed to legalize operation
    'tfl.conv_2d'", with padding 'tfl.pad') or ``pad`` (the deformable lowerings pad the map) fails its
    converter after the whole conversion ran; the float32 model converts (a float16 ``Linear`` does too).
    A litert-torch from 0.11 on is left to convert (not measured here).

    Raises:
        ExportError: the program holds a float16 convolution or pad; the message names the fix.
    """
    import importlib.metadata

    import torch
    from packaging.version import Version

    if Version(importlib.metadata.version("litert-torch")) >= Version("0.11"):
        return  # not measured on a newer converter: its own conversion decides
    aten = torch.ops.aten
    refused = (aten.convolution.default, aten.constant_pad_nd.default, aten.pad.default)
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.target not in refused or not node.args:
            continue
        val = getattr(node.args[0], "meta", {}).get("val")
        if getattr(val, "dtype", None) == torch.float16:
            raise ExportError(
                f"litert-torch 0.10 does not convert a float16 {node.target.__name__.split('.')[0]} ({node.name}): "
                + FLOAT16_FIX
            )


def convert(ep, args: tuple) -> bytes:
    """The decomposed program as ``.tflite`` bytes (litert-torch)."""
    with quiet() as noise, shared_provenance():  # its passes retrace the program: no deep copy of node histories
        try:
            import litert_torch

            model = litert_torch.convert(ep.module(), args)
            data = model.model_content()
        except Exception as exc:  # noqa: BLE001 - the runtime's errors, any kind: its first line, said in one
            line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            # measured with litert-torch 0.10.0: a float16 deformable model fails ("failed to legalize operation
            # 'tfl.pad'", the lowerings' padded map); the float32 model converts
            half = any(str(getattr(a, "dtype", "")) == "torch.float16" for a in args)
            fix = f"; {FLOAT16_FIX}" if half else ""
            raise ExportError(
                f"litert-torch could not convert the program: {first_error(noise) or line}{fix}"
            ) from None
    return bytes(data)


def write(model, args, path, **settings) -> ExportReport:
    """Write ``model`` as a LiteRT flatbuffer to ``path`` (``.tflite``), proven in LiteRT first.

    Takes ``method`` (``auto`` = ``gather`` here, ``grid_sample``, ``gather``), ``verify``, ``rtol``, ``atol``; other settings of
    :func:`deform_onnx.export` (``dynamic_shapes`` among them) are refused; ``verify_shapes`` is refused as for a
    static ONNX file. The model's training mode is restored after.

    Raises:
        ValueError: a setting a .tflite does not take, a Python number or bfloat16 input.
        ExportError: export, decomposition or conversion failed, or LiteRT refused the file.
        VerificationError: LiteRT's outputs differ from PyTorch's (nothing written).
    """
    started = time.perf_counter()
    if settings.get("dynamic_shapes") is not None:
        raise ValueError(
            "dynamic_shapes= is not taken when writing LiteRT files: they are written and proven at the "
            "example's size (write .pte or .onnx for dynamic sizes)"
        )
    import torch

    opts, args, method = prepare(TITLE, settings, TAKEN, path, args, AUTO_METHOD)
    notes: list[str] = []
    with eval_mode(model):
        plan = plan_sizes(model, args, None, opts["verify_shapes"], opts["verify"])
        with graph_forms(FORMS):
            ep = exported(
                model,
                args,
                None,
                method,
                TITLE,
                notes=notes,
                extra={
                    torch.ops.aten.repeat.default: compact_repeat,
                    torch.ops.aten.pow.Tensor_Scalar: square_as_mul,
                    torch.ops.aten.argmax.default: argmax_of_one,
                },
            )
        refuse_float16_conv(ep)
        data = convert(ep, args)
        session = LiteRTSession(data, output_names=output_order(ep))
        checks = prove(session, model, plan, opts) if opts["verify"] else []
    written = write_bytes_atomic(path, data)
    report = report_for(written, "litert", method, checks, len(data), started, ep, plan)
    report.verified = bool(checks)
    report.notes.extend(session.notes)
    report.notes.extend(notes)
    return report
