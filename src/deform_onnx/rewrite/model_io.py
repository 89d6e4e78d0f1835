"""Reading and writing ONNX files for the rewrite: one-line errors for bad files, value_info kept."""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import onnx_ir as ir


class ModelFileError(ValueError):
    """A file that is missing or is not a readable ONNX model."""


def read_model(path: str | os.PathLike) -> ir.Model:
    """Load an ONNX file into onnx-ir; external data stays on disk (memory-mapped).

    Raises:
        ModelFileError: the file is missing, unreadable, truncated or not an
            ONNX model (one-line message naming the file).
    """
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"{path}: no such file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - protobuf raises DecodeError, RuntimeWarning, ...
        raise ModelFileError(f"{path}: not a readable ONNX model ({type(e).__name__}: {_first_line(e)})") from None
    _check_structure(proto, path)
    model = _from_proto(proto)
    ir.external_data.set_base_dir(model.graph, str(path.parent))
    return model


#: Key in ``ir.Model.meta``: names that had value_info in the file read.
_VALUE_INFO = "deform_onnx.value_info_names"


def _from_proto(proto: onnx.ModelProto) -> ir.Model:
    model = ir.serde.deserialize_model(proto)
    model.meta[_VALUE_INFO] = frozenset(vi.name for vi in proto.graph.value_info)
    return model


def _keep_value_info(model: ir.Model) -> None:
    """Serialize value_info only for the values that had it when read.

    onnx-ir writes value_info for every typed initializer; clearing the
    (redundant) type of the others keeps the file's value_info as it was.
    """
    names = model.meta.get(_VALUE_INFO)
    if names is None:
        return
    for value in model.graph.initializers.values():
        if value.name not in names and not value.is_graph_input():
            value.type = None
            value.shape = None


def _check_structure(proto: onnx.ModelProto, where) -> None:
    """Reject what protobuf parses without error but is no model (empty or cut files)."""
    if proto.ir_version <= 0 or not proto.HasField("graph") or not proto.graph.output:
        raise ModelFileError(f"{where}: not an ONNX model (no ir_version, graph or graph outputs)")
    known = {i.name for i in proto.graph.input} | {t.name for t in proto.graph.initializer}
    for node in proto.graph.node:
        known.update(node.output)
    missing = [o.name for o in proto.graph.output if o.name not in known]
    if missing:
        raise ModelFileError(
            f"{where}: graph output(s) {', '.join(missing)} are produced by no node: the file looks truncated"
        )


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else ""


def default_opset(model: ir.Model) -> int | None:
    """The model's default-domain (``ai.onnx``) opset, or ``None`` if it imports none."""
    for key in ("", "ai.onnx"):
        if key in model.opset_imports:
            return int(model.opset_imports[key])
    return None
