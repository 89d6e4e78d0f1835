"""Repro: onnx2tf misconverts ``torch.stack(values, dim=-2).flatten(-2)`` in Deformable DETR's per-level MSDA core.

Deformable DETR's PyTorch fallback (``MSDeformAttnReference``: one ``F.grid_sample`` per level)
ends with ``torch.stack(sampling_value_list, dim=-2).flatten(-2)`` before the attention-weighted sum.
Exported for target ``tflite`` (gather@13, TorchScript) that is ``Unsqueeze`` per level, a 5-D
``Concat`` and a ``Reshape`` (shape from ``Shape``/``Slice``/``Concat``) merging the level and point
axes. Bisected by cutting the file (``onnx.utils.extract_model``) and converting prefixes: every value
up to the 5-D ``Concat`` converts exactly (compared over axis orders: onnx2tf holds it as
``[2, 4, 2, 7, 3]`` for ONNX's ``[2, 4, 7, 2, 3]``), the final output is 1.0 off; a constant shape on
the ``Reshape`` is still 1.0 off. The same values written as one ``Concat`` of the per-level tensors on
their last axis (stack at -2 then flatten(-2) is a concat on the last axis) convert and match.

1. ``as_exported``: the file ``deform_onnx.export(..., target="tflite")`` writes: 1.0 off in LiteRT.
2. ``one_concat``: the same file, the Unsqueeze/Concat/Reshape replaced by ``Concat(axis=-1)`` (checked
   equal on ONNX Runtime first): 1.6e-7, as on ONNX Runtime (measured here, onnx2tf 1.29.24 + LiteRT 2.1.0).

Usage: ``PYTHONPATH=src python scripts/repro/onnx2tf_stack_flatten.py [OUT_DIR]``
"""

from __future__ import annotations

import io
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1]),
                str(Path(__file__).resolve().parents[2] / "tests")]  # fmt: skip
from _run import run  # noqa: E402

import deform_onnx  # noqa: E402


def one_concat(model: onnx.ModelProto) -> int:
    """Replace each ``Reshape(Concat(Unsqueeze(x_i, a), axis=a))`` by ``Concat(x_i, axis=a)`` in place.

    Assumes the Reshape merges axes ``a`` and ``a + 1`` (the core's ``flatten(-2)``); :func:`main`
    checks the values on ONNX Runtime. Returns how many were replaced.
    """
    g = model.graph
    by_output = {o: n for n in g.node for o in n.output}
    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    consts.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in g.node if n.op_type == "Constant"})
    done = 0
    for i, node in enumerate(list(g.node)):
        cat = by_output.get(node.input[0]) if node.op_type == "Reshape" else None
        if cat is None or cat.op_type != "Concat":
            continue
        ups = [by_output.get(x) for x in cat.input]
        axis = next(a.i for a in cat.attribute if a.name == "axis")
        if not all(u is not None and u.op_type == "Unsqueeze" for u in ups):
            continue
        axes = [consts[u.input[1]].tolist() if len(u.input) > 1 else next(a.ints for a in u.attribute) for u in ups]
        if any(list(a) != [axis] for a in axes):
            continue
        g.node[i].CopyFrom(
            helper.make_node(
                "Concat", [u.input[0] for u in ups], list(node.output), axis=axis + 1 if axis < 0 else axis
            )
        )
        done += 1
    return done


def main(out: Path) -> None:
    """Export the per-level core for ``tflite``, run it and its one-Concat form in LiteRT (one JSON line each)."""
    import onnxruntime as ort
    import op_matrix
    import torch

    _, module, inputs = next(m for m in op_matrix.op_models() if m[0] == "msda-plain")
    with torch.no_grad():
        want = module(*inputs.values()).numpy()
    feeds = {k: v.numpy() for k, v in inputs.items()}
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        deform_onnx.export(module, tuple(inputs.values()), buf, target="tflite", input_names=list(inputs),
                           output_names=["y"])  # fmt: skip
    exported = onnx.load_from_string(buf.getvalue())
    (out / "as_exported.onnx").write_bytes(buf.getvalue())
    fixed = onnx.load_from_string(buf.getvalue())
    print(f"one_concat: {one_concat(fixed)} Reshape(Concat(Unsqueeze)) replaced", flush=True)
    onnx.save(fixed, out / "one_concat.onnx")
    for name, proto in (("as_exported", exported), ("one_concat", fixed)):
        got = ort.InferenceSession(proto.SerializeToString()).run(None, feeds)[0]
        print(f"{name}: ONNX Runtime max error {np.abs(got - want).max():.2g}", flush=True)
        result = run("onnx2tf", out / f"{name}.onnx", feeds, list(want.shape))
        if result.get("error") is None:
            lite = np.load((out / f"{name}.onnx").with_suffix(".out.npy"))
            print(f"{name}: LiteRT max error {np.abs(lite - want).max():.2g}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="stack-flatten-")))
