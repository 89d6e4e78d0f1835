"""The order a ``.pte`` runs its nodes in: each portable result consumed while it is still in the CPU's caches.

XNNPACK has no gather, so the gather form's row gathers (``index_select``) run on ExecuTorch's portable
kernels, and the corners' ``mul``/``add`` and the contraction's ``mm`` inside the XNNPACK delegate. The
XNNPACK partitioner merges every node it takes into as few delegates as the graph allows, so all weighting
of all kernel taps lands in one delegate that needs every gather first: the program ran all 36 gathers of a
64-channel DCNv2 layer (36 MB of rows at 64x64) before any of them was weighted, and each pass read its rows
back from memory (ExecuTorch's etdump: the gathers consecutive, then one delegate call). Here:

- :func:`partitioner`: XNNPACK's partitioner whose partitions are cut into pieces, each reading at most
  :data:`CUT_BYTES` of results computed outside it (two taps' gathered rows), in :func:`lazy_order`;
- :func:`reorder`: the lowered program's nodes in :func:`lazy_order`, so that each gather runs right before
  the delegate that weights it (the lowering's own topological sort runs breadth first and groups them).

Both change only which delegate holds a node and when a node runs: the same operations on the same values.
"""

from __future__ import annotations

import itertools

import torch
from torch.fx.passes.infra.partitioner import Partition

__all__ = ["CUT_BYTES", "lazy_order", "partitioner", "reorder", "xnnpack_can_serialize"]

#: Bytes of results computed outside a delegate (portable kernels) that one delegate reads at most; a piece
#: that would read more starts a new delegate. Two taps' gathered corners of a 64-channel map at 64x64
#: (1 MiB each). Measured in ExecuTorch's runtime, interleaved in one process against one merged delegate
#: (BENCHMARKS.md): on a quiet machine with its default two threads, 4 and 8 MiB ran faster on the 64- and
#: 256-channel layers (8 MiB the more on the latter), 1 MiB (a delegate per gather) slower on the first;
#: under load, and with one thread, 1 MiB gained the most. Fewer delegates also write faster.
CUT_BYTES = 8 << 20


