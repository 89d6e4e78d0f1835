"""One file per deployed runtime family, exported once per test run and shared (issue 36 item 5).

tests/proof/test_planted_faults.py (every output judged, planted faults refused) and
tests/runtimes/test_deployed.py (export(target=...) runs the file in that family and keeps its converter's
files) need the same file per family: :class:`Five`'s five outputs exported for the family's target with the
export's own run in that family and its files kept, then planted (:func:`plant`). conftest.py's session
fixture ``family_files`` builds each family's files on first use, so each family converts the healthy file
once (inside ``export``) and the planted one once (in the test that checks it) per test run.

:class:`Five` returns five outputs: ``y`` (a DCNv2 layer), ``k`` (an int64 argmax of the input over channels),
``z`` (``4 tanh`` of a 1x1 convolution), ``v`` (``y`` with 1000 added to its first four channels: large and
small elements) and ``w`` (a 3x3 convolution). :func:`plant` adds faulted copies after them, built from the
healthy graph's own nodes and initializers (no mock of the comparison):

(b) ``k_bad``: ``k + 1``, the integer output one off;
(c) ``z_bad``: ``z`` cast to float16, where PyTorch's output is float32 (a precision drop);
(d) ``v_bad``: ``v`` with 0.5 added to every element of its small channels (the added constant edited);
(a) ``w_bad``, the last output: ``w``'s convolution with one weight (an initializer) moved by 0.25.

ncnn's file has neither ``k`` nor the float16 copy (no integer tensors: pnnx writes no ArgMax layer; it writes
a ``Tensor.to`` layer ncnn cannot load).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import torchvision
from onnx import TensorProto, helper, numpy_helper

import deform_onnx
from deform_onnx.runtimes.deployed import family, interpreter
from deform_onnx.runtimes.deployed.check import RuntimeRow

#: family -> the target its file is exported for.
TARGETS = {
    "onnxruntime": None,
    "openvino": "openvino-extension",
    "mnn": "mnn",
    "ncnn": "ncnn",
    "tflite": "tflite",
    "tvm": "tvm",
    "onnx2torch": "onnx2torch",
}
#: Families whose runtime applies a float16 cast at an output (measured here): MNN and LiteRT (onnx2tf) drop it and
#: return the float32 values, exact, so the file they run has no precision drop; pnnx writes a ``Tensor.to``
#: layer ncnn cannot load, so ncnn's faulted file has no float16 output.
CASTS_TO_FLOAT16 = ("onnxruntime", "openvino", "tvm", "onnx2torch")
#: families that run in their own venvs (the others run with this interpreter).
DEPLOYED = ("mnn", "ncnn", "tflite", "tvm", "onnx2torch")
#: Max abs error of the DCNv2 output ``y`` against PyTorch per family, measured here on a layer like it (4 -> 8
#: channels, 16x16): mnn 1.7e-6, ncnn 4.6e-6, tflite 5.7e-7, tvm 6.7e-7, onnx2torch 9.5e-7, openvino 5.0e-7.
BOUND = 2e-5


class Five(torch.nn.Module):
    """``(y, k, z, v, w)`` as the module docstring says; ``integer=False`` drops ``k`` (ncnn, see there)."""

    def __init__(self, integer: bool = True) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.integer = integer
        self.off = torch.nn.Conv2d(4, 18, 3, padding=1)
        self.msk = torch.nn.Conv2d(4, 9, 3, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(4, 8, 3, padding=1)
        self.a = torch.nn.Conv2d(4, 4, 1)
        self.b = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.register_buffer("shift", torch.tensor([1000.0] * 4 + [0.0] * 4).view(1, 8, 1, 1))

    def forward(self, x: torch.Tensor):
        y = self.dcn(x, self.off(x), torch.sigmoid(self.msk(x)))
        z = torch.tanh(self.a(x)) * 4
        v = y + self.shift
        w = self.b(x)
        if self.integer:
            return y, torch.argmax(x, dim=1), z, v, w
        return y, z, v, w


def output_names(integer: bool) -> list[str]:
    """:class:`Five`'s output names."""
    return ["y", "k", "z", "v", "w"] if integer else ["y", "z", "v", "w"]


#: The planted copies, ``<healthy output>_bad``, after the five healthy outputs (``w_bad`` last).
PLANTED = ("k", "z", "v", "w")


def planted_outputs(name: str) -> list[str]:
    """The outputs planted on family ``name``'s file (ncnn: neither the integer nor the float16 one)."""
    return ["v", "w"] if name == "ncnn" else list(PLANTED)


