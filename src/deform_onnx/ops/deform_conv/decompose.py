"""Deformable convolution as core ATen ops, for torch.export stacks (:func:`deform_onnx.decompositions`).

The decomposition *is* the ONNX lowering: the dynamo translation of :mod:`.binding` driven by the
torch-ops builder (:class:`~deform_onnx.builder.torch_ops.TorchOpsBuilder`), so the ONNX files and the
ExecuTorch / LiteRT / Core ML programs sample with the same code.
"""

from __future__ import annotations

from ...builder.torch_ops import DECOMPOSITION_OPSET, TorchOpsBuilder


def decompositions(method: str) -> dict:
    """``{torch.ops.torchvision.deform_conv2d.default: fn}`` for ``method`` (``auto`` is ``grid_sample``).

    Raises:
        ValueError: ``native`` (the runtimes have no deformable convolution kernel to call).
    """
    from .binding import translations

    if method == "native":
        raise ValueError(
            "method 'native' keeps torchvision::deform_conv2d, which ExecuTorch, LiteRT and Core ML have no "
            "kernel for: use method 'auto', 'grid_sample' or 'gather'"
        )
    method = "grid_sample" if method == "auto" else method
    return translations(method, DECOMPOSITION_OPSET, lambda _default: DECOMPOSITION_OPSET, TorchOpsBuilder)
