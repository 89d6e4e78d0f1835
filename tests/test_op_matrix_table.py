"""scripts/op_matrix.py's table logic (no runtime venv runs here): verdicts, graph forms, README merge."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(scope="module")
def om():
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield importlib.import_module("op_matrix")
    finally:
        sys.path.remove(str(SCRIPTS))


def test_verdict_follows_the_float32_rule(om):
    assert om.verdict({"error": None, "max_error": om.ATOL}) == "ran"
    assert om.verdict({"error": None, "max_error": 2.8}).startswith("ran, wrong: max error 2.8")
    assert om.verdict({"error": None, "max_error": float("nan")}).startswith("ran, wrong")
    assert om.verdict({"error": "pnnx wrote no ncnn model: x", "max_error": None}) == "pnnx wrote no ncnn model: x"
    assert om.verdict({"error": None, "max_error": None}) == "ran, no comparable output"


def _gridsample_model(rank: int, mode: str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2] + [4] * (rank - 2))
    g = helper.make_tensor_value_info("g", TensorProto.FLOAT, [1] + [3] * (rank - 2) + [rank - 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode)
    return helper.make_model(helper.make_graph([node], "g", [x, g], [y]), opset_imports=[helper.make_opsetid("", 20)])


def test_graph_form_names_rank_and_mode(om):
    assert om.graph_form(_gridsample_model(5, "linear")) == "GridSample 5-D linear"
    assert om.graph_form(_gridsample_model(4, "cubic")) == "GridSample 4-D cubic"
    relu = helper.make_node("Relu", ["x"], ["y"])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    plain = helper.make_model(helper.make_graph([relu], "r", [x], [helper.make_tensor_value_info("y", 1, [1])]))
    assert om.graph_form(plain) == "standard ops"


def _row(om, op: str, build: str, ran: str) -> dict:
    b = next(b for b in om.BUILDS if b.key == build)
    return {"op": op, "runtime": b.runtime, "version": "1", "target": "t", "build": build, "method": "m",
            "opset": 17, "ran": ran, "max_error": 1e-7}  # fmt: skip


def test_partial_run_keeps_other_rows_in_table_order(om):
    first = om.table([_row(om, "gs4d", "mnn", "ran"), _row(om, "dcnv3", "tvm", "ran")], "cmd")
    rerun = om.table([_row(om, "gs4d", "ort-newest", "ran | x"), _row(om, "dcnv3", "tvm", "failed")], "cmd2", first)
    rows = [line for line in rerun.splitlines() if line.startswith("| ") and line not in om.HEADER]
    assert [r.split(" | ")[1] for r in rows] == ["ONNX Runtime", "MNN (MNNConvert + runtime)",
                                                 "Apache TVM (relax ONNX frontend, llvm)"]  # fmt: skip
    assert "ran \\| x" in rows[0] and "failed" in rows[2] and om.LABELS["dcnv3"] in rows[2]
