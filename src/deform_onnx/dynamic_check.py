"""The second-size check of :func:`deform_onnx.export`: a dynamic file runs, and matches PyTorch, at another size.

:mod:`deform_onnx.sizes` picks the size; :mod:`deform_onnx.frozen` names what froze
when the file fails there. Both exporters and every fallback go through
:func:`check_dynamic_file` before a file with dynamic axes is written.
"""

from __future__ import annotations

import time

import onnx
import torch

from .errors import ExportError, MissingKernelError, VerificationError
from .frozen import describe, static_dims
from .sizes import Axis, shown
from .verification import Verified, make_session, verify

#: What to do when a size froze (the end of every second-size error).
ADVICE = (
    "compute sizes from tensor shapes at run time (x.shape[-2:] in tensor arithmetic, torch.arange, "
    "ops such as deform_onnx.ops.ms_deform_attn) instead of Python numbers, torch.tensor(...) of sizes "
    "or lists built in loops; or export without dynamic axes (a static file at the example size); "
    "or give verify_shapes= sizes the model supports"
)


def static_dims_error(
    proto: onnx.ModelProto, axes: list[Axis], guards: list[str] | None = None, input_names: list[str] | None = None
) -> str | None:
    """The message when the file's graph inputs hold a requested dynamic axis fixed (``None`` when none)."""
    fixed = static_dims(proto, axes, input_names)
    if not fixed:
        return None
    named = [g for g in (guards or []) if "size()" in g and "==" in g]
    guard = f"; torch.export recorded the guard `{named[0]}`" if named else ""
    return (
        f"a requested dynamic dimension is static in the exported file: {'; '.join(fixed)} (the model's code "
        f"specialises it{guard}); {ADVICE}"
    )


def check_dynamic_file(
    model, args: tuple, data: bytes, proto: onnx.ModelProto, axes: list[Axis], second: list[tuple],
    rtol: float | None, atol: float | None, pytorch_ran: bool = False,
) -> tuple[Verified, list[Verified], float]:
    """Verify ``data`` at the example ``args`` and at each of ``second`` (``[(args, shapes), ...]``).

    Returns the example's :class:`Verified`, one per second size, and the seconds the second sizes took.
    ``pytorch_ran``: the sizes were picked by running the model there (else a PyTorch failure at a
    user-given size is reported as such, not as the file's).

    Raises:
        VerificationError: the file differs from PyTorch at the example size.
        MissingKernelError: ONNX Runtime has no kernel for some node.
        ExportError: the file fails or differs at a second size; the message names the size,
            what froze (:func:`deform_onnx.frozen.describe`) and what to do.
    """
    session = make_session(data)
    first = verify(model, args, data, rtol, atol, session=session)
    done = []
    start = time.perf_counter()
    for new_args, shapes in second:
        where = f" at {shown(shapes)}"
        try:
            if not pytorch_ran:
                with torch.no_grad():
                    model(*new_args)
        except Exception as exc:  # noqa: BLE001 - user code, at a size the user gave (verify_shapes)
            text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise ExportError(
                f"PyTorch itself fails at the second size {shown(shapes)} ({type(exc).__name__}: {text}); "
                "give verify_shapes= sizes that the model runs; no file was written"
            ) from None
        try:
            done.append(verify(model, new_args, data, rtol, atol, session=session, where=where))
        except MissingKernelError:
            raise
        except VerificationError as exc:
            raise ExportError(_second_size_message(proto, axes, shapes, str(exc).removesuffix("; no file was written")))
        except ExportError:
            raise
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime's own failure at that size (broadcast, reshape)
            problem, node = ort_failure(str(exc))
            raise ExportError(_second_size_message(proto, axes, shapes, problem, node)) from None
    return first, done, time.perf_counter() - start


def ort_failure(text: str) -> tuple[str, str | None]:
    """ONNX Runtime's run-time error in one line (``at Reshape node 'name': cannot reshape ...``) and the node name."""
    import re

    text = " ".join(text.split())
    name = re.search(r"Name:'([^']*)'", text)
    op = re.search(r"running (\w+) node", text)
    message = text.split("Status Message:", 1)[-1].strip()
    if " was false. " in message:  # ORT's source location and failed check precede the readable message
        message = message.rsplit(" was false. ", 1)[1]
    message = re.sub(r"^\S+:\d+ \S.*?\) ", "", message) if message.startswith("/") else message
    where = f" at {op.group(1) if op else 'a'} node {name.group(1)!r}" if name else ""
    return f"ONNX Runtime fails there{where}: {message[:240]}", (name.group(1) if name else None)


def _second_size_message(proto, axes: list[Axis], shapes, problem: str, node: str | None = None) -> str:
    dims = ", ".join(sorted({a.name or f"axis {a.axis}" for a in axes}))
    example = ", ".join(dict.fromkeys(f"{a.name or f'axis {a.axis}'}={a.size}" for a in axes))
    return (
        f"the file does not hold at a second size {shown(shapes)} (dynamic {dims}; export-time {example}): "
        f"{problem}; {describe(proto, axes, node)}; no file was written. What to do: {ADVICE}"
    )
