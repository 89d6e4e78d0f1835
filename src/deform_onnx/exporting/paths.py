"""The two paths one export takes: the dynamo exporter first, the TorchScript exporter when it cannot serve.

:func:`produce` runs the dynamo path (:func:`_dynamo_file`: export, convert down,
check, verify) and, when that raises :class:`DynamoUnfit` and the fallback is allowed,
the TorchScript path (:func:`_torchscript_file`) with a warning naming why. Each
path's file is finished (:func:`.finish.finish`) and verified by the export's
:class:`~.dynamic_check.SizeCheck` before :func:`produce` returns it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import onnx

from ..conversion import ConversionError
from ..core.errors import ExportError, MissingKernelError, raise_bad_module_input
from ..exporters import torchscript as _torchscript
from ..exporters.calls import capture_errors, cause, export_dynamo, export_torchscript
from ..exporters.dynamo import MIN_OPSET as DYNAMO_MIN_OPSET
from ..exporters.guards import FixedDynamicSize, parameter_names
from . import sizes
from .dynamic_check import SizeCheck
from .fallback_errors import dynamo_hint, dynamo_probe, reasons_named
from .finish import finish
from .large import ExternalSink
from .options import ExportOptions
from .verification import Verified


class DynamoUnfit(Exception):
    """The dynamo path cannot serve this export (the message says why); the TorchScript one may."""


@dataclass
class Produced:
    """A finished, verified file and how it was made.

    Attributes:
        proto: the model.
        data: the serialized model, or (over 2 GiB) the path of the file beside its data.
        verified: the verification at the example size (``None`` without verify).
        repairs: down-conversion adapters applied on the dynamo path, then the target's graph repairs.
        exporter: ``"dynamo"`` or ``"torchscript"``, the one that made the file.
        fallback_reason: why the dynamo path was abandoned, if it was.
    """

    proto: onnx.ModelProto
    data: bytes | str
    verified: Verified | None
    repairs: list = field(default_factory=list)
    exporter: str = "dynamo"
    fallback_reason: str | None = None


def produce(model, args: tuple, opts: ExportOptions, sized: SizeCheck, sink: ExternalSink | None) -> Produced:
    """The export's file: the dynamo path's, else (with ``opts.fallback``) the TorchScript path's.

    Raises:
        ExportError: the dynamo path cannot serve and the fallback is not allowed or not possible, or
            the TorchScript path's file fails its checks (naming the dynamo path's reason too).
        ValueError: a lowering or an op's module check refused the model (either path).
    """
    reason: str | None = None
    if opts.dynamo:
        try:
            return _dynamo_file(model, args, opts, sized, sink)
        except DynamoUnfit as exc:
            reason = str(exc)
        # outside the except: no chained traceback on the ExportError
        _check_fallback(reason, opts)
        warnings.warn(
            f"deform_onnx: {reason}; falling back to the TorchScript exporter "
            "(it records the branches taken for the example inputs)",
            stacklevel=5,  # produce <- _export_eval <- export <- keeping_state's wrapper <- the caller of export()
        )
    return _torchscript_file(model, args, opts, sized, sink, reason)


def _dynamo_file(model, args: tuple, opts: ExportOptions, sized: SizeCheck, sink: ExternalSink | None) -> Produced:
    """Export, validate and verify on the dynamo path, or raise :class:`DynamoUnfit` naming why not.

    User errors (``ValueError``) and a runtime without a kernel (:class:`MissingKernelError`) pass
    through: the TorchScript exporter would meet them too.
    """
    if opts.opset < DYNAMO_MIN_OPSET:
        raise DynamoUnfit(
            f"the dynamo exporter reaches opset {DYNAMO_MIN_OPSET} at the lowest, not {opts.opset} "
            "(it builds at 18 and onnx's version converter has no Reshape adapter below 14)"
        )
    try:
        proto, repairs = export_dynamo(model, args, opts, sink=sink, notes=sized.notes, guards=sized.guards)
    except capture_errors() as exc:
        raise_bad_module_input(exc)
        raise DynamoUnfit(f"torch.export could not capture the model ({cause(exc)})") from None
    except FixedDynamicSize as exc:  # the dynamo file would be wrong at other sizes (exporters/guards.py)
        raise DynamoUnfit(str(exc)) from None
    except ConversionError as exc:
        raise DynamoUnfit(f"the dynamo export cannot be converted down to opset {opts.opset}: {exc}") from None
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - any other failure of torch's exporter: TorchScript may still work
        raise_bad_module_input(exc)
        raise DynamoUnfit(f"the dynamo exporter failed ({cause(exc)})") from None
    try:
        data, repaired = finish(proto, opts, sink)
        verified = sized.run(model, args, data, proto, opts)
    except MissingKernelError:
        raise
    except ExportError as exc:  # VerificationError, a static dimension, a second size: TorchScript's file may hold
        raise DynamoUnfit(f"the dynamo export failed its check ({exc})") from None
    return Produced(proto, data, verified, [*repairs, *repaired])


def _eager(model, args: tuple) -> object:
    """The model run in PyTorch on the export's inputs (a trailing dict: keyword arguments, as torch.onnx reads it)."""
    import torch

    with torch.no_grad():
        if args and isinstance(args[-1], dict):
            return model(*args[:-1], **args[-1])
        return model(*args)


def _torchscript_file(
    model, args: tuple, opts: ExportOptions, sized: SizeCheck, sink: ExternalSink | None, abandoned: str | None
) -> Produced:
    """Export, validate and verify with the TorchScript exporter; ``abandoned``: why the dynamo path was left."""
    names = opts.input_names if opts.input_names is not None else parameter_names(model, len(args))
    axes = opts.dynamic_axes
    if axes is None and opts.dynamic_shapes is not None:
        axes = sizes.dynamic_shapes_to_axes(opts.dynamic_shapes, names)
    ts_opts = opts.replace(input_names=names, dynamic_axes=axes)
    # hook (issue 30): each path's reason, dynamo's first; whether dynamo=True holds where TorchScript froze
    probe = dynamo_probe(
        lambda at: _dynamo_file(model, args, opts.replace(opset=at), sized, None),
        bool(sized.axes),
        opts.opset if opts.dynamo else None,
        DYNAMO_MIN_OPSET,
        opts.opset,
    )
    with reasons_named(abandoned, lambda: _eager(model, args)), dynamo_hint(probe):
        proto = export_torchscript(model, args, ts_opts, sink=sink)
        data, repaired = finish(proto, ts_opts, sink)
        verified = sized.run(model, args, data, proto, ts_opts)
    return Produced(proto, data, verified, repaired, exporter="torchscript", fallback_reason=abandoned)


def _check_fallback(reason: str, opts: ExportOptions) -> None:
    """Raise :class:`ExportError` when the TorchScript fallback is not allowed or not possible."""
    if not opts.fallback:
        raise ExportError(f"{reason}; pass fallback=True or dynamo=False to use the TorchScript exporter") from None
    if opts.opset > _torchscript.MAX_OPSET:
        raise ExportError(
            f"{reason} and the TorchScript fallback supports opset <= {_torchscript.MAX_OPSET}, not {opts.opset}"
        ) from None
