"""Minimal repro: pnnx -> ncnn fails on a 5-D reshape ("layer Tensor.reshape not exists or registered").

The gather lowering holds 5-D and 6-D values (``[K, N, Ho, Wo, G, 1]`` weights, ``[K, N, G, Ho, Wo]``
indices); ncnn's blobs have no batch axis and at most 4 dimensions (w, h, d, c), and pnnx leaves
such a reshape as ``Tensor.reshape``, a layer ncnn does not have: the gather form's error. The
smallest graph showing it: x [1, 6, 4, 4] -> Reshape to 5-D -> Mul 2 -> Reshape [1, 6, 4, 4], with
the 5-D shape [2, 3, 1, 4, 4] (ncnn_rank5.onnx) or even [1, 3, 2, 4, 4] with a leading 1
(ncnn_rank5_lead1.onnx). The same graph through the 4-D shape [2, 3, 4, 4] converts and runs
exactly (ncnn_rank4.onnx). (Inside the grid_sample form, pnnx did convert 5-D reshapes with a
leading 1 fed by a Conv, e.g. [1, 18, 16, 16] -> [1, 9, 2, 16, 16]: its batch-axis inference
decides, so the ``ncnn`` target keeps to the graph measured to load.)

Usage: ``python scripts/repro/ncnn_rank5.py [OUT_DIR]`` (writes the three files, runs each with
pnnx -> ncnn in the runtime matrix's cached venv, prints one JSON line each).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _run import run


def model(mid: list[int]) -> onnx.ModelProto:
    """x [1, 6, 4, 4] reshaped to ``mid``, doubled, reshaped back (opset 17)."""
    nodes = [helper.make_node("Reshape", ["x", "mid"], ["r"]), helper.make_node("Mul", ["r", "two"], ["m"]),
             helper.make_node("Reshape", ["m", "back"], ["y"])]  # fmt: skip
    inits = [numpy_helper.from_array(np.array(mid, np.int64), "mid"), numpy_helper.from_array(np.float32(2), "two"),
             numpy_helper.from_array(np.array([1, 6, 4, 4], np.int64), "back")]  # fmt: skip
    graph = helper.make_graph(nodes, "rank5", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 4, 4])], inits)  # fmt: skip
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    out.mkdir(parents=True, exist_ok=True)
    x = np.arange(96, dtype=np.float32).reshape(1, 6, 4, 4)
    for name, mid in (
        ("ncnn_rank5", [2, 3, 1, 4, 4]),
        ("ncnn_rank5_lead1", [1, 3, 2, 4, 4]),
        ("ncnn_rank4", [2, 3, 4, 4]),
    ):
        path = out / f"{name}.onnx"
        onnx.save(model(mid), path)
        print(f"{name}: Reshape to {mid}: ", end="", flush=True)
        result = run("pnnx", path, {"x": x}, [1, 6, 4, 4])
        if result.get("error") is None:
            got = np.load(path.with_suffix(".out.npy"))
            print(f"  max abs error against x * 2: {np.abs(got - 2 * x).max():.1e}")


if __name__ == "__main__":
    main()
