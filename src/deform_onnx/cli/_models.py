"""Models and example inputs of ``deform-onnx export``.

A model is the bundled example, ``MODULE:FACTORY`` (a function or class
returning an ``nn.Module``), a TorchScript archive written by ``torch.jit.save``
(``.pt``, ``.pth``, ``.ts``, ``.jit``) or a ``torch.export`` archive
(``torch.export.save``, ``.pt2``). Inputs come from ``--inputs file.npz`` or
from ``--input-shape`` specs (the photo for ``N,3,H,W``, seeded noise
otherwise) in ``--dtype``; a torch.export archive given neither brings its own
(:func:`archive_inputs`).
"""

from __future__ import annotations

import functools
import re
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

from ._common import UserError, load_factory, one_line
from ._inputs import InputSpec

#: File suffixes read as TorchScript archives, and as torch.export archives.
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".jit")
EXPORT_SUFFIXES = (".pt2",)


def model_kind(spec: str | None) -> str:
    """``"example"``, ``"torchscript"``, ``"exported"`` or ``"factory"``; checks a file exists (cheap).

    Raises:
        UserError: an archive path that is missing or a directory, or a spec
            that is neither a file nor ``MODULE:FACTORY``.
    """
    if spec is None:
        return "example"
    suffix = Path(spec).suffix.lower()
    if suffix in TORCHSCRIPT_SUFFIXES + EXPORT_SUFFIXES:
        path = Path(spec)
        if path.is_dir():
            raise UserError(f"{spec}: is a directory, not a model archive")
        if not path.is_file():
            raise UserError(f"{spec}: no such file")
        return "exported" if suffix in EXPORT_SUFFIXES else "torchscript"
    if ":" not in spec:
        raise UserError(
            f"bad model {spec!r}: give MODULE:FACTORY (e.g. mypackage.models:build_model), "
            "a TorchScript archive (model.pt) or a torch.export archive (model.pt2)"
        )
    _check_module_exists(spec.partition(":")[0], spec)
    return "factory"


def _check_module_exists(module: str, spec: str) -> None:
    """A ``.py`` file that exists, or a top-level package found from the current folder (not imported).

    Raises:
        UserError: the file or the package is missing (answered before torch is imported).
    """
    import importlib.util
    import sys

    if not module:
        return  # load_factory names the malformed spec
    if module.endswith(".py"):
        path = Path(module)
        if path.is_dir():
            raise UserError(f"cannot import {module!r}: is a directory, not a .py file")
        if not path.is_file():
            raise UserError(f"cannot import {module!r}: no such file")
        return
    top = module.split(".")[0]
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise UserError(f"cannot import {module!r}: no module named {top!r} (from {cwd}); give MODULE:FACTORY "
                        "with MODULE a .py file or a module importable from the current folder")  # fmt: skip


def load_model(spec: str | None, kind: str):
    """The ``nn.Module`` to export, in eval mode.

    Raises:
        UserError: the archive does not load, the factory fails or returns no module.
    """
    import torch
    import torchvision  # noqa: F401  (registers torchvision::deform_conv2d, which archives call)

    if kind == "example":
        from .example import example_model

        return example_model()
    if kind == "torchscript":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)  # torch.jit.load's deprecation notice
                net = torch.jit.load(spec, map_location="cpu")
        except Exception as exc:  # noqa: BLE001 - any load failure is the file's
            raise UserError(
                f"{spec}: not a TorchScript archive ({type(exc).__name__}: {one_line(exc)}); save one with "
                "torch.jit.save(torch.jit.script(model) or torch.jit.trace(model, x), path), "
                "or give MODULE:FACTORY for a torch.save checkpoint"
            ) from None
        return net.eval()
    if spec is None:
        raise UserError(f"no model given for a {kind} model")  # model_kind() calls None the example
    if kind == "exported":
        net = load_program(spec).module()  # a GraphModule that both exporters take
        # Its train()/eval() raise (the mode is baked into the program); export() calls eval().
        net.train = types.MethodType(lambda self, mode=True: self, net)
        net.eval = types.MethodType(lambda self: self, net)
        return net
    factory = load_factory(spec)
    try:
        net = factory()
    except Exception as exc:  # noqa: BLE001 - the factory is user code
        raise UserError(f"{spec}() failed: {type(exc).__name__}: {one_line(exc)}") from None
    if not isinstance(net, torch.nn.Module):
        raise UserError(f"{spec}() returned {type(net).__name__}, not a torch.nn.Module")
    return net.eval()


