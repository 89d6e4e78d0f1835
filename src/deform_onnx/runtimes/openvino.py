"""OpenVINO: run ONNX deformable-convolution nodes on OpenVINO's own kernel.

OpenVINO's ONNX frontend (2026.4) rejects the standard ``DeformConv`` and
mmcv's nodes. :func:`extension` maps each node kind known to
:func:`deform_onnx.lower` (read from the same registry, so the attribute rules
are shared) to OpenVINO's ``DeformableConvolution-8`` with
``bilinear_interpolation_pad=True``: with it, OpenVINO samples like torchvision
(each of the four bilinear corners outside the image contributes 0, and a
sample with ``py <= -1``, ``py >= H``, ``px <= -1`` or ``px >= W`` is 0);
with the default ``False`` it differs at feature-map borders. Its offset
layout (``dy`` at channel ``2k``, ``dx`` at ``2k+1`` per offset group) and
mask layout are torchvision's (checked numerically in tests/test_openvino.py).
The bias, which DeformableConvolution lacks, is added by one ``Add``.

Inference precision: OpenVINO's CPU plugin may default to bf16 (or f16) on
CPUs that have it; :func:`compile` asks for ``f32`` unless told otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..ops.deform_conv import SOURCE_OPS, SourceOp

__all__ = ["extension", "read_model", "compile", "inference_precision", "available"]


def available() -> str | None:
    """``None`` if OpenVINO can be imported, else the reason (one line)."""
    try:
        import openvino  # noqa: F401
        from openvino.frontend.onnx import ConversionExtension  # noqa: F401
    except Exception as e:  # noqa: BLE001 - ImportError or a broken install
        return f"openvino is not usable: {e} (pip install 'deform-onnx[openvino]')"
    return None


def _is_null(output) -> bool:
    return output.get_node().get_type_name() == "NullNode"


def _converter(src: SourceOp):
    import openvino.opset8 as ops

    def convert(node) -> list:
        where = f"{src.describe()} node"
        attrs = {name: node.get_attribute(name) for name in src.attr_kinds if node.has_attribute(name)}
        a = src.read_attrs(attrs, where)
        count = node.get_input_size()

        def role(name: str):
            i = src.role_index(name)
            if i is None or i >= count:
                return None
            out = node.get_input(i)
            return None if _is_null(out) else out

        missing = [r for r in src.roles[: src.required] if role(r) is None]
        if missing:
            raise ValueError(f"{where}: required input(s) {', '.join(missing)} missing")
        x, weight, offset, mask, bias = (role(r) for r in ("input", "weight", "offset", "mask", "bias"))
        y = ops.deformable_convolution(
            x,
            offset,
            weight,
            strides=list(a.stride),
            pads_begin=list(a.padding),
            pads_end=list(a.padding_end or a.padding),
            dilations=list(a.dilation),
            mask=mask,
            group=a.groups,
            deformable_group=a.offset_groups,
            # torchvision's border rule; OpenVINO's own DeformableConv2D node keeps OpenVINO's.
            bilinear_interpolation_pad=a.bilinear_interpolation_pad,
        )
        if bias is not None:
            shape = ops.constant(np.array([1, -1, 1, 1], dtype=np.int64))
            y = ops.add(y, ops.reshape(bias, shape, special_zero=False))
        return [y.output(0)]

    return convert


def extension() -> list:
    """OpenVINO ONNX-frontend conversion extensions for every known deformable node kind.

    Returns:
        A list of ``openvino.frontend.onnx.ConversionExtension``, one per
        (domain, op_type) of :data:`deform_onnx.ops.deform_conv.SOURCE_OPS`:
        ``DeformConv`` (default domain), ``MMCVDeformConv2d`` /
        ``MMCVModulatedDeformConv2d`` (domains ``mmcv``, ``mmdeploy``), TensorRT's
        ``ModulatedDeformConv2d`` and CenterNet's ``DCNv2`` plugin nodes. Add them
        with ``core.add_extension(...)`` before ``core.read_model``.

    Raises:
        ImportError: OpenVINO is not installed (``pip install openvino``).

    Conversion raises (inside ``read_model``) on attributes the node kind
    does not have or a 3-D deformable convolution, naming the node kind.
    """
    from openvino.frontend.onnx import ConversionExtension

    return [ConversionExtension(src.op_type, src.domain, _converter(src)) for src in SOURCE_OPS.values()]


def _core():
    import openvino as ov

    core = ov.Core()
    for ext in extension():
        core.add_extension(ext)
    return core


def read_model(model: str | os.PathLike | Any, core=None):
    """Read an ONNX model (path or ``onnx.ModelProto``) into an ``openvino.Model`` with :func:`extension`.

    A ``ModelProto`` must hold its tensors in memory (no external data).
    """
    core = core or _core()
    if isinstance(model, (str, os.PathLike)):
        return core.read_model(str(Path(model)))
    return core.read_model(model.SerializeToString(), b"")


def compile(model: str | os.PathLike | Any, device: str = "CPU", precision: str | None = "f32"):
    """Read (with :func:`extension`) and compile a model for ``device``.

    Args:
        model: path to an ``.onnx`` file, an ``onnx.ModelProto`` or an
            ``openvino.Model``.
        device: OpenVINO device name (``"CPU"``, ``"GPU"``, ...).
        precision: ``INFERENCE_PRECISION_HINT`` (``"f32"``, ``"f16"``,
            ``"bf16"``); ``None`` keeps the device's default, which on CPUs
            with bf16 support is bf16 and then differs from torchvision by
            more than 1e-4.

    Returns:
        ``openvino.CompiledModel``; call it with a list or dict of numpy
        arrays. :func:`inference_precision` tells which precision it runs at.

    Raises:
        ImportError: OpenVINO is not installed.
        RuntimeError: from OpenVINO, if the model does not convert or compile.
    """
    import openvino as ov

    core = _core()
    ov_model = model if isinstance(model, ov.Model) else read_model(model, core)
    config = {"INFERENCE_PRECISION_HINT": precision} if precision else {}
    return core.compile_model(ov_model, device, config)


def inference_precision(compiled) -> str:
    """The inference precision a compiled model runs at (e.g. ``"f32"``)."""
    try:
        value = compiled.get_property("INFERENCE_PRECISION_HINT")
    except Exception:  # noqa: BLE001 - devices without the property
        return "default"
    name = getattr(value, "get_type_name", None)  # an openvino.Type
    return name() if callable(name) else str(value)
