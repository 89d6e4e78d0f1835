"""An onnx2torch converter for the standard ONNX ``DeformConv`` node: ``torchvision.ops.deform_conv2d`` (issue 38).

onnx2torch 1.5 has no ``DeformConv`` converter, so target ``onnx2torch`` writes the gather form: a DCNv2 layer
becomes ~270 small ops, and torch's per-op overhead made its file run 6-33x ONNX Runtime's native kernel
(measured here; no op was slow by itself). :func:`register` adds a converter for ``DeformConv`` (opset 19 and
its version 22) to onnx2torch's registry, as :func:`deform_onnx.openvino.extension` maps it to OpenVINO's own
``DeformableConvolution``; target ``onnx2torch-native`` writes the native form for it.

This file's source also runs inside the onnx2torch venv (:data:`.deployed.runners.ONNX2TORCH` starts with it),
so it imports only the standard library at its top and ``torch``, ``torchvision``, ``onnx2torch`` inside its
functions; it has no ``from __future__`` line (the runner is one concatenated script).
"""

import functools

#: The ``DeformConv`` versions registered (19: the op's first; 22: bfloat16 added, the same semantics).
DEFORM_CONV_VERSIONS = (19, 22)
#: What :func:`register` adds to onnx2torch's registry: ``{op: versions}`` (the targets' loadable-ops rule reads it).
CONVERTERS = {"DeformConv": DEFORM_CONV_VERSIONS}


def register():
    """Teach onnx2torch the standard ONNX ``DeformConv`` node: ``onnx2torch.convert`` then maps each one to a
    module that calls ``torchvision.ops.deform_conv2d``.

    Call it once before ``onnx2torch.convert`` (again: nothing more happens)::

        import deform_onnx.onnx2torch, onnx2torch
        deform_onnx.onnx2torch.register()
        net = onnx2torch.convert("m.onnx")  # a file written with target="onnx2torch-native"

    Semantics (the ONNX ``DeformConv`` spec, opset 19, to ``torchvision.ops.deform_conv2d``):

    - inputs ``X`` (N, C, H, W), ``W`` (oC, C/group, kH, kW), ``offset`` (N, offset_group*2*kH*kW, oH, oW),
      optional ``B`` (oC) -> ``bias``, optional ``mask`` (N, offset_group*kH*kW, oH, oW) -> ``mask`` (absent:
      all ones, as ``mask=None``); the offsets are (dy, dx) pairs in both.
    - ``strides`` -> ``stride``, ``dilations`` -> ``dilation`` (default 1 each).
    - ``pads`` ``[top, left, bottom, right]`` -> ``padding=(top, left)`` when symmetric; asymmetric pads zero-pad
      the input first (``F.pad``), the same samples since both read zeros outside the image.
    - ``group`` and ``offset_group``: torchvision reads them from the shapes (``C / W.shape[1]`` and
      ``offset.shape[1] / (2*kH*kW)``), which the ONNX spec requires to match; ``kernel_shape``, when given,
      must be ``W``'s (checked when ``W`` is an initializer).

    Dtypes are torchvision's CPU/CUDA ``deform_conv2d`` ones (float32, float64; float16 on CUDA). Only 2-D nodes
    convert (``onnx2torch.convert`` raises ``NotImplementedError`` naming the node otherwise).

    Raises:
        RuntimeError: one line: onnx2torch or torchvision is not installed (naming what to install).
    """
    try:
        import torchvision  # noqa: F401 - the converted module calls its deform_conv2d
        from onnx2torch.node_converters import registry  # type: ignore[import-not-found]
    except ImportError as exc:
        name = (exc.name or "onnx2torch").split(".")[0]
        raise RuntimeError(f"deform_onnx.onnx2torch.register() needs {name}: pip install {name}") from None
    for version in DEFORM_CONV_VERSIONS:
        key = registry.OperationDescription(domain="", operation_type="DeformConv", version=version)
        if key not in registry._CONVERTER_REGISTRY:  # a second call, or an onnx2torch that has its own: kept
            registry.add_converter(operation_type="DeformConv", version=version)(_convert)


def _convert(node, graph):
    """onnx2torch's converter signature: ``(OnnxNode, OnnxGraph) -> OperationConverterResult``."""
    from onnx2torch.utils.common import (  # type: ignore[import-not-found]
        OperationConverterResult,
        onnx_mapping_from_node,
    )

    attrs = node.attributes
    if node.input_values[1] in graph.initializers:  # W a constant: its kernel shape is known now
        weight = graph.initializers[node.input_values[1]].to_torch()
        shape = list(attrs.get("kernel_shape", weight.shape[2:]))
        if shape != list(weight.shape[2:]):
            raise ValueError(
                f"DeformConv {node.name!r}: kernel_shape {shape} is not its weight's {list(weight.shape[2:])}"
            )
    pads = list(attrs.get("pads", [0, 0, 0, 0]))
    if len(pads) != 4 or len(attrs.get("strides", [1, 1])) != 2:
        raise NotImplementedError(f"DeformConv {node.name!r}: only 2-D ones convert (torchvision.ops.deform_conv2d)")
    module = _module_class()(
        stride=tuple(attrs.get("strides", [1, 1])), dilation=tuple(attrs.get("dilations", [1, 1])), pads=pads
    )
    # every input in ONNX order (X, W, offset, B, mask); onnx2torch passes an empty one as a missing keyword
    return OperationConverterResult(torch_module=module, onnx_mapping=onnx_mapping_from_node(node))


@functools.cache
def _module_class():
    """The ``torch.nn.Module`` a ``DeformConv`` node becomes (made on first use: torch is imported here)."""
    import torch
    import torch.nn.functional as F
    import torchvision

    class OnnxDeformConv(torch.nn.Module):
        """ONNX ``DeformConv``: ``forward(X, W, offset, B=None, mask=None)`` by ``torchvision.ops.deform_conv2d``."""

        def __init__(self, stride, dilation, pads):
            super().__init__()
            top, left, bottom, right = pads
            self.stride, self.dilation = stride, dilation
            symmetric = (top, left) == (bottom, right)
            self.padding = (top, left) if symmetric else (0, 0)
            self.pad = None if symmetric else (left, right, top, bottom)  # F.pad: last axis first

        def forward(self, input, weight, offset, bias=None, mask=None):
            if self.pad is not None:
                input = F.pad(input, self.pad)
            return torchvision.ops.deform_conv2d(
                input, offset, weight, bias, self.stride, self.padding, self.dilation, mask
            )

    return OnnxDeformConv
