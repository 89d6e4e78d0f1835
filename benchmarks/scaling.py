"""How cost grows with map size and batch (issue 13): ms per megapixel of output, table and plot.

    python benchmarks/scaling.py           # writes its section of BENCHMARKS.md and benchmarks/scaling.png
    python benchmarks/scaling.py --quick   # H 32, 64 and N 1, 2, 3 rounds; prints only

Times ONNX Runtime's native DeformConv, the grid_sample and gather lowerings
and the dense Conv limit at H = 32, 64, 128, 256, 512 (N = 1) and N = 1, 2,
4, 8 (H = 64), C = 64, with the harness and contenders of ``deform-onnx
bench`` (``deform_onnx.bench``: one process, interleaved rounds, median).
Needs matplotlib for the plot (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from deform_onnx import bench
from deform_onnx.bench import scaling

ROOT = Path(__file__).resolve().parent.parent


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="sizes 32,64, batches 1,2, 3 rounds after 1 warm-up; prints only unless --output/--png",
    )
    parser.add_argument("--sizes", type=_ints, help=f"H = W of the N = 1 sweep (default {scaling.SIZES})")
    parser.add_argument("--batches", type=_ints, help=f"N of the H = 64 sweep (default {scaling.BATCHES})")
    parser.add_argument(
        "--batch-h", type=int, default=scaling.BATCH_SIZE_H, help="H = W of the batch sweep (default 64)"
    )
    parser.add_argument("--channels", type=int, default=scaling.CHANNELS, help="C in = out (default 64)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, help="timed rounds (default 9; --quick 3)")
    parser.add_argument("--warmup", type=int, help="untimed rounds first (default 2; --quick 1)")
    parser.add_argument("--memory", action="store_true", help="also measure peak memory (not reported here)")
    parser.add_argument("--output", type=Path, help="markdown file to update (default BENCHMARKS.md; --quick: none)")
    parser.add_argument("--png", type=Path, help="plot file (default benchmarks/scaling.png; --quick: none)")
    args = parser.parse_args(argv)
    sizes = args.sizes or (scaling.QUICK_SIZES if args.quick else scaling.SIZES)
    batches = args.batches or (scaling.QUICK_BATCHES if args.quick else scaling.BATCHES)
    output = args.output or (None if args.quick else ROOT / "BENCHMARKS.md")
    png = args.png or (None if args.quick else ROOT / "benchmarks" / "scaling.png")
    result = bench.run_benchmark(
        scaling.scaling_shapes(sizes, batches, args.channels, args.batch_h),
        bench.select_contenders(scaling.CONTENDER_KEYS),
        runs=args.runs or (3 if args.quick else 9),
        warmup=args.warmup if args.warmup is not None else (1 if args.quick else 2),
        threads=args.threads,
        memory=args.memory,
        log=lambda msg: print(msg, file=sys.stderr, flush=True),
    )
    for line in bench.notes(result):
        print(f"note: {line}", file=sys.stderr)
    command = " ".join(
        ["python benchmarks/scaling.py", *(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))]
    )
    if png is not None:
        scaling.plot(result, sizes, batches, png)
        print(f"wrote {png}", file=sys.stderr)
    base = (output or ROOT / "BENCHMARKS.md").resolve().parent
    link = None if png is None else os.path.relpath(png.resolve(), base)
    text = scaling.render_markdown(result, sizes, batches, link, command)
    print(text)
    if output is not None:
        bench.write_marked_section(output, text, scaling.MARK_BEGIN, scaling.MARK_END)
        print(f"wrote {output}", file=sys.stderr)


if __name__ == "__main__":
    main()
