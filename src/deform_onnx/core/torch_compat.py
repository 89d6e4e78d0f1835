"""What differs between the torch releases the package accepts (pyproject: torch >= 2.9.1, < 2.15).

Measured here with the full test suite on torch 2.9.1 / torchvision 0.24.1
(docs/development.md, "Torch versions"): everything passes except dynamic N/H/W through
the dynamo exporter, whose file runs at the example size but computes wrong
reshape sizes at other sizes (the bundled example at 2x3x96x160:
"cannot reshape {2,16,36,20} to {48,240}"). ``export()`` verifies only at
the example size, so that would be a silent error: refuse it instead.
"""

from __future__ import annotations

import torch
from packaging.version import Version

TORCH_VERSION = Version(torch.__version__.split("+")[0])
#: Oldest torch whose dynamo exporter was measured right with dynamic shapes (the suite on 2.14.1).
DYNAMO_DYNAMIC_FROM = Version("2.14")


def check_dynamo_dynamic(dynamo: bool, dynamic: bool, version: Version | None = None) -> None:
    """Refuse dynamic shapes on the dynamo path where this torch was measured wrong.

    Raises:
        ValueError: ``dynamo`` and ``dynamic`` on torch older than :data:`DYNAMO_DYNAMIC_FROM`.
    """
    version = version or TORCH_VERSION
    if dynamo and dynamic and version < DYNAMO_DYNAMIC_FROM:
        raise ValueError(
            f"dynamic shapes through the dynamo exporter need torch >= {DYNAMO_DYNAMIC_FROM} (torch {version} "
            "writes wrong reshape sizes for other input sizes, measured here); pass dynamo=False "
            "(dynamic_axes) or upgrade torch"
        )
