"""What froze in a dynamic file: input dims the file keeps static, and constants holding export-time sizes.

Used by :func:`deform_onnx.export` to word the error when a file exported with
dynamic axes fails (or differs) at a second size: the message names the
export-time value, the node that holds it (a ``Reshape``/``Expand``/``Constant``
..., its name and, where the dynamo exporter recorded it, the torch op and the
user's source line) and what to do.
"""

from __future__ import annotations

import os
import re

import numpy as np
import onnx
from onnx import numpy_helper

from .sizes import Axis

#: (op type, input index) pairs whose input is a shape or a size.
SHAPE_INPUTS = {
    ("Reshape", 1),
    ("Expand", 1),
    ("Tile", 1),
    ("ConstantOfShape", 0),
    ("Range", 0),
    ("Range", 1),
    ("Range", 2),
    ("Slice", 1),
    ("Slice", 2),
    ("Split", 1),
    ("Resize", 3),
    ("Upsample", 1),
    ("TopK", 1),
}
#: Ops a shape passes through on its way to a shape input.
_PASS = {"Concat", "Cast", "Identity", "Unsqueeze", "Squeeze", "Mul", "Div", "Add", "Sub", "Gather"}


def static_dims(proto: onnx.ModelProto, axes: list[Axis], input_names: list[str] | None = None) -> list[str]:
    """Requested dynamic axes that the file's graph inputs hold fixed: ``"input 'x' axis 2 (H) is fixed at 128"``."""
    inits = {i.name for i in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in inits]
    by_name = {i.name: i for i in inputs}
    out = []
    for a in axes:
        name = input_names[a.index] if input_names and a.index < len(input_names) else None
        if name in by_name:  # exporters drop unused inputs: match by name where the names are known
            value = by_name[name]
        elif name is None and a.index < len(inputs):
            value = inputs[a.index]
        else:
            continue
        dims = value.type.tensor_type.shape.dim
        if a.axis >= len(dims):
            continue
        d = dims[a.axis]
        if d.HasField("dim_value") and not d.HasField("dim_param"):
            label = f" ({a.name})" if a.name else ""
            # a size-1 example is captured at 2 (exporters/examples.py): say so, or "fixed at 2" reads as a mistake
            widened = (
                f" (the example's {a.size}, captured at {d.dim_value} to keep it symbolic: torch.export fixes a size of 1)"
                if a.size == 1 and d.dim_value == 2
                else ""
            )
            out.append(f"input {value.name!r} axis {a.axis}{label} is fixed at {d.dim_value}{widened}")
    return out


