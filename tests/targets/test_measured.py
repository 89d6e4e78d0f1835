"""Each target's default form from the benchmark's data (issue 38 item 1): deform_onnx.targets.measured.

The data are planted here (no benchmark runs in the tests): a refused form is never picked however fast the
data say it is, a form that failed on one shape is no candidate, a form within the margin keeps the table's
pick, missing data keep it too; the checked-in data file's picks are allowed by their targets and export.
"""

from __future__ import annotations

import io

import onnx
import pytest
import torch
import torchvision

import deform_onnx
from deform_onnx.ops.deform_conv.classes import shape_class
from deform_onnx.targets import TARGETS, all_targets, measured, resolve_target
from deform_onnx.targets.fastest import DATA
from util import DeformLayer, assert_close, case_config, make_inputs, reference, run_ort

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
    target = resolve_target(name)
    assert report.method == picks(target).get(shape_class(cfg.N, cfg.offset_groups), target.method)
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


def test_a_run_whose_same_dense_conv_disagrees_is_too_noisy_to_pick_from():
    """1x64x64 and 1x64x64 og8 have one dense Conv: timings of it far apart in one run mark the run as noise (the
    bench then writes nothing unless forced); within the limit, or on shapes with other dense Convs, it passes."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import deployed_forms as forms

    from deform_onnx.bench.deform_conv import BenchShape

    shapes = [BenchShape.parse(s) for s in ("1,64,64", "1,256,32", "1,64,64,og=8")]

    def cells(*ms):
        return {"mnn": {forms.DENSE: {s.label: forms.Cell(runs=[m]) for s, m in zip(shapes, ms)}}}

    (line,) = forms.noisy(cells(2.0, 9.0, 6.9), shapes)
    assert line.startswith("mnn: the same dense Conv took 2.00 ms (1x64x64) and 6.90 ms (1x64x64 og8)"), line
    assert forms.noisy(cells(2.0, 9.0, 2.4), shapes) == []  # within 1.3x; 1x256x32 is another Conv


# -- per shape class (deform_onnx.ops.deform_conv.classes) ---------------------------------------------------

#: The checked-in run's shapes: two of the plain class, one of each other class.
CLASS_SHAPES = ["1x64x64", "1x256x32", "4x64x32", "1x64x64 og8"]


def planted_classes(target: str, forms: dict[str, tuple], opsets=None) -> dict:
    """Data of one run on :data:`CLASS_SHAPES`: ``forms[method]`` = its ms per shape, a dense Conv of 1 ms each."""
    opsets = {"native": 19, "grid_sample": 17, "gather": 17, **(opsets or {})}
    by = {m: {"opset": opsets[m], "ms": dict(zip(CLASS_SHAPES, ms, strict=True))} for m, ms in forms.items()}
    by["dense Conv"] = {"opset": 17, "ms": dict.fromkeys(CLASS_SHAPES, 1.0)}
    return {"date": "test", "op": "deform_conv2d", "shapes": CLASS_SHAPES, "dense": "dense Conv",
            "targets": {target: by}}  # fmt: skip


def picks(t) -> dict[str, str]:
    return {c.shape_class: c.method for c in t.class_methods if c.op == "deform_conv2d"}


def test_bench_labels_map_to_classes():
    from deform_onnx.ops.deform_conv.classes import BATCH, OFFSET_GROUPS, PLAIN, label_class, shape_class

    assert [label_class(s) for s in CLASS_SHAPES] == [PLAIN, PLAIN, BATCH, OFFSET_GROUPS]
    assert label_class("4x64x32 og8 s2") == shape_class(4, 8) == f"{BATCH}, {OFFSET_GROUPS}"
    assert shape_class(None, 1) is None and label_class("900 q") is None  # a dynamic batch: no class


def test_class_pick_wins_on_every_shape_of_its_class_only():
    """TVM-like data: gather well ahead on the plain shapes, even on batch 4, behind with offset groups."""
    table = TARGETS["tvm"]  # grid_sample
    data = planted_classes("tvm", {"grid_sample": (4.0, 4.0, 2.0, 2.0), "gather": (2.0, 2.0, 1.9, 6.0)})
    t = measured.apply(table, data)
    assert t.method == "grid_sample" and picks(t) == {"batch 1, one offset group": "gather"}
    assert t.class_methods[0].reason.startswith("measured fastest on 1x64x64, 1x256x32: 2.00x its own dense Conv")
    del data["op"]  # data that do not say which op the layer calls: no class of any op
    assert measured.apply(table, data).class_methods == ()


@pytest.mark.parametrize("plain", [(2.0, 3.5), (2.0, None)], ids=["within-margin-on-one-shape", "failed-on-one-shape"])
def test_class_pick_needs_every_shape_of_its_class(plain):
    data = planted_classes("tvm", {"grid_sample": (4.0, 4.0, 2.0, 2.0), "gather": (*plain, 1.9, 6.0)})
    assert picks(measured.apply(TARGETS["tvm"], data)) == {}


@pytest.mark.parametrize(
    ("target", "refused", "control"), [("ncnn", "gather", "mnn"), ("onnx2torch", "grid_sample", "tensorrt")]
)
def test_refused_form_is_never_a_class_pick(target, refused, control):
    """A graph rule (ncnn blobs: gather; no GridSample) refuses the form on every class, however fast; the same
    data on a target that allows it (same default method and opset) give it that class."""
    table = TARGETS[target]
    times = {table.method: (5.0, 5.0, 5.0, 5.0), refused: (5.0, 5.0, 0.1, 5.0)}
    opsets = {table.method: table.opset, refused: table.opset}
    assert picks(measured.apply(table, planted_classes(target, times, opsets))) == {}
    allowed = TARGETS[control]
    assert (allowed.method, allowed.opset) == (table.method, table.opset)
    assert picks(measured.apply(allowed, planted_classes(control, times, opsets))) == {"batch > 1": refused}


@pytest.mark.parametrize(("gather_opset", "picked"), [(17, True), (13, False)])
def test_class_pick_only_at_the_files_opset(gather_opset, picked):
    """mnn's file is opset 17: a gather measured at 13 is no per-class form of it (nor tflite's grid_sample at 16
    beside its opset-13 gather, in the checked-in data)."""
    data = planted_classes("mnn", {"grid_sample": (3.0, 4.0, 3.0, 5.0), "gather": (6.0, 4.0, 0.5, 15.0)},
                           opsets={"gather": gather_opset})  # fmt: skip
    assert picks(measured.apply(TARGETS["mnn"], data)) == ({"batch > 1": "gather"} if picked else {})
    tflite = resolve_target("tflite")
    assert tflite.opset < DATA["targets"]["tflite"]["grid_sample"]["opset"] and not picks(tflite)


@pytest.fixture
def tvm_gather_class(monkeypatch):
    """Data (planted, as in :func:`test_class_pick_wins_on_every_shape_of_its_class_only`) that give target tvm the
    gather form for batch 1, one offset group: the class-form paths are tested whatever the checked-in run says."""
    data = planted_classes("tvm", {"grid_sample": (4.0, 4.0, 2.0, 2.0), "gather": (2.0, 2.0, 1.9, 6.0)})
    monkeypatch.setattr(measured, "_data", lambda: data)
    assert picks(resolve_target("tvm")) == {"batch 1, one offset group": "gather"}


class TwoLayers(torch.nn.Module):
    """Two DCNv1 layers on one batch-1 input: one offset group and two (the offsets are inputs ``o1``, ``o2``;
    side by side, so that each reads a graph input's static shape also in a file ``lower`` rewrites)."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.a = torchvision.ops.DeformConv2d(4, 4, 3, padding=1)
        self.b = torchvision.ops.DeformConv2d(4, 4, 3, padding=1)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) / 6)

    def forward(self, x, o1, o2):
        return self.a(x, o1) + self.b(x, o2)


