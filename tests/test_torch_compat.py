"""What differs between the torch releases pyproject accepts (docs/development.md, "Torch versions")."""

from __future__ import annotations

import pytest


def test_dynamic_dynamo_refused_on_torch_measured_wrong():
    """torch 2.9.1's dynamo exporter wrote wrong reshape sizes with dynamic shapes (measured here)."""
    from packaging.version import Version

    from deform_onnx.core.torch_compat import check_dynamo_dynamic

    with pytest.raises(ValueError, match=r"need torch >= 2.14.*dynamo=False"):
        check_dynamo_dynamic(True, True, Version("2.9.1"))
    check_dynamo_dynamic(False, True, Version("2.9.1"))
    check_dynamo_dynamic(True, False, Version("2.9.1"))
    check_dynamo_dynamic(True, True, Version("2.14.1"))
