"""Models over protobuf's 2 GiB limit: the weights go to one external data file beside the ``.onnx``.

A ``ModelProto`` cannot be serialized past 2 GiB, so torch's exporters fail on
such models ("The serialized model is larger than the 2GiB limit imposed by the
protobuf library") when asked for bytes. :class:`ExternalSink` keeps the export
small instead: right after torch's exporter, every tensor over
:data:`SIZE_THRESHOLD` bytes is written to ``<name>.data`` in a private temporary
folder beside the output and the proto keeps only references to it, so the
down-conversion, the checker and the target checks work on a small proto. The
file is checked (``onnx.checker`` from the path) and verified in ONNX Runtime
from the path, then moved into place: the data file first, then the ``.onnx``
(both renames within one folder, so both or neither appear; a failed second
rename removes the first).

Whether a model takes this path is decided before the export from the size of
its parameters and buffers (:func:`is_large`, limit :data:`PROTOBUF_LIMIT`;
tests lower it to send a small model through the same path).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import onnx
import torch

from ..core.atomic_io import file_mode
from ..core.errors import ExportError

#: protobuf's limit on a serialized message (2 GiB - 1); a module attribute so tests can lower it.
PROTOBUF_LIMIT = 2**31 - 1
#: Room for the graph itself (nodes, constants folded by the exporter) beside the weights.
MARGIN = 64 * 2**20
#: Tensors of at least this many bytes go to the data file (onnx's default threshold).
SIZE_THRESHOLD = 1024


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of ``model``'s parameters and buffers (what the file's initializers hold)."""
    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) not in seen:
            seen.add(id(t))
            total += t.numel() * t.element_size()
    return total


def is_large(model: torch.nn.Module) -> bool:
    """Whether ``model``'s file would pass (or come within :data:`MARGIN` of) :data:`PROTOBUF_LIMIT`."""
    return weight_bytes(model) + MARGIN > PROTOBUF_LIMIT


class ExternalSink:
    """A temporary folder beside ``path`` holding the model's data file until :meth:`commit`.

    Raises:
        ExportError: ``path`` is a file-like object (external data needs a file path).
    """

    def __init__(self, path):
        if hasattr(path, "write"):
            raise ExportError(
                "the model's weights pass protobuf's 2 GiB limit, so it is written with external data: "
                "give export() a file path, not a file-like object"
            )
        self.path = Path(path)
        self.data_name = f"{self.path.name}.data"
        self.folder = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent))
        self._stripped = False

    def strip(self, proto: onnx.ModelProto) -> onnx.ModelProto:
        """Move the large tensors of ``proto`` (in place) to the data file; returns ``proto``, now small."""
        from onnx import external_data_helper as ext

        data = self.folder / self.data_name
        data.unlink(missing_ok=True)  # a second export (the TorchScript fallback) starts afresh
        ext.convert_model_to_external_data(
            proto,
            all_tensors_to_one_file=True,
            location=self.data_name,
            size_threshold=SIZE_THRESHOLD,
        )
        ext.write_external_data_tensors(proto, str(self.folder))
        self._stripped = True
        return proto

    def save_ir(self, model) -> onnx.ModelProto:
        """The dynamo exporter's ``onnx_ir`` model written with its data file; returns the small proto."""
        import onnx_ir as ir

        target = self.folder / self.path.name
        (self.folder / self.data_name).unlink(missing_ok=True)
        ir.save(model, str(target), external_data=self.data_name, size_threshold_bytes=SIZE_THRESHOLD)
        self._stripped = True
        return onnx.load(str(target), load_external_data=False)

    def torchscript_path(self) -> Path:
        """Where the TorchScript exporter writes (its own external files go into this subfolder)."""
        sub = self.folder / "torchscript"
        shutil.rmtree(sub, ignore_errors=True)
        sub.mkdir()
        return sub / "model.onnx"

    def load_torchscript(self, path) -> onnx.ModelProto:
        """The TorchScript exporter's file (and its data files) as a stripped proto; the files are removed."""
        proto = onnx.load(str(path), load_external_data=True)
        shutil.rmtree(Path(path).parent, ignore_errors=True)
        return self.strip(proto)

    def save(self, proto: onnx.ModelProto) -> str:
        """Write the (stripped) model beside its data file; returns the path, for the checker and ONNX Runtime."""
        model = self.folder / self.path.name
        onnx.save_model(proto, str(model))
        return str(model)

    def check(self, model_path: str) -> None:
        """Run onnx's full checker on the file beside its data; ``ExportError`` naming the first problem."""
        try:
            onnx.checker.check_model(model_path, full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
            raise ExportError(f"the exported model is not valid ONNX: {str(exc).splitlines()[0]}") from None

    def file_size(self) -> int:
        """Bytes of the model file and its data file."""
        return sum(p.stat().st_size for p in (self.folder / self.path.name, self.folder / self.data_name) if p.exists())

    def commit(self) -> Path:
        """Move the data file, then the ``.onnx``, into place; remove the temporary folder."""
        data_src, data_dst = self.folder / self.data_name, self.path.parent / self.data_name
        for p in (data_src, self.folder / self.path.name):  # as open() would make them (onnx writes 0o600)
            os.chmod(p, file_mode())
        os.replace(data_src, data_dst)
        try:
            os.replace(self.folder / self.path.name, self.path)
        except BaseException:
            data_dst.unlink(missing_ok=True)
            raise
        self.close()
        return self.path

    def close(self) -> None:
        """Remove the temporary folder (nothing of the model is left)."""
        shutil.rmtree(self.folder, ignore_errors=True)