@pytest.fixture(scope="module")
def two_layers():
    gen = torch.Generator().manual_seed(1)
    inputs = {"x": torch.randn(1, 4, 5, 5, generator=gen), "o1": torch.randn(1, 18, 5, 5, generator=gen) * 2,
              "o2": torch.randn(1, 36, 5, 5, generator=gen) * 2}  # fmt: skip
    module = TwoLayers().eval()
    return module, inputs, reference(module, inputs)


@pytest.fixture(scope="module")
def native_two(two_layers) -> onnx.ModelProto:
    """The two layers as native ``DeformConv`` nodes (opset 19), for ``lower`` and ``check``."""
    return _export_two(two_layers, method="native", opset_version=19, dynamo=False)


def layer_ops(proto: onnx.ModelProto, second_offset: str = "o2") -> tuple[list[str], list[str]]:
    """Op types of the first layer (nodes no path from ``o2`` reaches) and of the second (those it reaches)."""
    reached, first, second = {second_offset}, [], []
    for node in proto.graph.node:  # topologically sorted
        if reached & set(node.input):
            reached |= set(node.output)
            second.append(node.op_type)
        else:
            first.append(node.op_type)
    return first, second


def gathers(ops: list[str]) -> int:
    return sum(op in ("Gather", "GatherElements", "GatherND") for op in ops)


def _export_two(two_layers, **kw) -> onnx.ModelProto:
    module, inputs, want = two_layers
    buf = io.BytesIO()
    deform_onnx.export(module, tuple(inputs.values()), buf, input_names=list(inputs), verify_runtimes=(), **kw)
    proto = onnx.load_from_string(buf.getvalue())
    assert_close(run_ort(buf.getvalue(), inputs), want, what=str(kw))
    return proto


