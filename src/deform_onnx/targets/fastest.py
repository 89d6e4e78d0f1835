"""What ``scripts/runtime_venvs.py bench`` measured: each deployed target's forms beside its dense Conv.

Generated (do not edit): :mod:`deform_onnx.targets.measured` reads it. Empty: no measurement, the table's picks.
"""

DATA: dict = {}
