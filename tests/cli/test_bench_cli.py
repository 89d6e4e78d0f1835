"""``deform-onnx bench`` and ``benchmarks/*.py``: the harness runs end to end on tiny shapes and reports every
contender.

Only the structure is checked (rows, statuses, the markdown blocks, output
agreement with PyTorch/torchvision on the same tensors); timings are never
asserted (speed goals live in BENCHMARKS.md).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deform_onnx import bench
from deform_onnx.cli import app

runner = CliRunner()
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
#: Tiny MSDA core: 2 levels, 2 heads, 2 points, 16 channels.
TINY_MSDA = "levels=6x6/3x3,heads=2,points=2,channels=16"


def script(name: str) -> dict:
    """The globals of ``benchmarks/NAME.py`` (run as a module, not as ``__main__``)."""
    return runpy.run_path(str(BENCHMARKS / f"{name}.py"))


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "BENCH.md"
    result = runner.invoke(
        app,
        [
            "bench",
            "--quick",
            "--shape",
            "1,4,6",
            "--shape",
            "2,4,5,og=2,stride=2,mask=0",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--no-memory",
            "--output",
            str(out),
        ],
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
    limit = text.split("### Ratio to ORT dense Conv (limit)", 1)[1].split("\n###", 1)[0]
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in limit.splitlines() if line.startswith("| ")}
    assert rows["ORT dense Conv (limit)"][:2] == ["1.00x", "1.00x"]  # the limit against itself
    assert all(cell.endswith("x") for cell in rows[bench.CONTENDERS[1].label][:2])  # native against the limit
    assert "| issue 13: gather <= 1.5x ORT native at every shape |" in text


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
    assert ran >= 5  # torchvision, the three ONNX Runtime lowerings and the dense Conv always run
    assert result.cell(shape, bench.LIMIT).ok


def test_peak_memory_child(tmp_path):
    """The fresh-process memory probe returns a positive byte count for an ORT model, at ORT's default
    optimisation level and at a chosen one; both rows run the one exported file."""
    shape = bench.BenchShape(1, 4, 6)
    result = bench.run_benchmark(
        [shape], bench.select_contenders(["ort-native"], ["basic"]), runs=1, warmup=0, memory=True, workdir=tmp_path
    )
    for key in ("ort-native", "ort-native@basic"):
        peak = result.cell(shape, key).stats.peak_bytes
        assert peak is not None and peak > 0, key
    assert sorted(p.name for p in (tmp_path / shape.label).glob("*.onnx")) == ["native_opset19.onnx"]


def test_ort_opt_level_sets_the_session_option():
    import onnxruntime as ort

    from deform_onnx.bench.runtimes import ort_session_options

    for name, member in bench.ORT_OPT_LEVELS.items():
        assert ort_session_options(1, name).graph_optimization_level == getattr(ort.GraphOptimizationLevel, member)


def test_cli_spells_the_harness_names():
    """The CLI checks --op and --ort-opt-level without importing the harness; the names must stay its own."""
    from deform_onnx.cli import bench_cmd

    assert tuple(bench.SUITES) == bench_cmd.OPS and tuple(bench.ORT_OPT_LEVELS) == bench_cmd.ORT_OPT_LEVELS


def test_bench_subset_of_contenders(tmp_path):
    """A subset runs; targets that need a missing contender say n/a instead of failing."""
    out = tmp_path / "b.md"
    r = runner.invoke(
        app,
        [
            "bench",
            "--shape",
            "1,4,6",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--no-memory",
            "-c",
            "ort-native",
            "-c",
            "ort-grid_sample",
            "--output",
            str(out),
        ],
        env={"COLUMNS": "400"},
    )
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert bench.CONTENDERS[2].label in text and bench.CONTENDERS[4].label not in text
    assert "| gather lowering >= 3x faster than the old exporter | n/a | n/a |" in text


def test_bench_opt_level_rows(tmp_path):
    """--ort-opt-level adds KEY@LEVEL rows for the selected ORT contenders; -c KEY@LEVEL names one directly."""
    out = tmp_path / "b.md"
    r = runner.invoke(
        app,
        [
            "bench",
            "--shape",
            "1,4,6",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--no-memory",
            "-c",
            "torch",
            "-c",
            "ort-dense",
            "-c",
            "ort-gather@disabled",
            "--ort-opt-level",
            "extended",
            "--output",
            str(out),
        ],
        env={"COLUMNS": "400"},
    )
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "--ort-opt-level extended" in text and "graph_optimization_level=extended" in text
    for label in ("ORT dense Conv (limit) @extended", "ORT gather (opset 11) @disabled"):
        assert f"| {label} | " in text, label
    assert "| torchvision eager @" not in text and "| ORT native (opset 19) |" not in text  # not selected


@pytest.mark.parametrize(
    "args, message",
    [
        (["--shape", "1,4"], "N,C,H"),
        (["--contender", "tensorrt"], "ort-native"),
        (["--contender", "torch@basic"], "does not run in ONNX Runtime"),
        (["--contender", "ort-gather@fast"], "extended"),
        (["--ort-opt-level", "fast"], "extended"),
        (["--op", "conv"], "msda"),
        (["--op", "msda", "--shape", "1,4,6"], "levels="),
        (["--op", "msda", "--contender", "ort-native"], "ort-fused"),
        (["--op", "grid_sample", "--shape", "1,4,6,og=2"], "grid=G"),
    ],
)
def test_bench_rejects_bad_arguments(args, message):
    r = runner.invoke(app, ["bench", *args])
    assert r.exit_code == 2 and message in r.output, r.output


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1,64,64", bench.BenchShape(1, 64, 64)),
        ("1x64x64,og=8", bench.BenchShape(1, 64, 64, offset_groups=8)),
        ("1,128,64,stride=2,mask=0", bench.BenchShape(1, 128, 64, stride=2, mask=False)),
    ],
)
def test_shape_parse(text, expected):
    assert bench.BenchShape.parse(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [("1,64,128", bench.GridSampleShape(1, 64, 128)), ("2x8x16,grid=5", bench.GridSampleShape(2, 8, 16, 5))],
)
def test_grid_sample_shape_parse(text, expected):
    assert bench.GridSampleShape.parse(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("900", bench.MSDAShape(900)),
        ("all", bench.MSDAShape(None)),
        (f"5,{TINY_MSDA}", bench.MSDAShape(5, ((6, 6), (3, 3)), 2, 2, 16)),
    ],
)
def test_msda_shape_parse(text, expected):
    assert bench.MSDAShape.parse(text) == expected


def test_msda_shapes_of_the_issue():
    """Issue 10: 4 levels 100x100 .. 13x13, 8 heads, 4 points, 256 channels; 1, 900 and all-pixel queries."""
    assert [s.num_queries for s in bench.MSDA.full_shapes] == [1, 900, 100 * 100 + 50 * 50 + 25 * 25 + 13 * 13]
    assert all((s.heads, s.points, s.channels) == (8, 4, 256) for s in bench.MSDA.full_shapes)


@pytest.mark.parametrize(
    "op, shapes",
    [
        ("grid_sample", [bench.GridSampleShape(1, 4, 8), bench.GridSampleShape(2, 3, 7, grid=5)]),
        ("msda", [bench.MSDAShape(5, ((6, 6), (3, 3)), 2, 2, 16), bench.MSDAShape(None, ((5, 4), (2, 3)), 2, 2, 8)]),
    ],
)
def test_sampling_suites_match_pytorch(op, shapes):
    """Every contender of --op grid_sample / msda runs and agrees with PyTorch eager on the same tensors."""
    suite = bench.suite(op)
    result = bench.run_suite(suite, shapes, runs=1, warmup=0, memory=False)
    for shape in shapes:
        for c in suite.contenders:
            cell = result.cell(shape, c.key)
            assert cell.ok, (shape.label, c.key, cell.status)
            assert cell.stats.max_abs_err <= 1e-4, (shape.label, c.key, cell.stats)
        assert result.ratio(shape, suite.reference) == 1.0


def test_msda_script_writes_its_section(tmp_path, capsys):
    """benchmarks/msda.py is `deform-onnx bench --op msda`: its block replaces the old one between the msda
    markers and leaves the rest of the file alone."""
    begin, end = bench.MSDA.markers
    out = tmp_path / "B.md"
    out.write_text(f"# B\n\nbefore\n\n{begin}\nold table\n{end}\n\nafter\n")
    with pytest.raises(SystemExit) as exit_info:
        script("msda")["main"](["--shape", f"3,{TINY_MSDA}", "--runs", "1", "--warmup", "0", "--output", str(out)])
    assert exit_info.value.code in (0, None), capsys.readouterr()
    text = out.read_text()
    assert text.startswith("# B\n\nbefore\n") and text.rstrip().endswith("after") and "old table" not in text
    assert text.count(begin) == 1 and "deform-onnx bench --op msda --shape" in text
    for c in bench.MSDA.contenders:
        assert f"| {c.label} | " in text, c.label
    assert "fused lowering faster than PyTorch eager" in text  # issue 10's goals


def test_scaling_script_smoke(tmp_path, capsys):
    """benchmarks/scaling.py --quick on tiny maps: a marked section (ms per megapixel per contender for each
    size and batch) and a PNG plot."""
    out, png = tmp_path / "B.md", tmp_path / "scaling.png"
    out.write_text("# B\n\nhand-written\n")
    script("scaling")["main"](
        [
            "--quick",
            "--channels",
            "4",
            "--sizes",
            "8,16",
            "--batches",
            "1,2",
            "--batch-h",
            "8",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--output",
            str(out),
            "--png",
            str(png),
        ]
    )
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = out.read_text()
    assert text.startswith("# B\n\nhand-written\n") and "](scaling.png)" in text
    section = text.split("<!-- scaling: begin", 1)[1]
    for label in (
        "ORT native (opset 19)",
        "ORT grid_sample (opset 17)",
        "ORT gather (opset 11)",
        "ORT dense Conv (limit)",
    ):
        assert label in section, label
    rows = [line for line in section.splitlines() if line[:4] in ("| 8 ", "| 16", "| 1 ", "| 2 ")]
    assert len(rows) == 4 and all(line.count(" ms)") == 4 for line in rows), rows
