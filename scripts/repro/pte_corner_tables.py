"""Prototype: the gather form's per-tap sampling + contraction in a ``.pte``, in corner-table variants (issue 38).

    python scripts/repro/pte_corner_tables.py --write      # writes its block of BENCHMARKS.md
    python scripts/repro/pte_corner_tables.py --cases 64x64 --variants v0,pair3 --rounds 10   # prints only
    python scripts/repro/pte_corner_tables.py --cases 64x64 --variants v0,pair3 --profile     # + etdump per op kind

Each variant is a small torch module with the map, the corner-00 row of every tap (``idx [K, M]`` int64) and
the bilinear weights (per corner ``[4, K, M, 1]``, per row pair ``[2, K, M, 2, 1]``) as inputs, so only the
sampling and the contraction differ; all are lowered with the ``.pte`` writer's own
``formats.executorch.lower`` (constant folding, cut XNNPACK partitions, lazy order), checked against the eager
``v0``, and timed interleaved in one process in ExecuTorch's runtime: first with its own threads (wall time),
then with one thread (the thread's CPU time: less moved by other jobs on a shared machine); median of rounds.

- ``v0``: what the ``.pte`` runs today: four ``index_select`` of ``[M, C]`` rows, each ``mul`` by its ``[M, 1]``
  weight, added, one ``mm`` per tap, accumulated.
- ``embedding``, ``index``: ``v0`` with ``aten.embedding`` / ``aten.index.Tensor`` instead of ``index_select``.
- ``pair_mm``: a pair table ``[x(y, x), x(y, x+1)]`` (``[R, 2C]``, one ``cat`` in XNNPACK); two gathers per tap,
  weighted on a ``[M, 2, C]`` view by ``[M, 2, 1]`` and added; one ``mm`` with the tap's weight stacked twice
  (``[2C, Co]``: the left/right halves summed inside the ``mm``).
- ``pair3``: ``pair_mm`` with the pair table 3-D (``[R, 2, C]``): gathered without a view.
- ``pair3h``: ``pair3`` with the halves added by slices and a ``C`` ``mm``.
- ``pair3_sum``: ``pair3`` with the halves added by ``sum.dim`` (ExecuTorch's optimized kernel) and a ``C`` ``mm``.
- ``quad_mm``: a quad table (``[R, 4C]``, the four corners of each pixel); one gather per tap, weighted on a
  ``[M, 4, C]`` view, one ``mm`` with the weight stacked four times.
- ``quad_bmm``: one quad gather per tap, ``bmm`` of ``[M, 1, 4]`` weights with the ``[M, 4, C]`` rows.
- ``quad_sum``: one quad gather per tap, weighted, the corners added by ``sum.dim``.
- ``ufirst``: the contraction first: one ``mm`` of the table with every tap's weight (``[R, K*Co]``), then 36
  gathers of ``Co``-wide rows, each weighted and added (bilinear sampling and the contraction commute).
- ``band2``, ``band4``: ``v0`` on 2 or 4 chunks of the points (rows of the output), each chunk's taps accumulated
  and the chunks concatenated: a chunk's four corner blocks of a tap fit the L2 cache; the index computation is not
  repeated (the ``.pte``'s row bands repeat it), only the sampling's nodes multiply.
- ``ebag``: each tap's four corners gathered, weighted and summed by ONE ``aten._embedding_bag`` (``mode="sum"``,
  ``per_sample_weights``, a bag of four rows per point), then the tap's ``mm``. The edge dialect takes it
  (``_embedding_bag`` is a core ATen op; ``F.embedding_bag`` itself decomposes to ``_embedding_bag_forward_only``,
  which it refuses), but executorch 1.5.1's pip runtime registers no kernel for it (portable or optimized:
  ``_get_operator_names()``), so the program does not load ("Missing operator: aten::_embedding_bag.out"): the
  row says so instead of a time.
- ``grid``: ``aten.grid_sampler_2d`` of the unpadded map with every tap stacked along H (grid ``[1, K*H, W, 2]``,
  one call; what ``F.grid_sample`` lowers to), the ``[C*K, H*W]`` columns transposed and contracted by one ``mm``
  with the ``[C*K, Co]`` weight. The pip build registers the optimized library's ``opt_grid_sampler_2d``, whose
  fast path is aarch64 NEON only: on x86-64 it calls the portable kernel (its disassembly: every path jumps to
  ``grid_sampler_2d_out``).

The corner weights are bilinear (from the fractions of random sample points inside the padded map), so that
``grid`` samples the same points as the table variants.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch


def table(x: torch.Tensor) -> torch.Tensor:
    """``[N*(H+3)*(W+3), C]`` zero-padded channels-last rows (as the gather form's table)."""
    n, c, h, w = x.shape
    p = torch.nn.functional.pad(x, (1, 2, 1, 2))
    return p.reshape(n, c, (h + 3) * (w + 3)).permute(0, 2, 1).reshape(-1, c)


class Variant(torch.nn.Module):
    def __init__(self, kind: str, weight: torch.Tensor, width: int):
        super().__init__()
        self.kind, self.row = kind, width + 3
        reps = {"pair_mm": 2, "pair3": 2, "quad_mm": 4}.get(kind, 1)
        self.register_buffer("w", weight.repeat(1, reps, 1).contiguous())  # [K, reps*C, Co]
        self.register_buffer("wg", weight.permute(1, 0, 2).reshape(-1, weight.shape[2]).contiguous())  # [C*K, Co]

    def forward(self, x, idx, wts, pairs, grid=None):
        """``idx [K, M]`` corner-00 rows, ``wts [4, K, M, 1]`` corner weights, ``pairs [2, K, M, 2, 1]`` (top, bottom);
        ``grid [1, K*H, W, 2]`` the same points for ``grid_sample`` (variant ``grid`` only)."""
        if self.kind == "grid":
            _, c, h, w = x.shape
            s = torch.nn.functional.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
            return s.reshape(c * self.w.shape[0], h * w).t() @ self.wg  # [C, K, H, W]: column c*K + k
        t = table(x)
        r, c = t.shape
        row = self.row
        out = None
        if self.kind.startswith("quad"):
            t = torch.cat([t[: r - row - 1], t[1 : r - row], t[row : r - 1], t[row + 1 :]], dim=1)  # [R', 4C]
        elif self.kind.startswith("pair3") or self.kind == "pair_sum":  # 3-D: [R-1, 2, C], gathered without a view
            t = torch.cat([t[:-1].unsqueeze(1), t[1:].unsqueeze(1)], dim=1)
        elif self.kind.startswith("pair"):
            t = torch.cat([t[:-1], t[1:]], dim=1)  # [R-1, 2C]
        elif self.kind == "ufirst":  # contraction first: [R*K, Co] rows, tap k of pixel r at r*K + k
            u = (t @ self.w.permute(1, 0, 2).reshape(c, -1)).reshape(-1, self.w.shape[2])
            kk = idx.shape[0]
            terms = []
            for k in range(kk):
                i00 = idx[k] * kk + k
                for corner, i in enumerate((i00, i00 + kk, i00 + row * kk, i00 + (row + 1) * kk)):
                    terms.append(u.index_select(0, i) * wts[corner, k])
            out = terms[0]
            for term in terms[1:]:
                out = out + term
            return out
        if self.kind.startswith("band"):  # v0 on row chunks of the points: each chunk's corner blocks in L2
            bands = int(self.kind[4:])
            m = idx.shape[1]
            outs = []
            for b in range(bands):
                lo, hi = b * m // bands, (b + 1) * m // bands
                acc = None
                for k in range(idx.shape[0]):
                    i00 = idx[k, lo:hi]
                    g = [t.index_select(0, i) for i in (i00, i00 + 1, i00 + row, i00 + row + 1)]
                    w = [wts[j, k, lo:hi] for j in range(4)]
                    s = g[0] * w[0] + g[1] * w[1] + g[2] * w[2] + g[3] * w[3]
                    p = s @ self.w[k]
                    acc = p if acc is None else acc + p
                outs.append(acc)
            return torch.cat(outs)
        for k in range(idx.shape[0]):
            i00 = idx[k]  # [M]
            m = i00.shape[0]
            w = [wts[j, k] for j in range(4)]  # [M, 1] each
            if self.kind == "ebag":  # one bag of the four corner rows per point, weighted and summed in the kernel
                ids = torch.stack([i00, i00 + 1, i00 + row, i00 + row + 1], 1).reshape(-1)  # [4M], point-major
                per = torch.cat(w, 1).reshape(-1)  # [M, 4] -> [4M]
                offsets = torch.arange(0, 4 * m, 4, device=ids.device)
                s = torch.ops.aten._embedding_bag(t, ids, offsets, False, 0, False, per)[0]
            elif self.kind in ("v0", "embedding", "index"):
                ids = [i00, i00 + 1, i00 + row, i00 + row + 1]
                take = {"v0": lambda i: t.index_select(0, i), "index": lambda i: t[i]}.get(
                    self.kind, lambda i: torch.nn.functional.embedding(i, t)
                )
                g = [take(i) for i in ids]
                s = g[0] * w[0] + g[1] * w[1] + g[2] * w[2] + g[3] * w[3]
            elif self.kind == "pair_mm":
                top = t.index_select(0, i00).view(m, 2, c) * pairs[0, k]
                bot = t.index_select(0, i00 + row).view(m, 2, c) * pairs[1, k]
                s = (top + bot).view(m, 2 * c)
            elif self.kind == "pair3":
                s = (t.index_select(0, i00) * pairs[0, k] + t.index_select(0, i00 + row) * pairs[1, k]).view(m, 2 * c)
            elif self.kind == "pair3h":  # halves added by slices, the mm over C
                v = t.index_select(0, i00) * pairs[0, k] + t.index_select(0, i00 + row) * pairs[1, k]
                s = v[:, 0] + v[:, 1]
            elif self.kind == "quad_sum":  # the corners added by ExecuTorch's optimized sum.dim
                s = (t.index_select(0, i00).view(m, 4, c) * torch.cat([pairs[0, k], pairs[1, k]], 1)).sum(1)
            elif self.kind == "pair3_sum":  # pair rows weighted and added in XNNPACK, the halves by sum.dim
                s = (t.index_select(0, i00) * pairs[0, k] + t.index_select(0, i00 + row) * pairs[1, k]).sum(1)
            elif self.kind == "quad_bmm":
                w4 = torch.cat([pairs[0, k], pairs[1, k]], 1).transpose(1, 2)  # [M, 1, 4]
                s = torch.bmm(w4, t.index_select(0, i00).view(m, 4, c)).view(m, c)
            elif self.kind == "quad_mm":
                s = (t.index_select(0, i00).view(m, 4, c) * torch.cat([pairs[0, k], pairs[1, k]], 1)).view(m, 4 * c)
            else:
                raise ValueError(self.kind)
            p = s @ self.w[k]
            out = p if out is None else out + p
        return out


def inputs(size: int, channels: int):
    """``(x, idx, wts, pairs), weight, grid``: the map, random sample points as table rows and bilinear weights,
    the contraction weight ``[K, C, Co]``, and the same points as a ``grid_sample`` grid ``[1, K*H, W, 2]``."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, channels, size, size, generator=gen)
    k, m, row = 9, size * size, size + 3
    py = torch.rand(k, m, generator=gen) * (size + 1)  # padded coordinates 0 .. size+1 (corner 11 inside)
    px = torch.rand(k, m, generator=gen) * (size + 1)
    idx = (py.floor() * row + px.floor()).long()
    fy, fx = py - py.floor(), px - px.floor()
    wts = torch.stack([(1 - fy) * (1 - fx), (1 - fy) * fx, fy * (1 - fx), fy * fx]).unsqueeze(-1)  # [4, K, M, 1]
    pairs = wts.reshape(2, 2, k, m).permute(0, 2, 3, 1).unsqueeze(-1).contiguous()  # [2, K, M, 2, 1]
    weight = torch.randn(k, channels, channels, generator=gen) / (9 * channels) ** 0.5
    # padded p is pixel p - 1; align_corners=False: pixel = ((g + 1) * size - 1) / 2; taps stacked along H
    norm = torch.stack([(2 * (px - 1) + 1) / size - 1, (2 * (py - 1) + 1) / size - 1], -1)  # [K, M, 2]
    return (x, idx, wts, pairs), weight, norm.reshape(1, k * size, size, 2)


def profile(kind: str, data: bytes, args, calls: int = 10) -> None:
    """Print the milliseconds per call of each operator (ExecuTorch's etdump, ``calls`` calls summed)."""
    import tempfile
    from collections import defaultdict

    from executorch.devtools import Inspector
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    module = _load_for_executorch_from_buffer(data, enable_etdump=True)
    for _ in range(calls):
        module.forward(list(args))
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/etdump.etdp"
        module.write_etdump_result_to_file(path)
        inspector = Inspector(etdump_path=path)
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for block in inspector.event_blocks:
        if block.name != "Execute":
            continue
        for event in block.events:
            if event.perf_data is None or event.name in ("Method::execute", "DELEGATE_CALL", "OPERATOR_CALL"):
                continue
            name = event.name.split(" #")[0]  # XNNPACK's operators by kind, not by instance
            total[name] += sum(event.perf_data.raw)
            count[name] += len(event.perf_data.raw)
    print(f"{kind}: etdump, ms per call")
    for name, ms in sorted(total.items(), key=lambda kv: -kv[1])[:14]:
        print(f"  {name[:60]:60s} {ms / calls:7.3f}  x{count[name] // calls}")


BEGIN = "<!-- pte corner tables: begin (generated by scripts/repro/pte_corner_tables.py) -->"
END = "<!-- pte corner tables: end -->"
VARIANTS = "v0,embedding,index,pair_mm,pair3,pair3h,pair3_sum,quad_mm,quad_bmm,quad_sum,ufirst,band2,band4,ebag,grid"
#: ``{(case, variant): why}``: variants ExecuTorch's runtime refused to load (no kernel for an op).
refused: dict[tuple[str, str], str] = {}


def programs(label: str, size: int, channels: int, variants: list[str], profiled: bool) -> dict:
    """``{variant: callable}``: each variant lowered by the ``.pte`` writer's ``lower`` and loaded in ExecuTorch."""
    from executorch.runtime import Runtime

    from deform_onnx.formats.executorch import lower
    from deform_onnx.formats.torch_export import quiet

    common, weight, grid = inputs(size, channels)
    ref = Variant("v0", weight, size).eval()(*common)
    runs = {}
    for kind in variants:
        started = time.perf_counter()
        args = (*common, grid) if kind == "grid" else common  # an unused input would be copied in every call
        data = lower(torch.export.export(Variant(kind, weight, size).eval(), args))
        failed = None
        with quiet() as noise:  # its lines arrive when the block ends
            try:
                program = Runtime.get().load_program(data)
                method = program.load_method("forward")
            except Exception as exc:  # noqa: BLE001 - the runtime's refusal, any kind: reported, not timed
                failed = str(exc)
        if failed is not None:
            refused[(label, kind)] = next((ln.split("] ")[-1] for ln in noise if "Missing operator" in ln), failed)
            print(f"{label} {kind}: ExecuTorch refused it: {refused[(label, kind)]}", flush=True)
            continue
        err = float((method.execute(list(args))[0] - ref).abs().max())
        if err > 1e-4:
            raise SystemExit(f"{label} {kind}: off by {err:.1e} from the eager v0")
        print(f"{label} {kind}: written in {time.perf_counter() - started:.1f} s, max error {err:.1e}", flush=True)
        runs[kind] = (program, lambda m=method, a=args: m.execute(list(a)))  # the method points into the program
        if profiled:
            profile(f"{label} {kind}", data, args)
    return {k: run for k, (_, run) in runs.items()} | {"_keep": [p for p, _ in runs.values()]}


def timed(runs: dict, rounds: int, clock) -> dict[str, float]:
    """Median seconds per call of each variant, interleaved round-robin (start rotated each round)."""
    names = [n for n in runs if n != "_keep"]
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds + 2):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            time.sleep(0.005)
            t = clock()
            runs[name]()
            if r >= 2:
                times[name].append(clock() - t)
    return {n: statistics.median(v) for n, v in times.items()}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="64x64,256x32", help="CHANNELSxSIZE of each layer")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--variants", default=VARIANTS)
    parser.add_argument("--profile", action="store_true", help="print ExecuTorch's etdump per operator")
    parser.add_argument("--write", action="store_true", help="write the block of BENCHMARKS.md")
    opts = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    start, load = time.time(), os.getloadavg()[0]
    variants = opts.variants.split(",")
    cases = {
        c: programs(c, int(c.split("x")[1]), int(c.split("x")[0]), variants, opts.profile)
        for c in opts.cases.split(",")
    }
    # ExecuTorch's own threads first (its pool: one thread per core), then one thread timed by its CPU time
    results = {(c, "threads"): timed(runs, opts.rounds, time.perf_counter) for c, runs in cases.items()}
    _unsafe_reset_threadpool(1)
    results |= {(c, "one"): timed(runs, opts.rounds, time.thread_time) for c, runs in cases.items()}
    import executorch

    heads = [f"{c}: {'ExecuTorch threads, wall' if m == 'threads' else 'one thread, CPU time'}" for c, m in results]
    lines = [
        BEGIN,
        "",
        f"- Command: `python scripts/repro/pte_corner_tables.py --cases {opts.cases} --rounds {opts.rounds}`; "
        f"torch {torch.__version__}, executorch {getattr(executorch, '__version__', '1.5.1')}",
        "- Each variant: the sampling and contraction of one DCNv2 layer (`CHANNELSxSIZE`, 3x3 taps, C_in = C_out) "
        "from its corner rows and weights, lowered by the `.pte` writer's `lower`, run in ExecuTorch; ms and ratio "
        "to `v0` (the current form)",
        f"- Load average {load:.2f} before, {os.getloadavg()[0]:.2f} after (the machine is shared); "
        f"{(time.time() - start) / 60:.1f} min; median of {opts.rounds} interleaved rounds",
        "",
        "| variant | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(heads),
    ]
    for v in variants:
        cells = [
            f"{r[v] * 1e3:.2f} ({r[v] / r[variants[0]]:.2f}x)" if v in r else f"no kernel: {refused.get((c, v), '?')}"
            for (c, _), r in results.items()
        ]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    lines += ["", END]
    block = "\n".join(lines)
    print(block)
    if opts.write:
        path = Path(__file__).resolve().parents[2] / "BENCHMARKS.md"
        text = path.read_text()
        if BEGIN not in text:
            raise SystemExit(f"BENCHMARKS.md has no {BEGIN}: place the markers first")
        path.write_text(text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :])


if __name__ == "__main__":
    main(sys.argv[1:])
