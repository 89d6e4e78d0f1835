"""Opset ranges of the two exporters, spelled out so that ``export``'s argument checks need no torch.

``deform_onnx.exporting.api`` and ``deform_onnx.exporters.torchscript`` read them from torch
(importing it takes seconds); tests/test_cli_issue21.py keeps these equal to theirs.
"""

from __future__ import annotations

#: ``deform_onnx.exporting.api.DYNAMO_MIN_OPSET`` / ``DYNAMO_MAX_OPSET``: the dynamo path's range.
DYNAMO_MIN_OPSET = 14
DYNAMO_MAX_OPSET = 23
#: ``deform_onnx.exporters.torchscript.MAX_OPSET`` (torch's ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET).
TORCHSCRIPT_MAX_OPSET = 20
#: ``deform_onnx.exporting.api.DEFAULT_OPSET``: a method's opset when neither ``--opset`` nor the plan gives one.
DEFAULT_OPSET = 17
