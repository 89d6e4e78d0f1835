"""Export-time verification: run the file in ONNX Runtime and compare with PyTorch, per output dtype.

Default tolerances (``|ort - torch| <= atol + rtol * |torch|``, per output, by its dtype):

=========  ======  ======  =====================================================================
dtype      atol    rtol    why
=========  ======  ======  =====================================================================
float64    1e-8    1e-8    tighter than float32's resolution (eps 1.2e-7), so a float32 cast
                           hidden in the graph fails; float64 runs differ by ~1e-13
float32    1e-4    1e-4    the project's float32 rule (unit-scale outputs)
float16    1e-2    1e-2    see below: the runtime's own float16 Conv bound plus the rounding
                           of every sample
bfloat16   8e-2    8e-2    float16's bound with bfloat16's unit roundoff (2^-8, 8x float16's)
=========  ======  ======  =====================================================================

float16: PyTorch (CPU) and ONNX Runtime (CPU, which casts to float32 around ops
without a float16 kernel) both accumulate a convolution in float32 and round
the output once, so the runtime's own float16 ``Conv`` differs from PyTorch's
by up to one output ulp (2u|y|, u = 2^-11; measured: 4.9e-4 to 9.8e-4 on
unit-scale 3x3 convolutions with 16 and 64 channels). A deformable convolution
also rounds each sampled value and its product with the mask to float16 (2
roundings per term in torchvision's float16 column buffer, at least 2 in each
lowering), so the two results differ by at most ``4u * sum_k |w_k s_k| + 2u|y|``.
For the unit-scale layers the project tests (3x3 kernels, 16 input channels,
weights ~ N(0, 1/fan_in): ``sum |w s|`` about 8) that bound is about 1.7e-2;
rounding errors have random signs, so the expected worst case over a map is a
fraction of that, and 1e-2 (10 ulps at 1.0) is the default. An explicit
``rtol``/``atol`` always wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import onnx
import torch

from .errors import ExportError, MissingKernelError, VerificationError


@dataclass(frozen=True)
class Tolerance:
    """The tolerance one output was checked with: ``|ort - torch| <= atol + rtol * |torch|``.

    Attributes:
        dtype: the output's dtype name (``float32``, ...).
        rtol, atol: relative and absolute tolerance.
        explicit: ``True`` when given to ``export()``, ``False`` for the dtype's default.
    """

    dtype: str
    rtol: float
    atol: float
    explicit: bool = False


#: dtype -> (rtol, atol); the reasoning is in this module's docstring.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-8, 1e-8),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (8e-2, 8e-2),
}


def tolerance_for(dtype, rtol: float | None = None, atol: float | None = None) -> Tolerance:
    """The tolerance for an output of ``dtype`` (numpy or torch dtype, or its name).

    Integer and boolean outputs must match exactly. ``rtol``/``atol`` given here win
    over the dtype's default (each on its own).
    """
    if isinstance(dtype, torch.dtype):
        name = str(dtype).replace("torch.", "")
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:  # a name numpy does not know (bfloat16)
            name = str(dtype)
    if name == "bool" or "int" in name:
        default = (0.0, 0.0)
    else:
        default = DEFAULT_TOLERANCES.get(name, DEFAULT_TOLERANCES["float32"])
    return Tolerance(
        name,
        default[0] if rtol is None else float(rtol),
        default[1] if atol is None else float(atol),
        explicit=rtol is not None or atol is not None,
    )


def _flatten(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value.detach().cpu()]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _flatten(v)]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _flatten(v)]
    return []


def _numpy(t: torch.Tensor) -> np.ndarray:
    # numpy has no bfloat16: compare in float32, which holds every bfloat16 value exactly.
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


@dataclass
class Verified:
    """What :func:`verify` found: the worst error, its output, and each output's tolerance."""

    max_error: float
    worst_output: str | None
    tolerances: dict[str, Tolerance]


