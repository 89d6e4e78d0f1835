"""Torch ops that deform-onnx defines and exports in one piece (see each module)."""

from .ms_deform_attn import MSDeformAttnCore, ms_deform_attn, ms_deform_attn_reference

__all__ = ["ms_deform_attn", "ms_deform_attn_reference", "MSDeformAttnCore"]
