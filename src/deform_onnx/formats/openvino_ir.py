"""``export(model, args, "m.xml")``: OpenVINO IR (``.xml`` + ``.bin``), verified in OpenVINO against PyTorch.

The model is exported to ONNX through the normal path (verified in ONNX Runtime; a dynamic
file also at a second size) with target :data:`ONNX_TARGET` unless a target is given. The IR
is then, for a static export without a target, ``openvino.convert_model`` of the PyTorch module
(the fastest correct form measured: BENCHMARKS.md's deployed-runtimes block); otherwise, or when
that conversion fails or differs from PyTorch, the ONNX file converted with ``openvino``
(:func:`deform_onnx.openvino.read_model`: the conversion extension maps ``DeformConv`` to
OpenVINO's own ``DeformableConvolution``, so the IR needs no extension to load). Either is
saved uncompressed (float32 weights), read back by a plain ``openvino.Core`` and run on the
same inputs as PyTorch (and at each second size the ONNX check used); ``report.notes`` says
which form was written. ``.xml`` and ``.bin`` are written both or neither.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..core.atomic_io import commit_copies
from ..core.errors import VerificationError

__all__ = ["FASTEST_FORM", "ONNX_TARGET", "write"]

#: The IR form a static ``.xml`` export without a target takes first: ``openvino.convert_model`` of the
#: PyTorch module. BENCHMARKS.md's deployed-runtimes block times the three forms on the DCNv2 shapes (one run):
#: convert_model 0.56x ONNX Runtime's native time (geomean), the extension's DeformableConvolution 0.72x,
#: the standard-op file (target ``openvino``) 0.78x; all three within 1e-4 of PyTorch.
FASTEST_FORM = "convert_model"
#: The ONNX file's target (and the IR's form when convert_model does not serve: dynamic sizes, a target
#: given, a conversion that fails or differs): DCN as OpenVINO's native DeformableConvolution (the extension).
ONNX_TARGET = "openvino-extension"


def write(model, args, path, **settings: Any):
    """Export ``model`` to ONNX, convert it to OpenVINO IR, verify the IR in OpenVINO, write ``.xml`` + ``.bin``.

    Args:
        model: the module (as for :func:`deform_onnx.export`).
        args: its example inputs.
        path: the ``.xml`` path; the weights go to the same name with ``.bin``.
        **settings: :func:`deform_onnx.export`'s other keywords (``target`` defaults to :data:`ONNX_TARGET`;
            ``verify=False`` skips both the ONNX Runtime and the OpenVINO check, and the IR is the ONNX file's).

    Returns:
        The ONNX export's :class:`~deform_onnx.ExportReport` with ``path`` (the ``.xml``), ``format="openvino"``,
        ``file_size`` (``.xml`` + ``.bin``) and ``runtimes`` (a line saying the OpenVINO check's version and error).

    Raises:
        VerificationError: OpenVINO's result differs from PyTorch's beyond the export's tolerance (nothing written).
        ExportError, ValueError: as :func:`deform_onnx.export`.
    """
    import openvino as ov

    from ..core.atomic_io import check_output_path
    from ..exporting.api import export
    from ..runtimes.openvino import read_model

    path = Path(path)
    check_output_path(path)
    args = args if isinstance(args, tuple) else (args,)
    verify = settings.get("verify", True)
    static = settings.get("dynamic_shapes") is None and settings.get("dynamic_axes") is None
    first = verify and static and settings.get("target") is None  # convert_model: only where it is proved
    settings["target"] = settings.get("target") or ONNX_TARGET
    settings.pop("format", None)
    tol = settings.get("rtol"), settings.get("atol")
    with tempfile.TemporaryDirectory(prefix="deform-onnx-ir-") as tmp:
        onnx_path = Path(tmp) / f"{path.stem}.onnx"
        report = export(model, args, onnx_path, format="onnx", **settings)
        xml = Path(tmp) / f"{path.stem}.xml"
        if first:
            first = _try_convert_model(model, args, xml, report, tol)
        if not first:
            ov.save_model(read_model(onnx_path), str(xml), compress_to_fp16=False)
            if verify:
                report.runtimes.append(_verify(xml, model, args, report, *tol))
            report.notes.append(f"OpenVINO IR: the ONNX file (target {settings['target']!r}) converted by OpenVINO")
        _commit([(xml, path), (xml.with_suffix(".bin"), path.with_suffix(".bin"))])
    report.path, report.format = path, "openvino"
    report.runtime, report.verified = (f"OpenVINO {ov.__version__}", True) if verify else (None, False)
    report.file_size = path.stat().st_size + path.with_suffix(".bin").stat().st_size
    return report


def _try_convert_model(model, args: tuple, xml: Path, report, tol: tuple) -> bool:
    """Write ``openvino.convert_model`` of the module to ``xml`` and verify it; ``False`` (with a note) if not."""
    import openvino as ov

    try:
        ov.save_model(ov.convert_model(model, example_input=args), str(xml), compress_to_fp16=False)
        report.runtimes.append(_verify(xml, model, args, report, *tol))
    except Exception as exc:  # noqa: BLE001 - the ONNX file's IR is the fallback; the note says why
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        report.notes.append(f"OpenVINO IR: convert_model of the PyTorch module did not serve ({why}); the ONNX "
                            "file's IR instead")  # fmt: skip
        return False
    report.notes.append("OpenVINO IR: openvino.convert_model of the PyTorch module (the fastest correct form "
                        "measured, BENCHMARKS.md), verified against PyTorch; the ONNX file was verified too")  # fmt: skip
    return True


def _verify(xml: Path, model, args: tuple, report, rtol: float | None, atol: float | None) -> str:
    """Run the IR (a plain ``openvino.Core``, float32 inference) at each size the ONNX check used; one line."""
    import openvino as ov
    import torch

    from ..exporting.sizes import inputs_at
    from ..exporting.verification import _within, tolerance_for

    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    shapes = report.checked_shapes[1:]  # the second sizes the ONNX file was checked at (dynamic exports)
    worst = 0.0
    for call in [args, *(inputs_at(args, s) for s in shapes)]:
        with torch.no_grad():
            want = [t.detach().float().numpy() for t in torch.utils._pytree.tree_leaves(model(*call))]
        feeds = [t.detach().numpy() for t in call if isinstance(t, torch.Tensor)]
        got = _run_ir(compiled, feeds)
        if len(got) != len(want):
            raise VerificationError(f"OpenVINO IR has {len(got)} outputs, PyTorch {len(want)}; nothing was written")
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            tol = tolerance_for(w.dtype, rtol, atol)
            err = float(np.abs(g.astype(np.float64) - w).max()) if g.shape == w.shape and w.size else 0.0
            if g.shape != w.shape or not _within(g, w, tol):
                raise VerificationError(
                    f"OpenVINO {ov.get_version().split('-')[0]} runs the IR's output {i} "
                    f"{'with shape ' + str(g.shape) if g.shape != w.shape else f'{err:.2g} off'} PyTorch "
                    f"(tolerance {tol.atol:g} + {tol.rtol:g}*|torch|) at input shapes "
                    f"{[tuple(t.shape) for t in feeds]}; nothing was written"
                )
            worst = max(worst, err)
    return f"openvino {ov.get_version().split('-')[0]} (IR): max abs error {worst:.2g}"


def _run_ir(compiled, feeds: list[np.ndarray]) -> list[np.ndarray]:
    """The compiled IR's outputs on ``feeds``, in order."""
    result = compiled(feeds)
    return [np.asarray(result[o]) for o in compiled.outputs]


def _commit(pairs: list[tuple[Path, Path]]) -> None:
    """Copy each ``(source, destination)`` beside its destination under a temporary name, then rename all
    (:func:`~deform_onnx.core.atomic_io.commit_copies`: a new file's mode, not the temporary file's 0600).
    """
    commit_copies(pairs[::-1])  # the .bin first: an .xml never points at missing weights
