"""A lowered file's deformable convolutions back as ``DeformConv`` nodes, for :func:`deform_onnx.quantize`.

A default export (``deform_onnx.export``: the grid_sample lowering at opset
17) holds each deformable convolution as a float subgraph of GridSample (or
Gather), mask product and contraction. Quantized as it is, its contraction
stays float and its sampler is GridSample: 1.18-1.26x the float32 native
file's time on the 64-channel stack (BENCHMARKS.md), against 0.85x for the
INT8 form quantize writes from a ``DeformConv`` node (weight-first U8S8
contraction, ONNX Runtime's own ``DeformConv`` as the sampler). So quantize
rebuilds each layer as a ``DeformConv`` node and lowers it again, in that
form, with the one lowering every entry point uses (:func:`deform_onnx.lower`).

What a layer is comes from the export's record (:mod:`deform_onnx.builder.written`:
its :class:`~deform_onnx.ops.deform_conv.spec.DeformConvSpec` and the graph
values that are its input, offset, mask and output; the dynamo exporter names
values after the FX graph, so the names hold for its files). Its numbers come
from the file itself, not from the record, by running the layer's subgraph
(everything between those values) in ONNX Runtime: with zero offsets and a
unit mask a deformable convolution is a plain convolution, so

- zero input gives the bias exactly (``0 * w`` sums to 0, then ``+ b``);
- random inputs give the weight by least squares over output pixels
  (``y - b = cols(x) @ W^T``, float64; the columns ``cols`` computed here
  from the spec, im2col with zero padding), checked by its residual.

Recovering the weight from the graph, rather than reading an initializer, is
what works for every file: the exporters fold a small layer's weight into
the lowering's reshaped constants (the bundled example's do), and a user may
have edited the weights. A layer whose record does not match its subgraph (a
name the graph lacks, a subgraph that reads other graph inputs, a residual
above float32 rounding) is left as it is, with a note; quantize then checks
the whole rebuilt-and-lowered model against the file on the evaluation sample
(:func:`~.lowering.check_lowering`) before quantizing.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..builder import written
from ..ops.deform_conv.spec import DeformConvSpec

#: Largest residual of the recovered convolution, relative to the output's largest value: float32
#: rounding of a few hundred products is ~1e-6 of it; a wrong spec or a sampler off by a pixel, ~1e-1.
RESIDUAL = 1e-4
#: Rows fitted per unknown of a channel's weight (least squares over that many output pixels; as many checked).
FIT_ROWS = 4
#: Seeded probes at most per layer (a small map with many channels needs several to fill the system).
MAX_PROBES = 64


def rebuild_deform_convs(model: onnx.ModelProto, evaluation: dict) -> tuple[onnx.ModelProto, int, list[str]]:
    """``model`` with each recorded deformable convolution replaced by one ``DeformConv`` node.

    Args:
        model: a float32 ONNX model (not modified); its ``metadata_props`` may hold the export's record.
        evaluation: one input sample by name (the layer's value shapes are read from a run on it).

    Returns:
        ``(model, rebuilt, notes)``: the new model (``model`` itself when nothing was rebuilt), how
        many layers were rebuilt, and a line for each layer left as it was. The new model's opset is
        unchanged: ``DeformConv`` needs 19, so it must be lowered (``deform_onnx.lower(opset=...)``).
    """
    # (a native export records its DeformConv nodes too: nothing to rebuild where one still is)
    native = {o for n in model.graph.node if n.op_type == "DeformConv" for o in n.output}
    calls = [c for c in written.read(model) if c.op == "deform_conv2d" and c.values.get("output", "") not in native]
    calls = [c for c in calls if c.values]
    if not calls:
        return model, 0, []
    from .timing import ort_session

    roles = [c.values.get(r) for c in calls for r in ("input", "offset", "mask")]
    wanted = list(dict.fromkeys(n for n in roles if n))
    have = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.input}
    if not set(wanted) <= have:
        return model, 0, ["the file's record of its deformable convolutions names values it lacks (edited?): "
                          "they stay as they are"]  # fmt: skip
    values = dict(zip(wanted, ort_session(_with_outputs(model, wanted)).run(wanted, evaluation)))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    rebuilt, notes = 0, []
    for index, c in enumerate(calls):
        try:
            spec = DeformConvSpec(**c.spec)
            sub = _subgraph(
                model, [c.values[r] for r in ("input", "offset", "mask") if r in c.values], c.values["output"]
            )
            weight, bias = _recover(sub, spec, c, values)
        except (ValueError, KeyError, TypeError) as exc:
            notes.append(f"deformable convolution {c.values.get('output')!r} stays as it is: {exc}")
            continue
        _replace(out, spec, c, weight, bias, index)
        rebuilt += 1
    if not rebuilt:
        return model, 0, notes
    _drop_dead(out)
    written.stamp(out, [])  # the record described the lowered layers: none of them is left as it was
    return out, rebuilt, notes


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.output[:]
    copy.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    return copy


def _subgraph(model: onnx.ModelProto, inputs: list[str], output: str) -> onnx.ModelProto:
    """The nodes that compute ``output`` from ``inputs`` and constants, as a model with those inputs."""
    graph = model.graph
    producer = {o: k for k, n in enumerate(graph.node) for o in n.output}
    inits = {t.name for t in graph.initializer}
    keep: set[int] = set()
    seen, stack = set(inputs), [output]
    while stack:
        name = stack.pop()
        if not name or name in seen or name in inits:
            continue
        seen.add(name)
        k = producer.get(name)
        if k is None:
            raise ValueError(f"its subgraph reads the graph input {name!r}, not only its input, offset and mask")
        node = graph.node[k]
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise ValueError("its subgraph has control flow")
        if k not in keep:
            keep.add(k)
            stack.extend(node.input)
    nodes = [graph.node[k] for k in sorted(keep)]
    used = {i for n in nodes for i in n.input}
    sub = helper.make_graph(
        nodes,
        "deform_conv",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in inputs],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
        [t for t in graph.initializer if t.name in used],
    )
    return helper.make_model(sub, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def _recover(sub: onnx.ModelProto, spec: DeformConvSpec, c, values: dict) -> tuple[np.ndarray, np.ndarray]:
    """``(weight [Co, C/groups, kh, kw], bias [Co])`` of the subgraph, run with zero offsets and a unit mask."""
    from .timing import ort_session

    session = ort_session(sub)
    x_shape = np.shape(values[c.values["input"]])
    offset_shape = np.shape(values[c.values["offset"]])
    feeds = {c.values["offset"]: np.zeros(offset_shape, np.float32)}
    if "mask" in c.values:
        feeds[c.values["mask"]] = np.ones(np.shape(values[c.values["mask"]]), np.float32)
    name = c.values["input"]
    y0 = session.run(None, {**feeds, name: np.zeros(x_shape, np.float32)})[0]
    N, Co, Ho, Wo = y0.shape
    if (Co, Ho * Wo) != (spec.out_channels, offset_shape[2] * offset_shape[3]):
        raise ValueError(f"its subgraph writes {list(y0.shape)}, not {spec.out_channels} channels at the offset's size")
    bias = y0[0, :, 0, 0].astype(np.float64)
    if np.abs(y0 - bias[None, :, None, None]).max() > RESIDUAL * max(np.abs(bias).max(), 1.0):
        raise ValueError("with zero input its output is no constant bias")
    G, Cpg, Cog, K = spec.groups, spec.channels_per_group, spec.out_channels // spec.groups, spec.taps
    rng = np.random.default_rng(0)
    # Each probe's output pixels, shuffled: half fitted on, half checking the fit (enough to fit:
    # FIT_ROWS rows per unknown of one channel's weight; a small map takes several probes).
    need = FIT_ROWS * Cpg * K
    take = min(Ho * Wo, 2 * need)
    fit: list = []
    check: list = []
    rows = 0
    for _ in range(MAX_PROBES):
        x = rng.standard_normal(x_shape).astype(np.float32)
        y = session.run(None, {**feeds, name: x})[0].astype(np.float64) - bias[None, :, None, None]
        for n in range(N):
            pixels = rng.permutation(Ho * Wo)[:take]
            cols_n, y_n = _columns(x[n].astype(np.float64), spec, Wo, pixels), y[n].reshape(Co, Ho * Wo).T[pixels]
            half = max(len(pixels) // 2, 1)
            fit.append((cols_n[:half], y_n[:half]))
            check.append((cols_n[half:], y_n[half:]))
            rows += half
        if rows >= need:
            break
    else:
        raise ValueError(f"{MAX_PROBES} probes of its {Ho}x{Wo} map do not determine {Cpg * K} weights per channel")
    cols, y = (np.concatenate(t) for t in zip(*fit))
    cols_check, y_check = (np.concatenate(t) for t in zip(*check))
    weight = np.zeros((spec.out_channels, Cpg, K))
    scale = max(np.abs(y).max(), 1e-30)
    for g in range(G):
        a = cols[:, g * Cpg : (g + 1) * Cpg].reshape(len(cols), Cpg * K)
        try:  # the normal equations: random columns are well conditioned (SVD-based lstsq is ~30x slower)
            w = np.linalg.solve(a.T @ a, a.T @ y[:, g * Cog : (g + 1) * Cog])
        except np.linalg.LinAlgError:
            raise ValueError("its probes do not determine the weight (singular columns)") from None
        a = cols_check[:, g * Cpg : (g + 1) * Cpg].reshape(len(cols_check), Cpg * K)
        residual = np.abs(a @ w - y_check[:, g * Cog : (g + 1) * Cog]).max(initial=0.0)  # pixels not fitted on
        if residual > RESIDUAL * scale:
            raise ValueError(
                f"it is no convolution of its record's spec at zero offsets (residual {residual / scale:.2g} of the output)"
            )
        weight[g * Cog : (g + 1) * Cog] = w.T.reshape(Cog, Cpg, K)
    return weight.reshape(spec.out_channels, Cpg, *spec.kernel).astype(np.float32), bias.astype(np.float32)


def _columns(x: np.ndarray, spec: DeformConvSpec, Wo: int, pixels: np.ndarray) -> np.ndarray:
    """im2col of ``x [C, H, W]`` at zero offsets for the flat output ``pixels``: ``[len(pixels), C, K]``
    (zero padding; taps row-major, as the weight ``[Co, C, kh, kw]`` orders them).
    """
    _, H, W = x.shape
    (sh, sw), (ph, pw), (dh, dw) = spec.stride, spec.padding, spec.dilation
    ki, kj = np.divmod(np.arange(spec.taps), spec.kernel[1])
    i, j = np.divmod(pixels, Wo)
    r = i[:, None] * sh - ph + ki[None, :] * dh  # [P, K]
    s = j[:, None] * sw - pw + kj[None, :] * dw
    inside = (r >= 0) & (r < H) & (s >= 0) & (s < W)
    taken = x[:, np.clip(r, 0, H - 1), np.clip(s, 0, W - 1)] * inside  # [C, P, K]
    return taken.transpose(1, 0, 2)


def _replace(model: onnx.ModelProto, spec: DeformConvSpec, c, weight: np.ndarray, bias: np.ndarray, index: int):
    """Put one ``DeformConv`` (inputs ``X, W, offset, B, mask``: the ONNX spec) where ``output``'s producer was."""
    graph = model.graph
    output = c.values["output"]
    at = next(k for k, n in enumerate(graph.node) if output in n.output)
    old = graph.node[at]
    old.output[list(old.output).index(output)] = f"{output}__lowered_{index}"  # dead now: dropped with its subgraph
    w_name, b_name = f"{output}__rebuilt_weight", f"{output}__rebuilt_bias"
    graph.initializer.extend([numpy_helper.from_array(weight, w_name), numpy_helper.from_array(bias, b_name)])
    inputs = [c.values["input"], w_name, c.values["offset"], b_name] + (
        [c.values["mask"]] if "mask" in c.values else []
    )
    node = helper.make_node(
        "DeformConv",
        inputs,
        [output],
        name=f"{output}__DeformConv",
        dilations=list(spec.dilation),
        group=spec.groups,
        kernel_shape=list(spec.kernel),
        offset_group=spec.offset_groups,
        pads=list(spec.pads),
        strides=list(spec.stride),
    )
    graph.node.insert(at, node)


def _drop_dead(model: onnx.ModelProto) -> None:
    """Remove the nodes and initializers no graph output needs (the replaced layers' subgraphs)."""
    graph = model.graph
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(node.input)
    kept_nodes = list(reversed(keep))
    del graph.node[:]
    graph.node.extend(kept_nodes)
    needed |= {i.name for i in graph.input}  # an initializer listed as a graph input stays (old IR files)
    inits = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    names = {o for n in graph.node for o in n.output}
    infos = [v for v in graph.value_info if v.name in names]
    del graph.value_info[:]
    graph.value_info.extend(infos)


def rebuilt_note(rebuilt: int, model: onnx.ModelProto, lowered: onnx.ModelProto) -> str:
    """The report's note on a rebuild (and on the opset it took the file to)."""

    def opset(m):
        return next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)

    note = (
        f"rebuilt {rebuilt} deformable convolution(s) of this lowered file as DeformConv (the layers its export "
        "recorded; weights and biases read back from its subgraphs) and lowered them in the INT8 form"
    )
    if opset(lowered) != opset(model):
        note += f"; the INT8 file is at opset {opset(lowered)} (the file's: {opset(model)}), which DeformConv needs"
    return note
