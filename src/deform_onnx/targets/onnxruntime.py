"""The ``onnxruntime`` target: native ``DeformConv`` where every admitted version has the kernel.

``onnxruntime`` alone means the installed version (``importlib.metadata``);
``onnxruntime<1.25``, ``onnxruntime==1.18``, ``onnxruntime>=1.25`` (any PEP 440
specifier) mean every version the specifier admits: native only when all of them have the kernel; grid_sample
when some lack it; gather at 11 when all are older than the oldest build
measured here.
"""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from .base import Fault, Target

#: First release with a ``DeformConv`` kernel (CPU/CUDA): 1.24.4 has none (measured
#: here, issue 12), 1.32 runs it (measured here); DESIGN.md: "onnxruntime >= ~1.25".
NATIVE_FROM = Version("1.25")
#: Oldest build the standard-op graphs were run on here (tests/test_old_runtime.py, IR 8 file).
OLDEST_MEASURED = Version("1.16")
#: Release versions probed against a specifier (patches 0 to 9 of each minor line).
_PROBES = [Version(f"1.{minor}.{patch}") for minor in range(10, 41) for patch in range(10)]

_NO_KERNEL = Fault(
    what="native (DeformConv)",
    why="ONNX Runtime has no DeformConv kernel before 1.25 (session creation fails: NOT_IMPLEMENTED; measured on 1.24.4)",
    hits=lambda method, opset: method == "native",
    fix="use method grid_sample (opset >= 16) or gather, or target onnxruntime>=1.25",
    op="deform_conv2d",
)


def installed_version() -> Version | None:
    """The installed onnxruntime's version, or ``None`` when it is not installed."""
    from importlib import metadata

    for dist in ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino"):
        try:
            return Version(metadata.version(dist))
        except metadata.PackageNotFoundError:
            continue
    return None


#: ONNX Runtime's CPU EP has no bfloat16 Conv, GridSample or Add (tests/test_bfloat16.py, 1.32): a bfloat16
#: file written for it would not run there (scripts/op_matrix.py: the grid_sample file was refused at load).
_LACKS = (
    (
        "bfloat16",
        "ONNX Runtime has no bfloat16 Conv or GridSample kernel (CPU EP, measured on 1.32)",
        "export it as float32 or float16 (model.float() / model.half()), or use target='openvino'",
    ),
)


def onnxruntime_target(spec: str = "") -> Target:
    """The ``onnxruntime`` target for a version specifier (``""``: the installed version).

    Raises:
        ValueError: a specifier that does not parse, or admits no release.
    """
    label = f"onnxruntime{spec}"
    if spec:
        try:
            specifier = SpecifierSet(spec)
        except InvalidSpecifier:
            raise ValueError(
                f"bad version pin {label!r}: use a PEP 440 specifier, e.g. onnxruntime<1.25 or onnxruntime==1.18"
            ) from None
        admitted = [v for v in _PROBES if specifier.contains(v, prereleases=True)]
        if not admitted:
            raise ValueError(f"{label!r} admits no onnxruntime release between 1.10 and 1.40")
        oldest, newest = min(admitted), max(admitted)
        runtime = f"ONNX Runtime {spec}"
    else:
        oldest = installed_version()  # type: ignore[assignment]  # None: not installed
        runtime = f"ONNX Runtime {oldest} (installed)" if oldest else "ONNX Runtime (not installed: any version)"
        if oldest is None:
            oldest = OLDEST_MEASURED  # unknown: pick what runs everywhere measured
        newest = oldest
    if oldest >= NATIVE_FROM:
        return Target(
            name=label or "onnxruntime",
            runtime=runtime,
            method="native",
            opset=19,
            reason="DeformConv kernel (CPU/CUDA) from 1.25: fastest (grid_sample ~1.2x, gather ~1.7x its time); "
            "GridSample-20 5-D (linear, nearest) and 4-D cubic match PyTorch (CPU, every padding; 5-D cubic: no kernel)",
            source="measured here (onnxruntime 1.32, BENCHMARKS.md; tests/test_grid_sample_5d_cubic.py)",
            status="measured here",
            grid_sample=("5-D", "cubic"),
            lacks=_LACKS,
        )
    if newest >= OLDEST_MEASURED:  # a pin like <1.25 means the recent builds without the kernel
        return Target(
            name=label,
            runtime=runtime,
            method="grid_sample",
            opset=17,
            reason="no DeformConv kernel before 1.25; grid_sample@17 (IR 8) runs on 1.16.3 to 1.24.4",
            source="measured here (scripts/runtime_matrix.py; tests/test_old_runtime.py on 1.16.3)",
            options=("no DeformConv",),
            faults=(_NO_KERNEL,),
            status="measured here",
            lacks=_LACKS,
        )
    return Target(
        name=label,
        runtime=runtime,
        method="gather",
        opset=11,
        reason=f"older than the oldest build measured here ({OLDEST_MEASURED}): the widest graph (gather@11, IR 6)",
        source="ONNX versioning table (opset -> IR version); not measured",
        options=("no DeformConv",),
        faults=(_NO_KERNEL,),
        lacks=_LACKS,
    )
