"""Minimal repro: MNNConvert 3.6.1 folds a ``ConstantOfShape`` without ``value`` into uninitialised memory.

The ONNX spec's ``ConstantOfShape`` has an optional ``value`` ("If not specified, it defaults to a tensor of
value 0 and datatype float32"); torch's dynamo exporter leaves it out for ``new_zeros`` / ``torch.zeros``
(VFNet's star offsets). MNNConvert folds the node into a constant at conversion; without the attribute the
constant holds whatever its memory held: the same file converted again gives other numbers (VFNet's star
offsets: 4 of 15 conversions wrong, up to 1.9e32; found when one CI run refused the file). With the value
written (target ``mnn``'s repair ``ConstantOfShape value written``) every conversion matched. The graph:

    y = Concat(x [1, 4, 6, 6], ConstantOfShape([1, 12, 6, 6]), axis=1)

Usage: ``python scripts/repro/mnn_constant_of_shape.py [ROUNDS] [OUT_DIR]``: converts and runs each variant
ROUNDS times (default 10) in MNN's cached venv (:func:`deform_onnx.check_runtimes`, one conversion per run),
against ONNX Runtime, and prints how many runs missed.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deform_onnx import check_runtimes
from deform_onnx.targets.repairs import constant_of_shape_value_written


def model(with_value: bool) -> onnx.ModelProto:
    """``Concat(x, zeros)`` with the zeros from a ``ConstantOfShape`` of a constant shape."""
    shape = numpy_helper.from_array(np.array([1, 12, 6, 6], np.int64), "shape")
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["zeros"]),
        helper.make_node("Concat", ["x", "zeros"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "constant_of_shape",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])],
        [shape],
    )
    out = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    if with_value:
        constant_of_shape_value_written(out)
    return out


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    out_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp(prefix="mnn-cos-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    x = np.random.default_rng(0).standard_normal((1, 4, 6, 6)).astype(np.float32)
    for with_value in (False, True):
        path = out_dir / f"value_{'written' if with_value else 'absent'}.onnx"
        onnx.save(model(with_value), path)
        missed = []
        for _ in range(rounds):
            (row,) = check_runtimes(path, ["mnn"], inputs={"x": x}, repeats=1)
            if row.error or row.failure:
                missed.append(row.error or f"max abs error {row.max_error:.3g}")
        print(f"value {'written' if with_value else 'absent '}: {len(missed)} of {rounds} conversions missed"
              + (f" ({'; '.join(missed[:3])})" if missed else ""))  # fmt: skip


if __name__ == "__main__":
    main()