def load_program(spec: str):
    """The ``torch.export.ExportedProgram`` in the archive ``spec`` (loaded once per file version).

    Raises:
        UserError: not a zip file, or not a torch.export archive.
    """
    import os

    stat = os.stat(spec)
    return _load_program(spec, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=1)  # export reads the archive's example inputs, then its module
def _load_program(spec: str, _mtime: int, _size: int):
    import logging
    import zipfile

    import torch
    import torchvision  # noqa: F401  (registers torchvision::deform_conv2d, which archives call)

    if not zipfile.is_zipfile(spec):
        raise UserError(
            f"{spec}: not a torch.export archive (not a zip file); "
            "save one with torch.export.save(torch.export.export(model, (x,)), path)"
        )
    logger = logging.getLogger("torch.export")
    level = logger.level
    logger.setLevel(logging.ERROR)  # torch logs a traceback before raising; the one-line error says it
    try:
        return torch.export.load(spec)
    except Exception as exc:  # noqa: BLE001
        raise UserError(
            f"{spec}: not a torch.export archive ({type(exc).__name__}: {one_line(exc)}); "
            "save one with torch.export.save(torch.export.export(model, (x,)), path)"
        ) from None
    finally:
        logger.setLevel(level)


def archive_inputs(spec: str) -> ExampleInputs:
    """The example inputs a torch.export archive was exported with (``ExportedProgram.example_inputs``),
    named as its forward's inputs: what ``export model.pt2`` takes when no ``--input-shape`` is given.

    Raises:
        UserError: the archive holds none, or keyword / non-tensor inputs (the message names --input-shape).
    """
    import torch

    program = load_program(spec)
    example = getattr(program, "example_inputs", None)
    args, kwargs = example if example is not None else ((), {})
    names = [str(n) for n in program.graph_signature.user_inputs]
    if not args or kwargs or not all(isinstance(a, torch.Tensor) for a in args) or len(names) != len(args):
        raise UserError(
            f"{spec} holds no positional example tensors to export with: give the example input with "
            "--input-shape (e.g. --input-shape 1,3,224,224) or --inputs FILE.npz"
        )
    shown = ", ".join(f"{n} {_dims(t.shape)} {str(t.dtype).removeprefix('torch.')}" for n, t in zip(names, args))
    return ExampleInputs(names, [a.detach().clone() for a in args], f"the archive's example inputs ({shown})")


def cast_inputs(inputs: ExampleInputs, dtype: str | None) -> ExampleInputs:
    """``inputs`` with floating tensors cast to ``dtype`` (``--dtype``; ``None``: as they are)."""
    import torch

    if dtype is None:
        return inputs
    want = getattr(torch, dtype)
    tensors = [t.to(want) if t.is_floating_point() else t for t in inputs.tensors]
    return ExampleInputs(inputs.names, tensors, f"{inputs.description} as {dtype}")


def model_dtype(net) -> str:
    """The dtype of the model's first floating parameter (``"float32"`` when it has none)."""
    for p in net.parameters():
        if p.is_floating_point():
            return str(p.dtype).removeprefix("torch.")
    return "float32"


@dataclass
class ExampleInputs:
    """The example tensors in ``forward`` order, their graph input names, and a description."""

    names: list[str]
    tensors: list  # torch.Tensor
    description: str


def _dims(shape) -> str:
    return "x".join(map(str, shape))


