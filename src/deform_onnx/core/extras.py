"""Optional dependencies, checked without importing them, each with the one-line error naming its extra.

``scikit-image`` serves only the bundled photo (:func:`deform_onnx.cli.example.load_photo`):
``pip install 'deform-onnx[example]'``. ONNX Runtime: :mod:`deform_onnx.runtimes.ort_distribution`.
"""

from __future__ import annotations

import importlib.util

#: The one-line error when scikit-image (the bundled photo) is missing.
EXAMPLE_MISSING = (
    "the bundled example photo needs scikit-image: pip install 'deform-onnx[example]' (or pip install scikit-image)"
)


def has_skimage() -> bool:
    """Whether ``skimage`` can be imported (looked up, not imported: it takes a second)."""
    return importlib.util.find_spec("skimage") is not None


def require_skimage() -> None:
    """Raises ``ModuleNotFoundError`` with :data:`EXAMPLE_MISSING` when scikit-image is missing."""
    if not has_skimage():
        raise ModuleNotFoundError(EXAMPLE_MISSING, name="skimage")
