"""Targets that take a runtime version: ``webgpu>=1.30``, ``tensorrt==10.0``, ``openvino<2024`` (PEP 440 specifiers).

Like ``onnxruntime`` (:mod:`.onnxruntime`), a name with a specifier means every release the specifier
admits: the target keeps a form only where every admitted release runs it. A name without a specifier
means the installed version when the runtime's Python distribution is installed (:attr:`Family.dists`),
else the table entry (:data:`deform_onnx.targets.table.TABLE`, any version). Each :class:`Family` is one
entry of :data:`FAMILIES`: the table entry's name, the releases it probes, and a function that adjusts the
table entry to the oldest and newest admitted release.

- ``webgpu`` (onnxruntime-web / onnxruntime-webgpu version): GridSample only where
  microsoft/onnxruntime#32275 (wrong GridSample results in RT-DETR decoders) is fixed
  (:data:`WEBGPU_GRIDSAMPLE_FIXED_IN`); the release with the fix is not established, so every version
  gets the gather form.
- ``tensorrt``: ``DeformConv`` only through the ModulatedDeformConv2d plugin from TensorRT 10.1 (native
  refused where an older release is admitted); GridSample-20 refused at every version (onnx-tensorrt PR
  #1060 is open).
- ``openvino``: the picks were measured on 2023.3 to 2026.4; admitted releases outside that range keep the
  pick, marked as not measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from .base import Target

__all__ = ["FAMILIES", "Family", "WEBGPU_GRIDSAMPLE_FIXED_IN", "family_target", "installed"]

#: First onnxruntime-web release with microsoft/onnxruntime#32275 fixed; ``None``: not established (the
#: issue is closed, but neither its thread nor the release notes read here (1.28.1, 1.29.0, 1.30.0, WebGPU
#: plugin EP 0.4.0) name the fixing PR or release), so no release gets GridSample.
WEBGPU_GRIDSAMPLE_FIXED_IN: Version | None = None
#: First TensorRT release whose parser maps ONNX ``DeformConv`` to the ModulatedDeformConv2d plugin (DESIGN.md).
TENSORRT_DEFORMCONV_FROM = Version("10.1")
#: OpenVINO releases the ``openvino`` target's picks were measured on (tests/test_openvino.py, runtime matrix).
OPENVINO_MEASURED = (Version("2023.3"), Version("2026.4"))


@dataclass(frozen=True)
class Family:
    """A target that takes a version.

    Attributes:
        name: the table entry's name (``webgpu``); ``name`` + a PEP 440 specifier selects releases.
        package: what the version numbers count (shown in messages), e.g. ``"onnxruntime-web"``.
        dists: Python distributions whose installed version stands for the runtime (first found wins).
        probes: release versions checked against a specifier.
        adjust: ``adjust(entry, oldest, newest, runtime) -> Target``: the table entry for the admitted releases.
        example: a pin shown in the error for a bad one.
    """

    name: str
    package: str
    dists: tuple[str, ...]
    probes: tuple[Version, ...]
    adjust: Callable[[Target, Version, Version, str], Target]
    example: str


def _releases(majors, minors, patches=range(10)) -> tuple[Version, ...]:
    return tuple(Version(f"{a}.{b}.{c}") for a in majors for b in minors for c in patches)


def _webgpu(entry: Target, oldest: Version, newest: Version, runtime: str) -> Target:
    fixed = WEBGPU_GRIDSAMPLE_FIXED_IN
    if fixed is None:
        return dataclasses.replace(entry, runtime=runtime)
    if oldest < fixed:
        return dataclasses.replace(
            entry,
            runtime=runtime,
            reason=f"no DeformConv kernel; GridSample is right (microsoft/onnxruntime#32275) only from {fixed} and the "
            "pin admits older releases: gather",
        )
    from .table import WEBGPU_32275

    return dataclasses.replace(
        entry,
        runtime=runtime,
        method="grid_sample",
        opset=17,
        reason=f"GridSample (4-D, bilinear; microsoft/onnxruntime#32275 fixed from {fixed}) but no DeformConv; "
        "GridSample-20's 'linear' is not a mode it knows",
        options=("no DeformConv", "no GridSample-20"),
        faults=tuple(f for f in entry.faults if f is not WEBGPU_32275),
    )


def _tensorrt(entry: Target, oldest: Version, newest: Version, runtime: str) -> Target:
    if oldest >= TENSORRT_DEFORMCONV_FROM:
        return dataclasses.replace(entry, runtime=runtime)
    from .table import TENSORRT_BEFORE_PLUGIN

    return dataclasses.replace(
        entry,
        runtime=runtime,
        options=(*entry.options, "no DeformConv"),
        faults=(*entry.faults, TENSORRT_BEFORE_PLUGIN),
    )


def _openvino(entry: Target, oldest: Version, newest: Version, runtime: str) -> Target:
    low, high = OPENVINO_MEASURED
    if low <= oldest and newest <= high:
        return dataclasses.replace(entry, runtime=runtime)
    return dataclasses.replace(
        entry,
        runtime=runtime,
        status="read",
        reason=f"{entry.reason} (the pin admits releases outside {low} to {high}: not measured)",
    )


#: Targets that take a version, by name (each one entry).
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "webgpu", "onnxruntime-web", ("onnxruntime-webgpu",), _releases([1], range(17, 41)), _webgpu, "webgpu>=1.30"
        ),
        Family(
            "tensorrt",
            "TensorRT",
            ("tensorrt", "tensorrt-cu13", "tensorrt-cu12"),
            _releases(range(8, 13), range(0, 20)),
            _tensorrt,
            "tensorrt>=10.1",
        ),
        Family(
            "openvino",
            "OpenVINO",
            ("openvino",),
            _releases(range(2022, 2029), range(0, 5), range(3)),
            _openvino,
            "openvino==2026.4",
        ),
    )
}


def installed(family: Family) -> Version | None:
    """The installed version of the family's runtime (its first installed distribution), or ``None``."""
    from importlib import metadata

    for dist in family.dists:
        try:
            return Version(metadata.version(dist))
        except (metadata.PackageNotFoundError, InvalidVersion):
            continue
    return None


def family_target(entry: Target, spec: str = "") -> Target:
    """The table entry ``entry`` for the releases of a specifier (``""``: the installed version, else any).

    Raises:
        ValueError: a specifier that does not parse, or admits no probed release (one line each).
    """
    family = FAMILIES[entry.name]
    if not spec:
        version = installed(family)
        if version is None:
            return entry
        return family.adjust(entry, version, version, f"{family.package} {version} (installed): {entry.runtime}")
    label = f"{entry.name}{spec}"
    try:
        specifier = SpecifierSet(spec)
    except InvalidSpecifier:
        raise ValueError(
            f"bad version pin {label!r}: use a PEP 440 specifier on the {family.package} version, e.g. {family.example}"
        ) from None
    admitted = [v for v in family.probes if specifier.contains(v, prereleases=True)]
    if not admitted:
        raise ValueError(
            f"{label!r} admits no {family.package} release between {family.probes[0]} and {family.probes[-1]}"
        )
    target = family.adjust(entry, min(admitted), max(admitted), f"{family.package}{spec}: {entry.runtime}")
    return dataclasses.replace(target, name=label)
