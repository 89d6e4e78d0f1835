"""The TorchScript adapter of :class:`~.base.Builder`: emits through the exporter's ``g.op``.

Used by every TorchScript symbolic (``torch.onnx.export(..., dynamo=False)``),
with the helpers the symbolics share.
"""

from __future__ import annotations

import contextlib
import contextvars

import numpy as np
import torch

from .base import Builder

_SCALAR_TO_NP = {
    "Float": np.float32,
    "Double": np.float64,
    "Half": np.float16,
    "BFloat16": None,
}


class TorchScriptBuilder(Builder):
    """:class:`Builder` over the TorchScript exporter's ``GraphContext``."""

    def __init__(self, g):
        self.g = g
        self.opset = g.opset

    def _emit(self, op_type, inputs, attrs, domain=""):
        while inputs and inputs[-1] is None:  # trailing optionals are simply left out
            inputs.pop()
        if any(i is None for i in inputs):
            inputs = [self.g.op("prim::Constant") if i is None else i for i in inputs]
        kwargs = {}
        for key, value in attrs.items():
            if isinstance(value, np.ndarray):  # a tensor attribute (e.g. ConstantOfShape's value)
                value = torch.from_numpy(np.array(value, copy=True))
            kwargs[f"{key}_{_attr_suffix(value)}"] = value
        name = f"{domain}::{op_type}" if domain else op_type
        return self.g.op(name, *inputs, **kwargs)

    def _constant(self, array):
        return self.g.op("Constant", value_t=torch.from_numpy(np.array(array, copy=True)))

    def static_shape(self, value):
        """The traced value's sizes (``None`` per dynamic dimension; ``None`` for an unknown rank)."""
        t = value.type()
        try:
            sizes = t.varyingSizes()
        except RuntimeError:
            return None
        if sizes is None:
            return None
        return tuple(sizes)

    def declare_shape(self, value, shape, like):
        """An ``Identity`` of ``value`` typed as ``like``'s dtype with ``shape``, where the exporter knows less.

        ``torch.onnx``'s per-node shape inference loses static sizes through a ``Reshape`` to ``-1`` of a map
        with a dynamic batch, so a lowering's output came out with no known size, and so did the ops after it
        (its own inference reads the sizes it recorded, not a value's type): the model's next
        ``deform_conv2d`` then took the dynamic-map sampler (target ``tvm`` refused that file). An
        ``Identity`` is inferred from its typed input and records the sizes; the export drops it again
        (:func:`drop_identities`). Outside :func:`typing_copies` (``torch.onnx.export`` after
        :func:`deform_onnx.register`) only the value's type is set: the graph is the one written before.
        """
        known = self.static_shape(value)
        if known is not None and len(known) == len(shape) and sum(k is None for k in known) <= shape.count(None):
            return value
        try:
            value.setType(like.type().with_sizes(list(shape)))
        except (RuntimeError, TypeError, AttributeError):  # ``like`` is not a complete tensor type: leave it
            return value
        return self.g.op("Identity", value) if _COPIES.get() else value

    def dtype(self, value):
        """The traced value's numpy dtype, or ``None`` for a type ONNX lowering does not take."""
        try:
            st = value.type().scalarType()
        except RuntimeError:
            return None
        if st is None:
            return None
        return _SCALAR_TO_NP.get(st)


def _attr_suffix(value) -> str:
    if isinstance(value, torch.Tensor):
        return "t"
    if isinstance(value, str):
        return "s"
    if isinstance(value, (bool, int)):
        return "i"
    if isinstance(value, float):
        return "f"
    if isinstance(value, (list, tuple)):
        return "f" if any(isinstance(v, float) for v in value) else "i"
    raise TypeError(f"unsupported attribute value {value!r}")


def traced_output_dtype(g) -> np.dtype | None:
    """The numpy dtype of the traced node's (first) output, or ``None`` when the trace has none."""
    try:
        st = next(iter(g.original_node.outputs())).type().scalarType()
    except (AttributeError, RuntimeError, StopIteration):
        return None
    dt = _SCALAR_TO_NP.get(st)
    return np.dtype(dt) if dt is not None else None


