"""Deformable convolution (torchvision ``deform_conv2d``, DCNv1/DCNv2), top to bottom.

- :mod:`.spec`: what it is (:class:`~.spec.DeformConvSpec`: shapes, argument
  checks, the source of the semantics);
- :mod:`.lower_native`, :mod:`.lower_grid_sample`, :mod:`.lower_gather`: its
  three lowerings (ONNX ``DeformConv``; standard ops on ``GridSample``; standard
  ops on ``Gather``), with the pieces they share in :mod:`.common`;
- :mod:`.binding`: the TorchScript symbolic and the dynamo translation;
  :mod:`.module_checks`: the checks of ``DeformConv2d`` modules before export;
- :mod:`.source_kinds`: the file nodes that mean it (:class:`~.source_kinds.SourceOp`),
  one module per kind: :mod:`.source_onnx` (``DeformConv``), :mod:`.source_mmcv`
  (mmcv / mmdeploy plugin nodes), :mod:`.source_openvino` (OpenVINO's node),
  :mod:`.source_tensorrt` (TensorRT's ``ModulatedDeformConv2d`` plugin, CenterNet's ``DCNv2``);
  :mod:`.source_kinds` imports every ``source_*`` module, so a new kind touches nothing else;
  :mod:`.sources`: ``lower``'s side of them (find, read the spec, replace);
- :mod:`.rules`: the target graph rule its nodes bring (``no DeformConv``);
- :mod:`.register`: its registry entry (:data:`~.register.LOWERINGS`, :func:`~.register.resolve_method`).

Importing this package registers the node kinds (the rewriter and the OpenVINO
conversion extension read :data:`~.source_kinds.SOURCE_OPS`); nothing here imports torch.
"""

from .source_kinds import SOURCE_OPS, SourceOp
from .spec import DeformConvSpec, out_size

__all__ = ["DeformConvSpec", "SOURCE_OPS", "SourceOp", "out_size"]