def export_time_values(axes: list[Axis]) -> dict[int, str]:
    """Integers a traced graph holds when it froze the example's dynamic sizes: each size, its quotients by
    the strides 2..64, the products of two such quotients (H'*W' of a level) and their sums over
    consecutive strides (level start indices, total tokens). Value -> how it follows from the sizes.
    """
    values: dict[int, str] = {}
    named = [(a.name or f"input{a.index}.axis{a.axis}", a.size, a.axis) for a in axes]
    for label, size, _ in named:
        values.setdefault(size, label)
    spatial = [(label, size) for label, size, axis in named if axis != 0]
    for label, size in spatial:
        for s in (2, 4, 8, 16, 32, 64):
            if size // s > 4:
                values.setdefault(size // s, f"{label}/{s}")
                values.setdefault(-(-size // s), f"ceil({label}/{s})")
                # A level padded by one pixel on each side (InternImage pads before its reference points).
                values.setdefault(size // s + 2, f"{label}/{s}+2")
    if len(spatial) >= 2:
        (lh, h), (lw, w) = spatial[-2], spatial[-1]
        for s in (1, 2, 4, 8, 16, 32, 64):
            if h // s * (w // s) > 4:
                values.setdefault(h // s * (w // s), f"{lh}/{s}*{lw}/{s}")
        for start in (1, 2, 4, 8):
            for count in (2, 3, 4, 5):
                strides = [start * 2**k for k in range(count)]
                total = sum(h // s * (w // s) for s in strides)
                if total > 4:
                    values.setdefault(total, "sum of " + " + ".join(f"{lh}/{s}*{lw}/{s}" for s in strides))
    return values


def _constants(proto: onnx.ModelProto) -> dict[str, tuple[np.ndarray, str, onnx.NodeProto | None]]:
    out: dict = {}
    for init in proto.graph.initializer:
        try:
            out[init.name] = (numpy_helper.to_array(init), "initializer", None)
        except Exception:  # noqa: BLE001 - external data etc.: not a size
            continue
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value":
                    out[node.output[0]] = (numpy_helper.to_array(attr.t), "Constant", node)
                elif attr.name in ("value_int", "value_ints"):
                    out[node.output[0]] = (np.array(onnx.helper.get_attribute_value(attr)), "Constant", node)
    return out


def scope_origin(node: onnx.NodeProto | None, model=None) -> str:
    """Where a TorchScript node comes from: its name holds the module scope (``/model/backbone/layers.0/Reshape_5``),
    which names a submodule of ``model``; ``" (in SwinLayer.forward, transformers/models/swin/modeling_swin.py:612)"``
    (the class, and the file and first line of its ``forward``), or ``""`` when the scope names no submodule.
    """
    import inspect

    if node is None or model is None or not node.name.startswith("/"):
        return ""
    parts = node.name.strip("/").split("/")[:-1]
    while parts:
        try:
            module = model.get_submodule(".".join(parts))
            break
        except AttributeError:
            parts = parts[:-1]
    else:
        return ""
    cls = type(module)
    forward = inspect.unwrap(cls.forward)  # through decorators (transformers wraps some forwards)
    try:
        path = inspect.getsourcefile(forward) or ""
        line = inspect.getsourcelines(forward)[1]
    except (TypeError, OSError):
        return f" (in {cls.__name__}.forward)"
    short = path.split("site-packages/")[-1]
    return f" (in {cls.__name__}.forward, {short}:{line})"


#: One frame of a Python traceback as torch.fx records it in ``node.meta["stack_trace"]``.
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n(?P<code>[^\n]*)')


def user_frame(trace: str) -> str:
    """The model's line in a ``pkg.torch.onnx.stack_trace``: ``"path/model.py:63 in forward: y[:, 0] = x"``.

    The innermost frame outside torch's package (the user's call, not the ``torch/nn/functional.py`` body it
    reached), or the innermost frame when every frame is torch's; ``""`` when ``trace`` holds no frame.
    """
    import torch

    frames = list(_FRAME.finditer(trace + "\n"))
    if not frames:
        return ""
    root = os.path.dirname(torch.__file__) + os.sep
    frame = next((f for f in reversed(frames) if not f["file"].startswith(root)), frames[-1])
    path = frame["file"].split("site-packages" + os.sep)[-1]
    return f"{path}:{frame['line']} in {frame['func']}: {frame['code'].strip()[:120]}"


def _origin(node: onnx.NodeProto | None, model=None) -> str:
    """The torch op and the model's source line (:func:`user_frame`) the dynamo exporter recorded on ``node``
    (metadata_props); for a TorchScript node (no metadata), the module its scope names (:func:`scope_origin`).
    """
    if node is None:
        return ""
    meta = {m.key: m.value for m in node.metadata_props}
    parts = []
    hierarchy = meta.get("pkg.torch.onnx.class_hierarchy", "")
    if hierarchy:
        op = hierarchy.strip("[]").split(",")[-1].strip(" '\"")
        if op:
            parts.append(f"from torch op {op}")
    line = user_frame(meta.get("pkg.torch.onnx.stack_trace", ""))
    if line:
        parts.append(f"at {line}")
    return f" ({' '.join(parts)})" if parts else scope_origin(node, model)


def _ancestors(proto: onnx.ModelProto, node_name: str | None) -> set[str] | None:
    """Names of every value the named node depends on (``None`` when there is no such node)."""
    if not node_name:
        return None
    producers = {o: n for n in proto.graph.node for o in n.output}
    start = next((n for n in proto.graph.node if n.name == node_name), None)
    if start is None:
        return None
    seen: set[str] = set()
    todo = list(start.input)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in producers:
            todo.extend(producers[name].input)
    return seen


def frozen_sizes(
    proto: onnx.ModelProto, axes: list[Axis], limit: int = 3, near: str | None = None, model=None
) -> list[str]:
    """Constants that hold an export-time size and feed a shape input (or, failing that, any node).

    With ``near`` (the node ONNX Runtime failed at), constants it depends on come first. ``model``: the
    exported module, to name the source of TorchScript nodes (:func:`scope_origin`).

    Each line: ``value 336 (sum of H/8*W/8 + ...) in Constant 'name' -> Reshape 'node' input 1 (from torch op ...)``.
    """
    values = export_time_values(axes)
    exact = {a.size for a in axes}
    consts = _constants(proto)
    producers = {o: n for n in proto.graph.node for o in n.output}
    users: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in proto.graph.node:
        for k, name in enumerate(node.input):
            users.setdefault(name, []).append((node, k))

    def shape_use(name: str, depth: int = 0):
        """The first (node, input index) that uses ``name`` as a shape, through pass-through ops."""
        for node, k in users.get(name, []):
            if (node.op_type, k) in SHAPE_INPUTS:
                return node, k
            if depth < 4 and node.op_type in _PASS:
                for out in node.output:
                    hit = shape_use(out, depth + 1)
                    if hit is not None:
                        return hit
        return None

    found, loose = [], []
    # Size attributes (Split's split, a Reshape/Upsample of old opsets): the failing node's first.
    for node in sorted(proto.graph.node, key=lambda n: 0 if n.name == near else 1):
        for attr in node.attribute:
            if attr.name in ("split", "shape", "sizes", "ends", "starts") and attr.type == onnx.AttributeProto.INTS:
                hits = [int(v) for v in attr.ints if int(v) in values and int(v) > 1]
                if hits:
                    found.append(f"value {max(hits)} ({values[max(hits)]}) in the {attr.name!r} attribute of "
                                 f"{node.op_type} {node.name!r}{_origin(node, model)}")  # fmt: skip
    before = _ancestors(proto, near)
    for name, (array, kind, node) in consts.items():
        if before is not None and name not in before:
            continue  # ONNX Runtime named the failing node: only what it depends on
        if array.dtype.kind not in "iuf" or array.size == 0 or array.size > 4096:
            continue
        flat = np.unique(array.reshape(-1))
        if flat.size > 64:
            continue
        hits = [int(v) for v in flat if np.isfinite(v) and float(v).is_integer() and int(v) in values and int(v) > 1]
        if not hits:
            continue
        value = max(hits)
        holder = f"{kind} {(node.name if node is not None and node.name else name)!r}"
        use = shape_use(name)
        if use is not None:
            user, k = use
            where = _origin(user, model) or _origin(node, model)
            found.append(
                f"value {value} ({values[value]}) in {holder} -> {user.op_type} {user.name!r} input {k}{where}"
            )
        elif (((value in exact and array.dtype.kind in "iu") or (len(hits) == flat.size and array.size >= 2))
              and (before is None or name in before)
              and any(u.op_type != "Gather" for u, _ in users.get(name, []))):  # fmt: skip
            # An exact dynamic size, or a tensor made only of export-time sizes (torch.tensor([W, H]) repeated).
            user = users[name][0][0]
            where = _origin(user, model) or _origin(node, model)
            loose.append(f"value {value} ({values[value]}) in {holder} -> {user.op_type} {user.name!r}{where}")
    del producers
    return (found or loose)[:limit]


def describe(proto: onnx.ModelProto, axes: list[Axis], near: str | None = None, model=None) -> str:
    """One sentence naming what froze (static input dims first, else constants holding export-time sizes, with
    the source they come from: the dynamo exporter's stack trace, or the module of a TorchScript node's scope).
    """
    static = static_dims(proto, axes)
    if static:
        return "the file keeps a requested dynamic dimension static: " + "; ".join(static)
    sizes = frozen_sizes(proto, axes, near=near, model=model)
    if sizes:
        return "constants in the file hold export-time sizes (likely frozen there): " + "; ".join(sizes)
    return "no constant in the file holds an export-time size directly (the size is frozen in arithmetic)"
