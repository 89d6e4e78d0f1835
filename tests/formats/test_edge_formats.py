"""export() to .pte / .tflite / .mlpackage: each file run in its own runtime against PyTorch before it is written.

One shared export per format of one small model holding the family: a DCNv2 neck (offsets and mask
from a conv), a 5-D optical-flow-style warp, the fused MSDA op, Deformable DETR's per-level PyTorch
core and an int64 input. Each written file is run again here in its runtime (ExecuTorch, LiteRT) at the
sizes it claims and compared with PyTorch, not read from the report. Measured (torch 2.14.1, executorch
1.5.1, litert-torch 0.10.0): ExecuTorch <= 1.2e-6 (every size), LiteRT <= 1.2e-6; bound 1e-4 (float32).
Planted faults: through each written file's runner (no new export: a fault in the last, integer output,
a float16 precision drop, a fault at a larger size only), and in a decomposition (off by H - W, so zero
on a square example) on a one-DCN neck of one tap (1x1 kernel), the cheapest export that goes through one.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torchvision

import deform_onnx
from deform_onnx.core.errors import ExportError, VerificationError
from deform_onnx.ops.msda.op import MSDeformAttnCore, MSDeformAttnReference
from models import Neck
from real_code.raft_style import TinyRAFT

SHAPES = [(4, 5), (2, 3)]
#: The .pte's dynamic H: example 6, declared 4..16 (checked at both bounds and a second size).
H_MIN, H_MAX = 4, 16


def _needs(module: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


class Family(torch.nn.Module):
    """DCNv2 + 5-D warp + MSDA (fused and per-level core) + an int64 input, on small tensors."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.offsets = torch.nn.Conv2d(4, 27, 3, padding=1)
        self.dcn = torchvision.ops.DeformConv2d(4, 4, 3, padding=1)
        self.fused = MSDeformAttnCore(SHAPES)
        self.core = MSDeformAttnReference(SHAPES)

    def forward(self, x, volume, flow, value, loc, attn, k):
        o = self.offsets(x)
        y = self.dcn(x, o[:, :18], o[:, 18:].sigmoid())
        warped = F.grid_sample(volume, flow, align_corners=False, padding_mode="border")
        return y * k.to(y.dtype), warped, self.fused(value, loc, attn) + self.core(value, loc, attn), k + 1


def _args(H: int = 6):
    gen = torch.Generator().manual_seed(1)
    S = sum(h * w for h, w in SHAPES)
    return (
        torch.randn(1, 4, H, 7, generator=gen),
        torch.randn(1, 2, 3, 4, 5, generator=gen),
        torch.rand(1, 3, 4, 5, 3, generator=gen) * 2.4 - 1.2,
        torch.randn(1, S, 2, 4, generator=gen),
        torch.rand(1, 5, 2, len(SHAPES), 2, 2, generator=gen),
        torch.rand(1, 5, 2, len(SHAPES), 2, generator=gen),
        torch.tensor([3], dtype=torch.int64),
    )


