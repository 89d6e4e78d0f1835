"""Random or given feeds for ``deform-onnx check``: input shapes from the command line, each input's role."""

from __future__ import annotations

from ._common import UserError
from ._inputs import parse_specs

#: Offsets are drawn as randn * OFFSET_SCALE so that many samples fall outside the image.
OFFSET_SCALE = 2.0


def parse_shapes(specs: list[str], inputs: list[str] | None = None) -> dict[str, tuple[int, ...]]:
    """``["x=1,3,32,32", ...]`` -> ``{"x": (1, 3, 32, 32)}`` (dims may also be separated by ``x``).

    ``inputs``: the file's graph input names; a spec without ``NAME=`` is the shape of the only one.

    Raises:
        UserError: a spec without ``NAME=`` for a file with several inputs (the message names them), a bad
            dimension, a repeated name, or a ``:dtype`` (check reads dtypes from the model).
    """
    parsed = parse_specs(specs)
    shapes: dict[str, tuple[int, ...]] = {}
    inputs = list(inputs or [])
    for spec, text in zip(parsed, specs):
        name = spec.name if spec.name is not None or len(inputs) != 1 else inputs[0]
        if name is None:
            named = f" (the file's inputs: {', '.join(inputs)})" if inputs else ""
            example = inputs[0] if inputs else "x"
            raise UserError(f"--input-shape {text!r}: give NAME=D1,D2,..., e.g. {example}=1,3,32,32{named}")
        if spec.dtype is not None:
            raise UserError(
                f"--input-shape {text!r}: check takes each input's dtype from the model; drop ':{spec.dtype}'"
            )
        shapes[name] = spec.shape
    return shapes


def input_roles(model) -> dict[str, str]:
    """Graph inputs that are the offset or mask of a deformable node, or named like one."""
    from ..ops.deform_conv.sources import find_nodes

    roles: dict[str, str] = {}
    graph_inputs = {v.name for v in model.graph.inputs}
    for node, src in find_nodes(model):
        for role in ("offset", "mask"):
            i = src.role_index(role)
            value = node.inputs[i] if i is not None and i < len(node.inputs) else None
            if value is not None:
                name = value.name
                if name is not None and name in graph_inputs:
                    roles[name] = role
    for name in graph_inputs:
        low = name.lower()
        if name not in roles:
            if "offset" in low:
                roles[name] = "offset"
            elif "mask" in low:
                roles[name] = "mask"
    return roles


def _shown(dims) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def make_feeds(model, shapes: dict[str, tuple[int, ...]], npz: dict | None = None, seed: int = 0) -> dict:
    """Inputs (numpy arrays) for every graph input that is not an initializer.

    Floating inputs: ``randn``, offsets ``randn * 2``, masks ``rand``
    (see :func:`input_roles`), in the input's dtype; integer and bool inputs:
    zeros. ``npz`` values take precedence.

    Raises:
        UserError: an input with a dynamic or unknown shape and no
            ``--input-shape``; a shape or array whose rank or static dims
            differ from the model's; ``--inputs``/``--input-shape`` naming an
            input the model does not have.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    roles = input_roles(model)
    inputs = [v for v in model.graph.inputs if v.name not in model.graph.initializers]
    names = {v.name for v in inputs}
    for source, keys in (("--input-shape", shapes), ("--inputs", npz or {})):
        unknown = sorted(set(keys) - names)
        if unknown:
            raise UserError(
                f"{source} names {', '.join(unknown)}, but the model's inputs are {', '.join(sorted(names))}"
            )
    feeds = {}
    for v in inputs:
        dims = list(v.shape) if v.shape is not None else None
        given = npz[v.name].shape if npz and v.name in npz else shapes.get(v.name)
        source = "--inputs" if npz and v.name in npz else "--input-shape"
        if given is not None and dims is not None:
            if len(given) != len(dims):
                raise UserError(
                    f"input {v.name!r} has rank {len(dims)} {_shown(dims)}, but {source} gives {len(given)} dims "
                    f"{_shown(given)}"
                )
            fixed = [i for i, (d, g) in enumerate(zip(dims, given)) if isinstance(d, int) and d != g]
            if fixed:
                raise UserError(
                    f"input {v.name!r} has shape {_shown(dims)}, but {source} gives {_shown(given)} "
                    f"(axis {fixed[0]} is fixed at {dims[fixed[0]]})"
                )
        dtype = np.dtype(v.dtype.numpy()) if v.dtype is not None else np.dtype(np.float32)
        if npz and v.name in npz:
            array = np.asarray(npz[v.name])
            if v.dtype is not None and array.dtype != dtype:
                raise UserError(
                    f"--inputs {v.name} is {array.dtype}, but the model's input {v.name} is {dtype}; "
                    f"save it as {dtype} (array.astype(numpy.{dtype}))"
                )
            feeds[v.name] = array
            continue
        shape = given
        if shape is None:
            if dims is None or not all(isinstance(d, int) for d in dims):
                shown = "unknown" if dims is None else _shown(dims)
                raise UserError(
                    f"input {v.name!r} has a dynamic or unknown shape {shown}; give it with "
                    f"--input-shape {v.name}=D1,D2,..."
                )
            shape = tuple(dims)
        # ml_dtypes' bfloat16 is kind "V", not "f": without the name check a bfloat16 input was all zeros.
        if dtype.kind == "f" or dtype.name == "bfloat16":
            role = roles.get(v.name)
            if role == "offset":
                a = rng.standard_normal(shape) * OFFSET_SCALE
            elif role == "mask":
                a = rng.random(shape)
            else:
                a = rng.standard_normal(shape)
            feeds[v.name] = a.astype(dtype)
        else:
            feeds[v.name] = np.zeros(shape, dtype=dtype)
    return feeds
