"""Where the time goes: ONNX Runtime's profiler on each lowering of one benchmark layer.

    python benchmarks/ort_profile.py 1,64,64            # N,C,H[,og=G][,stride=S][,mask=0]
    python benchmarks/ort_profile.py 1,64,64,og=8 --threads 1 --top 12
    python benchmarks/ort_profile.py 1,64,64 --ort-opt-level basic   # what ORT's later passes change

Prints, per lowering, the kernel time summed by op type and the slowest
nodes (median over the runs after warm-up, from
``SessionOptions.enable_profiling``). The layer, its inputs and the exports
are those of ``deform-onnx bench`` (``deform_onnx.bench``).
"""

from __future__ import annotations

import argparse
import tempfile
from collections import defaultdict
from pathlib import Path

from deform_onnx import bench

LOWERINGS = (("native", 19), ("grid_sample", 17), ("gather", 11))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shape", help="N,C,H[,og=G][,stride=S][,mask=0]")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--top", type=int, default=8, help="slowest nodes to list per lowering")
    parser.add_argument(
        "--ort-opt-level",
        choices=list(bench.ORT_OPT_LEVELS),
        default=None,
        help="ONNX Runtime graph optimisation level (default: ORT's, all)",
    )
    args = parser.parse_args()
    shape = bench.BenchShape.parse(args.shape)
    with tempfile.TemporaryDirectory() as tmp:
        case = bench.DeformConvCase(shape, Path(tmp), args.threads)
        for method, opset in LOWERINGS:
            path, stats = case.export(method, opset)
            nodes = bench.ort_profile(
                path, case.feeds, threads=args.threads, runs=args.runs, opt_level=args.ort_opt_level
            )
            total = sum(n.ms for n in nodes)
            by_op: dict[str, float] = defaultdict(float)
            for n in nodes:
                by_op[n.op_type] += n.ms
            print(
                f"== {shape.label}  {method} (opset {opset}): {stats.nodes} nodes in the file, "
                f"{len(nodes)} run by ORT, kernel time {total:.2f} ms/run ({args.threads} threads)"
            )
            print(
                "   by op type: "
                + ", ".join(f"{op} {ms:.2f}" for op, ms in sorted(by_op.items(), key=lambda kv: -kv[1]))
            )
            for n in nodes[: args.top]:
                print(
                    f"   {n.ms:8.3f} ms {100 * n.ms / total:5.1f}%  {n.op_type:14s} out {n.output_bytes / 2**20:7.2f} MB  {n.name}"
                )


if __name__ == "__main__":
    main()
