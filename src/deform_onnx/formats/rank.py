"""Rank <= 5 programs for Core ML: tensors of rank 6 carried with two (or more) adjacent axes merged.

Core ML holds tensors of rank 5 at most (coremltools' ``Program._check_invalid_tensor_rank``: "Core ML only
supports tensors with rank <= 5"). Deformable attention code builds rank-6 tensors itself: Deformable DETR's
and RF-DETR's ``MSDeformAttn.forward`` views the offsets as ``[N, Lq, M, L, P, 2]`` and adds
``reference_points[:, :, None, :, None, :]``, before any op of this project is called, and the fused
``ms_deform_attn``'s decomposition reads that tensor. coremltools' own pass for this
(``expand_high_rank_reshape_and_transpose``) only covers a reshape -> transpose -> reshape chain.

:func:`lower_rank` rewrites a decomposed ``ExportedProgram`` in place so that no intermediate exceeds rank 5:
each connected region of rank-6 values (values of the same rank, joined by producer and consumer) is carried
with one run of adjacent axes merged into one (``[N, Lq, M, L, P, 2]`` as ``[N*Lq, M, L, P, 2]``); the first run
that every op of the region can follow is taken. An op follows a run when

- it only reshapes (``view``, ``unsqueeze``, ``squeeze``, ``clone``, ...): a reshape of the merged value to the
  merged (or, leaving the region, the original) shape: the elements' row-major order is the same;
- it is pointwise (``torch.Tag.pointwise``) or ``expand``: each operand, aligned to the output's rank, is either
  full or broadcast (size 1) along the whole run, so broadcasting the merged operands is the same;
- it picks or reduces along another axis (``select``, ``index_select``, ``slice``, ``sum``/``mean``/``amax``
  over dims): the same op on the merged value with the axis renumbered;
- it is a ``permute`` that keeps the run together and in order (the gather form's corner tables): the run
  moves with it (each value of the region records where its run starts).

A region one of whose ops follows no run (or a rank-6 program input or output, which a program cannot change)
is left as it is, with the reason (the Core ML writer refuses it in one line before converting). The rewritten program computes the same
values (only shapes change), and :mod:`deform_onnx.formats.coreml` runs it in PyTorch against the model.
"""

from __future__ import annotations

import math

import torch
from torch.fx import Graph, Node

__all__ = ["MAX_RANK", "lower_rank"]

#: Core ML's largest tensor rank.
MAX_RANK = 5

_aten = torch.ops.aten
#: Ops that only change the shape (the merged value is reshaped to the merged or original shape).
_RESHAPES = {
    _aten.view.default,
    _aten._unsafe_view.default,
    _aten.reshape.default,
    _aten.unsqueeze.default,
    _aten.squeeze.default,
    _aten.squeeze.dim,
    _aten.squeeze.dims,
    _aten.clone.default,
    _aten.alias.default,
    _aten.flatten.using_ints,
}
#: Ops that take one axis (``dim``, its argument position), renumbered on the merged value.
_ALONG = {_aten.select.int: 1, _aten.index_select.default: 1, _aten.slice.Tensor: 1}
#: Reductions over a list of dims (argument position 1).
_REDUCE = {_aten.sum.dim_IntList, _aten.mean.dim, _aten.amax.default, _aten.amin.default}


class _Unsupported(Exception):
    """An op of the region that the run tried cannot follow."""


def _val(node) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _rank(node) -> int:
    v = _val(node)
    return v.dim() if v is not None else -1


def _shape(node) -> list[int]:
    v = _val(node)
    if v is None or not all(isinstance(d, int) for d in v.shape):
        raise _Unsupported("a dynamic or unknown shape")
    return list(v.shape)


def _merged(shape: list[int], start: int, size: int) -> list[int]:
    return [*shape[:start], math.prod(shape[start : start + size]), *shape[start + size :]]


