"""Tables of a :class:`.harness.BenchResult`: rows, the generated markdown block, rich tables.

The markdown block sits between its suite's markers in BENCHMARKS.md;
:func:`write_markdown` replaces only that block (hand-written text around it
is kept) or appends it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from .harness import PAUSE_S, BenchResult, Goal, Suite
from .memory import PEAK_MEMORY_METHOD


def write_marked_section(path: Path, text: str, begin: str, end: str) -> None:
    """Put ``text`` (which starts with ``begin`` and ends with ``end``) into ``path`` in place of the
    block between those markers, or append it; the rest of the file is left as it is. The file is
    replaced atomically (written beside it, then renamed).
    """
    path = Path(path)
    old = path.read_text()
    if begin in old:
        new = re.sub(re.escape(begin) + ".*?" + re.escape(end) + "\n?", lambda _: text, old, flags=re.S)
    else:
        new = old.rstrip("\n") + "\n\n" + text
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(new)
    os.replace(tmp, path)


def _fmt_ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.2f}"


def fmt_x(ratio: float | None) -> str:
    """``1.23x``, or ``—`` for no ratio."""
    return "—" if ratio is None else f"{ratio:.2f}x"


def _fmt_kb(nbytes: int | None) -> str:
    return "—" if nbytes is None else f"{nbytes / 1024:.1f}"


def _fmt_mb(nbytes: int | None) -> str:
    return "—" if nbytes is None else f"{nbytes / 2**20:.1f}"


def _short_status(status: str) -> str:
    return "n/a" if status.startswith("n/a") else "error"


def _label(result: BenchResult, key: str) -> str:
    return next((c.label for c in result.contenders if c.key == key), key)


def time_rows(result: BenchResult) -> list[list[str]]:
    """Rows ``[contender, cell per shape..., geomean ratio]``; a cell is ``ms (ratio to the reference)``."""
    rows = []
    for c in result.contenders:
        row = [c.label]
        for s in result.shapes:
            cell = result.cell(s, c.key)
            row.append(
                f"{_fmt_ms(cell.median)} ({fmt_x(result.ratio(s, c.key))})" if cell.ok else _short_status(cell.status)
            )
        row.append(fmt_x(result.geomean_ratio(c.key)))
        rows.append(row)
    return rows


def limit_rows(result: BenchResult) -> list[list[str]]:
    """Rows ``[contender, ratio to the suite's limit per shape..., geomean]``; empty when the limit did not run."""
    limit = result.suite.limit if result.suite else None
    if limit is None or not any(result.cell(s, limit).ok for s in result.shapes):
        return []
    rows = []
    for c in result.contenders:
        row = [c.label] + [
            fmt_x(result.ratio(s, c.key, limit))
            if result.cell(s, c.key).ok
            else _short_status(result.cell(s, c.key).status)
            for s in result.shapes
        ]
        rows.append(row + [fmt_x(result.geomean_ratio(c.key, limit))])
    return rows


def extra_bytes(result: BenchResult, shape, key: str) -> int | None:
    """File bytes beyond the reference's file of the same shape."""
    a = result.cell(shape, key).stats.file_bytes
    b = result.cell(shape, result.reference).stats.file_bytes
    return None if a is None or b is None else a - b


def model_header(result: BenchResult) -> list[str]:
    """Column names of :func:`model_rows`."""
    ref = result.suite.ref_name if result.suite else "native"
    oracle = result.suite.oracle if result.suite else "torchvision"
    return [
        "shape",
        "contender",
        "nodes",
        "file KB",
        f"file KB beyond {ref}",
        "largest non-weight constant KB",
        "export s",
        "peak inference MB",
        f"peak / {ref}",
        f"max abs err vs {oracle}",
    ]


def model_rows(result: BenchResult) -> list[list[str]]:
    """Rows ``[shape, contender, nodes, file KB, beyond reference, largest constant KB, export s, peak MB,
    peak / reference, max err]``, for every cell that ran.
    """
    rows = []
    for s in result.shapes:
        for c in result.contenders:
            cell = result.cell(s, c.key)
            if not cell.ok:
                continue
            st = cell.stats
            rows.append(
                [
                    s.label,
                    c.label,
                    "—" if st.nodes is None else str(st.nodes),
                    _fmt_kb(st.file_bytes),
                    _fmt_kb(extra_bytes(result, s, c.key)),
                    _fmt_kb(st.largest_constant_bytes),
                    "—" if st.export_s is None else f"{st.export_s:.2f}",
                    _fmt_mb(st.peak_bytes),
                    fmt_x(result.memory_ratio(s, c.key)),
                    "—" if st.max_abs_err is None else f"{st.max_abs_err:.1e}",
                ]
            )
    return rows


def goals(result: BenchResult) -> list[Goal]:
    """The suite's goals evaluated on ``result`` (empty for a suite without goals)."""
    return result.suite.goals(result) if result.suite else []


def notes(result: BenchResult) -> list[str]:
    """One line per contender that did not run everywhere."""
    seen, out = set(), []
    for c in result.contenders:
        for s in result.shapes:
            status = result.cell(s, c.key).status
            if status != "ok" and (c.key, status) not in seen:
                seen.add((c.key, status))
                out.append(f"{c.label} ({s.label}): {status}")
    return out


def _md_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _legend(result: BenchResult, key: str) -> str:
    legend = result.suite.legend if result.suite else {}
    base, _, level = key.partition("@")
    text = legend.get(base, "")
    return f"{text}, graph_optimization_level={level}" if level else text


def _suite(result: BenchResult) -> Suite:
    """The suite ``result`` ran (its markers, heading and notes are what the report prints).

    Raises:
        ValueError: ``result`` was not made by :func:`run_suite` (it has no suite).
    """
    if result.suite is None:
        raise ValueError("this BenchResult has no suite (it was not made by run_suite): nothing to report it under")
    return result.suite


def _limit(result: BenchResult) -> str:
    """The key of the suite's limit contender; only called when :func:`limit_rows` found it ran."""
    limit = _suite(result).limit
    if limit is None:
        raise ValueError("the suite has no limit contender")
    return limit


def render_markdown(result: BenchResult) -> str:
    """The generated block of BENCHMARKS.md, between the suite's markers.

    Raises:
        ValueError: ``result`` has no suite.
    """
    suite = _suite(result)
    begin, end = suite.markers
    m = result.machine
    v = m.get("versions", {})
    ref = _label(result, result.reference)
    parts = [begin, ""]
    if suite.heading:
        parts += [suite.heading, ""]
    parts += [
        "### Setup",
        "",
        f"- Command: `{result.command}`" if result.command else "- Command: (library call)",
        f"- Machine: {m.get('cpu')}, {m.get('cores')} usable cores, {m.get('os')}; load average (1/5/15 min) "
        f"{m.get('load_before', 'n/a')} before the run, {m.get('load_after', 'n/a')} after",
        "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()),
        f"- Threads: {result.threads} intra-op threads per runtime (torch.set_num_threads({result.threads}); "
        f"ORT intra_op_num_threads={result.threads}, inter_op_num_threads=1, sequential, "
        f"session.intra_op.allow_spinning=0, graph_optimization_level ORT's default (all) unless the row says "
        f"`@level`; OpenVINO INFERENCE_NUM_THREADS={result.threads}, NUM_STREAMS=1, LATENCY, f32)",
        f"- Timing: one process, contenders interleaved round-robin (start rotated each round), "
        f"{result.warmup} warm-up rounds, then the median of {result.runs} rounds; wall time of one call "
        f"(an untimed {PAUSE_S * 1e3:.0f} ms pause between calls lets the previous runtime's threads go idle)",
        f"- Shapes: {suite.shape_note}: " + ", ".join(s.label for s in result.shapes),
        f"- Memory: {PEAK_MEMORY_METHOD}" if result.memory else "- Memory: not measured (--no-memory)",
        "- Contenders: " + "; ".join(f"**{c.label}**: {_legend(result, c.key)}" for c in result.contenders),
        f"- {suite.inputs_note}",
        f"- Total run time: {result.seconds / 60:.1f} min",
        "",
        f"### Median time per call, ms (ratio to {ref}; lower is faster)",
        "",
        _md_table(["contender", *[s.label for s in result.shapes], "geomean ratio"], time_rows(result)),
    ]
    limits = limit_rows(result)
    if limits:
        parts += [
            "",
            f"### Ratio to {_label(result, _limit(result))} (time / the dense Conv's time; 1.00x = the limit)",
            "",
            _md_table(["contender", *[s.label for s in result.shapes], "geomean ratio"], limits),
        ]
    parts += ["", "### Models", "", _md_table(model_header(result), model_rows(result))]
    evaluated = goals(result)
    if evaluated:
        parts += [
            "",
            "### Goals",
            "",
            _md_table(
                ["goal", "measured", "met"],
                [[g.name, g.measured, "n/a" if g.met is None else ("yes" if g.met else "**no**")] for g in evaluated],
            ),
        ]
    extra = notes(result)
    if extra:
        parts += ["", "Not run:", ""] + [f"- {line}" for line in extra]
    parts += ["", end]
    return "\n".join(parts) + "\n"


def write_markdown(result: BenchResult, path: str | os.PathLike, title: str = "# Benchmarks") -> Path:
    """Write :func:`render_markdown` to ``path`` atomically.

    If the file holds the suite's markers, only the text between them is
    replaced (hand-written analysis around it is kept); a file without them
    gets the block appended; a missing file is ``title`` plus the block.
    """
    path = Path(path)
    block = render_markdown(result)
    if not path.exists():
        path.write_text(f"{title}\n\n{block}")
    else:
        write_marked_section(path, block, *_suite(result).markers)
    return path


def rich_tables(result: BenchResult) -> list:
    """The time table, the ratio-to-limit table (if any), the model table and the goals as ``rich`` tables."""
    from rich.table import Table

    suite = _suite(result)
    ref = _label(result, result.reference)
    times = Table(
        title=f"{suite.title}: median ms per call (ratio to {ref}), {result.threads} threads, "
        f"median of {result.runs} after {result.warmup} warm-up"
    )
    tables = [times]
    limits = limit_rows(result)
    if limits:
        tables.append(Table(title=f"ratio to {_label(result, _limit(result))}"))
    for table, rows in zip(tables, (time_rows(result), limits)):
        table.add_column("contender")
        for s in result.shapes:
            table.add_column(s.label, justify="right")
        table.add_column("geomean", justify="right")
        for row in rows:
            table.add_row(*row)
    models = Table(title="Models")
    for h in model_header(result):
        models.add_column(h, justify="left" if h in ("shape", "contender") else "right")
    for row in model_rows(result):
        models.add_row(*row)
    tables.append(models)
    evaluated = goals(result)
    if evaluated:
        table = Table(title="Goals")
        for h in ("goal", "measured", "met"):
            table.add_column(h)
        for g in evaluated:
            table.add_row(g.name, g.measured, "n/a" if g.met is None else ("yes" if g.met else "no"))
        tables.append(table)
    return tables
