"""Shape classes of a deformable convolution: what a target's per-class form is keyed by (issue 38 item 1).

A runtime's fastest form of ``deform_conv2d`` can differ with the call's shape (``scripts/runtime_venvs.py
bench`` measures a DCNv2 layer's forms per runtime on a few shapes: one offset group at batch 1, batch 4,
8 offset groups). A class is read from what a lowering knows statically, so that the bindings (TorchScript,
dynamo, the torch.export decompositions) and ``lower`` (file nodes) classify a call alike:

- :data:`PLAIN`: batch 1, one offset group;
- :data:`BATCH`: a static batch above 1, one offset group;
- :data:`OFFSET_GROUPS`: batch 1, more than one offset group;
- both above 1: ``"batch > 1, offset groups > 1"`` (no benchmark shape has both: no per-class form);
- a batch the graph does not fix (a dynamic axis, a file without shapes): no class (``None``), so the
  target's default form.

Channels, spatial size, stride and the mask are not part of a class: the measured forms rank alike across
them in the data (:mod:`deform_onnx.targets.fastest`); a class no benchmark shape falls in gets no form of
its own. :func:`label_class` reads the bench's shape labels (``"4x64x32 og8"``: N x C x H, then ``og<G>``)
into the same classes, so a measurement and a call meet by the same function.
"""

from __future__ import annotations

import re

#: The one-offset-group, batch-1 class.
PLAIN = "batch 1, one offset group"
#: A static batch above 1, one offset group.
BATCH = "batch > 1"
#: More than one offset group at batch 1.
OFFSET_GROUPS = "offset groups > 1"
#: Both above 1.
BOTH = f"{BATCH}, {OFFSET_GROUPS}"
#: Every class, in the order the docs and ``deform-onnx targets`` list them.
CLASSES = (PLAIN, BATCH, OFFSET_GROUPS, BOTH)


def shape_class(batch: int | None, offset_groups: int) -> str | None:
    """The class of a call with ``batch`` images (``None``: not static) and ``offset_groups`` offset groups.

    Returns:
        One of :data:`CLASSES`, or ``None`` when the batch is not known statically.
    """
    if batch is None:
        return None
    features = [name for name, above in ((BATCH, batch > 1), (OFFSET_GROUPS, offset_groups > 1)) if above]
    return ", ".join(features) or PLAIN


def label_class(label: str) -> str | None:
    """The class of a benchmark shape by its label (``BenchShape.label``: ``"1x64x64"``, ``"4x64x32 og8 s2"``).

    Returns:
        Its class, or ``None`` for a label that is not ``N x C x H`` first (no class: never a per-class form).
    """
    match = re.match(r"(\d+)x\d+x\d+(?:\s|$)", label)
    if match is None:
        return None
    groups = re.search(r"(?:^|\s)og(\d+)(?:\s|$)", label)
    return shape_class(int(match.group(1)), int(groups.group(1)) if groups else 1)
