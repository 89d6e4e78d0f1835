"""Shared fixtures. Helpers (configs, export, ORT, reference) live in ``tests/util.py``."""

from __future__ import annotations

import pytest

import deform_onnx


@pytest.fixture
def register():
    """``register(method)`` for this test; the symbolic is always removed afterwards.

    ``deform_onnx.register`` is global state (torch's symbolic registry), so a
    test never leaks its method into the next one.
    """

    def _register(method: str = "auto") -> None:
        deform_onnx.register(method)

    yield _register
    deform_onnx.unregister()
