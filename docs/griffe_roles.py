"""A griffe extension of the API reference (mkdocs.yml, mkdocstrings ``extensions``): Sphinx roles as code.

The docstrings name other objects the Sphinx way (``:func:`lower```, ``:mod:`.api```); mkdocstrings
reads Markdown, where a role would show as its raw text. Each role becomes a plain code span.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|exc|obj|const):`~?\.?([^`]+)`")


def plain_roles(text: str) -> str:
    """``:func:`deform_onnx.lower``` -> ```deform_onnx.lower```."""
    return _ROLE.sub(r"`\1`", text)


class SphinxRoles(griffe.Extension):
    """Rewrite each object's docstring once it is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Griffe event, once per loaded object: its docstring's roles as code spans."""
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)
