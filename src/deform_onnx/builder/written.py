"""What each deformable call was written as: its form, read from the ops its lowering emitted, and its values.

One rule names the form a file holds, for every label and report field
(``ExportReport.method``/``forms``, ``deform-onnx export``'s rows): a call
whose lowering emitted a ``DeformConv`` is ``native``, one that emitted a
``GridSample`` is ``grid_sample``, any other is ``gather``. The method asked
is not the form written: under ``grid_sample`` a deformable convolution of a
dynamic or large map is sampled with the exact gather sampler, and a 5-D
``F.grid_sample`` below opset 20 has no GridSample to be.

While an exporter runs (:func:`recording`), each binding opens a
:func:`call` around its lowering; :meth:`~.base.Builder.op` notes every op
type emitted inside it (:func:`note`). The calls are stamped into the file's
``metadata_props`` under :data:`KEY` (JSON, one entry per call: op, form,
and for deformable convolution its :class:`~deform_onnx.ops.deform_conv.spec.DeformConvSpec`
fields and, where the exporter keeps the names (the dynamo exporter names
values after the FX graph), the graph values that are its input, offset,
mask and output). :func:`deform_onnx.quantize` reads them back
(:func:`read`) to rebuild the layer from a lowered file
(:mod:`deform_onnx.quantize.rebuild`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

#: ``metadata_props`` key of the record.
KEY = "deform_onnx.calls"
#: Forms in the order labels list them (the last: only quantize's lowering writes it).
FORMS = ("native", "grid_sample", "gather", "DeformConv sampler")
#: Ops whose form depends on the method (``ms_deform_attn`` has one form whatever the method).
RECORDED_OPS = ("deform_conv2d", "grid_sample")
#: Roles of a deformable convolution's graph values in the record.
ROLES = ("input", "offset", "mask", "output")


@dataclass
class Call:
    """One lowered call: ``op`` (``deform_conv2d``/``grid_sample``), the ``form`` it was written in,
    ``spec`` (deformable convolution's parameters) and ``values`` (role -> graph value name, where known).
    """

    op: str
    form: str = "gather"
    spec: dict[str, Any] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)
    emitted: set[str] = field(default_factory=set, repr=False)
    handles: dict[str, Any] = field(default_factory=dict, repr=False)  # role -> the builder's value


_CALLS: ContextVar[list[Call] | None] = ContextVar("deform_onnx_written_calls", default=None)
_CURRENT: ContextVar[Call | None] = ContextVar("deform_onnx_written_current", default=None)


def form_of(op_types) -> str:
    """The form a call wrote, from the op types its lowering emitted.

    A ``DeformConv`` beside a contraction (``MatMul``) is quantize's ``"DeformConv sampler"`` form
    (:mod:`deform_onnx.ops.deform_conv.sampler_columns`), not the native one.
    """
    ops = set(op_types)
    if "DeformConv" in ops:
        return "DeformConv sampler" if ops & {"MatMul", "Gemm"} else "native"
    return "grid_sample" if "GridSample" in ops else "gather"


@contextlib.contextmanager
def recording() -> Iterator[list[Call]]:
    """Collect the calls the bindings lower inside the block (a fresh list: one export attempt)."""
    calls: list[Call] = []
    token = _CALLS.set(calls)
    try:
        yield calls
    finally:
        _CALLS.reset(token)


@contextlib.contextmanager
def call(op: str, spec: dict | None = None, **values) -> Iterator[Call | None]:
    """One binding's lowering of ``op``; ``values``: role -> the builder's value (``None``: absent).

    Yields the :class:`Call` (``None`` outside :func:`recording`); set ``handles["output"]`` on it.
    """
    calls = _CALLS.get()
    if calls is None:
        yield None
        return
    record = Call(op, spec=dict(spec or {}), handles={k: v for k, v in values.items() if v is not None})
    token = _CURRENT.set(record)
    try:
        yield record
    finally:
        _CURRENT.reset(token)
    record.form = form_of(record.emitted)
    calls.append(record)


def note(op_type: str) -> None:
    """Called by :meth:`~.base.Builder.op` for each op emitted."""
    current = _CURRENT.get()
    if current is not None:
        current.emitted.add(op_type)


def label(calls: list[Call], default: str) -> str:
    """The form(s) the calls were written in, e.g. ``"gather"`` or ``"grid_sample+gather"``; ``default`` if none.

    ``default`` is the method asked: an ``F.grid_sample`` call written as one GridSample is that op's
    native form and its grid_sample form alike, so it takes the method's name where that is one of them.
    """
    forms = {
        default
        if c.op == "grid_sample" and c.form == "grid_sample" and default in ("native", "grid_sample")
        else c.form
        for c in calls
        if c.op in RECORDED_OPS
    }
    return "+".join(f for f in FORMS if f in forms) or default


def per_op(calls: list[Call]) -> dict[str, str]:
    """``{op: label}`` of each op called (``"grid_sample+gather"`` where its calls took two forms)."""
    return {op: label([c for c in calls if c.op == op], "") for op in dict.fromkeys(c.op for c in calls)}


def stamp(proto, calls: list[Call]) -> None:
    """Write ``calls`` into ``proto.metadata_props`` (:data:`KEY`), keeping only names the graph has.

    ``values`` are named from the recorded handles (:func:`name_values`) before this; a name the
    final graph lacks (an optimizer replaced the value) drops that call's names, never half of them.
    """
    names = {t.name for t in proto.graph.initializer} | {v.name for v in proto.graph.input}
    names |= {o for n in proto.graph.node for o in n.output}
    entries = []
    for c in calls:
        values = c.values if all(v in names for v in c.values.values()) else {}
        entries.append({"op": c.op, "form": c.form, "spec": c.spec, "values": values})
    for prop in list(proto.metadata_props):
        if prop.key == KEY:
            proto.metadata_props.remove(prop)
    if entries:
        proto.metadata_props.add(key=KEY, value=json.dumps(entries, separators=(",", ":")))


def name_values(calls: list[Call]) -> None:
    """Fill each call's ``values`` from its handles' names (onnx-ir values, after the exporter named them)."""
    for c in calls:
        names = {role: getattr(h, "name", None) for role, h in c.handles.items()}
        if names and all(isinstance(n, str) and n for n in names.values()) and "output" in names:
            c.values = names  # type: ignore[assignment]  # checked: all str


def refresh(metadata: dict, forms: dict[str, str]) -> None:
    """Update the record in ``metadata`` (onnx-ir's ``metadata_props``) after a rewrite: ``forms`` maps
    the output value of each rewritten deformable convolution to the form now written there.
    """
    text = metadata.get(KEY)
    if text is None or not forms:
        return
    try:
        entries = json.loads(text)
        for e in entries:
            out = (e.get("values") or {}).get("output")
            if e.get("op") == "deform_conv2d" and out in forms:
                e["form"] = forms[out]
    except (ValueError, TypeError, AttributeError):
        return
    metadata[KEY] = json.dumps(entries, separators=(",", ":"))


def read(proto) -> list[Call]:
    """The calls stamped in ``proto`` (an ``onnx.ModelProto``); ``[]`` when none or unreadable."""
    text = next((p.value for p in proto.metadata_props if p.key == KEY), None)
    if text is None:
        return []
    try:
        entries = json.loads(text)
        return [Call(e["op"], e["form"], dict(e.get("spec") or {}), dict(e.get("values") or {})) for e in entries]
    except (ValueError, TypeError, KeyError):
        return []
