"""The runtime builds of scripts/runtime_matrix.py and the code each runs inside its own venv.

A runner is Python source run as ``python -c CODE META`` by the build's venv
interpreter, where ``META`` is a JSON file: ``model`` (path), ``feeds`` (npz,
inputs by name, in graph order), ``out`` (npy to write), ``inputs`` and
``output`` (names), ``output_shape`` (PyTorch's), ``repeats``, ``src`` (this checkout's ``src``, for the
OpenVINO extension), ``tool`` (the venv's ``bin``, for converter programs) and
``extension``. Its last line of stdout is JSON: ``version``, ``error`` (the
first line of what failed, or null) and ``ms`` (median of ``repeats`` timed
runs after one warm-up).
"""

from __future__ import annotations

from dataclasses import dataclass

from deform_onnx.runtimes.deployed import FAMILIES
from deform_onnx.runtimes.deployed.runners import MNN, NCNN, ONNX2TORCH, ONNXSIM, ONNXSLIM, OPENVINO, ORT, TFLITE, TVM

__all__ = ["BUILDS", "NOT_RUN", "REWRITERS", "Build", "MNN", "NCNN", "ONNX2TORCH", "ONNXSIM", "ONNXSLIM", "OPENVINO",
           "ORT", "TFLITE", "TVM"]  # fmt: skip


@dataclass(frozen=True)
class Build:
    """One runtime build: its venv, what it runs, and which targets' files it is given."""

    name: str  #: venv folder under deform_onnx.runtimes.venvs.venv_root()
    runtime: str  #: the table's runtime column
    requirements: tuple[str, ...]
    runner: str
    targets: tuple[str, ...]
    extension: bool = False  #: OpenVINO: add deform_onnx.openvino.extension()
    rewriter: tuple[str, str] | None = None  #: (venv name, code) applied before running in ``runs_in``
    runs_in: str | None = None  #: for a rewriter: the build whose venv runs the rewritten file
    options: tuple[str, ...] = ()  #: extra ``pip install`` options of its venv
    inherit: bool = False  #: its venv sees the project's packages (onnx2torch: torch)

    def python(self, timeout: float):
        """The build's venv interpreter (created on first use)."""
        from deform_onnx.runtimes.venvs import cached_venv

        return cached_venv(self.name, self.requirements, timeout=timeout, options=self.options, inherit=self.inherit)

    @property
    def key(self) -> str:
        """The name ``--only`` selects it by (venv name, or the rewriter's, with ``+ext`` for the extension)."""
        return self.rewriter[0] if self.rewriter else self.name + ("+ext" if self.extension else "")


_ORT_TARGETS = ("onnxruntime<1.25", "generic", "onnxruntime")
_OV_TARGETS = ("openvino", "generic", "openvino-extension")
# onnx and onnx-ir: what deform_onnx.openvino.extension() imports (the extension rows share the venv)
_OV_2025, _OV_NEWEST = ("openvino==2025.4.0", "onnx", "onnx-ir"), ("openvino", "onnx", "onnx-ir")
BUILDS: tuple[Build, ...] = (
    Build("ort-1.16.3", "ONNX Runtime", ("onnxruntime==1.16.3", "numpy<2"), ORT, _ORT_TARGETS),
    Build("ort-1.18.1", "ONNX Runtime", ("onnxruntime==1.18.1", "numpy<2"), ORT, _ORT_TARGETS),
    Build("ort-1.20.1", "ONNX Runtime", ("onnxruntime==1.20.1",), ORT, _ORT_TARGETS),
    Build("ort-1.22.1", "ONNX Runtime", ("onnxruntime==1.22.1",), ORT, _ORT_TARGETS),
    Build("ort-1.24.4", "ONNX Runtime", ("onnxruntime==1.24.4",), ORT, _ORT_TARGETS),
    Build("ort-newest", "ONNX Runtime", ("onnxruntime",), ORT, _ORT_TARGETS),
    Build("ov-2023.3.0", "OpenVINO (plain)", ("openvino==2023.3.0", "numpy<2"), OPENVINO, _OV_TARGETS),
    Build("ov-2024.6.0", "OpenVINO (plain)", ("openvino==2024.6.0",), OPENVINO, _OV_TARGETS),
    Build("ov-2025.4.0", "OpenVINO (plain)", _OV_2025, OPENVINO, _OV_TARGETS),
    Build(
        "ov-2025.4.0", "OpenVINO + deform_onnx extension", _OV_2025, OPENVINO, ("openvino-extension",), extension=True
    ),
    Build("ov-newest", "OpenVINO (plain)", _OV_NEWEST, OPENVINO, _OV_TARGETS),
    Build(
        "ov-newest", "OpenVINO + deform_onnx extension", _OV_NEWEST, OPENVINO, ("openvino-extension",), extension=True
    ),
    Build(
        "ort-newest", "onnxsim, then ONNX Runtime", ("onnxruntime",), ORT, _ORT_TARGETS, rewriter=("onnxsim", ONNXSIM)
    ),
    Build(
        "ort-newest",
        "onnxsim 0.4.36 (onnx2tf's pin), then ONNX Runtime",
        ("onnxruntime",),
        ORT,
        _ORT_TARGETS,
        rewriter=("onnxsim-0.4.36", ONNXSIM),
    ),
    Build(
        "ort-newest",
        "onnxslim, then ONNX Runtime",
        ("onnxruntime",),
        ORT,
        _ORT_TARGETS,
        rewriter=("onnxslim", ONNXSLIM),
    ),
)


def _family(name: str, runtime: str, targets: tuple[str, ...]) -> Build:
    """The build of a package family (:data:`deform_onnx.runtimes.deployed.FAMILIES`): its venv and pins."""
    fam = FAMILIES[name]
    assert fam.venv is not None
    return Build(fam.venv, runtime, fam.requirements, fam.runner, targets, options=fam.options, inherit=fam.inherit)


BUILDS += (
    _family("mnn", "MNN (MNNConvert + runtime)", ("mnn", "generic")),
    _family("tvm", "Apache TVM (relax ONNX frontend, llvm)", ("tvm", "generic")),
    _family("ncnn", "ncnn (through pnnx)", ("ncnn", "ncnn:gather")),
)
BUILDS += (_family("tflite", "TFLite / LiteRT (through onnx2tf)", ("tflite", "tflite:grid_sample")),)
#: Requirements of the rewriters' venvs.
REWRITERS = {
    "onnxsim": ("onnxsim", "onnxruntime"),
    "onnxsim-0.4.36": ("onnxsim==0.4.36", "onnxruntime"),
    "onnxslim": ("onnxslim",),
}
#: onnx2torch runs on the project's own torch/torchvision (its venv inherits them: no second 4 GB copy).
BUILDS += (_family("onnx2torch", "onnx2torch (torch.fx, CPU)", ("onnx2torch", "generic", "onnxruntime<1.25",
                   "onnxruntime")),)  # fmt: skip
#: Families named by issue 12 that this script does not run yet (a "not run" row each, with why).
NOT_RUN: dict[str, str] = {}
