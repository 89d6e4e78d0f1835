"""Repair ``"Einsum as MatMul"``: a two-operand batched-matmul ``Einsum`` as ``Transpose`` + ``MatMul`` + ``Transpose``.

MNN 3.6.1 (its ONNX converter) returns ``Einsum("bmn,bcn->bcm")`` with the output axes in the wrong order:
shape ``(4, 80, 4)`` where ONNX says ``(4, 4, 80)`` (measured here). DAT's deformable attention
(``LeapLabTHU/DAT`` ``models/dat_blocks.py``, ``tests/real_code/dat_style.py``) gathers its values with exactly
that ``torch.einsum('b m n, b c n -> b c m', attn, v)``, so target ``mnn`` could not take the model (0.26 off).
An equation of the form "batch letters shared by all three terms, one letter contracted, one free letter per
operand" (no ellipsis, no repeated letter) is a ``MatMul`` of the two operands transposed to ``[batch..., free,
k]`` and ``[batch..., k, free]``, transposed to the output's order: the same values (a sum over one axis).
Other equations are left as written.
"""

from __future__ import annotations

import onnx
from onnx import helper

__all__ = ["einsum_as_matmul"]


def _plan(equation: str) -> tuple[list[int], list[int], list[int]] | None:
    """The ``Transpose`` perms of the two operands and of the ``MatMul`` result (empty: none needed), or ``None``
    when ``equation`` is no batched matmul.
    """
    text = equation.replace(" ", "")
    if "..." in text or "->" not in text:
        return None
    inputs, out = text.split("->")
    terms = inputs.split(",")
    if len(terms) != 2:
        return None
    a, b = terms
    if any(len(set(t)) != len(t) for t in (a, b, out)):
        return None
    batch = [c for c in a if c in b and c in out]
    contracted = [c for c in a if c in b and c not in out]
    free_a = [c for c in a if c not in b]
    free_b = [c for c in b if c not in a]
    if len(contracted) != 1 or len(free_a) != 1 or len(free_b) != 1:
        return None
    if set(out) != {*batch, *free_a, *free_b} or len(out) != len(batch) + 2:
        return None
    k = contracted[0]
    order_a = [*batch, free_a[0], k]
    order_b = [*batch, k, free_b[0]]
    result = [*batch, free_a[0], free_b[0]]
    perm_a = [a.index(c) for c in order_a]
    perm_b = [b.index(c) for c in order_b]
    perm_out = [result.index(c) for c in out]

    def needed(perm: list[int]) -> list[int]:
        return [] if perm == sorted(perm) else perm

    return needed(perm_a), needed(perm_b), needed(perm_out)


def einsum_as_matmul(model: onnx.ModelProto) -> list[str]:
    """Write each main-graph two-operand batched-matmul ``Einsum`` as ``Transpose`` + ``MatMul`` (in place).

    Returns one line naming how many ``Einsum`` nodes changed (empty when none).
    """
    graph = model.graph
    nodes: list[onnx.NodeProto] = []
    changed = 0
    for node in graph.node:
        equation = next((a.s.decode() for a in node.attribute if a.name == "equation"), "")
        plan = _plan(equation) if node.op_type == "Einsum" and node.domain in ("", "ai.onnx") else None
        if plan is None or len(node.input) != 2:
            nodes.append(node)
            continue
        perm_a, perm_b, perm_out = plan
        base = node.name or f"einsum{changed}"
        operands = []
        for name, perm, tag in ((node.input[0], perm_a, "a"), (node.input[1], perm_b, "b")):
            if perm:
                nodes.append(helper.make_node("Transpose", [name], [f"{base}__{tag}"], f"{base}__{tag}", perm=perm))
                name = f"{base}__{tag}"
            operands.append(name)
        product = f"{base}__matmul" if perm_out else node.output[0]
        nodes.append(helper.make_node("MatMul", operands, [product], f"{base}__matmul"))
        if perm_out:
            nodes.append(helper.make_node("Transpose", [product], [node.output[0]], f"{base}__out", perm=perm_out))
        changed += 1
    if changed:
        del graph.node[:]
        graph.node.extend(nodes)
    return [f"Einsum written as MatMul on {changed} node(s)"] if changed else []
