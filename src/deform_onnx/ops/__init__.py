"""PyTorch reference forms of the ops of the family that torch itself lacks (DCNv3), written so that they export."""