def test_tvm_takes_each_layers_class_form(tvm_gather_class, two_layers, native_two):
    """target tvm: the one-offset-group layer in the gather form, the two-group layer in the default grid_sample;
    an explicit method (even the target's own) is every layer's form; ``lower`` of a file does the same."""
    from deform_onnx.builder import written

    proto = _export_two(two_layers, target="tvm")
    first, second = layer_ops(proto)
    assert "GridSample" not in first and gathers(first) and "GridSample" in second
    assert [(c.spec["offset_groups"], c.form) for c in written.read(proto)] == [(1, "gather"), (2, "grid_sample")]
    first, second = layer_ops(_export_two(two_layers, target="tvm", method="grid_sample", dynamo=False))
    assert "GridSample" in first and "GridSample" in second
    lowered = deform_onnx.lower(native_two, target="tvm")
    first, second = layer_ops(lowered)
    assert "GridSample" not in first and gathers(first) and "GridSample" in second and "DeformConv" not in first
    assert_close(run_ort(lowered.SerializeToString(), two_layers[1]), two_layers[2], what="lowered for tvm")


def test_check_target_lowers_with_the_class_forms(tvm_gather_class, native_two, tmp_path, monkeypatch):
    """``deform-onnx check --target tvm`` without ``--method``: its lowered path is ``lower(target="tvm")``'s file,
    the class forms included (the note names them, the path's label the forms written)."""
    import onnx_ir as ir
    from typer.testing import CliRunner

    import deform_onnx.rewrite
    from deform_onnx.cli import app

    forms, lower_model = [], deform_onnx.rewrite.lower_model

    def recorded(*args, **kw):
        out = lower_model(*args, **kw)
        first, second = layer_ops(ir.to_proto(out[0]))
        forms.append(("GridSample" in first, bool(gathers(first)), "GridSample" in second))
        return out

    monkeypatch.setattr(deform_onnx.rewrite, "lower_model", recorded)

    native = tmp_path / "native.onnx"
    onnx.save(native_two, str(native))
    result = CliRunner().invoke(app, ["check", str(native), "--target", "tvm", "--runtime", "ort", "--repeat", "1"],
                                env={"COLUMNS": "200"})  # fmt: skip
    assert result.exit_code == 1, result.output  # the file as is (DeformConv) breaks tvm's rules: said, exit 1
    assert "`deform-onnx lower native.onnx --target tvm -o OUT.onnx` writes a file that follows" in " ".join(
        result.output.split()
    )  # the fix, as a command to run
    out = " ".join(result.stdout.split())
    assert "tvm: lowered paths use grid_sample; gather where a node is batch 1, one offset group" in out
    assert "lower(gather+grid_sample)" in out and forms and set(forms) == {(False, True, True)}
    result = CliRunner().invoke(app, ["lower", str(native), "-o", str(tmp_path / "low.onnx"), "--target", "tvm"],
                                env={"COLUMNS": "200"})  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "replaced 2 node(s) with the gather and grid_sample lowerings" in " ".join(result.stdout.split())


def test_bench_block_marks_the_class_pick_on_its_shapes():
    """``runtime_venvs.py bench --render``: the default row marked (pick), the class pick on its class's cells."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import runtime_venvs

    data = planted_classes("tvm", {"grid_sample": (4.0, 4.0, 2.0, 2.0), "gather": (2.0, 2.0, 1.9, 6.0)})
    data["targets"].update(planted_classes("onnxruntime", {"native": (3.0, 3.0, 3.0, 3.0)}, {})["targets"])
    facts = {"command": "bench --repeats 1 --rounds 1", "machine": "m", "load": ["1", "1"], "minutes": 1.0}
    rows = {line.split(" |")[0]: line for line in runtime_venvs.render({**data, **facts, "versions": {}}).splitlines()}
    gather = rows["| tvm (tvm): gather"].split(" | ")[1:5]
    assert [c.endswith("**(pick: batch 1, one offset group)**") for c in gather] == [True, True, False, False]
    assert "| tvm (tvm): grid_sample **(pick)**" in rows and "(pick:" not in rows["| tvm (tvm): grid_sample **(pick)**"]


CLI_MODEL = '''
import torch, torchvision


class Two(torch.nn.Module):
    """Two DCNv1 layers on one input, their offsets from convolutions: one offset group, then two."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.o1, self.o2 = torch.nn.Conv2d(4, 18, 3, padding=1), torch.nn.Conv2d(4, 36, 3, padding=1)
        self.a = torchvision.ops.DeformConv2d(4, 4, 3, padding=1)
        self.b = torchvision.ops.DeformConv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.a(x, self.o1(x)) + self.b(x, self.o2(x))


def build():
    return Two()
'''


def test_cli_export_target_takes_each_layers_class_form(tvm_gather_class, tmp_path):
    """``deform-onnx export --target tvm`` passes no method of its own: the file holds what ``export`` writes."""
    from typer.testing import CliRunner

    from deform_onnx.builder import written
    from deform_onnx.cli import app

    (tmp_path / "m.py").write_text(CLI_MODEL)
    out = tmp_path / "m.onnx"
    args = ["export", f"{tmp_path / 'm.py'}:build", "-s", "1,4,5,5", "--target", "tvm", "--no-verify-runtime"]
    result = CliRunner().invoke(app, [*args, "-o", str(out), "--repeat", "1"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    calls = written.read(onnx.load(str(out)))
    assert [(c.spec["offset_groups"], c.form) for c in calls] == [(1, "gather"), (2, "grid_sample")]
