"""bfloat16 models: the opset that types them, and verification against the float32 model.

ONNX types ``Conv`` (and ``GridSample``) in bfloat16 from opset 22 only: below it the
checker raises onnx's raw ``InferenceError``. torchvision's ``deform_conv2d`` has no
bfloat16 CPU kernel, so the PyTorch reference is a float32 copy of the model on the
upcast inputs; the file runs in bfloat16. ONNX Runtime's CPU provider has no bfloat16
``Conv`` (nor ``Add``: measured with onnxruntime 1.32), OpenVINO's CPU plugin runs the
file (measured on c31 as tests/test_bfloat16.py builds it: 2.0e-2 max error against the
float32 model, within the bfloat16 tolerance 8e-2 of :mod:`deform_onnx.exporting.verification`). Verification therefore tries ONNX
Runtime, then OpenVINO; with neither it raises a one-line :class:`MissingKernelError`. Only the session is
this module's (:func:`make_session`, :class:`OpenVINOSession`): the rules, the feeding by input name and the
report are :func:`deform_onnx.exporting.verification.verify`'s, as for float16.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.errors import ExportError, MissingKernelError
from ..runtimes.sessions import input_tensors
from .verification import Verified
from .verification import make_session as _ort_session
from .verification import verify as _verify

#: First default-domain opset whose Conv and GridSample take bfloat16.
MIN_OPSET = 22


def has_bfloat16(model: torch.nn.Module, args) -> bool:
    """Whether any parameter, buffer or example input of ``model`` is bfloat16."""
    tensors = [*model.parameters(), *model.buffers(), *input_tensors(args)]
    return any(t.dtype == torch.bfloat16 for t in tensors)


def choose_opset(model: torch.nn.Module, args, opset: int | None, dynamo: bool) -> int | None:
    """The opset to export a bfloat16 model at: :data:`MIN_OPSET` when none was given.

    Other models: ``opset`` unchanged.

    Raises:
        ExportError: a bfloat16 model and an opset below 22, or ``dynamo=False`` (the
            TorchScript exporter stops at opset 20, and runs torchvision's kernel,
            which has no bfloat16). Raised before any export work.
    """
    if not has_bfloat16(model, args):
        return opset
    if not dynamo:
        raise ExportError(
            f"the model is bfloat16, which ONNX types for Conv from opset {MIN_OPSET}; the TorchScript exporter "
            "stops at 20: use dynamo=True (the default), or convert the model to float32 (model.float())"
        )
    if opset is not None and opset < MIN_OPSET:
        raise ExportError(
            f"the model is bfloat16, which ONNX types for Conv from opset {MIN_OPSET}, not {opset}: "
            f"export at opset_version={MIN_OPSET} (or leave it unset), or convert the model to float32 (model.float())"
        )
    return MIN_OPSET if opset is None else opset


def verify_model(model, args, data: bytes, rtol=None, atol=None, input_names: list[str] | None = None) -> Verified:
    """:func:`deform_onnx.exporting.verification.verify`, on :func:`make_session` for a bfloat16 model."""
    session = make_session(data) if has_bfloat16(model, args) else None
    return _verify(model, args, data, rtol, atol, session=session, input_names=input_names)


def verify_bfloat16(
    model: torch.nn.Module,
    args: tuple,
    data: bytes,
    rtol=None,
    atol=None,
    *,
    session=None,
    where: str = "",
    input_names: list[str] | None = None,
) -> Verified:
    """:func:`deform_onnx.exporting.verification.verify` of a bfloat16 file, on :func:`make_session` unless ``session``.

    The rules, feeding (by name, ``input_names``) and report (``Verified.checks``) are verification's:
    each bfloat16 output against a float32 copy of ``model`` on the upcast ``args`` (torchvision has no
    bfloat16 CPU kernel, so PyTorch's own bfloat16 output is used only where it runs), within the
    bfloat16 default 8e-2 (or ``rtol``/``atol``).

    Raises:
        MissingKernelError: neither runtime can run the file (one line: ``verify=False``
            writes it unverified).
        VerificationError: an output differs beyond its tolerance, or in shape.
    """
    session = session if session is not None else make_session(data)
    return _verify(model, args, data, rtol, atol, session=session, where=where, input_names=input_names)


def make_session(data: bytes):
    """A session that runs the bfloat16 file: ONNX Runtime CPU where it has the kernels, else OpenVINO CPU.

    Raises:
        MissingKernelError: neither can run it (one line naming ``verify=False``).
    """
    session, why = _onnxruntime_session(data)
    return session if session is not None else OpenVINOSession(data, why)


def _onnxruntime_session(data: bytes):
    """``(session, "")``, or ``(None, why not)`` when ONNX Runtime is missing or lacks a kernel."""
    try:
        return _ort_session(data), ""
    except ModuleNotFoundError:
        return None, "ONNX Runtime is not installed"
    except MissingKernelError as exc:
        return None, str(exc).split(", so ")[0]


class _Port:
    def __init__(self, name: str):
        self.name = name


class OpenVINOSession:
    """OpenVINO CPU with the part of ONNX Runtime's session API that :func:`deform_onnx.runtimes.sessions.run_file`
    uses: ``get_inputs()``, ``get_outputs()`` (ONNX names), ``run(None, feeds)`` (feeds by name;
    bfloat16 as ``ml_dtypes.bfloat16`` arrays, given and returned).

    Raises:
        MissingKernelError: OpenVINO is not installed or cannot compile the file (``ort_reason``: why
            ONNX Runtime could not run it, the start of the message).
    """

    runtime = "OpenVINO"

    def __init__(self, data: bytes, ort_reason: str):
        try:
            import openvino as ov
        except ImportError:
            raise MissingKernelError(
                f"{ort_reason} and OpenVINO (which runs bfloat16 Conv) is not installed, so the bfloat16 file "
                "cannot be verified here: pip install openvino, or pass verify=False to write it unverified"
            ) from None
        core = ov.Core()
        try:
            self._compiled = core.compile_model(core.read_model(model=data), "CPU")
        except RuntimeError as exc:  # e.g. native DeformConv: no conversion rule without deform_onnx.openvino's
            import re

            found = re.search(r"No conversion rule found for operations: ([\w\-, ]*\w)", str(exc))
            why = (
                f"no conversion rule for {found.group(1).strip()}" if found else str(exc).strip().splitlines()[-1][:200]
            )
            raise MissingKernelError(
                f"{ort_reason}, and OpenVINO cannot run the bfloat16 file either ({why}), so it cannot be verified "
                "here; pass verify=False to write it unverified, or choose method='grid_sample' or 'gather'"
            ) from None
        self._request = self._compiled.create_infer_request()
        import onnx

        # The file's own names: a port may carry several (OpenVINO merges the names of folded values, and
        # its get_any_name() may be another value's: measured, 'val_19' for a dynamo export's input 'x').
        graph = (
            onnx.load(data, load_external_data=False) if isinstance(data, str) else onnx.load_from_string(data)
        ).graph
        initializers = {t.name for t in graph.initializer}
        ported = {n for p in self._compiled.inputs for n in p.get_names()}  # OpenVINO drops unused inputs
        self._inputs = [i.name for i in graph.input if i.name not in initializers and i.name in ported]
        self._outputs = [o.name for o in graph.output]

    def _port(self, ports, name: str):
        return next(p for p in ports if name in p.get_names())

    def get_inputs(self) -> list[_Port]:
        """The compiled model's inputs, as ONNX Runtime's sessions list them."""
        return [_Port(n) for n in self._inputs]

    def get_outputs(self) -> list[_Port]:
        """The compiled model's outputs, as ONNX Runtime's sessions list them."""
        return [_Port(n) for n in self._outputs]

    def run(self, output_names, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Run the compiled model on ``feeds`` (ONNX Runtime's ``run`` signature); outputs as numpy arrays."""
        from ..runtimes import _ov_input, _ov_output

        self._request.infer({self._port(self._compiled.inputs, n): _ov_input(a) for n, a in feeds.items()})
        return [_ov_output(self._request.get_tensor(self._port(self._compiled.outputs, n))) for n in self._outputs]


__all__ = [
    "MIN_OPSET",
    "ExportError",
    "choose_opset",
    "has_bfloat16",
    "make_session",
    "verify_bfloat16",
    "verify_model",
    "OpenVINOSession",
]