def verify(model, args: tuple, data: bytes, rtol: float | None = None, atol: float | None = None) -> Verified:
    """Run ``data`` in ONNX Runtime (CPU) on ``args`` and compare with ``model(*args)``.

    Raises:
        ExportError: ONNX Runtime has no kernel for some node at its dtype
            (named, with ``verify=False`` as the way out), or the inputs do not fit.
        ModuleNotFoundError: no ONNX Runtime distribution is installed (the message names
            the ``deform-onnx[onnxruntime]`` extra).
        VerificationError: an output's shape or values differ beyond its tolerance.
    """
    from .ort_distribution import require

    ort = require()  # whichever distribution provides it (onnxruntime, -gpu, -openvino, ...): all have the CPU EP
    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT raises its own NotImplemented / Fail types
        missing = _missing_kernel(str(exc), data)
        if missing is None:
            raise
        raise MissingKernelError(missing) from None
    feeds_in = [_numpy(t) for t in _flatten(args)]
    inputs = session.get_inputs()
    if len(inputs) > len(feeds_in):
        raise ExportError(f"the model has {len(inputs)} inputs but {len(feeds_in)} example tensors were given")
    # Exporters drop inputs that the graph does not use; keep the order of the rest.
    feeds = {i.name: a for i, a in zip(inputs, feeds_in[: len(inputs)])}
    got = session.run(None, feeds)
    with torch.no_grad():
        expected = _flatten(model(*args))
    names = [o.name for o in session.get_outputs()]
    worst, worst_name, tolerances = 0.0, None, {}
    for name, g, e in zip(names, got, expected):
        tol = tolerance_for(e.dtype, rtol, atol)
        tolerances[name] = tol
        e = _numpy(e)
        if g.shape != e.shape:
            raise VerificationError(f"output {name!r}: ONNX Runtime shape {g.shape} != PyTorch shape {e.shape}")
        if e.size == 0:
            continue
        diff = np.abs(g.astype(np.float64) - e.astype(np.float64))
        diff[g == e] = 0.0  # equal infinities (masked logits, -inf in both) match; inf - inf is NaN
        err = float(np.nanmax(diff))
        if err >= worst:
            worst, worst_name = err, name
        if not np.all(diff <= tol.atol + tol.rtol * np.abs(e.astype(np.float64))):
            source = "given" if tol.explicit else f"the {tol.dtype} default"
            raise VerificationError(
                f"output {name!r} differs from PyTorch: max abs error {err:.3g} "
                f"(atol={tol.atol}, rtol={tol.rtol}, {source}); no file was written"
            )
    return Verified(worst, worst_name, tolerances)


def _missing_kernel(text: str, data: bytes) -> str | None:
    """One line for ORT's "Could not find an implementation for Conv(11) node with name 'x'"."""
    match = re.search(r"Could not find an implementation for (\w+)\((\d+)\) node with name '([^']*)'", text)
    if match is None:
        return None
    op, _kernel_version, node_name = match.groups()  # the kernel's since-version (Conv(11)), not the file's opset
    dtype = _node_input_dtype(data, node_name)
    of = f"{dtype} " if dtype else ""
    opset = _file_opset(data)
    at = f"opset {opset}, " if opset is not None else ""
    return (
        f"ONNX Runtime (CPU) has no {of}kernel for {op} ({at}node {node_name!r}), so the "
        f"exported file cannot be verified here; pass verify=False (CLI: --no-verify) to write it unverified "
        f"(runtimes with {of}{op}: see README, Runtime support), or export the model in float32"
    )


def _file_opset(data: bytes) -> int | None:
    """The file's default-domain opset (what the message names; ORT's text names its kernel's version)."""
    try:
        proto = onnx.load_from_string(data)
    except Exception:  # noqa: BLE001 - only used to word the message
        return None
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)


def _node_input_dtype(data: bytes, node_name: str) -> str | None:
    """The element type of the named node's first input (after shape inference), e.g. ``float64``."""
    try:
        proto = onnx.shape_inference.infer_shapes(onnx.load_from_string(data))
    except Exception:  # noqa: BLE001 - only used to word the message
        return None
    node = next((n for n in proto.graph.node if n.name == node_name), None)
    if node is None or not node.input:
        return None
    infos = [*proto.graph.input, *proto.graph.value_info, *proto.graph.initializer]
    for info in infos:
        if info.name == node.input[0]:
            elem = info.data_type if isinstance(info, onnx.TensorProto) else info.type.tensor_type.elem_type
            return onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else None
    return None
