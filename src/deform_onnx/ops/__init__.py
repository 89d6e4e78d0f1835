"""Torch ops that deform-onnx defines and exports in one piece (MSDA), and PyTorch reference forms of
the family's ops that torch lacks (DCNv3, :mod:`.dcnv3`), written so that they export."""

from .ms_deform_attn import MSDeformAttnCore, MSDeformAttnReference, ms_deform_attn, ms_deform_attn_reference

__all__ = ["ms_deform_attn", "ms_deform_attn_reference", "MSDeformAttnCore", "MSDeformAttnReference"]