def lazy_order(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """A topological order of ``graph`` that computes each node right before its first use.

    Depth first from the output; of a node's inputs, the one latest in the graph's order (the deepest chain)
    is computed first, so the other inputs (a gather, say) are computed last, just before the node. Placeholders
    and attributes keep their places at the start; nodes the output does not need (asserts) run before it.
    """
    nodes = list(graph.nodes)
    at = {n: i for i, n in enumerate(nodes)}
    order = [n for n in nodes if n.op in ("placeholder", "get_attr")]
    done = set(order)
    output = [n for n in nodes if n.op == "output"]
    stack: list[tuple[torch.fx.Node, bool]] = [(n, False) for n in output]
    while stack:
        node, ready = stack.pop()
        if node in done:
            continue
        if ready:
            done.add(node)
            order.append(node)
            continue
        stack.append((node, True))
        # pushed last = visited first: the input latest in the graph's order
        stack.extend((i, False) for i in sorted(node.all_input_nodes, key=at.__getitem__) if i not in done)
    rest = [n for n in nodes if n not in done]  # not needed by the output: before it, in their order
    return [n for n in order if n.op != "output"] + rest + output


def reorder(gm: torch.fx.GraphModule) -> None:
    """Put ``gm``'s nodes in :func:`lazy_order` (in place; any topological order computes the same values)."""
    order = lazy_order(gm.graph)
    for before, node in itertools.pairwise(order):
        if before.next is not node:
            before.append(node)
    gm.graph.lint()
    gm.recompile()


def _nbytes(node: torch.fx.Node) -> int:
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return 0
    numel = value.numel()
    if not isinstance(numel, int):  # a dynamic size: its example's value
        numel = getattr(numel.node, "hint", None) or 0
    return int(numel) * value.element_size()


def _cut(partition: Partition, at: dict, groups: list) -> list[list[torch.fx.Node]]:
    """``partition``'s nodes in pieces of at most :data:`CUT_BYTES` of outside results read, or in one piece.

    Pieces are consecutive in :func:`lazy_order` (so each is convex: a path between two of its nodes through
    the partition stays inside it, and none leaves the partition, which XNNPACK's partitioner ensured).
    Constants go with the piece of their users, pieces joined where users of one constant or the nodes of one
    config match (a ``mm`` and its weight) would land in several.
    """
    members = set(partition.nodes)
    computed = sorted((n for n in members if n.op == "call_function"), key=at.__getitem__)
    piece_of: dict[torch.fx.Node, int] = {}
    piece, read, seen = 0, 0, set()
    for node in computed:
        outside = [i for i in node.all_input_nodes if i not in members and i.op == "call_function" and i not in seen]
        size = sum(_nbytes(i) for i in outside)
        if piece_of and size and read + size > CUT_BYTES:
            piece, read = piece + 1, 0
        piece_of[node] = piece
        seen.update(outside)
        read += size
    # spans of pieces that must be one: constants' users, and each config match
    spans = [[piece_of[u] for u in n.users if u in piece_of] for n in members if n.op != "call_function"]
    spans += [[piece_of[n] for n in g if n in piece_of] for g in groups if members.issuperset(g)]
    reach = list(range(piece + 1))  # the last piece a run that starts at this piece must reach
    for span in (s for s in spans if s):
        reach[min(span)] = max(reach[min(span)], max(span))
    joined, start, end = [], 0, -1
    for p in range(piece + 1):
        if p > end:
            start = p
        end = max(end, reach[p])
        joined.append(start)
    pieces: dict[int, list[torch.fx.Node]] = {}
    for node in computed:
        pieces.setdefault(joined[piece_of[node]], []).append(node)
    for node in members:
        if node.op != "call_function":
            users = [piece_of[u] for u in node.users if u in piece_of]
            pieces.setdefault(joined[min(users)] if users else 0, []).append(node)
    return list(pieces.values())


def xnnpack_can_serialize(node: torch.fx.Node) -> bool:
    """Whether XNNPACK's serializer takes ``node``, where its partitioner config lets through what it refuses.

    executorch 1.5.1's ``UnsqueezeCopyConfig`` takes every ``unsqueeze_copy`` on the trailing dimension, but the
    serializer (``backends/xnnpack/operators/op_squeeze.py``, a static reshape) refuses an output with more than
    one dynamic dimension ("XNNPACK reshape only supports 1 dynamic dimension"), and the whole lowering fails:
    InternImage's DCNv4 and DCNv3 layers with dynamic H and W did (``x[..., None]`` of an ``[N, H, W, G]`` map).
    Such a node stays on the portable kernels (which take any shape).
    """
    name = getattr(node.target, "__name__", "")  # the edge dialect's name, or ATen's
    if name.removeprefix("aten.") in ("amax.default", "max.dim"):
        return _xnnpack_pools_dim(node)
    if name not in ("aten.unsqueeze_copy.default", "unsqueeze_copy.default"):
        return True
    value = node.meta.get("val")
    shape = getattr(value, "shape", ())
    return sum(not isinstance(d, int) for d in shape) <= 1


def _xnnpack_pools_dim(node: torch.fx.Node) -> bool:
    """Whether XNNPACK's serializer takes this ``amax`` / ``max.dim``: a max over dim ``2`` or ``3`` written so,
    ``keepdim`` given.

    executorch 1.5.1's ``MaxDimConfig`` takes every 4-D ``max.dim`` whose indices go unused, but its serializer
    (``backends/xnnpack/operators/op_max_dim.py``, a max pooling) compares the dim itself with 2 and 3: S2ANet's
    ``cls_score.max(dim=-1, keepdim=True)`` of ``[N, H*W, A, K]`` failed the whole lowering ("amax.default only
    supports dim == 2 or dim == 3"). Such a node stays on the portable kernels.
    """
    return len(node.args) == 3 and node.args[1] in (2, 3)


#: The highest tensor rank XNNPACK defines (``XNN_MAX_TENSOR_DIMS``).
XNNPACK_MAX_RANK = 6


def _above_xnnpack_rank(node: torch.fx.Node) -> bool:
    """Whether ``node`` makes or reads a tensor of rank > :data:`XNNPACK_MAX_RANK`.

    XNNPACK's partitioner takes such nodes and the program then fails to load ("Failed to define tensor 85 with
    code: xnn_status_unsupported_parameter", executorch 1.5.1): RAFT's ``upsample_flow`` softmaxes a 7-D
    ``mask.view(N, 1, 9, 8, 8, H, W)``. They run on the portable kernels instead.
    """
    values = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    return any(isinstance(v, torch.Tensor) and v.dim() > XNNPACK_MAX_RANK for v in values)


def partitioner(ops=None):
    """ExecuTorch's ``XnnpackPartitioner`` whose partitions are cut as :func:`_cut` says.

    Nodes XNNPACK's serializer would refuse (:func:`xnnpack_can_serialize`) or whose ranks XNNPACK does not define
    (:data:`XNNPACK_MAX_RANK`) are left out of every partition.

    ``ops``: called with the edge program's graph module before anything is partitioned (a
    :class:`~deform_onnx.formats.patterns.Ops` records the program's ops there).
    """
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import (
        generate_grouped_partitions_from_list_of_nodes,
    )

    class CutXnnpackPartitioner(XnnpackPartitioner):
        def generate_partitions(self, ep):
            if ops is not None:
                ops(ep.graph_module)
            matched = self.get_matched_nodes_from_configs(ep)  # what the parent's method does, then the cuts
            matched = [g for g in matched if all(xnnpack_can_serialize(n) and not _above_xnnpack_rank(n) for n in g)]
            partitions = generate_grouped_partitions_from_list_of_nodes(ep.graph_module, matched)
            at = {n: i for i, n in enumerate(lazy_order(ep.graph_module.graph))}
            groups = [list(g) for g in matched if len(g) > 1]
            pieces = [nodes for p in partitions for nodes in _cut(p, at, groups)]
            return [Partition(id=i, nodes=nodes) for i, nodes in enumerate(pieces)]

    return CutXnnpackPartitioner()
