"""How onnx2tf lays out a graph output: channels-last, as the ONNX file, or not known (the tflite runner).

This file's source runs inside the onnx2tf venv, in the convert step of :data:`.runners.TFLITE` (after
``onnx2tf.convert()``), so it imports only the standard library at its top and ``onnx`` inside its functions;
it has no ``from __future__`` line (the runner is one concatenated script).

onnx2tf (1.29) writes channels-last models: ``ops/Input.py`` moves axis 1 last on every 3-D to 5-D input
(no ``keep_*`` option is given), and ``convert()`` returns each output as the tensor its graph left, with no
final transpose (``onnx2tf.py``: ``get_tf_model_outputs``). Whether that tensor is channels-last follows from
the op that made it, as onnx2tf's converter for that op lays it out; a shape says it only where the two
readings differ (not for ``[1, 8, 8, 8]``: C == H == W). onnx2tf's own per-tensor ``nhwc`` flag
(``model.onnx_output_layouts``) is not enough: ``ops/ArgMax.py`` carries it over to a value whose channel
axis it dropped.
"""

CHANNELS_LAST = "channels-last"
AS_FILE = "as file"

#: Elementwise ops of one variable input: the output is laid out as that input.
UNARY = frozenset(
    "Abs Cast Ceil Clip Elu Erf Exp Floor Gelu HardSigmoid HardSwish Identity LeakyRelu Log Neg Reciprocal Relu "
    "Round Selu Sigmoid Sign Softplus Sqrt Tanh".split()
)
#: Elementwise ops of two inputs: laid out as their variable inputs of the output's rank, where those agree.
BINARY = frozenset("Add Sub Mul Div Pow Max Min".split())


def output_layouts(graph, records, names):
    """``{name: "channels-last" | "as file" | None}`` for each graph output in ``names``.

    Args:
        graph: the ``onnx.GraphProto`` onnx2tf converted (onnxsim's, which onnx2tf writes over its input).
        records: onnx2tf's ``tf_layers_dict`` (each tensor's ``optype``, ONNX ``shape``, and a Reshape's
            ``unnecessary_reshape``); a name onnx2tf sanitised (``:`` to ``__``) is looked up both ways.
        names: the output names.

    ``"channels-last"``: a ``Conv``'s or ``ConvTranspose``'s (``ops/Conv.py``, ``ops/ConvTranspose.py`` convolve
    channels-last), a 3-D to 5-D graph input's, an elementwise op's of such values. ``"as file"``: a ``Reshape``'s
    to a static shape (``ops/Reshape.py`` reshapes the value moved back to the ONNX layout to the ONNX shape), an
    ``ArgMax``/``ArgMin``'s over the channel axis without ``keepdims``, a ``Squeeze``'s of the channel axis alone
    of a channels-last value (``ops/Squeeze.py`` maps ONNX axis 1 to the channels-last axis with ``convert_axis``,
    so ``[N, H, W, 1]`` becomes ``[N, H, W]``: DBNet's ``binarize(img).squeeze(1)``), an elementwise op's of such
    values. ``None``: not known (any other op, or a converter record that names another op than the graph).
    """
    from onnx import helper

    made = {o: n for n in graph.node for o in n.output}
    ranks = {i.name: len(i.type.tensor_type.shape.dim) for i in graph.input}
    consts = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}

    def constant(name):  # an initializer's or a Constant node's values as a list of ints, else None
        from onnx import numpy_helper

        found = [t for t in graph.initializer if t.name == name]
        found += [a.t for n in graph.node if n.op_type == "Constant" and n.output[0] == name for a in n.attribute
                  if a.name == "value"]  # fmt: skip
        return [int(v) for v in numpy_helper.to_array(found[0]).reshape(-1)] if found else None

    def record(name):
        return records.get(name) or records.get(name.replace(":", "__")) or {}

    def rank(name):
        shape = record(name).get("shape")
        return len(shape) if shape is not None else ranks.get(name)

    def layout(name, depth):
        if name in ranks:
            return CHANNELS_LAST if 3 <= ranks[name] <= 5 else None
        node, rec = made.get(name), record(name)
        if node is None or depth > 500 or rec.get("optype", node.op_type) != node.op_type:
            return None
        op, attrs = node.op_type, {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if op in ("Conv", "ConvTranspose"):
            return CHANNELS_LAST
        if op == "Reshape":
            shape = rec.get("shape")
            static = shape is not None and all(isinstance(d, int) and d > 0 for d in shape)
            return AS_FILE if static and not rec.get("unnecessary_reshape") else None
        if op in UNARY:
            return layout(node.input[0], depth + 1)
        if op in BINARY:
            variables = [i for i in node.input if i and i not in consts]
            if not variables or any(rank(i) != rank(name) for i in variables):
                return None
            found = {layout(i, depth + 1) for i in variables}
            return found.pop() if len(found) == 1 else None
        if op == "Squeeze":
            axes = attrs.get("axes")
            if axes is None and len(node.input) > 1:
                axes = constant(node.input[1])
            r = rank(node.input[0])
            squeezed = sorted(a % r for a in axes) if axes is not None and r else None
            return AS_FILE if squeezed == [1] and layout(node.input[0], depth + 1) == CHANNELS_LAST else None
        if op in ("ArgMax", "ArgMin"):
            source = layout(node.input[0], depth + 1)
            if attrs.get("keepdims", 1) or source == AS_FILE:
                return source
            r = rank(node.input[0])
            return AS_FILE if source == CHANNELS_LAST and r and attrs.get("axis", 0) % r == 1 else None
        return None

    return {n: layout(n, 0) for n in names}


def op_names(graph, names):
    """``{name: the op that makes it}`` (``"graph input"`` for an input) for each of ``names``: the error says it."""
    made = {o: n.op_type for n in graph.node for o in n.output}
    return {n: made.get(n, "graph input") for n in names}
