"""How the torch.export formats capture a model: the ONNX path's strategies, tried in order.

``.pte``, ``.tflite`` and ``.mlpackage`` start from one ``torch.export.export`` program. Detector code that
``deform_onnx.export`` writes to ONNX stops a plain capture: RF-DETR 1.4.1's ``MSDeformAttn`` reads
``assert (input_spatial_shapes[:, 0] * input_spatial_shapes[:, 1]).sum() == Len_in`` back from a
``torch.as_tensor`` of the maps' sizes ("Could not guard on data-dependent expression Eq(u0, 1)", measured on
torch 2.14.1), and a release that builds the shapes with ``torch._shape_as_tensor`` fails in every
``torch.export`` mode ("The tensor has a non-zero number of elements, but its data is not allocated yet").
The ONNX path captures both, because ``torch.onnx.export`` tries several strategies inside deform-onnx's
export-time rewrites (:func:`deform_onnx.exporters.rewriters.while_exporting`: size tensors remember their
sizes, static or symbolic; ``linspace`` over a size; ``torch._shape_as_tensor``). :func:`capture` gives the
torch.export formats the same: :data:`STRATEGIES` in order, the first program that captures wins, and the
report's notes say which one did (:func:`Captured.note`).
"""

from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass, field

import torch

from ..core.errors import ExportError

__all__ = ["STRATEGIES", "Captured", "Strategy", "capture"]


@dataclass(frozen=True)
class Strategy:
    """One way to call ``torch.export.export``.

    Attributes:
        name: how the report names it.
        strict: ``torch.export.export(..., strict=...)`` (``True``: TorchDynamo traces the Python code).
        rewrites: inside :func:`~deform_onnx.exporters.rewriters.while_exporting` (the size rewrites).
    """

    name: str
    strict: bool
    rewrites: bool


#: Tried in this order (the first two are the ONNX path's first two, torch.onnx.export's own order): non-strict
#: with the size rewrites; strict with them (TorchDynamo runs the model's Python: measured to capture RF-DETR
#: 1.4.1's decoder without any rewrite); strict without them (a model whose code TorchDynamo cannot trace
#: through the rewrites' function mode).
STRATEGIES: tuple[Strategy, ...] = (
    Strategy("torch.export non-strict with deform-onnx's size rewrites", strict=False, rewrites=True),
    Strategy("torch.export strict=True with deform-onnx's size rewrites", strict=True, rewrites=True),
    Strategy("torch.export strict=True", strict=True, rewrites=False),
)


@dataclass
class Captured:
    """A captured program and how: the strategy, the rewrites that acted, why earlier strategies failed."""

    program: torch.export.ExportedProgram
    strategy: Strategy
    applied: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def note(self) -> str:
        """One line for the report: the strategy, the rewrites that acted and each earlier failure."""
        text = f"captured by {self.strategy.name}"
        if self.applied:
            text += f" ({', '.join(self.applied)} rewritten)"
        if self.failed:
            text += "; before that: " + "; ".join(self.failed)
        return text


#: torch.export's guard for a size the model needs divisible: ``L['x'].size()[3] == (2*(L['x'].size()[3] // 2))``
#: (LivePortrait's ``AvgPool3d((1, 2, 2))`` then ``interpolate(scale_factor=(1, 2, 2))`` on a dynamic H).
_MULTIPLE = re.compile(r"(?P<size>\S+\.size\(\)\[\d+\]) == \((?P<k>\d+)\*\((?P=size) // (?P=k)\)\)")


def capture(model, args: tuple, dynamic_shapes, title: str) -> Captured:
    """``torch.export.export(model, args, dynamic_shapes=...)`` by the first of :data:`STRATEGIES` that captures.

    Raises:
        ExportError: no strategy captured the model; the message gives each strategy's first line
            (a dynamic dimension the model fixes is named by torch.export there).
    """
    from ..exporters.calls import quiet
    from ..exporters.rewriters import while_exporting
    from .torch_export import _one_line

    failed: list[str] = []
    reasons: dict[str, list[str]] = {}  # each reason once, with the strategies that stopped on it
    for strategy in STRATEGIES:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_quiet_guards())
            # torch's ONNX exporter captures with backed sizes size-oblivious (its first two strategies): without
            # it, torch cannot prove the reshape of a level's flattened pixels back to (h, w) when w is static
            # (``(16 + 16*k) % (1 + k) == 0``: sympy distributes the 16 over k + 1) and refuses a dynamic H
            stack.enter_context(torch.fx.experimental._config.patch(backed_size_oblivious=True))  # type: ignore[attr-defined]
            stack.enter_context(quiet())  # torch.export prints the partial graph of a failed capture on stderr
            mode = stack.enter_context(while_exporting()) if strategy.rewrites else None
            try:
                program = torch.export.export(model, tuple(args), dynamic_shapes=dynamic_shapes, strict=strategy.strict)
            except Exception as exc:  # noqa: BLE001 - torch.export's errors are many kinds: the next strategy
                failed.append(f"{strategy.name}: {_one_line(exc)}")
                reasons.setdefault(_one_line(exc), []).append(strategy.name)
                continue
        return Captured(program, strategy, list(mode.applied) if mode is not None else [], failed)
    fix = ""
    multiple = next((m for f in failed if (m := _MULTIPLE.search(f))), None)
    if multiple is not None:  # `X == k*(X // k)`: the model needs a multiple of k (a stride-k pool or reshape)
        k = multiple.group("k")
        fix = (
            f"; the model needs that size to be a multiple of {k}: declare it as {k} * torch.export.Dim(...) "
            f"(e.g. H = {k} * Dim('h', min=..., max=...)), or make that dimension static (no --dynamic / "
            "dynamic_shapes)"
        )
    elif any("Constraints violated" in f for f in failed):  # a dynamic dimension the model's code fixes or bounds
        fix = "; make that dimension static (no --dynamic / dynamic_shapes) or give its Dim the range the model allows"
    elif any("data-dependent" in f.lower() for f in failed):  # `if x.sum() > 0:` (EDVR's DCNv2Pack offset check)
        fix = (
            "; the model reads a tensor's values in Python (a branch or assert on them, e.g. `if offset.abs().mean() >"
            " 50:`, or .item()): remove that, write a branch with torch.cond, or export to .onnx (its TorchScript"
            " fallback records the branch taken)"
        )
    said = "; ".join(f"{' / '.join(names)}: {reason}" for reason, names in reasons.items())
    raise ExportError(f"torch.export could not export the model for {title}: {said}{fix}")


@contextlib.contextmanager
def _quiet_guards():
    """Silence ``torch._guards``' logger: it prints a traceback per strategy on a dynamic dimension the model
    fixes ("Error while creating guard"), whose reason the ``ExportError`` already gives in one line.
    """
    logger = logging.getLogger("torch._guards")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def drop_aliases(ep) -> int:
    """Replace ``aten.alias`` nodes by their input in ``ep``'s graph (in place); how many.

    A full slice (``refpoints[..., :4]`` of a 4-wide tensor in RF-DETR's ``TransformerDecoder``) decomposes to
    ``aten.alias``, which coremltools 9's torch.export frontend cannot convert ("Unsupported fx node alias");
    in a functional program an alias is its input. An alias that is a program output is kept (the output's
    name is part of the program's signature).
    """
    graph = ep.graph_module.graph
    dropped = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.alias.default:
            continue
        if any(user.op == "output" for user in node.users):
            continue
        node.replace_all_uses_with(node.args[0])
        graph.erase_node(node)
        dropped += 1
    if dropped:
        ep.graph_module.recompile()
    return dropped
