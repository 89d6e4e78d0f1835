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


def resnet_config(features):
    """The transformers ``ResNetConfig`` backbone of the DETR-family configs here: 4 stages of one block,
    16-64 channels; ``features`` the stages it outputs (e.g. ``["stage2", "stage3", "stage4"]``)."""
    import transformers

    return transformers.ResNetConfig(
        depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 64, 64], embedding_size=16, out_features=features
    )


def deformable_detr_config(**extra):
    """``DeformableDetrConfig``: the ResNet above (strides 8/16/32 out), d_model 32, 1 encoder and 2 decoder
    layers, 2 heads, 10 queries, 5 labels. ``extra`` adds or overrides fields."""
    import transformers

    fields = dict(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=resnet_config(["stage2", "stage3", "stage4"]),
        d_model=32,
        encoder_layers=1,
        decoder_layers=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_queries=10,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        num_labels=5,
    )
    fields.update(extra)
    return transformers.DeformableDetrConfig(**fields)


def mask2former_config(**extra):
    """``Mask2FormerConfig`` with the ResNet above (all 4 stages out; transformers' default is Swin): 32-wide
    pixel decoder with one encoder layer, 2 decoder layers, 2 heads, 10 queries, 5 labels."""
    import transformers

    fields = dict(
        backbone_config=resnet_config(["stage1", "stage2", "stage3", "stage4"]),
        use_pretrained_backbone=False,
        feature_size=32,
        mask_feature_size=32,
        hidden_dim=32,
        encoder_feedforward_dim=64,
        dim_feedforward=64,
        encoder_layers=1,
        decoder_layers=2,
        num_attention_heads=2,
        num_queries=10,
        num_labels=5,
    )
    fields.update(extra)
    return transformers.Mask2FormerConfig(**fields)


def rf_detr_config(backbone_layers: int = 4, **extra):
    """``RfDetrConfig``: a windowed DINOv2 backbone (hidden 32, ``backbone_layers`` layers, each a stage it
    outputs: the first windowed, the rest global; 2 heads, patch 14, 2 windows; the input must be a multiple of
    28, e.g. 112x112), d_model 32, 2 decoder layers, 10 queries, one group."""
    import transformers

    backbone = transformers.RfDetrDinov2Config(
        hidden_size=32,
        num_hidden_layers=backbone_layers,
        num_attention_heads=2,
        image_size=56,
        patch_size=14,
        num_windows=2,
        window_block_indexes=[0, 2],
        out_features=[f"stage{k}" for k in range(1, backbone_layers + 1)],
        mlp_ratio=2,
    )
    fields = dict(
        backbone_config=backbone,
        d_model=32,
        decoder_ffn_dim=64,
        decoder_layers=2,
        num_queries=10,
        group_detr=1,
        decoder_self_attention_heads=2,
        decoder_cross_attention_heads=2,
        intermediate_size=32,
        decoder_n_points=2,
    )
    fields.update(extra)
    return transformers.RfDetrConfig(**fields)


def grounding_dino_config(config_cls=None, **extra):
    """A Grounding-DINO-family config (``GroundingDinoConfig`` by default; MM-Grounding-DINO takes the same
    fields): the ResNet above, a 1-layer BERT text encoder (vocabulary 100), d_model 32, 1 encoder and 2
    decoder layers, 2 heads, 10 queries, 16 text tokens."""
    import transformers

    text = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    fields = dict(
        backbone_config=resnet_config(["stage2", "stage3", "stage4"]),
        use_pretrained_backbone=False,
        use_timm_backbone=False,
        text_config=text,
        d_model=32,
        encoder_layers=1,
        decoder_layers=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_queries=10,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        max_text_len=16,
    )
    fields.update(extra)
    return (config_cls or transformers.GroundingDinoConfig)(**fields)
