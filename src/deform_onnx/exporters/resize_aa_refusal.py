"""The one line when ``F.interpolate(..., antialias=True)`` meets a dynamic size below opset 18.

RF-DETR's backbone resizes its position embedding (bicubic, antialiased) to a size computed from
the image's shape. :mod:`.aten_detectors` writes that resize as two ``MatMul`` by weights computed
at export, which serves static H/W only.
"""

from __future__ import annotations


def resize_aa_refusal(mode: str, dynamic: str, shape) -> str:
    """The one line when an antialiased resize meets a dynamic size below opset 18 (``dynamic``: which side).

    The TorchScript form (two ``MatMul`` by :func:`aa_weights`) computes its weights at export, so both
    the input's and the output's H and W must be known then. ``Resize`` has ``antialias`` from opset 18,
    which the dynamo exporter writes (measured: dynamic H/W at 18 verifies at a second size).
    """
    shown = "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]" if shape else "[?]"
    op = f"aten::_upsample_{mode}2d_aa (F.interpolate(..., mode={mode!r}, antialias=True))"
    fix = "export with static H/W (no dynamic_shapes / dynamic_axes on H and W)"
    if dynamic == "output":  # a static tensor resized to a size from the image's shape
        why = f"its output size depends on a dynamic input size of the model (the resized tensor {shown} is static)"
        fix += ", or pass a fixed size= to F.interpolate"
    elif shape and len(shape) == 4 and any(d is not None for d in shape):  # a fixed size= would not do
        why = f"its input's H/W are dynamic (input {shown}), so its output size depends on a dynamic input size"
    else:  # RF-DETR: ONNX shape inference loses the position embedding's shape through its reshapes
        why = (
            f"its output size depends on a dynamic input size and the resized tensor's shape is not known "
            f"at export ({shown})"
        )
    return (
        f"{op} cannot be exported with a dynamic size below opset 18: {why}, and its weights are computed at "
        f"export; {fix}, or export at opset_version=18 or higher with the dynamo exporter (the default; Resize-18 "
        "has antialias); no file was written"
    )
