"""The target graph rules deformable convolution's DeformConv nodes bring (:mod:`deform_onnx.targets.rules`).

The runtimes without a DeformConv kernel name ``"no DeformConv"`` in their ``options`` and a
fault on method ``native`` (:mod:`deform_onnx.targets.table`).
"""

from __future__ import annotations

import onnx

from ...targets.rules import RuleFn, _nodes  # the rules' own graph reader


def no_deformconv(model: onnx.ModelProto) -> list[str]:
    """DeformConv nodes: runtimes without a DeformConv kernel refuse the file."""
    found = _nodes(model, "DeformConv")
    return [f"DeformConv node(s) {', '.join(found[:3])}"] if found else []


#: Rule name -> check (joined with the targets' own by :data:`deform_onnx.targets.rules.RULES`).
RULES: dict[str, RuleFn] = {"no DeformConv": no_deformconv}
