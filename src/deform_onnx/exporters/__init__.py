"""Exporter glue: the TorchScript symbolic and the dynamo translation table."""
