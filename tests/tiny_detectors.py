"""Tiny Hugging Face detector configs shared by the real-model tests and scripts/transformers_dynamic_sweep.py
(random weights from a config: nothing is downloaded)."""

from __future__ import annotations


def rt_detr_config(config_cls=None, **extra):
    """An RT-DETR-family config (``RTDetrConfig`` by default; RT-DETRv2 and D-FINE take the same fields):
    a 4-stage basic ResNet (16-64 channels, strides 8/16/32 out), d_model 32, 2 heads, 10 queries, 5 labels.
    ``extra`` adds or overrides fields (``decoder_layers``, ``attn_implementation``, ...)."""
    import transformers

    backbone = transformers.RTDetrResNetConfig(
        depths=[1, 1, 1, 1],
        hidden_sizes=[16, 32, 64, 64],
        embedding_size=16,
        layer_type="basic",
        out_features=["stage2", "stage3", "stage4"],
    )
    fields = dict(
        backbone_config=backbone,
        use_pretrained_backbone=False,
        encoder_in_channels=[32, 64, 64],
        encoder_hidden_dim=32,
        d_model=32,
        decoder_in_channels=[32, 32, 32],
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        num_queries=10,
        num_labels=5,
    )
    fields.update(extra)
    return (config_cls or transformers.RTDetrConfig)(**fields)
