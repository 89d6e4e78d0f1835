"""Where a ``.tflite`` file's time goes on LiteRT: every op timed alone, grouped by op type (issue 38 item 4).

LiteRT's Python interpreter has no per-op profiler. This script runs the whole model once with
``experimental_preserve_all_tensors`` (builtin kernels) to get every op's real inputs, then writes each op as a
one-op model (its tensors, constants and options; its non-constant inputs made the model's inputs), feeds
it those inputs and times it (the default interpreter, so the XNNPACK delegate takes the op where it can; or
``--no-delegate``; ``--cpu``: the process's CPU time, which other work on a shared machine inflates far less than
wall time). The sum of the ops is close to the whole model's time when the delegate does not regroup
the graph (see BENCHMARKS.md, "Deployed runtimes"). Prints the milliseconds per op type and the slowest ops.

Runs in the onnx2tf venv (``ai_edge_litert`` and ``flatbuffers``), e.g. on the ``*_float32.tflite`` that
``deform_onnx.runtimes.deployed.run_file`` leaves in its work folder:

    ~/.cache/deform-onnx/venvs/onnx2tf/bin/python scripts/repro/litert_op_profile.py MODEL.tflite [--no-delegate] [--cpu]
"""

from __future__ import annotations

import argparse
import collections
import copy
import statistics
import time

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema
from ai_edge_litert.interpreter import Interpreter, OpResolverType

NO_DELEGATE = {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--no-delegate", action="store_true", help="builtin kernels only (no XNNPACK)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--cpu", action="store_true", help="the process's CPU time, not wall time (a loaded machine)")
    args = parser.parse_args()
    kw = NO_DELEGATE if args.no_delegate else {}

    rng = np.random.default_rng(0)
    full = Interpreter(model_path=args.model, experimental_preserve_all_tensors=True, **NO_DELEGATE)
    full.allocate_tensors()
    for d in full.get_input_details():
        full.set_tensor(d["index"], rng.standard_normal(d["shape"]).astype(d["dtype"]))
    full.invoke()

    with open(args.model, "rb") as f:
        model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(f.read(), 0))
    graph = model.subgraphs[0]
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}

    def op_name(op) -> str:
        code = model.operatorCodes[op.opcodeIndex]
        return names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "?")

    def constant(t: int) -> bool:
        data = model.buffers[graph.tensors[t].buffer].data if graph.tensors[t].buffer else None
        return data is not None and len(data) > 0

    by_type: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    rows = []

    def one_op_model(op, inputs: list[int]) -> bytes:
        """``op`` alone: its tensors (renumbered), its constants' buffers, ``inputs`` as the model's inputs."""
        used = list(dict.fromkeys(t for t in [*op.inputs, *op.outputs] if t >= 0))
        at = {t: i for i, t in enumerate(used)}
        tensors, buffers = [], [schema.BufferT()]
        for t in used:
            tensor = copy.copy(graph.tensors[t])
            tensor.buffer = 0
            if constant(t):
                buffers.append(model.buffers[graph.tensors[t].buffer])
                tensor.buffer = len(buffers) - 1
            tensors.append(tensor)
        alone = copy.copy(op)
        alone.inputs = [at[t] if t >= 0 else -1 for t in op.inputs]
        alone.outputs = [at[t] for t in op.outputs]
        alone.intermediates = []
        sub = schema.SubGraphT()
        sub.tensors, sub.operators, sub.name = tensors, [alone], b"op"
        sub.inputs, sub.outputs = [at[t] for t in inputs], [at[t] for t in op.outputs]
        small = schema.ModelT()
        small.version, small.operatorCodes, small.subgraphs, small.buffers = (
            model.version,
            model.operatorCodes,
            [sub],
            buffers,
        )
        builder = flatbuffers.Builder(1024)
        builder.Finish(small.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())

    for i, op in enumerate(graph.operators):
        inputs = list(dict.fromkeys(t for t in op.inputs if t >= 0 and not constant(t)))
        try:
            it = Interpreter(model_content=one_op_model(op, inputs), **kw)
            it.allocate_tensors()
        except (RuntimeError, ValueError) as exc:  # an op that needs more than itself (a WHILE's subgraphs)
            print(f"  op {i} {op_name(op)} not timed alone: {str(exc).splitlines()[0][:100]}")
            continue
        for d, t in zip(it.get_input_details(), inputs, strict=True):
            it.set_tensor(d["index"], full.get_tensor(t))
        it.invoke()
        times = []
        clock = time.process_time if args.cpu else time.perf_counter
        for _ in range(args.repeats):
            start = clock()
            it.invoke()
            times.append(clock() - start)
        ms = statistics.median(times) * 1000
        name = op_name(op)
        by_type[name] += ms
        count[name] += 1
        rows.append((ms, i, name, [tuple(graph.tensors[t].shape) for t in op.inputs if t >= 0]))
    how = "no delegate" if args.no_delegate else "default"
    print(f"{args.model}: sum of the ops {sum(by_type.values()):.2f} ms ({how})")
    for name, ms in by_type.most_common():
        print(f"  {name:20s} {ms:7.2f} ms  ({count[name]} ops)")
    for ms, i, name, shapes in sorted(rows, reverse=True)[: args.top]:
        print(f"  {ms:6.3f} ms  op {i} {name} {shapes}")


if __name__ == "__main__":
    main()
