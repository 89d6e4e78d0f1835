"""Multi-scale deformable attention (Deformable DETR), top to bottom.

- :mod:`.op`: what it is: the torch op ``deform_onnx::ms_deform_attn`` (exported
  in one piece) and the PyTorch reference (``ms_deform_attn_core_pytorch``);
  shapes and the source of the semantics are in its docstrings;
- :mod:`.lower`: its lowering (the fused gather form, all levels at once) and shape checks;
- :mod:`.binding`: the TorchScript symbolic and the dynamo translation;
- :mod:`.sources`: the file nodes that mean it (mmdeploy's / mmcv's / TensorRT's MSDA nodes).

Nothing is imported here: :mod:`.op` imports torch, :mod:`.lower` does not.
"""
