"""How the file's outputs pair with PyTorch's in verification: one for one, in the exporters' order.

PyTorch's outputs are flattened as the exporters flatten them
(:func:`deform_onnx.runtimes.sessions.output_tensors`: ``torch.utils._pytree``); the file must have
exactly as many graph outputs, in the same order. A file with an output missing, an extra one, or
two outputs swapped is refused here, with both sides named.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..core.errors import VerificationError

#: Outputs listed in a message before "...".
SHOWN = 6


def _shown(items: Sequence[str]) -> str:
    head = ", ".join(items[:SHOWN])
    return head + (f", ... ({len(items) - SHOWN} more)" if len(items) > SHOWN else "")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def check_count(
    names: Sequence[str],
    got: Sequence[np.ndarray],
    paths: Sequence[str],
    expected: Sequence[torch.Tensor],
    runtime: str,
    where: str = "",
) -> None:
    """Refuse a file whose output count differs from PyTorch's flattened outputs.

    Args:
        names, got: the file's output names and the arrays ``runtime`` gave for them.
        paths, expected: PyTorch's outputs (pytree key paths, e.g. ``"[1]"``, ``"['logits']"``) and tensors.

    Raises:
        VerificationError: ``len(names) != len(paths)``; the message lists both sides (name or path, dtype, shape).
    """
    if len(names) == len(paths):
        return
    file_side = [f"{n!r} {g.dtype} {list(g.shape)}" for n, g in zip(names, got)]
    torch_side = [f"{p or 'the output'} {str(t.dtype).replace('torch.', '')} {list(t.shape)}"
                  for p, t in zip(paths, expected)]  # fmt: skip
    raise VerificationError(
        f"the file has {_plural(len(names), 'output')} ({_shown(file_side) or 'none'}), PyTorch returns "
        f"{len(paths)}{where} ({_shown(torch_side) or 'none'}): the file does not hold the model's outputs one "
        "for one; no file was written"
    )


def swapped_with(
    index: int, g: np.ndarray, candidates: Sequence[np.ndarray | None], close: Callable[[np.ndarray, np.ndarray], bool]
) -> int | None:
    """The other PyTorch output that file output ``index`` (``g``) matches, when it misses its own.

    ``candidates``: PyTorch's outputs (or their reference) by position; ``close``: the output's tolerance rule.
    """
    for j, c in enumerate(candidates):
        if j != index and c is not None and c.shape == g.shape and c.size and close(g, c):
            return j
    return None


def order_error(name: str, index: int, other: int, paths: Sequence[str], names: Sequence[str], where: str) -> str:
    """The message for file output ``name`` (position ``index``) holding PyTorch's output ``other``."""
    return (
        f"output {name!r}{where} holds PyTorch's output {paths[other] or other}, not {paths[index] or index}: the "
        f"file's outputs ({_shown([repr(n) for n in names])}) are not in the order the model returns them "
        f"({_shown(list(paths))}); no file was written"
    )


__all__ = ["check_count", "order_error", "swapped_with"]