def _keep_error_one_line(exc: BaseException, g) -> None:
    """Stop torch from printing its whole IR graph on this error; keep the nodes around the op in a note.

    torch 2.14's ``setup_onnx_logging`` tests the function ``_jit_is_onnx_log_enabled``
    instead of calling it, so ONNX logging is always on during a TorchScript export
    and any symbolic error first dumps the whole graph ("Torch IR graph at
    exception") on stderr. Turning the log off before raising leaves the
    one-line error; the deformable node and its inputs' producers (what
    ``PYTORCH_JIT_LOG_LEVEL`` would show) go to ``exc.__notes__``, which
    tracebacks and ``deform-onnx export --verbose`` print.
    """
    torch._C._jit_set_onnx_log_enabled(False)
    node = getattr(g, "original_node", None)
    if node is None or not hasattr(exc, "add_note"):
        return
    lines: list[str] = []
    for value in node.inputs():
        producer = value.node()
        if producer.kind() not in ("prim::Param", "prim::Constant"):
            lines.append(str(producer).rstrip())
    lines.append(str(node).rstrip())
    exc.add_note("TorchScript IR around the deformable op:\n" + "\n".join(dict.fromkeys(lines)))


#: Whether :meth:`TorchScriptBuilder.declare_shape` may add its typing ``Identity``: only inside
#: :func:`typing_copies` (deform_onnx's own TorchScript export, which drops them again), so that a user's own
#: ``torch.onnx.export`` after :func:`deform_onnx.register` writes the graph it always did.
_COPIES: contextvars.ContextVar[bool] = contextvars.ContextVar("deform_onnx_typing_copies", default=False)


@contextlib.contextmanager
def typing_copies():
    """Within the block, lowerings type their outputs with an ``Identity`` (:func:`drop_identities` after)."""
    token = _COPIES.set(True)
    try:
        yield
    finally:
        _COPIES.reset(token)


def drop_identities(proto) -> None:
    """Remove the main graph's ``Identity`` nodes (in place): each copies a value and does nothing else.

    :meth:`TorchScriptBuilder.declare_shape` adds them only to carry sizes through the exporter's shape
    inference. Consumers (in subgraphs too) read the copied value instead; an ``Identity`` that writes a
    graph output gives that name to the node that computed its input (when that value is no graph input,
    initializer or other output, and not read in a subgraph), else it stays.
    """
    graph = proto.graph
    outputs = {o.name for o in graph.output}
    fixed = outputs | {i.name for i in graph.input} | {t.name for t in graph.initializer}
    produced = {name for node in graph.node for name in node.output}
    in_subgraphs = {name for node in graph.node for name in _subgraph_inputs(node)}
    rename: dict[str, str] = {}
    kept = []
    for node in graph.node:
        if node.op_type != "Identity" or node.domain not in ("", "ai.onnx"):
            kept.append(node)
            continue
        src, dst = rename.get(node.input[0], node.input[0]), node.output[0]
        if dst not in outputs:
            rename[dst] = src
        elif src in produced and src not in fixed and src not in in_subgraphs and src not in rename.values():
            rename[src] = dst  # the producer writes the output itself
        else:
            kept.append(node)
    if not rename:
        return

    def apply(nodes) -> None:
        for node in nodes:
            node.input[:] = [rename.get(name, name) for name in node.input]
            node.output[:] = [rename.get(name, name) for name in node.output]
            for sub in _subgraphs(node):
                apply(sub.node)

    del graph.node[:]
    graph.node.extend(kept)
    apply(graph.node)
    info = [v for v in graph.value_info if v.name not in rename]
    del graph.value_info[:]
    graph.value_info.extend(info)


def _subgraphs(node) -> list:
    """The graphs ``node``'s attributes hold (an ``If``'s branches, a ``Loop``'s body)."""
    return [g for attr in node.attribute for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)]


def _subgraph_inputs(node) -> set[str]:
    """Every name a node inside ``node``'s subgraphs reads, at any depth."""
    return {name for sub in _subgraphs(node) for inner in sub.node for name in (*inner.input, *_subgraph_inputs(inner))}