def from_specs(specs: list[InputSpec], dtype: str) -> ExampleInputs:
    """Tensors for ``--input-shape`` specs: the photo for ``N,3,H,W`` (with scikit-image), seeded normal noise otherwise."""
    import torch

    from ..core.extras import has_skimage
    from .example import load_photo

    names, tensors, parts = [], [], []
    gen = torch.Generator().manual_seed(0)
    photo = has_skimage()  # without the [example] extra an image input is noise too (the title says which)
    for i, spec in enumerate(specs):
        shape, want = spec.shape, getattr(torch, spec.dtype or dtype)
        if photo and len(shape) == 4 and shape[1] == 3 and i == 0:
            t = load_photo((shape[2], shape[3])).expand(shape[0], -1, -1, -1).contiguous()
            what = f"the astronaut photo {_dims(shape)}"
        else:
            t = torch.randn(shape, generator=gen)
            what = f"seeded normal noise {_dims(shape)}"
        names.append(spec.name or ("input" if len(specs) == 1 else f"input_{i}"))
        tensors.append(t.to(want))
        parts.append(what + ("" if want == torch.float32 else f" {spec.dtype or dtype}"))
    return ExampleInputs(names, tensors, ", ".join(parts))


def from_npz(arrays: dict, dtype: str | None, path: Path) -> ExampleInputs:
    """Tensors from an ``.npz`` (in the file's order); floating arrays cast to ``dtype`` when given."""
    import numpy as np
    import torch

    names, tensors = [], []
    for name, array in arrays.items():
        if array.dtype.kind == "f" and dtype is not None:
            array = array.astype(dtype)
        names.append(name)
        tensors.append(torch.from_numpy(np.ascontiguousarray(array)))
    shown = ", ".join(f"{n} {_dims(t.shape)} {str(t.dtype).removeprefix('torch.')}" for n, t in zip(names, tensors))
    return ExampleInputs(names, tensors, f"{path.name} ({shown})")


def check_input_ranks(net, inputs: ExampleInputs, shown: str) -> None:
    """Run the model once, first checking the rank of what its first convolution receives.

    A 3-D input fed to a ``Conv2d`` is taken as unbatched ``C,H,W`` and fails
    later with a channel-count error; the rank is what the user got wrong.

    Raises:
        UserError: the first ``Conv2d``/``DeformConv2d`` gets a tensor that is
            not 4-D, or the model fails on the inputs (naming ``shown``).
    """
    import torch
    import torchvision

    kinds = (torch.nn.Conv2d, torchvision.ops.DeformConv2d)
    handles: list = []
    seen: list[str] = []

    def hook(name, module, args):
        if seen or not args or not isinstance(args[0], torch.Tensor):
            return
        seen.append(name)
        x = args[0]
        if x.dim() != 4:
            raise UserError(
                f"{shown} is rank {x.dim()}, but the model's first convolution "
                f"{name} ({type(module).__name__}) takes rank 4 (N,C,H,W), e.g. "
                f"--input-shape 1,{module.in_channels},64,64"
            )

    for name, module in net.named_modules():
        if isinstance(module, kinds):
            handles.append(module.register_forward_pre_hook(lambda m, a, n=name: hook(n, m, a)))
    try:
        with torch.no_grad():
            net(*inputs.tensors)
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - the model is user code
        raise UserError(f"the model fails on {shown}: {_error_line(exc)}") from None
    finally:
        for h in handles:
            h.remove()


def _error_line(exc: BaseException) -> str:
    """``Type: message``; for a TorchScript interpreter error, its last ``...Error: ...`` line (the cause)."""
    text = str(exc)
    if "TorchScript interpreter" in one_line(exc):
        found = re.findall(r"^(\w+(?:Error|Exception): .+)$", text, flags=re.MULTILINE)
        if found:
            return found[-1].strip()
    return f"{type(exc).__name__}: {one_line(exc)}"
