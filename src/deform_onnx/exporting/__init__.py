"""The one-call export (:func:`deform_onnx.export`): exporter choice, verification, the second-size check,
dynamic sizes, frozen dimensions, models over 2 GiB and bfloat16.

Not named ``export``: a subpackage of that name would shadow the public function ``deform_onnx.export``.
"""
