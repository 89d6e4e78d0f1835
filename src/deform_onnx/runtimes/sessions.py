"""Sessions that export's verification runs a file in, and how they are fed: by the file's input names.

:func:`make_session` is ONNX Runtime's CPU session (a missing kernel is a one-line
:class:`MissingKernelError`); :func:`run_file` feeds any session with ONNX Runtime's API (also
:class:`deform_onnx.exporting.bfloat16.OpenVINOSession`) from the example tensors, by name.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import onnx
import torch
import torch.utils._pytree as pytree

from ..core.errors import ExportError, MissingKernelError, VerificationError


def input_tensors(args) -> list[torch.Tensor]:
    """The tensors of ``args`` in the order the exporters make them graph inputs (pytree leaves, CPU).

    Other leaves (Python numbers, ``None``, strings) are constants to the exporters, not graph inputs.
    """
    leaves = pytree.tree_leaves(args)
    return [a.detach().cpu() for a in leaves if isinstance(a, torch.Tensor)]


def output_tensors(value) -> list[tuple[str, torch.Tensor]]:
    """PyTorch's outputs as the exporters write them to the file: ``[(path, tensor), ...]`` in graph order.

    ``torch.utils._pytree`` is the source of truth, as for ``torch.export`` and both ONNX exporters:
    tuples, lists, namedtuples and dicts (in insertion order), transformers' ``ModelOutput`` (registered by
    transformers: its set fields in order, ``None`` fields dropped), nested in any way; ``None`` leaves are
    dropped (the exporters drop ``None`` outputs). Python numbers become 0-d tensors (the TorchScript
    exporter writes a number computed from a shape as a 0-d output). A dataclass that is not registered
    with pytree is flattened field by field, ``None`` fields dropped (as ``torch.export.register_dataclass``
    does). ``path`` is pytree's key path (``"[0]"``, ``"['logits']"``, ``".last_hidden_state"``).

    Raises:
        VerificationError: a leaf that is neither a tensor nor a Python number (a string, a numpy array,
            an unregistered container), named by its path: there would be nothing to compare it with.
    """
    out: list[tuple[str, torch.Tensor]] = []
    for path, leaf in _leaves(value, ""):
        if leaf is None:  # a leaf to torch.utils._pytree, dropped from the graph by both exporters
            continue
        if isinstance(leaf, torch.Tensor):
            out.append((path, leaf.detach().cpu()))
        elif isinstance(leaf, (bool, int, float)):
            out.append((path, torch.tensor(leaf)))
        else:
            where = f"output {path}" if path else "the output"
            kind = (
                type(leaf).__qualname__
                if type(leaf).__module__ == "builtins"
                else f"{type(leaf).__module__}.{type(leaf).__qualname__}"
            )
            raise VerificationError(
                f"{where} of the model is a {kind}, which deform-onnx "
                "cannot compare with the file: return tensors (in tuples, lists, dicts, namedtuples or dataclasses), "
                "register the container with torch.utils._pytree, or pass verify=False"
            )
    return out


def _leaves(value, prefix: str) -> list[tuple[str, object]]:
    try:
        flat, _ = pytree.tree_flatten_with_path(value)
        pairs = [(prefix + pytree.keystr(path), leaf) for path, leaf in flat]
    except ValueError:  # a node registered without flatten_with_keys: positions instead of keys
        pairs = [(f"{prefix}[{i}]", leaf) for i, leaf in enumerate(pytree.tree_leaves(value))]
    out: list[tuple[str, object]] = []
    for path, leaf in pairs:
        if dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            for f in dataclasses.fields(leaf):
                out += _leaves(getattr(leaf, f.name), f"{path}.{f.name}")
        else:
            out.append((path, leaf))
    return out


def _numpy(t: torch.Tensor) -> np.ndarray:
    # numpy has no bfloat16: compare in float32, which holds every bfloat16 value exactly.
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def make_session(data: bytes, optimize: bool = True):
    """An ONNX Runtime CPU session on ``data``.

    ``optimize=False``: with ONNX Runtime's graph optimisations off, so the file runs as the ONNX spec
    says. The second-size check runs so: with them on, ONNX Runtime recomputed a Reshape whose shape the
    TorchScript exporter had frozen to the example's size (``Mul(W, 12)``) and gave the right result at
    another size, for a file that other runtimes run wrong.

    Raises:
        MissingKernelError: ONNX Runtime has no kernel for some node at its dtype.
        ModuleNotFoundError: no ONNX Runtime distribution is installed (the message names
            the ``deform-onnx[onnxruntime]`` extra).
    """
    from .ort_distribution import require

    ort = require()  # whichever distribution provides it (onnxruntime, -gpu, -openvino, ...): all have the CPU EP
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        missing = _missing_kernel(str(exc), data)
        if missing is None:
            raise
        raise MissingKernelError(missing) from None


def run_file(session, args: tuple, input_names: list[str] | None = None) -> tuple[list[str], list[np.ndarray]]:
    """Run ``session`` on the tensors of ``args`` (in order; inputs the graph dropped are skipped).

    ``session``: an ONNX Runtime ``InferenceSession``, or any object with its ``get_inputs()``,
    ``get_outputs()`` (items with ``.name``) and ``run(None, feeds)`` (such as
    :class:`deform_onnx.exporting.bfloat16.OpenVINOSession`). bfloat16 tensors are fed as ``ml_dtypes.bfloat16``
    arrays; bfloat16 outputs come back as such arrays.

    ``input_names``: the names the export gave the tensors of ``args``, in order. Exporters drop inputs
    that the graph does not use, and a dropped input in the middle shifts the rest: with the names, each
    file input gets its own tensor (OmDet-Turbo drops ``classes_attention_mask``; fed by position, the
    next input got its neighbour's tensor). Without them, the order of the rest is kept.
    """
    feeds = feeds_by_name([i.name for i in session.get_inputs()], [_feed(t) for t in input_tensors(args)], input_names)
    return [o.name for o in session.get_outputs()], _run(session, feeds)


def feeds_by_name(file_inputs: list[str], arrays: list, names: list[str] | None) -> dict:
    """The feeds of a file whose inputs are ``file_inputs`` from ``arrays`` (the example, in ``forward`` order).

    By name when ``names`` (the export's names for ``arrays``) holds every file input: an input the
    graph dropped, or inputs the file lists in another order, still get their own array. Else by
    position (the first ``len(file_inputs)`` arrays).

    Raises:
        ExportError: the file has more inputs than there are arrays.
    """
    if len(file_inputs) > len(arrays):
        raise ExportError(f"the model has {len(file_inputs)} inputs but {len(arrays)} example tensors were given")
    given = list(names or [])[: len(arrays)]
    if given and all(n in given for n in file_inputs):
        return {n: arrays[given.index(n)] for n in file_inputs}
    return dict(zip(file_inputs, arrays[: len(file_inputs)]))


def _feed(t: torch.Tensor) -> np.ndarray:
    """``t`` as a runtime takes it: bfloat16 as an ``ml_dtypes.bfloat16`` array of the same bits."""
    if t.dtype != torch.bfloat16:
        return t.numpy()
    import ml_dtypes  # onnx's own dependency

    return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)


def _run(session, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    if not hasattr(session, "run_with_ort_values"):  # another runtime's session (OpenVINO)
        return list(session.run(None, feeds))
    from .ort_distribution import require

    ort = require()
    quiet = ort.RunOptions()
    quiet.log_severity_level = 4  # a failure raises; its log line would only repeat it
    if not any(a.dtype.name == "bfloat16" for a in feeds.values()):
        return session.run(None, feeds, quiet)
    import ml_dtypes

    # ONNX Runtime's numpy bridge does not know ml_dtypes: bfloat16 goes in and out as OrtValues of its bits.
    values = {
        k: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(a.view(np.uint16), onnx.TensorProto.BFLOAT16)
        if a.dtype.name == "bfloat16"
        else ort.OrtValue.ortvalue_from_numpy(a)
        for k, a in feeds.items()
    }
    outs = session.run_with_ort_values(None, values, quiet)
    return [
        np.asarray(o.numpy()).view(ml_dtypes.bfloat16) if o.data_type() == "tensor(bfloat16)" else o.numpy()
        for o in outs
    ]


def _missing_kernel(text: str, data: bytes) -> str | None:
    """One line for ORT's "Could not find an implementation for Conv(11) node with name 'x'"."""
    match = re.search(r"Could not find an implementation for (\w+)\((\d+)\) node with name '([^']*)'", text)
    if match is None:
        return None
    op, _kernel_version, node_name = match.groups()  # the kernel's since-version (Conv(11)), not the file's opset
    dtype = _node_input_dtype(data, node_name)
    of = f"{dtype} " if dtype else ""
    opset = _file_opset(data)
    at = f"opset {opset}, " if opset is not None else ""
    return (
        f"ONNX Runtime (CPU) has no {of}kernel for {op} ({at}node {node_name!r}), so the "
        f"exported file cannot be verified here; pass verify=False (CLI: --no-verify) to write it unverified "
        f"(runtimes with {of}{op}: see docs/targets.md, Runtime support), or export the model in float32"
    )


def _file_opset(data: bytes) -> int | None:
    """The file's default-domain opset (what the message names; ORT's text names its kernel's version)."""
    try:
        proto = onnx.load_from_string(data)
    except Exception:  # noqa: BLE001 - only used to word the message
        return None
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)


def _node_input_dtype(data: bytes, node_name: str) -> str | None:
    """The element type of the named node's first input (after shape inference), e.g. ``float64``."""
    try:
        proto = onnx.shape_inference.infer_shapes(onnx.load_from_string(data))
    except Exception:  # noqa: BLE001 - only used to word the message
        return None
    node = next((n for n in proto.graph.node if n.name == node_name), None)
    if node is None or not node.input:
        return None
    infos = [*proto.graph.input, *proto.graph.value_info, *proto.graph.initializer]
    for info in infos:
        if info.name == node.input[0]:
            elem = info.data_type if isinstance(info, onnx.TensorProto) else info.type.tensor_type.elem_type
            return onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else None
    return None


class ReplaySession:
    """The part of ONNX Runtime's session API :func:`run_file` uses, answering with outputs another runtime already
    returned: so that :func:`deform_onnx.exporting.verification.verify` judges a deployed runtime's (or an OpenVINO
    IR's) outputs by export's own rules.

    Args:
        inputs: the file's input names, in order.
        outputs: ``[(name, array), ...]`` as the runtime returned them, in the file's order.
        runtime: who returned them, for the messages.
    """

    def __init__(self, inputs: list[str], outputs: list, runtime: str):
        self._inputs = [_Name(name) for name in inputs]
        self._outputs = [_Name(name) for name, _ in outputs]
        self._values = [value for _, value in outputs]
        self.runtime = runtime

    def get_inputs(self) -> list:
        """The inputs (items with ``.name``)."""
        return self._inputs

    def get_outputs(self) -> list:
        """The outputs (items with ``.name``), in the file's order."""
        return self._outputs

    def run(self, names, feeds) -> list:
        """The replayed outputs (``names`` and ``feeds`` are not read: the runtime ran on the same inputs)."""
        return list(self._values)


class _Name:
    def __init__(self, name: str):
        self.name = name