def _close(got: list[np.ndarray], want) -> None:
    """Every output of the file against PyTorch's (floats within the float32 bound, integers exactly)."""
    want = [w.detach().numpy() for w in want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        if np.issubdtype(w.dtype, np.integer):
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def _run_pte(path, args) -> list[np.ndarray]:
    """The written .pte run in ExecuTorch's own runtime (not the writer's session)."""
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(path.read_bytes())
    method = program.load_method("forward")
    return [o.numpy() for o in method.execute(list(args))]


def _run_tflite(path, args) -> list[np.ndarray]:
    """The written .tflite run in LiteRT's interpreter; inputs fed in the dtypes the file declares."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_content=path.read_bytes()).get_signature_runner()
    key = lambda name: int(name.rsplit("_", 1)[-1])  # noqa: E731 - args_0, args_1, ... / output_0, ...
    inputs = sorted(runner.get_input_details().items(), key=lambda kv: key(kv[0]))
    feeds = {name: a.numpy().astype(d["dtype"]) for (name, d), a in zip(inputs, args)}
    out = runner(**feeds)
    return [np.asarray(out[name]) for name in sorted(out, key=key)]


@pytest.fixture(scope="module")
def pte(tmp_path_factory):
    """The family's .pte, its XNNPACK partitions cut every 4 KiB of portable results read (formats.schedule:
    at the default cut size, maps this small stay in one piece)."""
    path = tmp_path_factory.mktemp("pte") / "family.pte"
    model = Family()  # training mode: the writer exports in eval mode and restores it
    H = torch.export.Dim("H", min=H_MIN, max=H_MAX)
    dynamic = ({2: H}, None, None, None, None, None, None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("deform_onnx.formats.schedule.CUT_BYTES", 4096)
        report = deform_onnx.export(model, _args(), path, dynamic_shapes=dynamic)
    return path, model, report, model.training


@pytest.fixture(scope="module")
def tflite(tmp_path_factory):
    path = tmp_path_factory.mktemp("tflite") / "family.tflite"
    model = Family()
    report = deform_onnx.export(model, _args(), path)
    return path, model, report, model.training


@_needs("executorch")
def test_pte_is_checked_at_the_second_size_and_both_bounds(pte, capfd):
    path, _, report, training = pte
    assert path.is_file() and report.format == "executorch" and report.verified
    assert report.runtime == "ExecuTorch (XNNPACK)" and report.method == "gather" and training
    assert report.ran_in == ["ExecuTorch (XNNPACK)"]
    heights = [shapes[0][2] for shapes in report.checked_shapes]
    assert heights[0] == 6 and {H_MIN, H_MAX} <= set(heights[1:]) and len(set(heights)) == len(heights) >= 3
    assert any("upper bound" in n for n in report.notes)
    assert not any("torchvision" in op or "grid_sampler_3d" in op for op in report.op_types)
    assert "cpuinfo" not in capfd.readouterr().err


@_needs("executorch")
@pytest.mark.parametrize("H", [H_MIN, 11, H_MAX])
def test_written_pte_matches_pytorch_at_its_claimed_sizes(pte, H):
    path, model, _, _ = pte
    args = _args(H)
    with torch.no_grad():
        _close(_run_pte(path, args), model.eval()(*args))


@_needs("executorch")
def test_pte_runs_each_gather_right_before_the_delegate_that_reads_it(pte):
    """formats.schedule: the gathers (portable ``index_select``) interleaved with the XNNPACK delegates, each
    read by the next delegate, not all run first (what the partitioner's merged delegate needed)."""
    from executorch.exir._serialize._program import deserialize_pte_binary

    program = deserialize_pte_binary(pte[0].read_bytes())
    plan = getattr(program, "program", program).execution_plan[0]
    calls = []
    for instruction in plan.chains[0].instructions:
        kind = type(instruction.instr_args).__name__
        if kind in ("KernelCall", "DelegateCall"):
            calls.append(plan.operators[instruction.instr_args.op_index].name if kind == "KernelCall" else "delegate")
    gathers = [i for i, c in enumerate(calls) if c == "aten::index_select"]
    assert len(gathers) >= 8 and calls.count("delegate") > 8
    stretches = "".join("g" if c == "aten::index_select" else "|" if c == "delegate" else "" for c in calls)
    # one merged delegate would need every gather of the DCN first: a stretch of its 36 (9 taps x 4 corners)
    assert max(len(s) for s in stretches.split("|")) <= len(gathers) // 4, stretches


@_needs("litert_torch")
def test_written_tflite_matches_pytorch(tflite):
    path, model, report, training = tflite
    assert path.is_file() and report.format == "litert" and report.verified and report.runtime == "LiteRT"
    assert report.method == "gather" and training
    assert any("int32 in the file" in n for n in report.notes)  # litert-torch writes the int64 input as int32
    with torch.no_grad():
        _close(_run_tflite(path, _args()), model.eval()(*_args()))


class _Planted:
    """A written file's session (the writer's runner) with one fault planted in what it returns."""

    def __init__(self, session, fault: str):
        self.session, self.fault = session, fault
        self.runtime = session.runtime
        self.planned = getattr(session, "planned", None)
        self.get_inputs, self.get_outputs = session.get_inputs, session.get_outputs

    def run(self, names, feeds):
        out = self.session.run(names, feeds)
        first = next(iter(feeds.values()))
        if self.fault == "last output, integer":
            out[-1] = out[-1] + 1
        elif self.fault == "float16 where float32 is claimed":
            out[0] = out[0].astype(np.float16).astype(out[0].dtype)
        elif self.fault == "larger size only" and first.shape[2] > 6:
            out[0] = out[0] + 0.5
        return out


FAULTS = {  # fault: (output named, size named)
    "last output, integer": ("output_3", "example 1,4,6,7"),
    "float16 where float32 is claimed": ("output_0", "example 1,4,6,7"),
    "larger size only": ("output_0", "second size 1,4,10,7"),
}


@pytest.mark.parametrize(
    ("fmt", "fault"),
    [("pte", f) for f in FAULTS] + [("tflite", f) for f in FAULTS if f != "larger size only"],  # .tflite: static
)
def test_planted_fault_in_the_runner_is_refused(request, fmt, fault):
    """Through the runner of each written file: a fault in the last (integer) output, a precision drop, a
    fault at a larger size only; each refused with the output, the runtime and the size named."""
    from deform_onnx.formats.torch_export import plan_sizes, prove

    if importlib.util.find_spec("executorch" if fmt == "pte" else "litert_torch") is None:
        pytest.skip("format not installed")
    path, model, _, _ = request.getfixturevalue(fmt)
    if fmt == "pte":
        from deform_onnx.formats.executorch import ExecuTorchSession as Session

        dynamic = ({2: torch.export.Dim("H", min=H_MIN, max=H_MAX)}, None, None, None, None, None, None)
    else:
        from deform_onnx.formats.litert import LiteRTSession as Session

        dynamic = None
    session = _Planted(Session(path.read_bytes()), fault)
    plan = plan_sizes(model.eval(), _args(), dynamic)
    name, size = FAULTS[fault]
    with pytest.raises(VerificationError) as info:
        prove(session, model, plan, {"rtol": None, "atol": None})
    message = str(info.value)
    assert f"'{name}'" in message and session.runtime in message and size in message and "\n" not in message


def _plant_hw_fault(monkeypatch) -> None:
    """deform_conv2d's decomposition off by H - W: zero on a square input, visible at any other size."""
    import deform_onnx.formats.decompose as decompose

    real = decompose.decompositions

    def faulty(method="auto", **kw):
        table = real(method, **kw)
        op = torch.ops.torchvision.deform_conv2d.default
        good = table[op]
        table[op] = lambda x, *rest: good(x, *rest) + (x.shape[-2] - x.shape[-1])
        return table

    monkeypatch.setattr(decompose, "decompositions", faulty)


@_needs("executorch")
def test_pte_fault_only_off_square_is_refused(tmp_path, monkeypatch):
    """A square example (8x8) passes the fault; the non-square second size (16x8 here) must refuse it."""
    _plant_hw_fault(monkeypatch)
    H = torch.export.Dim("H", min=4, max=16)
    with pytest.raises(VerificationError) as info:
        deform_onnx.export(Neck(1), (torch.randn(1, 4, 8, 8),), tmp_path / "bad.pte", dynamic_shapes=({2: H},))
    message = str(info.value)
    assert "ExecuTorch" in message and "1,4,16,8" in message and "\n" not in message
    assert list(tmp_path.iterdir()) == []


@_needs("litert_torch")
def test_tflite_fault_is_refused_and_not_written(tmp_path, monkeypatch):
    _plant_hw_fault(monkeypatch)
    with pytest.raises(VerificationError) as info:
        deform_onnx.export(Neck(1), (torch.randn(1, 4, 6, 7),), tmp_path / "bad.tflite")
    assert "LiteRT" in str(info.value) and "1,4,6,7" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_memory_plan_below_a_claimed_size_is_refused():
    """A runtime whose memory plan holds less than a claimed bound: refused before running, naming the plan."""
    from deform_onnx.formats.torch_export import SizeSet, prove

    class Planned:
        runtime = "ExecuTorch (XNNPACK)"
        planned = ((1, 4, 10, 8),)

        def run(self, *_):
            raise AssertionError("must not run beyond the plan")

    plan = [SizeSet((torch.zeros(1, 4, 16, 8),), [(1, 4, 16, 8)], "upper bound")]
    with pytest.raises(ExportError, match=r"holds the inputs up to 1,4,10,8, but the upper bound 1,4,16,8"):
        prove(Planned(), Neck(), plan, {"rtol": None, "atol": None})


@_needs("coremltools")
@pytest.mark.parametrize("precision", [None, "float16"])
def test_mlpackage_precision(tmp_path, precision):
    import coremltools as ct

    model = Neck(1)  # one tap: the precision setting is per file, not per tap
    extra = {} if precision is None else {"precision": precision}
    report = deform_onnx.export(model, (torch.randn(1, 4, 6, 7),), tmp_path / "neck.mlpackage", **extra)
    assert report.verified is False and report.max_error is None and "not run" in report.notes[0]
    assert report.ran_in == []
    assert report.method == "grid_sample" and model.training
    assert any(f"computes in {precision or 'float32'}" in n for n in report.notes)
    assert [p.name for p in tmp_path.iterdir()] == ["neck.mlpackage"]
    spec = ct.models.MLModel(str(tmp_path / "neck.mlpackage"), skip_model_load=True).get_spec()
    assert ("FLOAT16" in str(spec.mlProgram)) == (precision == "float16")


@pytest.mark.parametrize(
    ("suffix", "setting", "value"),
    [
        (".pte", "opset_version", 17),
        (".tflite", "dynamic_shapes", {"x": {}}),
        (".pte", "dynamic_axes", {"x": {0: "n"}}),
        (".pte", "precision", "float16"),
        (".tflite", "verify_shapes", [(1, 2)]),
    ],
)
def test_settings_that_mean_nothing_are_one_line(tmp_path, suffix, setting, value):
    class Boom(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("must not run")

    if importlib.util.find_spec("executorch" if suffix == ".pte" else "litert_torch") is None:
        pytest.skip("format not installed")
    match = "verify_shapes= needs dynamic axes" if setting == "verify_shapes" else f"{setting}= is not taken"
    with pytest.raises(ValueError, match=match) as info:
        deform_onnx.export(Boom(), (torch.zeros(1),), tmp_path / f"m{suffix}", **{setting: value})
    assert "\n" not in str(info.value) and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("suffix", "arg", "message"),
    [
        (".pte", 0.5, r"input 1 is a Python number \(0.5\)"),
        (".tflite", 2, r"input 1 is a Python number \(2\)"),
        (".pte", torch.zeros(1, dtype=torch.bfloat16), "input 1 is bfloat16"),
    ],
)
def test_inputs_the_formats_cannot_take_are_one_line(tmp_path, suffix, arg, message):
    class Boom(torch.nn.Module):
        def forward(self, x, s):
            raise AssertionError("must not run")

    if importlib.util.find_spec("executorch" if suffix == ".pte" else "litert_torch") is None:
        pytest.skip("format not installed")
    with pytest.raises(ValueError, match=message) as info:
        deform_onnx.export(Boom(), (torch.zeros(1), arg), tmp_path / f"m{suffix}")
    assert "\n" not in str(info.value) and list(tmp_path.iterdir()) == []


@_needs("litert_torch")
def test_uncovered_op_is_named(tmp_path):
    class Pool(torch.nn.Module):
        def forward(self, x, boxes):
            return torchvision.ops.roi_align(x, boxes, 2)

    args = (torch.randn(1, 2, 8, 8), torch.tensor([[0.0, 1.0, 1.0, 5.0, 6.0]]))
    with pytest.raises(ExportError, match=r"holds torchvision.roi_align.default, which no decomposition") as info:
        deform_onnx.export(Pool(), args, tmp_path / "m.tflite")
    assert "\n" not in str(info.value) and list(tmp_path.iterdir()) == []


@_needs("executorch")
def test_float16_pte_within_the_float16_rule(tmp_path, monkeypatch):
    """Measured: 7.5e-4 against the float32 model (float16 rule). LiteRT: litert-torch 0.10.0's converter
    refuses a float16 pad ("failed to legalize operation 'tfl.pad'") after the whole conversion: the program's
    float16 pad is refused before litert-torch runs, a one-line ExportError naming the fix."""
    report = deform_onnx.export(Neck().eval().half(), (torch.randn(1, 4, 6, 7).half(),), tmp_path / "neck.pte")
    assert report.verified and report.tolerances["output_0"].dtype == "float16"
    if importlib.util.find_spec("litert_torch") is not None:  # the refusal names the fix; nothing written
        from deform_onnx.formats import litert

        def converted(*_):
            raise AssertionError("litert-torch ran")

        monkeypatch.setattr(litert, "convert", converted)
        with pytest.raises(deform_onnx.ExportError, match="float16 model does not convert here: write the float32"):
            deform_onnx.export(Neck().eval().half(), (torch.randn(1, 4, 6, 7).half(),), tmp_path / "neck.tflite")
        assert not (tmp_path / "neck.tflite").exists()


class _SplitProjection(torch.nn.Module):
    """``nn.MultiheadAttention``'s packed input projection with ``query is key``, ``key is not value``
    (``_in_projection_packed``: ``w.split([E, 2 * E])``), as in every DETR decoder layer's self-attention;
    and RAFT's ``upsample_flow`` (``tests/real_code/raft_style.py``) on two more inputs."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w, self.b = torch.nn.Parameter(torch.randn(12, 4)), torch.nn.Parameter(torch.randn(12))

    def forward(self, x, flow, mask):
        w_q, w_kv = self.w.split([4, 8])
        b_q, b_kv = self.b.split([4, 8])
        return F.linear(x, w_q, b_q), F.linear(x, w_kv, b_kv), TinyRAFT.upsample_flow(self, flow, mask)


@_needs("executorch")
def test_pte_of_a_split_parameter_matches_pytorch(tmp_path):
    """ExecuTorch's ``constant_prop_pass`` folds ``w.split(...)[1]`` into a view at a storage offset, which
    XNNPACK serialized from the storage's start: the second projection ran 4.2 off PyTorch (a Deformable-DETR
    decoder layer's .pte 1.3 off, refused; found by the new-user trial). Each such constant is copied now.

    The same program holds RAFT's ``upsample_flow`` (a softmax over a 7-D view): XNNPACK defines tensors of rank
    <= 6, yet its partitioner took it and the program failed to load ("Failed to define tensor 85 with code:
    xnn_status_unsupported_parameter", said as ExecuTorch's "Failed to load method forward, error: 0x:1": RAFT's
    .pte). Such nodes run on the portable kernels now."""
    torch.manual_seed(0)
    model = _SplitProjection().eval()
    args = (torch.randn(3, 4), torch.randn(1, 2, 2, 3), torch.randn(1, 576, 2, 3))
    report = deform_onnx.export(model, args, tmp_path / "split.pte")
    assert report.verified
    _close(_run_pte(tmp_path / "split.pte", args), model(*args))


class _Linspace(torch.nn.Module):
    """InternImage's reference points: ``torch.linspace`` over a size in float arithmetic, without ``indexing=``."""

    def forward(self, x):
        H, W = x.shape[-2:]
        ys, xs = torch.meshgrid(torch.linspace(0.5, H - 0.5, H), torch.linspace(0.5, W - 0.5, W))
        return x + ys / H + xs / W


@_needs("executorch")
def test_pte_of_size_arithmetic_with_a_dynamic_size_runs_at_new_sizes(tmp_path):
    """``H - 0.5`` and linspace's decomposition are ``torch.sym_float`` / ``torch.sym_max`` calls, which ExecuTorch's
    edge verifier refused with a bare AssertionError ("ExecuTorch could not lower the program: AssertionError",
    InternImage's DCNv3_pytorch to ``-o m.pte --dynamic`` in the new-user trial). The writer lets ExecuTorch's own
    size prims through (``_edge_config``): the file is written, and runs right at sizes it was never checked at."""
    from executorch.runtime import Runtime

    dims = ({2: torch.export.Dim("H", min=2, max=8)},)
    model = _Linspace().eval()
    report = deform_onnx.export(model, (torch.randn(1, 2, 4, 6),), tmp_path / "grid.pte", dynamic_shapes=dims)
    assert report.verified and (1, 2, 8, 6) in [shapes[0] for shapes in report.checked_shapes]  # the upper bound
    program = Runtime.get().load_program((tmp_path / "grid.pte").read_bytes())
    method = program.load_method("forward")
    for h in (3, 7):
        x = torch.randn(1, 2, h, 6, generator=torch.Generator().manual_seed(h))
        (got,) = method.execute([x])
        _close([got.numpy()], [model(x)])


@_needs("executorch")
def test_pte_reshape_with_two_dynamic_dimensions_is_one_finished_line(monkeypatch):
    """XNNPACK's refusal ended mid-sentence ("... 1 dynamic dimension. This may occur when (make one dimension
    dynamic ...)", a DCNv4 layer with its tokens reshaped back to a map, to ``-o m.pte --dynamic`` in the new-user
    trial; the text below is that run's): now it says what and how."""
    from deform_onnx.formats import executorch

    said = (
        "ExecuTorch could not lower the program: XNNPACK reshape only supports 1 dynamic dimension. This may occur when"
    )

    def refused(*_):
        raise ExportError(said)

    monkeypatch.setattr(executorch, "_lowered", refused)
    ep = torch.export.export(torch.nn.Linear(2, 2).eval(), (torch.randn(1, 2),))
    with pytest.raises(ExportError, match="1 dynamic dimension: a reshape of the model's") as info:
        executorch.lower(ep)
    assert "This may occur" not in str(info.value) and "dynamic_shapes=" in str(info.value), str(info.value)


class _TrailingUnsqueeze(torch.nn.Module):
    """DCNv4's ``x[..., None]`` of an ``[N, H, W, G]`` map (``dcnv4_core``'s sampling points, a DCNv3 layer's gate)."""

    def forward(self, x):
        y = x.permute(0, 2, 3, 1) - 1
        return (y[..., None] * 3).flatten(-2)


@_needs("executorch")
@pytest.mark.parametrize("kept", [True, False])
def test_pte_unsqueeze_with_two_dynamic_dimensions_runs_on_the_portable_kernels(tmp_path, monkeypatch, kept):
    """XNNPACK's partitioner takes a trailing ``unsqueeze_copy`` that its serializer then refuses when H and W are
    both dynamic ("XNNPACK reshape only supports 1 dynamic dimension": FlashInternImage's DCNv4 and InternImage's
    DCNv3 to ``-o m.pte --dynamic``): such a node is kept out of XNNPACK, the file is written and right at both
    bounds. With the rule off (``kept=False``) the same export is refused, nothing written."""
    from deform_onnx.formats import schedule

    if not kept:
        monkeypatch.setattr(schedule, "xnnpack_can_serialize", lambda node: True)
    dims = ({2: torch.export.Dim("H", min=2, max=8), 3: torch.export.Dim("W", min=2, max=8)},)
    path, model = tmp_path / "u.pte", _TrailingUnsqueeze().eval()
    if not kept:
        with pytest.raises(ExportError, match="1 dynamic dimension"):
            deform_onnx.export(model, (torch.randn(1, 2, 4, 5),), path, dynamic_shapes=dims)
        assert not path.exists()
        return
    report = deform_onnx.export(model, (torch.randn(1, 2, 4, 5),), path, dynamic_shapes=dims)
    assert report.verified and {(1, 2, 2, 2), (1, 2, 8, 8)} <= {shapes[0] for shapes in report.checked_shapes}


class _GateRepeat(torch.nn.Module):
    """InternImage's ``center_feature_scale[..., None].repeat(1, 1, 1, 1, channels // group).flatten(-2)``, and
    repeats of an axis longer than 1 and of a new leading axis."""

    def forward(self, x):
        return x[..., None].repeat(1, 1, 1, 1, 4).flatten(-2) * 2 + x.repeat(1, 1, 1, 4) + x.repeat(2, 1, 1, 1, 4)[1]


@pytest.mark.parametrize("repeats", [(1, 1, 1, 1, 4), (1, 1, 1, 4), (2, 1, 1, 1, 4), (3, 2, 1, 2)])
def test_compact_repeat_is_repeat(repeats):
    from deform_onnx.formats.litert import compact_repeat

    x = torch.randn(1, 3, 4, 2)[..., None] if len(repeats) == 5 and repeats[0] == 1 else torch.randn(1, 3, 4, 2)
    torch.testing.assert_close(compact_repeat(x, repeats), x.repeat(*repeats), rtol=0, atol=0)


@_needs("litert_torch")
def test_tflite_of_a_five_d_repeat(tmp_path):
    """torch's and litert-torch's own ``repeat`` expand over twice the rank: LiteRT refused the 10-D
    ``broadcast_to`` ("'tfl.broadcast_to' op failed to verify that operand 0 is at most 8-D"; InternImage's
    DCNv3_pytorch with center_feature_scale to ``-o m.tflite`` in the new-user trial)."""
    model, args = _GateRepeat().eval(), (torch.randn(1, 3, 4, 2),)
    report = deform_onnx.export(model, args, tmp_path / "gate.tflite")
    assert report.verified
    _close(_run_tflite(tmp_path / "gate.tflite", args), [model(*args)])
