"""Exceptions of :func:`deform_onnx.export` and of the checks that run before it."""


class ExportError(RuntimeError):
    """The export did not produce a valid model; no file was written."""


class VerificationError(ExportError):
    """The exported model's ONNX Runtime outputs differ from PyTorch's; no file was written."""


class UndefinedReferenceError(VerificationError):
    """PyTorch gives NaN/Inf (in float64 too) where the file gives other values: the model is undefined at those
    inputs (a division by a size of 1, say), so nothing proves the file there; no file was written.
    """


class MissingKernelError(ExportError):
    """ONNX Runtime has no kernel for a node of the exported model at its dtype, so it cannot be verified."""


class TargetLacksError(MissingKernelError, ValueError):
    """The target's runtime has no kernels for a feature of the model (``Target.lacks``: deformable sampling on
    ``hailo``, bfloat16 on ``onnxruntime``); raised before any export.

    A :class:`MissingKernelError` and a ``ValueError``: a refusal of the target, as its faults and rules are, so
    the CLI answers it as a user error (one line, exit code 2), not as a failed export row.
    """


class BadModuleInput(ValueError):
    """A module of the model got arguments or tensors its op cannot take (an op's ``module_checks``).

    Raised by a forward pre-hook while the exporter runs the model; :func:`raise_bad_module_input`
    unwraps it from the exporter's own error.
    """


def raise_bad_module_input(exc: BaseException) -> None:
    """Re-raise a :class:`BadModuleInput` that an exporter wrapped (as cause or context), as a plain one-line
    ``ValueError``; return when ``exc`` holds none.
    """
    inner: BaseException | None = exc
    while inner is not None and not isinstance(inner, BadModuleInput):
        inner = inner.__cause__ or inner.__context__
    if inner is not None:
        raise ValueError(str(inner)) from None