def _regions(high: set[Node]) -> list[list[Node]]:
    """Connected groups of ``high`` (through producer / consumer edges), each in graph order."""
    seen: set[Node] = set()
    out = []
    for node in high:
        if node in seen:
            continue
        group, stack = set(), [node]
        while stack:
            n = stack.pop()
            if n in group:
                continue
            group.add(n)
            stack.extend(a for a in n.all_input_nodes if a in high)
            stack.extend(u for u in n.users if u in high)
        seen |= group
        out.append(group)
    order = {n: i for i, n in enumerate(next(iter(high)).graph.nodes)} if high else {}
    return [sorted(g, key=order.__getitem__) for g in out]


class _Rewriter:
    """The merged form of one region for one run of axes ``[start, start + size)`` of rank ``rank``."""

    def __init__(self, graph: Graph, region: list[Node], rank: int, start: int, size: int):
        self.graph, self.region, self.rank, self.start, self.size = graph, set(region), rank, start, size
        self.rep: dict[Node, Node] = {}  # region node -> its merged value
        self.pos: dict[Node, int] = {}  # region node -> the first axis of its merged run
        self.created: list[Node] = []
        self.exits: dict[Node, Node] = {}  # node leaving the region -> its replacement

    def call(self, target, args: tuple) -> Node:
        """A new node computing ``target(*args)`` with its fake value (which checks the shapes)."""
        from torch._guards import detect_fake_mode

        vals = torch.fx.node.map_arg(args, lambda n: n.meta["val"])
        node = self.graph.call_function(target, args)
        self.created.append(node)
        mode = detect_fake_mode([v for v in torch.utils._pytree.tree_leaves(vals) if isinstance(v, torch.Tensor)])
        try:
            with mode if mode is not None else _NoMode():
                node.meta["val"] = target(*vals)
        except Exception as exc:  # noqa: BLE001 - any shape error means the run does not fit this op
            raise _Unsupported(str(exc)) from None
        return node

    def at(self, arg) -> int:
        """Where the run starts in ``arg``'s merged value (the first axis of the run, in original numbering)."""
        return self.pos.get(arg, self.start)

    def axis(self, dim: int, at: int) -> int:
        """``dim`` of the original value on the merged one whose run starts at ``at`` (inside the run: refused)."""
        dim %= self.rank
        if at <= dim < at + self.size:
            raise _Unsupported("an op along a merged axis")
        return dim if dim < at else dim - self.size + 1

    def operand(self, arg, out_shape: list[int], at: int):
        """``arg`` (an operand broadcast to ``out_shape``) in the merged layout with the run at ``at``."""
        if not isinstance(arg, Node) or _val(arg) is None:
            return arg
        if arg in self.rep:
            if self.at(arg) != at:
                raise _Unsupported("operands merged at different axes")
            return self.rep[arg]
        shape = _shape(arg)
        if len(shape) > self.rank:
            raise _Unsupported("an operand of higher rank")
        aligned = [1] * (self.rank - len(shape)) + shape
        run = math.prod(aligned[at : at + self.size])
        if run not in (1, math.prod(out_shape[at : at + self.size])):
            raise _Unsupported("an operand broadcast along part of the run")
        return self.call(_aten.view.default, (arg, _merged(aligned, at, self.size)))

    def source(self, arg) -> Node:
        """The first argument of a reshape or pick: merged if it is in the region, else as it is."""
        return self.rep.get(arg, arg)

    def _permute(self, arg, perm: list[int]) -> tuple[Node, int]:
        """``permute`` of a merged value: the run must stay together and in order; the run's new place."""
        at = self.at(arg)
        perm = [d % self.rank for d in perm]
        j = perm.index(at)
        if perm[j : j + self.size] != list(range(at, at + self.size)):
            raise _Unsupported("a permute that splits the merged axes")
        kept = perm[:j] + [at] + perm[j + self.size :]
        moved = [d if d <= at else d - self.size + 1 for d in kept]
        return self.call(_aten.permute.default, (self.rep[arg], moved)), j

    def emit(self, node: Node) -> None:
        """The merged form of ``node`` (in the region: its merged value; leaving it: its replacement)."""
        inside = node in self.region
        out = _shape(node)
        target, args = node.target, list(node.args)
        if node.kwargs and target not in _RESHAPES:
            raise _Unsupported(f"{target} with keyword arguments")
        at = self.start
        if target in _RESHAPES:
            new = self.call(
                _aten.reshape.default, (self.source(args[0]), _merged(out, at, self.size) if inside else out)
            )
        elif target is _aten.permute.default:
            new, at = self._permute(args[0], list(args[1]))  # type: ignore[arg-type]
        elif target is _aten.expand.default:
            at = self.at(args[0])
            new = self.call(_aten.expand.default, (self.operand(args[0], out, at), _merged(out, at, self.size)))
        elif target in _ALONG or target in _REDUCE:
            at = self.at(args[0])
            moved = [self.source(args[0]), *args[1:]]
            if target in _ALONG:
                moved[1] = self.axis(args[1], at)  # type: ignore[arg-type]
            else:
                if len(args) < 2 or not args[1]:
                    raise _Unsupported(f"{target} over every axis")
                dims: list = list(args[1]) if isinstance(args[1], list | tuple) else [args[1]]
                moved[1] = [self.axis(d, at) for d in dims]
            new = self.call(target, tuple(moved))
        elif isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags:
            at = next((self.at(a) for a in args if isinstance(a, Node) and a in self.rep), self.start)
            new = self.call(target, tuple(self.operand(a, out, at) for a in args))
        else:
            raise _Unsupported(f"{target}")
        want = _merged(out, at, self.size) if inside else out
        if list(new.meta["val"].shape) != want:
            new = self.call(_aten.reshape.default, (new, want))
        if inside:
            self.rep[node], self.pos[node] = new, at
        else:
            self.exits[node] = new

    def run(self) -> None:
        """Write the merged form before each node of the region and each op that reads it."""
        leaving = {u for n in self.region for u in n.users if u not in self.region}
        if any(u.op != "call_function" for u in leaving):
            raise _Unsupported("a rank-6 program output")
        for node in self.graph.nodes:
            if node in self.region or node in leaving:
                if node.op != "call_function":
                    raise _Unsupported("a rank-6 program input")
                with self.graph.inserting_before(node):
                    self.emit(node)

    def undo(self) -> None:
        for node in reversed(self.created):
            self.graph.erase_node(node)

    def commit(self) -> None:
        for old, new in self.exits.items():
            old.replace_all_uses_with(new)
            self.graph.erase_node(old)
        order = {n: i for i, n in enumerate(self.graph.nodes)}
        for node in sorted(self.region, key=order.__getitem__, reverse=True):
            self.graph.erase_node(node)


