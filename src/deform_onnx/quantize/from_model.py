""":func:`deform_onnx.quantize` of a PyTorch model: export the file the INT8 form is made from, then quantize it."""

from __future__ import annotations

import tempfile
from pathlib import Path


def is_module(src) -> bool:
    """Whether ``src`` is a ``torch.nn.Module`` (without importing torch for a path)."""
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(src, torch.nn.Module)


def export_for_quantization(model, args, folder: str | Path, target: str) -> Path:
    """Write the float file quantize starts from: native ``DeformConv`` at opset 19 where ONNX Runtime has the
    kernel (quantize lowers it in its INT8 form; the export is verified there), else the default export
    (grid_sample at 17; quantize rebuilds its recorded layers, :mod:`.rebuild`). Returns its path.

    Raises:
        what :func:`deform_onnx.export` raises (nothing is written to the user's folders).
    """
    from ..exporting.api import export
    from .lowering import ort_has_deform_conv

    path = Path(folder) / "float.onnx"
    if not isinstance(args, tuple):
        args = (args,)
    native = target in ("onnxruntime", "openvino") and ort_has_deform_conv()
    if native:
        export(model, args, path, method="native", opset_version=19)
    else:
        export(model, args, path)
    return path


def quantize_model(model, dst, calibration, *, args, target: str | None, **kwargs):
    """:func:`~.api.quantize` of ``model`` exported by :func:`export_for_quantization` (see there)."""
    from ..core.atomic_io import check_output_path
    from .api import TARGETS, quantize

    if args is None:
        raise ValueError(f"src is a PyTorch module ({type(model).__name__}): pass its example inputs, args=(x,)")
    target = target or "onnxruntime"
    if target not in TARGETS:
        raise ValueError(f"target {target!r}: use one of {', '.join(TARGETS)}")
    want = ".xml" if target == "openvino" else ".onnx"
    if Path(dst).suffix != want:
        raise ValueError(
            f"dst {dst}: target {target!r} writes a {want} file; name it {Path(dst).with_suffix(want).name}"
        )
    check_output_path(dst, "dst")  # before the export
    with tempfile.TemporaryDirectory(prefix="deform_onnx_quantize_model_") as tmp:
        path = export_for_quantization(model, args, tmp, target)
        report = quantize(path, dst, calibration, target=target, **kwargs)
    report.src = f"{type(model).__name__} (exported: {'native DeformConv' if report.rebuilt == 0 else 'default'})"
    return report
