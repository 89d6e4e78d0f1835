"""Calibration data for :func:`deform_onnx.quantize`: feeds from arrays, an ``.npz`` file or a folder of images.

``quantize_static`` takes a ``CalibrationDataReader`` (``get_next()`` returns one
feed dict, then ``None``); :func:`feeds` turns what the user has into a list of
feed dicts once, checked against the model's inputs before any heavy work.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: Image suffixes read from a calibration folder (by scikit-image's ``imread``).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class Preprocess:
    """How a folder's images become the model's input (as the model was trained; the user names it).

    Each image is read as RGB, resized to ``size`` (``H, W``; antialiased,
    ``skimage.transform.resize``), scaled to ``[0, scale]`` (``scale=1``: the
    usual ``/255``), normalised ``(v - mean) / std`` per channel, and laid out
    as ``layout`` (``"NCHW"`` or ``"NHWC"``) with a batch of one, float32.
    ``size=None`` takes the size from the model's input (static H, W needed).
    """

    size: tuple[int, int] | None = None
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    layout: str = "NCHW"
    scale: float = 1.0

    def __post_init__(self):
        if self.layout not in ("NCHW", "NHWC"):
            raise ValueError(f"layout {self.layout!r}: use 'NCHW' or 'NHWC'")
        if len(self.mean) != 3 or len(self.std) != 3 or any(s == 0 for s in self.std):
            raise ValueError("mean and std take three values (R, G, B), std non-zero")

    def image(self, path: str | os.PathLike, size: tuple[int, int]) -> np.ndarray:
        """``path`` as a ``[1, 3, H, W]`` (or ``[1, H, W, 3]``) float32 array (needs scikit-image)."""
        if importlib.util.find_spec("skimage") is None:
            raise ModuleNotFoundError(
                "calibration from images needs scikit-image: pip install 'deform-onnx[quantize]'", name="skimage"
            )
        import skimage.color
        import skimage.io
        import skimage.transform

        image = skimage.io.imread(path)
        if image.ndim == 2:
            image = skimage.color.gray2rgb(image)
        image = image[..., :3]  # drop alpha
        image = skimage.transform.resize(image, size, anti_aliasing=True, preserve_range=True) / _full_scale(image)
        image = (image * self.scale - np.array(self.mean)) / np.array(self.std)
        if self.layout == "NCHW":
            image = image.transpose(2, 0, 1)
        return np.ascontiguousarray(image[None], dtype=np.float32)


def _full_scale(image: np.ndarray) -> float:
    return float(np.iinfo(image.dtype).max) if np.issubdtype(image.dtype, np.integer) else 1.0


def feeds(calibration, inputs: list[tuple[str, list]], preprocess: Preprocess | None = None) -> list[dict]:
    """The calibration samples as feed dicts ``{input name: float32 array}``.

    Args:
        calibration: an iterable of samples (each a dict by input name, a
            tuple/list in input order, or one array for a one-input model;
            torch tensors are accepted), a path to an ``.npz`` file (one array
            per input name, ``arr_0``.. in input order also accepted, with the
            samples stacked on the first axis: each ``[S, ...]`` entry gives S
            samples of batch 1 unless its shape already is the input's), or a
            folder of images (read with ``preprocess``; one-input models).
        inputs: the model's inputs as ``(name, shape)`` (shape entries: int or
            a name for a dynamic axis).
        preprocess: for a folder of images (required then).

    Raises:
        ValueError: no samples, a sample naming inputs the model lacks or
            missing one, a folder without images or without ``preprocess``,
            an image model whose input is not 4-D with 3 channels.
        FileNotFoundError: the path does not exist.
    """
    names = [n for n, _ in inputs]
    if isinstance(calibration, (str, os.PathLike)):
        path = Path(calibration)
        if not path.exists():
            raise FileNotFoundError(f"calibration {path}: no such file or folder")
        if path.is_dir():
            samples = _folder(path, inputs, preprocess)
        elif path.suffix == ".npz":
            samples = _npz(path, inputs)
        else:
            raise ValueError(f"calibration {path}: give an .npz file or a folder of images")
    else:
        samples = [_sample(s, names) for s in calibration]
    if not samples:
        raise ValueError(
            "calibration holds no samples: give at least one input (several representative ones are better)"
        )
    shapes = dict(inputs)
    for i, s in enumerate(samples):
        if set(s) != set(names):
            raise ValueError(f"calibration sample {i} has inputs {sorted(s)}; the model's are {names}")
        for name, array in s.items():
            want = shapes[name]
            if array.ndim != len(want) or not _fits(array.shape, want):
                raise ValueError(
                    f"calibration sample {i}: input {name!r} has shape {list(array.shape)}, the model takes {want}"
                )
            if np.issubdtype(array.dtype, np.floating) and array.dtype != np.float32:
                s[name] = array.astype(np.float32)
    return samples


def eval_feeds(eval_inputs, inputs: list[tuple[str, list]], preprocess: Preprocess | None = None) -> list[dict]:
    """The evaluation inputs as feed dicts: one sample, a list of samples, or an ``.npz``/folder (as :func:`feeds`).

    One sample is a dict by input name, a tuple in input order, or one array (tensor) of a one-input
    model; a list holds samples (for a one-input model, arrays), except a list of arrays for a model of
    several inputs, which is one sample in input order.

    Raises:
        ValueError, FileNotFoundError: as :func:`feeds`.
    """
    if isinstance(eval_inputs, (str, os.PathLike)):
        return feeds(eval_inputs, inputs, preprocess)
    if isinstance(eval_inputs, list) and (
        len(inputs) == 1 or all(isinstance(s, (dict, tuple, list)) for s in eval_inputs)
    ):
        return feeds(eval_inputs, inputs)
    return feeds([eval_inputs], inputs)


def _array(value) -> np.ndarray:
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _sample(sample, names: list[str]) -> dict:
    if isinstance(sample, dict):
        return {k: _array(v) for k, v in sample.items()}
    if isinstance(sample, (tuple, list)):
        if len(sample) != len(names):
            raise ValueError(
                f"a calibration sample has {len(sample)} values; the model has {len(names)} inputs {names}"
            )
        return {n: _array(v) for n, v in zip(names, sample)}
    if len(names) != 1:
        raise ValueError(
            f"a calibration sample is one array; the model has {len(names)} inputs {names}: give tuples or dicts"
        )
    return {names[0]: _array(sample)}


def _npz(path: Path, inputs: list[tuple[str, list]]) -> list[dict]:
    with np.load(path) as data:
        keys = list(data.keys())
        names = [n for n, _ in inputs]
        if set(names) <= set(keys):
            arrays = [data[n] for n in names]
        elif len(keys) == len(names) and all(k.startswith("arr_") for k in keys):
            arrays = [data[f"arr_{i}"] for i in range(len(names))]
        else:
            raise ValueError(f"calibration {path}: holds {keys}; name its arrays after the model's inputs {names}")
    out: list[dict] = []
    for (name, shape), array in zip(inputs, arrays):
        stacked = (
            array[:, None]
            if array.ndim == len(shape)
            and _fits(array.shape[1:], shape[1:])
            and array.shape[0] > 1
            and isinstance(shape[0], int)
            and shape[0] == 1
            else (array[None] if array.ndim == len(shape) else array)
        )
        for i, item in enumerate(stacked):
            if len(out) <= i:
                out.append({})
            out[i][name] = np.ascontiguousarray(item)
    return out


def _fits(have, want) -> bool:
    return all(not isinstance(w, int) or w == h for h, w in zip(have, want))


def _folder(path: Path, inputs: list[tuple[str, list]], preprocess: Preprocess | None) -> list[dict]:
    if preprocess is None:
        raise ValueError(
            f"calibration {path} is a folder of images: name the preprocessing (preprocess=Preprocess(...), "
            "CLI --size/--mean/--std/--layout)"
        )
    if len(inputs) != 1:
        raise ValueError(f"calibration from images needs a one-input model; this one has {[n for n, _ in inputs]}")
    name, shape = inputs[0]
    images = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise ValueError(f"calibration {path}: no images ({', '.join(IMAGE_SUFFIXES)}) in the folder")
    channel_axis = 1 if preprocess.layout == "NCHW" else 3
    if len(shape) != 4 or (isinstance(shape[channel_axis], int) and shape[channel_axis] != 3):
        other = "NHWC" if preprocess.layout == "NCHW" else "NCHW"
        # Suggest the other layout only where it fits; an 8-channel input takes no image in any layout.
        fits = len(shape) == 4 and shape[4 - channel_axis] == 3
        hint = f"pass layout='{other}' (CLI --layout {other})" if fits else "images have 3 channels"
        given = "[1, 3, H, W]" if preprocess.layout == "NCHW" else "[1, H, W, 3]"
        raise ValueError(
            f"input {name!r} has shape {shape}; images give {given} ({preprocess.layout}): {hint}, "
            "or give an .npz of the model's inputs"
        )
    size = preprocess.size
    if size is None:
        hw = shape[2:4] if preprocess.layout == "NCHW" else shape[1:3]
        if not all(isinstance(d, int) for d in hw):
            raise ValueError(
                f"input {name!r} has a dynamic size {shape}: name the image size (size=(H, W), CLI --size HxW)"
            )
        size = (int(hw[0]), int(hw[1]))
    return [{name: preprocess.image(p, size)} for p in images]


class Reader:
    """A calibration data reader for ``quantize_static`` (its protocol: ``get_next()``), calling ``on_sample``."""

    def __init__(self, samples: Iterable[dict], on_sample: Callable[[], None] | None = None):
        self._samples = list(samples)
        self._it = iter(self._samples)
        self._on_sample = on_sample

    def get_next(self) -> dict | None:
        """The next calibration sample (input name -> array), ``None`` after the last."""
        sample = next(self._it, None)
        if sample is not None and self._on_sample is not None:
            self._on_sample()
        return sample

    def rewind(self) -> None:
        """Start again from the first sample."""
        self._it = iter(self._samples)
