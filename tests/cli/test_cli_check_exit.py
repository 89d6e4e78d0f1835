"""``deform-onnx check`` exits 0 only when every path it set out to run ran and matched a reference (issue 32).

A path that timed out, failed or whose ``lower()`` failed, and a path compared with no reference ("n/a"),
make the exit code 1, and the summary line names them. A runtime that is not installed and that the
user did not name is skipped, said in its row. Each fault is planted in the two-DeformConv file
(tests/models.py), whose five paths all run and match when nothing is planted.
"""

from __future__ import annotations

import onnx
import pytest
from typer.testing import CliRunner

import deform_onnx.rewrite
import deform_onnx.runtimes
import deform_onnx.runtimes.openvino
from deform_onnx.cli import app
from deform_onnx.runtimes.deadline import Deadline
from models import two_node_model

runner = CliRunner()
PATHS = (
    "onnxruntime as is",
    "onnxruntime lower(auto)",
    "openvino extension",
    "openvino extension, defaults",  # OpenVINO with no config: its own precision on this CPU
    "openvino lower(auto)",
)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    path = tmp_path_factory.mktemp("check_exit") / "two.onnx"
    onnx.save(two_node_model(batch=1), str(path))
    return path


def check(path, *args):
    result = runner.invoke(app, ["check", str(path), "--repeat", "0", *args], env={"COLUMNS": "250"})
    return result, " ".join(result.stdout.split())  # rich may wrap the summary line


def rows(result) -> dict[str, str]:
    """``"runtime path" -> the rest of its table row`` (first table only; a cell rich wrapped is joined)."""
    out: dict[str, list[list[str]]] = {}
    key = None
    for line in result.stdout.split("border input")[0].splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if cells[0]:
            key = f"{cells[0]} {cells[1]}"
            out[key] = [[c] for c in cells[2:]]
        elif key is not None:  # a continuation line of the row above
            for column, c in zip(out[key], cells[2:]):
                column.append(c)
    return {k: " ".join(" ".join(p for p in column if p) for column in v).strip() for k, v in out.items()}


def test_all_paths_ran_and_matched_exits_0(two):
    result, text = check(two)
    assert result.exit_code == 0, result.output
    assert set(rows(result)) == set(PATHS) and "all 5 paths ran and match the reference within 0.0001" in text, text


def test_timed_out_paths_fail_the_check(two, monkeypatch):
    """The issue's `check nat.onnx --timeout 0.001` (exit 0, "all paths that ran match"), made certain:
    every path's run meets a deadline already passed (the reference is computed past it, so it exists)."""
    monkeypatch.setattr(deform_onnx.runtimes, "Deadline", lambda seconds: Deadline(0))
    result, text = check(two)
    assert result.exit_code == 1, result.output
    assert all("not run: timed out" in row for row in rows(result).values()), rows(result)
    assert f"check failed: 5 of 5 paths did not run ({', '.join(PATHS)})" in text, text


def test_a_failed_lower_fails_the_check(two, monkeypatch):
    def failing(*args, **kw):  # the lowered paths' lowering (the reference's re-stamp, lower(native), still works)
        raise ValueError("planted lowering failure")

    monkeypatch.setattr(deform_onnx.rewrite, "lower_model", failing)
    result, text = check(two)
    assert result.exit_code == 1, result.output
    assert "lower() failed: planted lowering failure" in rows(result)["openvino lower(auto)"]
    assert "check failed: 2 of 5 paths did not run (onnxruntime lower(auto), openvino lower(auto))" in text, text


def test_no_reference_fails_the_check(two, monkeypatch):
    """Rows that ran but had nothing to be compared with say n/a, and the check fails (it said "match")."""
    monkeypatch.setattr(deform_onnx.runtimes, "reference", lambda *a, **kw: (None, "no reference: planted"))
    result, text = check(two, "-r", "ort")
    assert result.exit_code == 1, result.output
    assert all(" n/a " in row for row in rows(result).values()), rows(result)
    assert "check failed: 2 of 2 paths had no reference (onnxruntime as is, onnxruntime lower(auto))" in text, text
    assert "match" not in text


def test_a_runtime_not_installed_is_skipped_unless_named(two, monkeypatch):
    missing = "openvino is not usable: planted (pip install 'deform-onnx[openvino]')"
    monkeypatch.setattr(deform_onnx.runtimes.openvino, "available", lambda: missing)
    result, text = check(two)  # the default runtimes: openvino was not asked for by name
    assert result.exit_code == 0, result.output
    skipped = rows(result)["openvino extension"]
    assert skipped == f"skipped: {missing}", rows(result)  # the install hint whole (rich markup escaped)
    assert (
        "all 2 paths ran and match the reference within 0.0001; skipped, not installed: openvino extension, "
        "openvino lower(auto)" in text
    ), text
    result, text = check(two, "-r", "ort,openvino")  # named: its paths must run
    assert result.exit_code == 1, result.output
    # not installed: no "defaults" row (the one OpenVINO row of each path says why)
    assert "check failed: 2 of 4 paths did not run (openvino extension, openvino lower(auto))" in text, text