class Twice(torch.nn.Module):
    """The reference of the planted file: the model's outputs, then again those that have a planted copy."""

    def __init__(self, model: Five, planted: list[str]) -> None:
        super().__init__()
        self.model, self.planted = model, planted

    def forward(self, x: torch.Tensor):
        outs = dict(zip(output_names(self.model.integer), self.model(x)))
        return (*outs.values(), *(outs[n] for n in self.planted))


def plant(healthy: Path, out: Path, planted: list[str]) -> None:
    """Write ``healthy`` plus a faulted copy of each output in ``planted`` (``<name>_bad``, in that order) to ``out``.

    The copies are built from the healthy graph's own nodes and initializers, each with the fault of the module
    docstring; the healthy outputs stay as they were.
    """
    proto = onnx.load(str(healthy))
    graph = proto.graph
    producer = {o: n for n in graph.node for o in n.output}
    inits = {i.name: i for i in graph.initializer}
    types = {o.name: o.type.tensor_type.elem_type for o in graph.output}

    def copy_with(output: str, index: int, edit) -> None:
        """``output``'s node again, its ``index``-th input (an initializer) edited, writing ``output_bad``."""
        node = producer[output]
        array = edit(numpy_helper.to_array(inits[node.input[index]]).copy())
        graph.initializer.append(numpy_helper.from_array(array, f"{output}__bad_init"))
        inputs = [f"{output}__bad_init" if k == index else i for k, i in enumerate(node.input)]
        graph.node.append(helper.make_node(node.op_type, inputs, [f"{output}_bad"], name=f"{output}_bad"))
        graph.node[-1].attribute.extend(node.attribute)

    for name in planted:
        elem = types[name]
        if name == "k":  # (b) the integer output one off
            graph.initializer.append(numpy_helper.from_array(np.array(1, np.int64), "k__one"))
            graph.node.append(helper.make_node("Add", ["k", "k__one"], ["k_bad"]))
        elif name == "z":  # (c) float16 where PyTorch's output is float32 (a round trip float16 -> float32 inside
            # the graph is no fault to test: OpenVINO removes such a pair and computes in float32)
            graph.node.append(helper.make_node("Cast", ["z"], ["z_bad"], to=TensorProto.FLOAT16))
            elem = TensorProto.FLOAT16
        elif name == "v":  # (d) the small channels 0.5 off: the added constant edited (a new Add of a (1, 8, 1, 1)
            # constant after v is no fault onnx2tf keeps: its .tflite adds it to other elements, measured here)
            assert producer["v"].op_type == "Add"
            index = next(k for k, i in enumerate(producer["v"].input) if i in inits)
            copy_with("v", index, lambda a: a + np.array([0.0] * 4 + [0.5] * 4, a.dtype).reshape(a.shape))
        else:  # (a) the last output's convolution with one weight moved
            assert producer["w"].op_type == "Conv"

            def move(a: np.ndarray) -> np.ndarray:
                a[0, 0, 1, 1] += 0.25
                return a

            copy_with("w", 1, move)
        info = onnx.ValueInfoProto()
        info.CopyFrom(next(o for o in graph.output if o.name == name))  # the healthy output's shape
        info.name, info.type.tensor_type.elem_type = f"{name}_bad", elem
        graph.output.append(info)
    onnx.checker.check_model(proto)
    onnx.save(proto, str(out))


def five_inputs() -> torch.Tensor:
    """The one input every family's file is exported and run with (seeded)."""
    return torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))


@dataclass
class FamilyFiles:
    """One family's files: the healthy export, its report and kept converter files, the planted copy.

    ``reference`` is the planted file's reference model (:class:`Twice`), ``want`` PyTorch's outputs by name.
    Read-only: a test that writes files uses a folder of its own.
    """

    name: str
    healthy: Path
    report: deform_onnx.ExportReport
    kept: Path
    faulted: Path
    reference: torch.nn.Module
    want: dict[str, np.ndarray]


RECORDER = """#!/bin/sh
echo "$0 $*" >> {record}
exit 0
"""


@dataclass
class UserShell:
    """A user's shell at its worst (:func:`user_shell`): its venv, what it records, its venv's files at the start."""

    folder: Path
    user: Path
    record: Path
    imported: Path
    user_before: set[str]


