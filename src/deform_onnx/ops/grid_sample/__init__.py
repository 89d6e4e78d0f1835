"""``F.grid_sample`` (ATen ``aten::grid_sampler``), top to bottom.

- :mod:`.lower`: what it is (:class:`~.lower.GridSampleSpec`: ATen's modes,
  padding modes and ``align_corners``, with its argument and shape checks) and
  its two lowerings: one ``GridSample`` node (opset 16+) and the gather form (11+);
- :mod:`.binding`: the TorchScript symbolic and the dynamo translation;
- :mod:`.sources`: the file nodes that mean it (default-domain ``GridSample``,
  lowered when the target opset lacks it).
"""

from .lower import GridSampleSpec, check_shapes

__all__ = ["GridSampleSpec", "check_shapes"]
