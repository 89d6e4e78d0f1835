"""When the TorchScript path fails too: one error naming each path's reason, dynamo's first.

:func:`deform_onnx.export` tries the dynamo exporter and falls back to the TorchScript one; when the
fallback fails as well, its error alone hid why dynamo was abandoned (RIFE with dynamic H/W,
hzwer/ECCV2022-RIFE#33, case c35, before module state was kept: the TorchScript fallback's
"upsample_bilinear2d() received an invalid combination of arguments" said nothing of the FakeTensor
torch.export had met). :func:`reasons_named` words that error; :func:`dynamo_hint` adds, to a TorchScript
file refused by the second-size check when the dynamo exporter was not tried, whether that exporter writes
a correct dynamic file (ultralytics' RT-DETR decoder: ``bs = len(feats)`` is a Python number in the trace,
a symbolic size in ``torch.export``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from ..core.errors import ExportError, MissingKernelError


def _text(exc: BaseException) -> str:
    if isinstance(exc, ExportError):
        return str(exc).removesuffix("; no file was written")
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def both_failed(abandoned: str, exc: BaseException, eager: Callable[[], object] | None = None) -> ExportError:
    """The error when the dynamo path was abandoned (``abandoned``: why) and the TorchScript one raised ``exc``:
    of ``exc``'s class when it is an :class:`ExportError`, else an :class:`ExportError`.

    ``eager`` runs the model in PyTorch on the export's inputs: when it raises too, the message says so first
    (DAT or TOOD cast to float16 mix float32 tensors in and fail in PyTorch itself; both exporters' errors
    alone read as an exporter's fault).
    """
    fix = untranslatable_fix(f"{abandoned} {_text(exc)}")
    message = (
        f"no exporter wrote a file: the dynamo exporter was abandoned first ({abandoned}); "
        f"then the TorchScript exporter failed: {_text(exc)}{fix}; no file was written"
    )
    if eager is not None and not isinstance(exc, ExportError):
        try:
            eager()
        except Exception as own:  # noqa: BLE001 - any failure of the model itself is the one to report
            message = (
                f"the model fails in PyTorch itself on these inputs ({_text(own)}): make it run eagerly on "
                f"inputs of this shape and dtype first; {message}"
            )
    return type(exc)(message) if isinstance(exc, ExportError) else ExportError(message)


#: What to do instead of an ATen op neither exporter translates, by op (aten name without namespace).
_INSTEAD = {
    # First Order Motion Model's jacobians, Thin-Plate-Spline Motion Model's TPS solve (torch.inverse)
    "linalg_inv": "torch.inverse has no ONNX operator: write a small matrix's inverse in closed form (2x2: "
    "[[d, -b], [-c, a]] / (a*d - b*c)), or compute it outside the model and pass it in as an input",
}
_INSTEAD["linalg_inv_ex"] = _INSTEAD["inverse"] = _INSTEAD["linalg_inv"]


def untranslatable_fix(text: str) -> str:
    """``"; <what to do>"`` when ``text`` (the exporters' errors) names an ATen op that neither exporter translates
    to ONNX (dynamo: "No ONNX function found for <OpOverload(op='aten.X'"; TorchScript: "Exporting the operator
    'aten::X' to ONNX opset version N is not supported"), else ``""``.

    Such an op is the model's own, not a deformable one deform-onnx lowers: the fix is in the model.
    """
    import re

    found = re.search(r"operator 'aten::(\w+)' to ONNX", text) or re.search(
        r"No ONNX function found for <OpOverload\(op='aten\.(\w+)'", text
    )
    if found is None:
        return ""
    op = found.group(1)
    instead = _INSTEAD.get(op) or (
        "rewrite that part of the model with ops that export, or compute it outside the model and pass the "
        "result in as an input"
    )
    return f" (aten::{op} has no ONNX translation in torch's exporters; it is not a deformable op): {instead}"


@contextlib.contextmanager
def reasons_named(abandoned: str | None, eager: Callable[[], object] | None = None) -> Iterator[None]:
    """Around the TorchScript path of an export whose dynamo path was abandoned (``abandoned``: why; ``None``:
    it was not abandoned, and errors pass unchanged, but for an op no exporter translates: then the fix is named). User errors (``ValueError``) and a runtime without a
    kernel (:class:`MissingKernelError`) pass unchanged: they name their own fix. ``eager``: see
    :func:`both_failed`.
    """
    try:
        yield
    except (ValueError, MissingKernelError):
        raise
    except Exception as exc:
        if abandoned is None:
            fix = untranslatable_fix(_text(exc))
            if fix and not isinstance(exc, ExportError):  # dynamo=False: the TorchScript exporter's error alone
                raise ExportError(f"the TorchScript exporter failed: {_text(exc)}{fix}; no file was written") from None
            raise
        raise both_failed(abandoned, exc, eager) from None


@contextlib.contextmanager
def dynamo_hint(probe: Callable[[], int] | None) -> Iterator[None]:
    """Around the dynamic-size check of a TorchScript file when the dynamo exporter was not tried.

    When the check refuses the file (an :class:`ExportError` of its own class: a second size or a static
    dimension; not a mismatch at the example size), ``probe()`` exports and checks the same model on the
    dynamo path (nothing is written) and returns the opset it held at; the error then says so. A probe
    that fails adds nothing. ``probe=None``: no probe.
    """
    try:
        yield
    except ExportError as exc:
        if probe is None or type(exc) is not ExportError:
            raise
        try:
            opset = probe()
        except Exception:  # noqa: BLE001 - the dynamo path fails too: the TorchScript error stands alone
            raise exc from None
        raise ExportError(
            f"{_text(exc)}; the dynamo exporter writes a correct dynamic file for this model: export with "
            f"dynamo=True at opset_version={opset} (exported and checked at the same sizes now); no file was written"
        ) from None


def dynamo_probe(make_dynamo_file: Callable[[int], object], has_axes: bool, tried_at: int | None, min_opset: int,
                 opset: int) -> Callable[[], int] | None:  # fmt: skip
    """For :func:`dynamo_hint`: a call that exports and checks the same model on the dynamo path at
    ``max(opset, min_opset)`` with ``make_dynamo_file(opset)`` (writing nothing) and returns that opset.

    ``None`` when the export has no dynamic axes (``has_axes``), or the dynamo exporter was tried already
    (``tried_at``: the opset it was tried at, ``None`` when it was not, and it reaches ``min_opset``).
    """
    if not has_axes or (tried_at is not None and tried_at >= min_opset):
        return None
    at = max(opset, min_opset)

    def probe() -> int:
        make_dynamo_file(at)
        return at

    return probe
