"""Each target's default form from the benchmark's data (issue 38 item 1): deform_onnx.targets.measured.

The data are planted here (no benchmark runs in the tests): a refused form is never picked however fast the
data say it is, a form that failed on one shape is no candidate, a form within the margin keeps the table's
pick, missing data keep it too; the checked-in data file's picks are allowed by their targets and export.
"""

from __future__ import annotations

import io

import pytest

import deform_onnx
from deform_onnx.targets import TARGETS, all_targets, measured, resolve_target
from deform_onnx.targets.fastest import DATA
from util import DeformLayer, case_config, make_inputs

SHAPES = ["1x64x64", "1x256x32"]


def planted(target: str, forms: dict[str, tuple[float | None, float | None]], opsets=None) -> dict:
    """Data of one run: ``forms[method] = (ms on SHAPES[0], ms on SHAPES[1])``, a dense Conv of 1 ms each."""
    opsets = opsets or {"native": 19, "grid_sample": 17, "gather": 17}
    by = {m: {"opset": opsets[m], "ms": dict(zip(SHAPES, ms, strict=True))} for m, ms in forms.items()}
    by["dense Conv"] = {"opset": 17, "ms": dict.fromkeys(SHAPES, 1.0)}
    return {"date": "test", "shapes": SHAPES, "dense": "dense Conv", "targets": {target: by}}


def test_faster_allowed_form_is_picked():
    table = TARGETS["mnn"]  # the table picks grid_sample
    data = planted("mnn", {"grid_sample": (6.0, 6.0), "gather": (2.0, 3.0)})
    t = measured.apply(table, data)
    assert (t.method, t.opset) == ("gather", 17) and table.method == "grid_sample"
    assert t.reason.startswith("measured fastest here, 2.45x its own dense Conv") and "2.45x slower" in t.reason


@pytest.mark.parametrize(
    ("target", "refused"),
    [("ncnn", "native"), ("ncnn", "gather"), ("onnx2torch", "grid_sample"), ("tflite", "native")],
)
def test_refused_form_is_never_picked(target, refused):
    """A fault (native on ncnn, tflite) or a graph rule (ncnn blobs: gather; no GridSample) refuses the form."""
    table = TARGETS[target]
    data = planted(target, {refused: (0.1, 0.1), table.method: (5.0, 5.0)})
    assert measured.apply(table, data).method == table.method
    assert [r.method for r in measured.ranking(table, data)] == [table.method]


def test_form_failed_on_a_shape_is_no_candidate():
    table = TARGETS["mnn"]
    data = planted("mnn", {"grid_sample": (6.0, 6.0), "gather": (1.0, None)})
    assert measured.apply(table, data).method == "grid_sample"


@pytest.mark.parametrize(
    "times",
    [((1.05, 1.05), (1.0, 1.0)), ((1.0, 9.0), (2.0, 1.0))],
    ids=["within-margin", "faster-on-one-shape-only"],
)
def test_close_or_mixed_keeps_the_table_pick(times):
    """Within the margin, or faster on one shape and slower on another (noise or a shape class): kept."""
    table = TARGETS["mnn"]
    data = planted("mnn", {"grid_sample": times[0], "gather": times[1]})
    t = measured.apply(table, data)
    assert t.method == "grid_sample" and "kept: gather" in t.reason and t.reason.startswith("measured here: ")


@pytest.mark.parametrize("data", [{}, planted("mnn", {"gather": (None, None)}), planted("tvm", {"gather": (1, 1)})])
def test_missing_data_keeps_the_table(data):
    assert measured.apply(TARGETS["mnn"], data) == TARGETS["mnn"]


def test_checked_in_picks_are_allowed():
    """Every target's pick from the checked-in data: measured on every shape, and no fault or rule refuses it."""
    for t in all_targets():
        ranked = measured.ranking(t)
        if t.reason.startswith("measured fastest here"):
            assert ranked and ranked[0].method == t.method, t.name
        assert not any(measured._refused(t, r.method, r.opset) for r in ranked), t.name


CHANGED = [name for name in TARGETS if resolve_target(name).method != TARGETS[name].method]


@pytest.mark.skipif(not CHANGED, reason="the checked-in data change no target's pick")
@pytest.mark.parametrize("name", CHANGED)
def test_changed_pick_exports(name):
    """A target whose pick the data changed writes that form (its rules pass) for a small DCNv2 layer."""
    cfg = case_config("c04")
    module, inputs = DeformLayer(cfg).eval(), make_inputs(cfg)
    report = deform_onnx.export(module, tuple(inputs.values()), io.BytesIO(), target=name, verify=False)
    assert report.method == resolve_target(name).method
    assert DATA["targets"]  # the data that changed it


def test_targets_command_says_why():
    from typer.testing import CliRunner

    from deform_onnx.cli import app

    out = CliRunner().invoke(app, ["targets", "mnn"], env={"COLUMNS": "200"}).output
    assert resolve_target("mnn").reason.split(";")[0][:40] in " ".join(out.split())


def test_a_run_of_some_families_replaces_their_rows_only():
    """``runtime_venvs.py bench --families mnn``: mnn's rows from the new run, the others' kept, the run listed."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import runtime_venvs

    base = {**planted("tvm", {"gather": (2.0, 2.0)}), "command": "all"}
    base["targets"].update(planted("mnn", {"gather": (5.0, 5.0)})["targets"])
    facts = {"command": "mnn", "date": "d", "machine": "m", "load": ["1", "2"], "minutes": 1.0}
    run = {**planted("mnn", {"gather": (3.0, 3.0)}), **facts, "versions": {"onnxruntime": "1", "mnn": "3"}}
    data = runtime_venvs.merge(base, run, runtime_venvs._targets_of(["mnn"]))
    assert data["targets"]["mnn"] == run["targets"]["mnn"] and data["targets"]["tvm"] == base["targets"]["tvm"]
    assert data["command"] == "all" and data["partial runs"] == [
        {"targets": ["mnn"], **facts, "versions": {"mnn": "3"}}
    ]
    with pytest.raises(SystemExit, match="shapes"):
        runtime_venvs.merge(base, {**run, "shapes": ["1x8x8"]}, ["mnn"])
