"""One export's settings as one frozen object: what :func:`deform_onnx.export` resolved, passed whole down.

:func:`deform_onnx.export` takes the user's keywords, lets the target pick what was
left open, resolves ``auto`` for the whole model and builds one :class:`ExportOptions`;
every step below it (the two exporter calls, the second-size check, the file's
checks) reads it instead of taking the settings one positional argument each.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..targets import Choice


@dataclass(frozen=True)
class ExportOptions:
    """The settings of one export, resolved.

    Attributes:
        opset: the default-domain opset of the file.
        method: the lowering method for the whole model (``native``, ``grid_sample`` or ``gather``;
            ``auto`` is resolved before this is built: :func:`deform_onnx.ops.registry.model_method`).
        dynamo: start with the dynamo exporter (``False``: the TorchScript exporter only).
        input_names: graph input names (``None``: the exporter's).
        output_names: graph output names (``None``: the exporter's).
        dynamic_shapes: ``torch.export`` dynamic shapes, or ``None``.
        dynamic_axes: TorchScript-style ``{name: {axis: "name"}}``, or ``None``.
        verify: run the file in ONNX Runtime and compare with PyTorch.
        rtol: the verification's relative tolerance (``None``: the output dtype's default).
        atol: the verification's absolute tolerance (``None``: the output dtype's default).
        fallback: use the TorchScript exporter when the dynamo path cannot serve.
        ir_version: the file's IR version (``None``: the lowest its opsets need).
        verify_shapes: the second sizes a dynamic file is checked at (``None``: picked).
        choice: the runtime target's checks and graph forms (:class:`deform_onnx.targets.Choice`), if any.
    """

    opset: int
    method: str
    dynamo: bool = True
    input_names: list[str] | None = None
    output_names: list[str] | None = None
    dynamic_shapes: Any = None
    dynamic_axes: dict | None = None
    verify: bool = True
    rtol: float | None = None
    atol: float | None = None
    fallback: bool = True
    ir_version: int | None = None
    verify_shapes: Any = None
    choice: Choice | None = None

    @property
    def dynamic(self) -> bool:
        """Whether any dimension was asked to be dynamic."""
        return self.dynamic_shapes is not None or self.dynamic_axes is not None

    def replace(self, **changes: Any) -> ExportOptions:
        """A copy with ``changes`` (the TorchScript path fills in input names and dynamic axes)."""
        return dataclasses.replace(self, **changes)
