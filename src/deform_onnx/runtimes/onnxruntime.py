"""ONNX Runtime helpers: a session from a path or ``onnx.ModelProto``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

__all__ = ["available", "session", "has_deform_conv_kernel"]


def available() -> str | None:
    """``None`` if onnxruntime can be imported, else the reason (one line)."""
    from .ort_distribution import MISSING

    try:
        import onnxruntime  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name == "onnxruntime":
            return MISSING
        return f"onnxruntime is not usable: {e} (pip install 'deform-onnx[onnxruntime]')"
    except Exception as e:  # noqa: BLE001
        return f"onnxruntime is not usable: {e} (pip install 'deform-onnx[onnxruntime]')"
    return None


def session(model: str | os.PathLike | Any, providers: Sequence[str] | None = None, threads: int | None = None):
    """An ``onnxruntime.InferenceSession`` for a path or ``onnx.ModelProto``.

    Args:
        model: path to an ``.onnx`` file (external data next to it is found)
            or an in-memory ``onnx.ModelProto``.
        providers: execution providers; default ``["CPUExecutionProvider"]``.
        threads: intra-op threads (``None``: onnxruntime's default).

    Raises:
        onnxruntime's exceptions when the model does not load (e.g. no kernel
        for ``DeformConv`` before onnxruntime ~1.25, or mmcv's custom nodes).
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    src = os.fspath(model) if isinstance(model, (str, os.PathLike)) else model.SerializeToString()
    return ort.InferenceSession(src, opts, providers=list(providers or ["CPUExecutionProvider"]))


def has_deform_conv_kernel() -> bool:
    """Whether this onnxruntime runs the standard ``DeformConv`` op on CPU."""
    import numpy as np
    import onnx
    from onnx import helper as h

    node = h.make_node("DeformConv", ["x", "w", "o"], ["y"], kernel_shape=[1, 1])
    f = onnx.TensorProto.FLOAT
    graph = h.make_graph(
        [node],
        "probe",
        [h.make_tensor_value_info(n, f, s) for n, s in (("x", [1, 1, 1, 1]), ("w", [1, 1, 1, 1]), ("o", [1, 2, 1, 1]))],
        [h.make_tensor_value_info("y", f, None)],
    )
    try:
        sess = session(h.make_model(graph, opset_imports=[h.make_opsetid("", 19)]))
        one = np.ones((1, 1, 1, 1), np.float32)
        sess.run(None, {"x": one, "w": one, "o": np.zeros((1, 2, 1, 1), np.float32)})
    except Exception:  # noqa: BLE001
        return False
    return True
