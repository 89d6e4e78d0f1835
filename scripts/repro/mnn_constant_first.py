"""Minimal repro: MNN 3.6.1 misreads ``GridSample(op(constant, Conv(x)), grid)`` (op: Add, Sub, Mul, Div).

BasicVSR++'s propagation starts from ``feat_prop = zeros + backbone(feat)`` (``flows.new_zeros(...)``, a
constant once exported) and warps it with ``flow_warp`` (``F.grid_sample``): in MNN (MNNConvert + its runtime)
the warped feature came out wrong, 0.011 to 1e17 off ONNX Runtime, the number varying from run to run (found
by cutting the exported graph at each value and comparing MNN with ONNX Runtime). The smallest graph:

    x [1, 8, 6, 6] -> Conv 3x3 (pads 1) -> v [1, 4, 6, 6]
    a = op(c, v), c a [1, 4, 6, 6] (or [1, 4, 1, 1]) constant *first*
    y = GridSample(a, grid [1, 6, 6, 2], align_corners=1)

Each line below is one variant, run in MNN against ONNX Runtime. Wrong: the constant first (4-D, full or
broadcast) with ``GridSample`` reading the result; so is a ``GridSample`` output in place of the ``Conv``
(measured while bisecting). Right: the value first; a 0-D constant; the value a graph input or a ``Relu``
of one; ``a`` read by a ``Conv``, a ``Transpose`` or as the graph's output. Target ``mnn`` therefore writes such ops value first (repair ``constant operand
last``); ``Div(c, v)`` has no exact value-first form and stays wrong.

Usage: ``python scripts/repro/mnn_constant_first.py [OUT_DIR]`` (writes each variant's ONNX file, runs it
with :func:`deform_onnx.check_runtimes` in MNN's cached venv, prints one line each).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deform_onnx import check_runtimes


def model(op: str, constant_first: bool, constant_shape: tuple[int, ...], reader: str) -> onnx.ModelProto:
    """``reader(op(c, Conv(x)))`` (or ``op(Conv(x), c)``), ``c`` a constant of ``constant_shape`` in [1, 2)."""
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array((rng.standard_normal((4, 8, 3, 3)) * 0.2).astype(np.float32), "w"),
        numpy_helper.from_array(rng.uniform(1, 2, constant_shape).astype(np.float32), "c"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["v"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node(op, ["c", "v"] if constant_first else ["v", "c"], ["a"]),
    ]
    if reader == "GridSample":
        nodes.append(helper.make_node("GridSample", ["a", "grid"], ["y"], align_corners=1))
    else:
        nodes.append(helper.make_node("Transpose", ["a"], ["y"], perm=[0, 1, 3, 2]))
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])]
    if reader == "GridSample":
        ins.append(helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 6, 6, 2]))
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])]
    m = helper.make_model(
        helper.make_graph(nodes, "constant_first", ins, out, inits),
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8,
    )
    onnx.checker.check_model(m, full_check=True)
    return m


def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2)
    feeds = {
        "x": rng.standard_normal((1, 8, 6, 6)).astype(np.float32),
        "grid": rng.uniform(-1, 1, (1, 6, 6, 2)).astype(np.float32),
    }
    variants = [
        (op, first, shape, reader)
        for op in ("Add", "Sub", "Mul", "Div")
        for first in (True, False)
        for shape in ((1, 4, 6, 6), (1, 4, 1, 1), ())
        for reader in ("GridSample", "Transpose")
    ]
    for op, first, shape, reader in variants:
        name = (
            f"mnn_{op}_{'constant_first' if first else 'value_first'}_{'x'.join(map(str, shape)) or 'scalar'}_{reader}"
        )
        path = out / f"{name}.onnx"
        onnx.save(model(op, first, shape, reader), path)
        wanted = {k: v for k, v in feeds.items() if k != "grid" or reader == "GridSample"}
        (row,) = check_runtimes(path, ["mnn"], inputs=wanted, repeats=1)
        verdict = (
            "right" if row.ok else f"WRONG (max abs error {row.max_error:.3g})" if row.error is None else row.error
        )
        print(f"{name}: {verdict}", flush=True)


if __name__ == "__main__":
    main()