def tree(folder: Path) -> set[str]:
    """The files under ``folder`` (relative paths, ``__pycache__`` left out)."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts}


def user_shell(folder: Path) -> UserShell:
    """An activated user venv with recording pips and a recording PYTHONPATH, in ``folder`` (:func:`poison` enters it).

    The worst case seen (issue 36 item 1): ``pip``/``pip3``/``pip3.X`` first on ``PATH`` record every call
    (MNN 3.6.1's ``mnnconvert`` ran ``pip install -U aliyun-log-python-sdk`` through the first ``pip`` on
    ``PATH``, which downgraded the user's protobuf) and ``PYTHONPATH`` holds a ``sitecustomize`` that records
    every interpreter importing it.
    """
    user = folder / "user-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(user)], check=True)
    record = folder / "pip-calls.txt"
    for name in ("pip", "pip3", f"pip{sys.version_info[0]}.{sys.version_info[1]}"):
        (user / "bin" / name).write_text(RECORDER.format(record=record))
        (user / "bin" / name).chmod(0o755)
    poisoned = folder / "user-pythonpath"
    poisoned.mkdir()
    imported = folder / "pythonpath-imports.txt"
    (poisoned / "sitecustomize.py").write_text(
        f"import sys\nopen({str(imported)!r}, 'a').write(sys.executable + '\\n')\n"
    )
    return UserShell(folder, user, record, imported, tree(user))


def poison(shell: UserShell, monkeypatch: pytest.MonkeyPatch) -> None:
    """Enter ``shell`` through ``monkeypatch`` (so it ends with it): its venv activated, its PYTHONPATH set,
    ``PYTHONHOME`` pointing nowhere (an interpreter that inherits it cannot start), ``PYTHONSTARTUP`` and
    ``PIP_*`` settings that would install elsewhere."""
    poisoned = shell.folder / "user-pythonpath"
    monkeypatch.setenv("VIRTUAL_ENV", str(shell.user))
    monkeypatch.setenv("PATH", f"{shell.user / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(poisoned))
    monkeypatch.setenv("PYTHONHOME", str(shell.folder / "no-python-home"))
    monkeypatch.setenv("PYTHONSTARTUP", str(poisoned / "sitecustomize.py"))
    monkeypatch.setenv("PIP_TARGET", str(shell.folder / "pip-target"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/poison")
    monkeypatch.setenv("PIP_REQUIRE_VIRTUALENV", "1")


class FamilyExports:
    """``family_files.get(name)``: :class:`FamilyFiles` for ``name``, exported on first use;
    ``family_files.checked(name)``: its planted file converted and run once in that family.

    A family with a venv of its own converts and runs the planted file in :attr:`shell`, a user's shell at its
    worst (:func:`user_shell`), and :attr:`venv_files` holds its venv's files from before: the rows of
    tests/proof/test_planted_faults.py are also what tests/runtimes/test_sealed.py reads (no second conversion).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.done: dict[str, FamilyFiles] = {}
        self.rows: dict[str, tuple[RuntimeRow, Path]] = {}
        self.shell: UserShell | None = None
        self.venv_files: dict[str, tuple[Path, set[str]]] = {}

    def get(self, name: str) -> FamilyFiles:
        if name not in self.done:
            self.done[name] = self._export(name)
        return self.done[name]

    def checked(self, name: str) -> tuple[RuntimeRow, Path]:
        """``check_runtimes`` of ``name``'s planted file in ``name`` (its reference :class:`Twice`, ``v_bad`` held
        to ``rtol=1e-3``, one timed run) and the ``keep_artifacts`` folder it was given: made once."""
        if name not in self.rows:
            files = self.get(name)
            kept = self.folder / name / "checked-kept"
            kept.mkdir()
            fam = family(name)
            with pytest.MonkeyPatch.context() as monkeypatch:
                if fam.venv is not None:
                    lib = interpreter(fam).parent.parent / "lib"  # created (if missing) before the shell is poisoned
                    self.venv_files[name] = (lib, tree(lib))
                    if self.shell is None:
                        self.shell = user_shell(self.folder)
                    poison(self.shell, monkeypatch)
                (row,) = deform_onnx.check_runtimes(files.faulted, [name], model=files.reference, args=(five_inputs(),),
                                                    keep_artifacts=kept, tolerances={"v_bad": (1e-3, None)},
                                                    repeats=1)  # fmt: skip
            self.rows[name] = row, kept
        return self.rows[name]

    def _export(self, name: str) -> FamilyFiles:
        """``export(target=...)`` runs the file in the family before writing it (keeping its converter's files)."""
        folder = self.folder / name
        kept = folder / "kept"
        kept.mkdir(parents=True)
        x = five_inputs()
        integer = name != "ncnn"
        model = Five(integer).eval()
        healthy, faulted = folder / f"five_{name}.onnx", folder / f"five_{name}_planted.onnx"
        report = deform_onnx.export(model, (x,), healthy, input_names=["x"], output_names=output_names(integer),
                                    target=TARGETS[name], keep_artifacts=kept)  # fmt: skip
        plant(healthy, faulted, planted_outputs(name))
        with torch.no_grad():
            want = dict(zip(output_names(integer), [t.numpy() for t in model(x)]))
        return FamilyFiles(name, healthy, report, kept, faulted, Twice(model, planted_outputs(name)).eval(), want)
