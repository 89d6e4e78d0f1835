"""``deform-onnx bench``: the harness runs end to end on a tiny layer and reports every contender.

Only the structure is checked (rows, statuses, the markdown block, output
agreement with torchvision); timings are never asserted (speed goals live in
BENCHMARKS.md).
"""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from deform_onnx import bench
from deform_onnx.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "BENCH.md"
    result = runner.invoke(
        app,
        ["bench", "--quick", "--shape", "1,4,6", "--shape", "2,4,5,og=2,stride=2,mask=0", "--runs", "2",
         "--warmup", "0", "--no-memory", "--output", str(out)],
        env={"COLUMNS": "400"},
    )
    return result, out


def test_bench_quick_table_rows(quick_run):
    result, _ = quick_run
    assert result.exit_code == 0, result.output
    for contender in bench.CONTENDERS:
        assert contender.label in result.output, contender.label
    assert "1x4x6" in result.output and "2x4x5 og2 s2 no mask" in result.output


def test_bench_markdown(quick_run):
    _, out = quick_run
    text = out.read_text()
    assert text.count(bench.MARK_BEGIN) == 1 and text.count(bench.MARK_END) == 1
    assert "deform-onnx bench --quick --shape 1,4,6" in text
    section = text.split("### Median time per call", 1)[1].split("\n###", 1)[0]
    time_rows = [line for line in section.splitlines() if line.startswith("| ")]
    labels = {c.label for c in bench.CONTENDERS}
    rows = {line.split(" | ")[0][2:]: line for line in time_rows}
    assert labels <= set(rows)
    for label in labels:  # a contender that could not run here (e.g. the optional old exporter) says n/a
        assert rows[label].endswith("x |") or "n/a" in rows[label], rows[label]
    native = next(line for line in time_rows if line.startswith(f"| {bench.CONTENDERS[1].label} |"))
    assert native.count("(1.00x)") == 2  # the reference row is 1.00x on both shapes


def test_bench_outputs_match_torchvision():
    """Every contender that ran on the tiny layer agrees with torchvision (float32, 1e-4)."""
    shape = bench.BenchShape(1, 4, 6, offset_groups=2)
    result = bench.run_benchmark([shape], runs=1, warmup=0, memory=False)
    ran = 0
    for c in bench.CONTENDERS:
        cell = result.cell(shape, c.key)
        assert cell.ok or cell.status.startswith("n/a"), (c.key, cell.status)
        if cell.ok:
            ran += 1
            assert cell.stats.max_abs_err is not None and cell.stats.max_abs_err <= 1e-4, (c.key, cell.stats)
            assert len(cell.times) == 1
    assert ran >= 4  # torchvision + the three ONNX Runtime lowerings always run


def test_peak_memory_child(tmp_path):
    """The fresh-process memory probe returns a positive byte count for an ORT model."""
    shape = bench.BenchShape(1, 4, 6)
    result = bench.run_benchmark([shape], bench.select_contenders(["ort-native"]), runs=1, warmup=0,
                                 memory=True, workdir=tmp_path)
    peak = result.cell(shape, "ort-native").stats.peak_bytes
    assert peak is not None and peak > 0


def test_bench_subset_of_contenders(tmp_path):
    """A subset runs; targets that need a missing contender say n/a instead of failing."""
    out = tmp_path / "b.md"
    r = runner.invoke(app, ["bench", "--shape", "1,4,6", "--runs", "1", "--warmup", "0", "--no-memory",
                            "-c", "ort-native", "-c", "ort-grid_sample", "--output", str(out)], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert bench.CONTENDERS[2].label in text and bench.CONTENDERS[4].label not in text
    assert "| gather lowering >= 3x faster than the old exporter | n/a | n/a |" in text


def test_bench_rejects_bad_shape_and_contender():
    r = runner.invoke(app, ["bench", "--shape", "1,4"])
    assert r.exit_code == 2 and "N,C,H" in r.output
    r = runner.invoke(app, ["bench", "--contender", "tensorrt"])
    assert r.exit_code == 2 and "ort-native" in r.output


@pytest.mark.parametrize(
    "text, expected",
    [("1,64,64", bench.BenchShape(1, 64, 64)), ("1x64x64,og=8", bench.BenchShape(1, 64, 64, offset_groups=8)),
     ("1,128,64,stride=2,mask=0", bench.BenchShape(1, 128, 64, stride=2, mask=False))],
)
def test_shape_parse(text, expected):
    assert bench.BenchShape.parse(text) == expected
