"""Runtime targets: pick the graph a runtime runs correctly and fast.

``deform_onnx.export(..., target="tensorrt")``, ``deform_onnx.lower(...,
target=...)`` and ``--target`` on the CLI resolve a name here to a lowering
method and opset (explicit ``method``/``opset`` still win), refuse
combinations the runtime is known to mishandle (``ValueError``; a warning with
``force=True``), and check the emitted graph against the target's rules.

Names: :data:`TARGET_NAMES`; ``onnxruntime`` also takes a version pin
(``onnxruntime<1.25``, ``onnxruntime==1.18``), and so do the targets of
:data:`deform_onnx.targets.versions.FAMILIES` (``webgpu>=1.30``, ``tensorrt==10.0``,
``openvino==2026.4``; without a pin, the installed version where the runtime's Python
package is installed). ``deform-onnx targets`` prints the table.
"""

from __future__ import annotations

import re

from . import measured
from .base import Choice, Fault, Target
from .onnxruntime import onnxruntime_target
from .rules import RULES, violations
from .table import TABLE
from .versions import FAMILIES, family_target

__all__ = [
    "Target",
    "Fault",
    "Choice",
    "TARGETS",
    "TARGET_NAMES",
    "resolve_target",
    "all_targets",
    "RULES",
    "violations",
]

#: Targets by name as the table reads them (``onnxruntime`` resolves against the installed version);
#: :func:`resolve_target` adds each one's measured fastest form (:mod:`.measured`).
TARGETS: dict[str, Target] = {t.name: t for t in TABLE}
TARGET_NAMES: tuple[str, ...] = ("onnxruntime", *TARGETS)


def resolve_target(spec: str | Target) -> Target:
    """The :class:`Target` for a name (``"tensorrt"``) or a version pin (``"onnxruntime<1.25"``, ``"webgpu>=1.30"``).

    A versioned target's name alone (``"webgpu"``, ``"tensorrt"``, ``"openvino"``) means the installed
    version where its Python package is installed, else any version (:mod:`.versions`).

    Raises:
        ValueError: an unknown name (the message lists the known ones) or a bad version pin (one line).
    """
    if isinstance(spec, Target):
        return spec
    return measured.apply(_resolve(spec))


def _resolve(spec: str) -> Target:
    text = str(spec).strip().lower()
    match = re.fullmatch(r"(onnxruntime|ort)\s*(.*)", text)
    if match:
        return onnxruntime_target(match.group(2).replace(" ", ""))
    match = re.fullmatch(r"([a-z0-9-]+?)\s*((?:[<>=!~,]|\s).*)?", text)
    if match and match.group(1) in FAMILIES:
        return family_target(TARGETS[match.group(1)], (match.group(2) or "").replace(" ", ""))
    if text in TARGETS:
        return TARGETS[text]
    raise ValueError(
        f"unknown target {spec!r}; choose one of {', '.join(TARGET_NAMES)} "
        f"(onnxruntime, {', '.join(FAMILIES)} also take a version pin, e.g. onnxruntime<1.25, webgpu>=1.30)"
    )


def all_targets() -> list[Target]:
    """Every target, ``onnxruntime`` first (for the installed version, then pinned below 1.25 and 1.16)."""
    listed = [onnxruntime_target(""), onnxruntime_target("<1.25"), onnxruntime_target("<1.16"), *TABLE]
    return [measured.apply(t) for t in listed]
