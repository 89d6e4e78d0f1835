"""bfloat16 models: the opset that types them, and verification against the float32 model.

ONNX types ``Conv`` (and ``GridSample``) in bfloat16 from opset 22 only: below it the
checker raises onnx's raw ``InferenceError``. torchvision's ``deform_conv2d`` has no
bfloat16 CPU kernel, so the PyTorch reference is a float32 copy of the model on the
upcast inputs; the file runs in bfloat16. ONNX Runtime's CPU provider has no bfloat16
``Conv`` (nor ``Add``: measured with onnxruntime 1.32), OpenVINO's CPU plugin runs the
file (measured on c31 as tests/test_bfloat16.py builds it: 2.0e-2 max error against the
float32 model, within the bfloat16 tolerance 8e-2 of :mod:`deform_onnx.verification`). Verification therefore tries ONNX
Runtime, then OpenVINO; with neither it raises a one-line :class:`MissingKernelError`.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from .errors import ExportError, MissingKernelError, VerificationError
from .verification import Verified, tolerance_for
from .verification import verify as _verify_float

#: First default-domain opset whose Conv and GridSample take bfloat16.
MIN_OPSET = 22


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def has_bfloat16(model: torch.nn.Module, args) -> bool:
    """Whether any parameter, buffer or example input of ``model`` is bfloat16."""
    tensors = [*model.parameters(), *model.buffers(), *_tensors(args)]
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


def verify_model(model, args, data: bytes, rtol=None, atol=None) -> Verified:
    """:func:`deform_onnx.verification.verify`, or :func:`verify_bfloat16` for a bfloat16 model."""
    if has_bfloat16(model, args):
        return verify_bfloat16(model, args, data, rtol, atol)
    return _verify_float(model, args, data, rtol, atol)


def verify_bfloat16(model: torch.nn.Module, args: tuple, data: bytes, rtol=None, atol=None) -> Verified:
    """Run the bfloat16 file and compare with a float32 copy of ``model`` on the upcast ``args``.

    Tolerance per output: the bfloat16 default (or ``rtol``/``atol``), against the float32
    reference (what the bfloat16 model approximates). Runtime: ONNX Runtime CPU, else
    OpenVINO CPU (which runs bfloat16 Conv).

    Raises:
        MissingKernelError: neither runtime can run the file (one line: ``verify=False``
            writes it unverified).
        VerificationError: an output differs beyond its tolerance, or in shape.
    """
    reference = copy.deepcopy(model).float().eval()
    upcast = [t.float() if t.is_floating_point() else t for t in _tensors(args)]
    with torch.no_grad():
        expected = [t.detach().float() if t.is_floating_point() else t.detach() for t in _tensors(reference(*upcast))]
    inputs = _tensors(args)
    got, ort_reason = _run_onnxruntime(data, inputs)
    if got is None:
        got = _run_openvino(data, inputs, ort_reason)
    import onnx

    graph = onnx.load(data, load_external_data=False) if isinstance(data, str) else onnx.load_from_string(data)
    names = [o.name for o in graph.graph.output]
    worst, worst_name, tolerances = 0.0, None, {}
    for name, g, reference_out in zip(names, got, expected):
        tol = tolerance_for(torch.bfloat16 if reference_out.is_floating_point() else reference_out.dtype, rtol, atol)
        tolerances[name] = tol
        e = reference_out.numpy()
        if g.shape != e.shape:
            raise VerificationError(f"output {name!r}: runtime shape {g.shape} != PyTorch shape {e.shape}")
        if e.size == 0:
            continue
        diff = np.abs(g.astype(np.float64) - e.astype(np.float64))
        diff[g == e] = 0.0
        err = float(np.nanmax(diff))
        if err >= worst:
            worst, worst_name = err, name
        if not np.all(diff <= tol.atol + tol.rtol * np.abs(e.astype(np.float64))):
            raise VerificationError(
                f"output {name!r} differs from the float32 model: max abs error {err:.3g} "
                f"(atol={tol.atol}, rtol={tol.rtol}, bfloat16); no file was written"
            )
    return Verified(worst, worst_name, tolerances)


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def _from_bits(a: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).float().numpy()


def _run_onnxruntime(data: bytes, inputs: list[torch.Tensor]) -> tuple[list[np.ndarray] | None, str]:
    """Outputs (float32 for bfloat16 ones), or ``(None, why not)`` when ONNX Runtime has no kernel."""
    import onnx

    from .ort_distribution import require
    from .verification import _missing_kernel

    try:
        ort = require()
    except ModuleNotFoundError:
        return None, "ONNX Runtime is not installed"

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        missing = _missing_kernel(str(exc), data)
        if missing is None:
            raise
        return None, missing.split(", so ")[0]
    feeds = {}
    for info, t in zip(session.get_inputs(), inputs):
        if t.dtype == torch.bfloat16:
            feeds[info.name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(_bits(t), onnx.TensorProto.BFLOAT16)
        else:
            feeds[info.name] = ort.OrtValue.ortvalue_from_numpy(t.numpy())
    outs = session.run_with_ort_values(None, feeds)
    return [_from_bits(o.numpy()) if o.data_type() == "tensor(bfloat16)" else o.numpy() for o in outs], ""


def _run_openvino(data: bytes, inputs: list[torch.Tensor], ort_reason: str) -> list[np.ndarray]:
    try:
        import openvino as ov
    except ImportError:
        raise MissingKernelError(
            f"{ort_reason} and OpenVINO (which runs bfloat16 Conv) is not installed, so the bfloat16 file cannot "
            "be verified here: pip install openvino, or pass verify=False to write it unverified"
        ) from None
    core = ov.Core()
    try:
        compiled = core.compile_model(core.read_model(model=data), "CPU")
    except RuntimeError as exc:  # e.g. native DeformConv: no conversion rule without deform_onnx.openvino's extension
        import re

        found = re.search(r"No conversion rule found for operations: ([\w\-, ]*\w)", str(exc))
        why = f"no conversion rule for {found.group(1).strip()}" if found else str(exc).strip().splitlines()[-1][:200]
        raise MissingKernelError(
            f"{ort_reason}, and OpenVINO cannot run the bfloat16 file either ({why}), so it cannot be verified here; "
            "pass verify=False to write it unverified, or choose method='grid_sample' or 'gather'"
        ) from None
    request = compiled.create_infer_request()
    feeds = []
    for t in inputs:
        if t.dtype == torch.bfloat16:
            tensor = ov.Tensor(ov.Type.bf16, list(t.shape))
            tensor.data.view(np.uint16)[...] = _bits(t)  # OpenVINO shows bf16 buffers as 16-bit numpy
            feeds.append(tensor)
        else:
            feeds.append(ov.Tensor(t.numpy()))
    request.infer(feeds)
    outs = []
    for i in range(len(compiled.outputs)):
        tensor = request.get_output_tensor(i)
        if tensor.element_type == ov.Type.bf16:
            outs.append(_from_bits(tensor.data.view(np.uint16)))
        else:
            outs.append(np.array(tensor.data))
    return outs


__all__ = ["MIN_OPSET", "ExportError", "choose_opset", "has_bfloat16", "verify_bfloat16", "verify_model"]