class _NoMode:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def lower_rank(ep, max_rank: int = MAX_RANK) -> tuple[int, list[str]]:
    """Rewrite ``ep`` (an ``ExportedProgram``, decomposed, static shapes) so that no intermediate exceeds ``max_rank``.

    Returns:
        ``(regions rewritten, why each region left as it is was left)``; the program is changed in place.
    """
    graph = ep.graph_module.graph
    high = {n for n in graph.nodes if n.op == "call_function" and _rank(n) > max_rank}
    high |= {n for n in graph.nodes if n.op == "placeholder" and _rank(n) > max_rank}
    done, left = 0, []
    for region in _regions(high):
        ranks = {_rank(n) for n in region}
        if len(ranks) != 1:
            left.append(f"{region[0].name}: values of ranks {sorted(ranks)} in one region")
            continue
        rank = ranks.pop()
        size = rank - max_rank + 1
        why = "no run of axes fits"
        for start in range(rank - size + 1):
            rewriter = _Rewriter(graph, region, rank, start, size)
            try:
                rewriter.run()
            except _Unsupported as exc:
                rewriter.undo()
                why = str(exc)
                continue
            rewriter.commit()
            done += 1
            break
        else:
            left.append(f"{region[0].name}: {why}")
    if done:
        graph.lint()
        ep.graph_module.recompile()
    return done, left
