"""The file's output names from the model's own output structure, unless ``output_names`` is given.

torch's exporters name a Hugging Face model's outputs after graph values (``select_44`` from the dynamo
exporter, ``4043`` from the TorchScript one). The model's output says what each is: the fields of a
``ModelOutput`` (``logits``, ``pred_boxes``), dict keys, namedtuple fields. Both exporters flatten the
output as ``torch.utils._pytree`` does (checked on torch 2.14: dict insertion order, ``ModelOutput``'s
present fields, namedtuple order, nested tuples depth first), so the names come from the same
flattening: each leaf's key path, joined with dots (``encoder.0``; a leaf reached through a plain tuple
first is ``output_<i>``). The dynamo path reads the structure ``torch.export`` recorded
(``ExportedProgram.call_spec.out_spec``); the TorchScript path the structure of the traced call's output
(:func:`recording`). Outputs with no name anywhere in their structure (a tensor, plain tuples and lists)
keep the exporter's names, as before; so does a file whose output count differs from the structure's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import onnx
import torch
from torch.utils import _pytree as pytree


def _key_name(key) -> tuple[str, bool]:
    """``(text, is_a_name)`` of one pytree key."""
    if isinstance(key, pytree.MappingKey):
        return str(key.key), True
    if isinstance(key, pytree.GetAttrKey):
        return str(key.name), True
    if isinstance(key, pytree.SequenceKey):
        return str(key.idx), False
    return str(key), False


def names_from_paths(paths: list[tuple]) -> list[str] | None:
    """One name per leaf key path, or ``None`` when no path holds a name (see the module docstring)."""
    named = [[_key_name(k) for k in path] for path in paths]
    if not any(is_name for parts in named for _, is_name in parts):
        return None
    names = []
    for parts in named:
        texts = [text for text, _ in parts]
        if parts and not parts[0][1]:
            texts[0] = f"output_{texts[0]}"
        names.append(".".join(texts) or "output")
    return names if len(set(names)) == len(names) else None


def names_of_output(output) -> list[str] | None:
    """Names for the tensor leaves of a model's output (``None``: keep the exporter's)."""
    leaves, _ = pytree.tree_flatten_with_path(output)
    if not all(isinstance(leaf, torch.Tensor) for _, leaf in leaves):
        return None  # a number or string among the outputs: the exporters' counts may differ
    return names_from_paths([path for path, _ in leaves])


def names_of_spec(spec) -> list[str] | None:
    """Names for the leaves of a pytree ``TreeSpec`` (``ExportedProgram.call_spec.out_spec``)."""
    if spec is None:
        return None
    try:
        structure = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
    except Exception:  # noqa: BLE001 - a container type pytree cannot rebuild: keep the exporter's names
        return None
    return names_from_paths([path for path, _ in pytree.tree_flatten_with_path(structure)[0]])


@contextlib.contextmanager
def recording(model: torch.nn.Module) -> Iterator[list]:
    """Inside the block, the output names of each call of ``model`` (a forward hook) are appended to the list."""
    found: list = []

    def hook(module, inputs, output):
        found.append(names_of_output(output))

    if isinstance(model, torch.jit.ScriptModule):  # no forward hooks there: the exporter's names stay
        yield found
        return
    handle = model.register_forward_hook(hook)
    try:
        yield found
    finally:
        handle.remove()


def rename_ir(model, names: list[str] | None) -> None:
    """Name the graph outputs of an ``onnx_ir`` model ``names`` (in place); nothing when the counts differ.

    A value of the graph already holding one of the names gets a free one first.
    """
    outputs = list(model.graph.outputs)
    if not names or len(names) != len(outputs):
        return
    taken = {v.name for v in _ir_values(model.graph) if v.name}
    wanted = set(names)
    for value in _ir_values(model.graph):
        if value.name in wanted and value not in outputs:
            value.name = _free(value.name, taken | wanted)
            taken.add(value.name)
    if any(v.is_graph_input() or v.is_initializer() for v in outputs):
        return  # an input returned as is: renaming it would rename the input too
    for value, name in zip(outputs, names):
        value.name = name


def _ir_values(graph):
    yield from graph.inputs
    yield from graph.initializers.values()
    for node in graph:
        yield from node.outputs


def rename_proto(proto: onnx.ModelProto, names: list[str] | None) -> None:
    """Name the graph outputs of ``proto`` ``names`` (in place, main graph and subgraphs' references);
    nothing when the counts differ or an output is a graph input or initializer itself.
    """
    graph = proto.graph
    if not names or len(names) != len(graph.output):
        return
    sources = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    if any(o.name in sources for o in graph.output):
        return
    produced = {o for n in graph.node for o in n.output}
    mapping = {o.name: n for o, n in zip(graph.output, names)}
    taken = produced | sources | set(names)
    for name in produced:  # a value already named like a new output name: give it a free name first
        if name in set(names) and name not in mapping:
            mapping[name] = _free(name, taken)
            taken.add(mapping[name])
    _apply(graph, mapping)


def _apply(graph: onnx.GraphProto, mapping: dict[str, str]) -> None:
    for node in graph.node:
        node.input[:] = [mapping.get(i, i) for i in node.input]
        node.output[:] = [mapping.get(o, o) for o in node.output]
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                _apply(attr.g, mapping)
            for sub in attr.graphs:
                _apply(sub, mapping)
    for value in (*graph.output, *graph.value_info):
        value.name = mapping.get(value.name, value.name)


def _free(name: str, taken: set[str]) -> str:
    k = 1
    while f"{name}_{k}" in taken:
        k += 1
    return f"{name}_{k}"
