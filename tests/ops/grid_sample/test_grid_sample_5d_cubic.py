"""Cases c29 (5-D ``F.grid_sample``) and c30 (bicubic): every form, opset, method and target, against PyTorch.

One module per case samples its input with every (mode, padding_mode,
align_corners) it covers (c29: bilinear + nearest = 12 outputs; c30: bicubic
= 6), so each (exporter, opset, method, target) is one shared export.
Expected values are PyTorch's ``F.grid_sample`` on the same tensors: within
1e-5 (nearest exact; the boundary mask of tests/test_grid_sample_op.py finds
no half-integer coordinate on these grids, asserted). The numpy references
(:mod:`deform_onnx.ops.grid_sample.reference`) are checked against PyTorch
too, and a planted fault in them (the cubic coefficient) must be seen.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F

import deform_onnx
from deform_onnx.ops.grid_sample import reference as ref
from deform_onnx.targets import resolve_target, violations
from util import load_cases, op_types

ATOL = 1e-5
PADDINGS = ("zeros", "border", "reflection")
C29_CONFIGS = list(itertools.product(("bilinear", "nearest"), PADDINGS, (True, False)))
C30_CONFIGS = [("bicubic", p, a) for p, a in itertools.product(PADDINGS, (True, False))]
NAMES = ["x", "grid"]


class Sampler(torch.nn.Module):
    """``F.grid_sample(x, grid)`` for each (mode, padding_mode, align_corners) of ``configs``."""

    def __init__(self, configs):
        super().__init__()
        self.configs = configs

    def forward(self, x, grid):
        return tuple(F.grid_sample(x, grid, mode=m, padding_mode=p, align_corners=a) for m, p, a in self.configs)


def _case(name: str, seed: int):
    c = load_cases()[name]["input"]
    low, high = c["grid_range"]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*c["input"], generator=g)
    grid = torch.rand(*c["grid"], generator=g) * (high - low) + low
    return x, grid


@pytest.fixture(scope="module")
def c29():
    return _case("c29", 29)


@pytest.fixture(scope="module")
def c30():
    return _case("c30", 30)


def _half_integer_points(grid: torch.Tensor, sizes, align: bool, eps: float = 1e-6) -> bool:
    """Whether any coordinate unnormalises (float64) within ``eps`` of a half-integer (nearest may round either way)."""
    g = grid.double().numpy()
    for axis, size in enumerate(reversed(sizes)):  # grid's last axis is (x, y[, z]); sizes are ([D,] H, W)
        p = ref.unnormalize(g[..., axis], size, align)
        if (np.abs(p - np.floor(p) - 0.5) < eps).any():
            return True
    return False


def _run(proto: onnx.ModelProto, x, grid) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x.numpy(), "grid": grid.numpy()})


def _assert_matches(outs, configs, x, grid, what: str) -> None:
    with torch.no_grad():
        want = [t.numpy() for t in Sampler(configs)(x, grid)]
    assert len(outs) == len(want), what
    for (mode, pad, align), got, exp in zip(configs, outs, want, strict=True):
        where = f"{what} {mode}/{pad}/align_corners={align}"
        assert got.shape == exp.shape, where
        if mode == "nearest":
            np.testing.assert_array_equal(got, exp, err_msg=where)
        else:
            np.testing.assert_allclose(got, exp, rtol=0, atol=ATOL, err_msg=where)


def _gridsample_modes(proto: onnx.ModelProto) -> list[str]:
    return [
        next((a.s.decode() for a in n.attribute if a.name == "mode"), "linear")
        for n in proto.graph.node
        if n.op_type == "GridSample"
    ]


# (exporter, opset, method, target) -> whether the file holds GridSample nodes (else the gather form).
C29_EXPORTS = {
    ("torchscript", 11, "gather", None): False,
    ("torchscript", 11, "auto", None): False,
    ("torchscript", 16, "auto", None): False,  # GridSample-16 is 4-D only
    ("torchscript", 17, "auto", None): False,
    ("torchscript", 20, "native", None): True,
    ("dynamo", 20, "grid_sample", None): True,
    ("torchscript", 20, "gather", None): False,
    ("dynamo", None, None, "openvino"): False,  # OpenVINO rejects 5-D GridSample
    ("torchscript", 20, "grid_sample", "openvino"): False,
    ("torchscript", None, None, "tensorrt"): False,
    ("torchscript", 20, None, "onnxruntime"): True,
}
C30_EXPORTS = {
    ("torchscript", 11, "gather", None): False,
    ("torchscript", 11, "auto", None): False,
    ("torchscript", 16, "grid_sample", None): True,
    ("dynamo", 17, "gather", None): False,
    ("torchscript", 17, "auto", None): True,
    ("torchscript", 20, "native", None): True,
    ("dynamo", 20, "auto", None): True,
    ("torchscript", 20, "gather", None): False,
    ("torchscript", 17, "grid_sample", "tensorrt"): False,  # TensorRT's cubic: wrong at >= 20, unmeasured below
    ("torchscript", None, None, "coreml"): False,
    ("torchscript", None, None, "openvino"): True,  # OpenVINO's cubic matches PyTorch (measured)
}


def _export_all(table, configs, x, grid, folder) -> dict:
    out = {}
    for key in table:
        exporter, opset, method, target = key
        path = folder / f"{exporter}_{opset}_{method}_{target}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TorchScript deprecation notes
            report = deform_onnx.export(
                Sampler(configs),
                (x, grid),
                path,
                opset_version=opset,
                method=method,
                target=target,
                dynamo=exporter == "dynamo",
                input_names=NAMES,
                verify=False,
            )
        out[key] = onnx.load(str(path)), report
    return out


@pytest.fixture(scope="module")
def c29_exports(c29, tmp_path_factory):
    return _export_all(C29_EXPORTS, C29_CONFIGS, *c29, tmp_path_factory.mktemp("c29"))


@pytest.fixture(scope="module")
def c30_exports(c30, tmp_path_factory):
    return _export_all(C30_EXPORTS, C30_CONFIGS, *c30, tmp_path_factory.mktemp("c30"))


def _ids(table):
    return ["-".join(str(v) for v in key if v is not None) for key in table]


# -- the references -------------------------------------------------------------
def test_references_match_pytorch_and_see_a_planted_fault(c29, c30):
    """The numpy references equal PyTorch (float64); with A = -0.5 instead of -0.75 the cubic one does not."""
    for (x, grid), configs, fn in ((c29, C29_CONFIGS, ref.grid_sample_3d), (c30, C30_CONFIGS, None)):
        x, grid = x.double(), grid.double()
        want = [t.numpy() for t in Sampler(configs)(x, grid)]
        for (mode, pad, align), w in zip(configs, want):
            got = (
                fn(x.numpy(), grid.numpy(), mode, pad, align)
                if fn
                else ref.grid_sample_bicubic(x.numpy(), grid.numpy(), pad, align)
            )
            np.testing.assert_allclose(got, w, rtol=0, atol=1e-12, err_msg=f"{mode}/{pad}/{align}")
    x, grid = (t.double() for t in c30)
    planted = ref.cubic_weights
    try:
        ref.cubic_weights = lambda t, A=-0.5: planted(t, A)
        bad = ref.grid_sample_bicubic(x.numpy(), grid.numpy(), "border", False)
    finally:
        ref.cubic_weights = planted
    assert (
        np.abs(bad - F.grid_sample(x, grid, mode="bicubic", padding_mode="border", align_corners=False).numpy()).max()
        > 1e-3
    )


def test_bicubic_pads_each_tap_not_the_coordinate(c30):
    """ATen applies border/reflection to each tap's index: padding the coordinate first (the bilinear rule) differs."""
    x, grid = (t.double() for t in c30)
    for pad in ("border", "reflection"):
        want = F.grid_sample(x, grid, mode="bicubic", padding_mode=pad, align_corners=False).numpy()
        p = [ref.source_index(grid.numpy()[..., k], 16, pad, False) for k in (0, 1)]
        renormalised = np.stack([(q * 2 + 1) / 16 - 1 for q in p], axis=-1)  # the padded coordinate, normalised
        wrong = ref.grid_sample_bicubic(x.numpy(), renormalised, "zeros", False)
        assert np.abs(wrong - want).max() > 1e-3, pad


def test_grids_have_no_rounding_boundary_points(c29):
    x, grid = c29
    assert float(grid.abs().max()) > 1.0, "c29 wants points outside [-1, 1]"
    assert not any(_half_integer_points(grid, x.shape[2:], a) for a in (True, False))


# -- c29: 5-D ------------------------------------------------------------------------
@pytest.mark.parametrize("key", list(C29_EXPORTS), ids=_ids(C29_EXPORTS))
def test_c29_export_matches_pytorch(c29_exports, c29, key):
    """Valid file; GridSample-20 exactly where the opset and target hold it, else the gather form; within 1e-5."""
    proto, report = c29_exports[key]
    onnx.checker.check_model(proto, full_check=True)
    if C29_EXPORTS[key]:
        assert report.opset >= 20 and sorted(_gridsample_modes(proto)) == ["linear"] * 6 + ["nearest"] * 6
    else:
        assert "GridSample" not in op_types(proto) and "Gather" in op_types(proto)
    _assert_matches(_run(proto, *c29), C29_CONFIGS, *c29, str(key))


def test_c29_explicit_gridsample_below_20_is_a_one_line_error(c29, tmp_path):
    path = tmp_path / "x.onnx"
    for method, opset in (("native", 19), ("grid_sample", 17)):
        with pytest.raises(ValueError) as info:
            deform_onnx.export(Sampler(C29_CONFIGS[:1]), c29, path, opset_version=opset, method=method, dynamo=False)
        text = str(info.value)
        assert "needs opset >= 20" in text and "method 'gather'" in text and "\n" not in text, text
    assert not path.exists()


def test_c29_openvino_runs_the_gather_form_and_rejects_5d_gridsample(c29_exports, c29):
    pytest.importorskip("openvino", reason="OpenVINO tests need `pip install openvino`")
    import deform_onnx.openvino as dov

    x, grid = c29
    compiled = dov.compile(c29_exports["dynamo", None, None, "openvino"][0], device="CPU", precision="f32")
    _assert_matches(
        [np.asarray(v) for v in compiled([x.numpy(), grid.numpy()]).values()], C29_CONFIGS, x, grid, "OpenVINO gather"
    )
    # openvinotoolkit/openvino#37770: why the openvino target gets gather
    with pytest.raises(Exception, match="GridSample is only supported for 4D input"):
        dov.compile(c29_exports["torchscript", 20, "native", None][0], device="CPU", precision="f32")


def test_c29_lower_rewrites_5d_gridsample_for_targets_and_low_opsets(c29_exports, c29):
    src = c29_exports["torchscript", 20, "native", None][0]
    assert violations(src, ("no 5-D GridSample",)), "premise: the rule sees 5-D GridSample"
    assert [v.split(":")[0] for v in violations(src, resolve_target("openvino").rules)] == ["no 5-D GridSample"]
    assert not violations(src, resolve_target("onnxruntime").rules)
    for kwargs in ({"target": "openvino"}, {"opset": 17}, {"method": "gather"}):
        out = deform_onnx.lower(src, **kwargs)
        assert "GridSample" not in op_types(out), kwargs
        _assert_matches(_run(out, *c29), C29_CONFIGS, *c29, f"lower {kwargs}")
    assert op_types(deform_onnx.lower(src)).count("GridSample") == len(C29_CONFIGS)  # auto at 20 keeps it
    with pytest.raises(ValueError, match="needs opset >= 20.*method 'gather'"):
        deform_onnx.lower(src, method="native", opset=17)


def test_5d_cubic_node_is_kept_or_refused_never_written_wrong():
    """A 5-D cubic GridSample (ONNX allows it, PyTorch and ONNX Runtime do not): native keeps it, gather refuses."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("GridSample", ["x", "grid"], ["y"], name="gs", mode="cubic")],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4, 5]),
            helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 2, 3, 3, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    with pytest.raises(ValueError, match=r"node gs \(GridSample\): grid_sample: mode 'bicubic' is 4-D only.*native"):
        deform_onnx.lower(model, method="gather")
    assert op_types(deform_onnx.lower(model, method="native")) == ["GridSample"]


# -- c30: bicubic --------------------------------------------------------------------
@pytest.mark.parametrize("key", list(C30_EXPORTS), ids=_ids(C30_EXPORTS))
def test_c30_export_matches_pytorch(c30_exports, c30, key):
    """Valid file; GridSample cubic (spelled bicubic below 20) where the target runs it, else 16 taps; within 1e-5."""
    proto, report = c30_exports[key]
    onnx.checker.check_model(proto, full_check=True)
    if C30_EXPORTS[key]:
        assert _gridsample_modes(proto) == ["cubic" if report.opset >= 20 else "bicubic"] * len(C30_CONFIGS)
    else:
        assert "GridSample" not in op_types(proto) and "Gather" in op_types(proto)
    _assert_matches(_run(proto, *c30), C30_CONFIGS, *c30, str(key))


def test_c30_openvino_runs_both_forms(c30_exports, c30):
    pytest.importorskip("openvino", reason="OpenVINO tests need `pip install openvino`")
    import deform_onnx.openvino as dov

    x, grid = c30
    for key in (("torchscript", 11, "gather", None), ("torchscript", None, None, "openvino")):
        compiled = dov.compile(c30_exports[key][0], device="CPU", precision="f32")
        _assert_matches(
            [np.asarray(v) for v in compiled([x.numpy(), grid.numpy()]).values()],
            C30_CONFIGS,
            x,
            grid,
            f"OpenVINO {key}",
        )


def test_c30_lower_rewrites_cubic_for_targets_without_it(c30_exports, c30):
    src = c30_exports["torchscript", 20, "native", None][0]
    assert any(v.startswith("no GridSample cubic") for v in violations(src, resolve_target("tensorrt").rules))
    assert not violations(src, resolve_target("openvino").rules)
    for kwargs in ({"target": "tensorrt"}, {"target": "tflite"}, {"method": "gather", "opset": 11}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = deform_onnx.lower(src, **kwargs)
        assert "GridSample" not in op_types(out), kwargs
        _assert_matches(_run(out, *c30), C30_CONFIGS, *c30, f"lower {kwargs}")
    assert _gridsample_modes(deform_onnx.lower(src, target="openvino")) == ["cubic"] * len(C30_CONFIGS)


def test_gather_forms_at_dynamic_sizes(c29, c30, tmp_path):
    """Dynamic sizes: exported at the case's size, run at another, still PyTorch's numbers."""
    for name, configs, (x, grid), axes in (
        (
            "c29",
            C29_CONFIGS[::3],
            c29,
            {"x": {0: "N", 2: "D", 3: "H", 4: "W"}, "grid": {0: "N", 1: "a", 2: "b", 3: "c"}},
        ),
        ("c30", C30_CONFIGS, c30, {"x": {0: "N", 2: "H", 3: "W"}, "grid": {0: "N", 1: "a", 2: "b"}}),
    ):
        path = tmp_path / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            deform_onnx.export(
                Sampler(configs),
                (x, grid),
                path,
                opset_version=11,
                method="gather",
                dynamo=False,
                input_names=NAMES,
                dynamic_axes=axes,
                verify=False,
            )
        g = torch.Generator().manual_seed(7)
        sizes = (3, 3, 5, 4, 6) if x.dim() == 5 else (2, 3, 7, 9)
        x2 = torch.randn(*sizes, generator=g)
        grid2 = torch.rand(sizes[0], *[3] * (x.dim() - 2), x.dim() - 2, generator=g) * 2.4 - 1.2
        assert not any(_half_integer_points(grid2, sizes[2:], a) for a in (True, False))
        _assert_matches(_run(onnx.load(str(path)), x2, grid2), configs, x2, grid2, f"{name} dynamic")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_gather_forms_keep_the_dtype(c29, c30, tmp_path, dtype):
    """float64: within 1e-10 of PyTorch (opset 13: ONNX Runtime has no float64 Clip-11); float16: float32
    coordinates and weights, compared with PyTorch's float32 result on the same float16 values."""
    for name, configs, (x, grid) in (("c29", C29_CONFIGS[::5], c29), ("c30", C30_CONFIGS[::2], c30)):
        x, grid = x.to(dtype), grid.to(dtype)
        path = tmp_path / f"{name}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            deform_onnx.export(
                Sampler(configs),
                (x, grid),
                path,
                opset_version=13,
                method="gather",
                dynamo=False,
                input_names=NAMES,
                verify=False,
            )
        got = _run(onnx.load(str(path)), x, grid)
        assert all(g.dtype == x.numpy().dtype for g in got), name
        with torch.no_grad():
            want = [
                t.double().numpy()
                for t in Sampler(configs)(
                    x if dtype == torch.float64 else x.float(), grid if dtype == torch.float64 else grid.float()
                )
            ]
        atol = 1e-10 if dtype == torch.float64 else 4e-3
        for cfg, g, w in zip(configs, got, want, strict=True):
            np.testing.assert_allclose(g.astype(np.float64), w, rtol=0, atol=atol, err_msg=f"{name} {dtype} {cfg}")


def test_bench_suites_run_and_match_pytorch():
    """`deform-onnx bench --op grid_sample_5d / grid_sample_bicubic`: every contender runs, within 1e-5 of PyTorch."""
    from deform_onnx import bench
    from deform_onnx.bench.grid_sample_forms import FormShape

    for op, shape in (("grid_sample_5d", FormShape(1, 2, 5, grid=3)), ("grid_sample_bicubic", FormShape(1, 3, 7))):
        suite = bench.suite(op)
        result = bench.run_suite(suite, [shape], runs=1, warmup=0, memory=False)
        for c in suite.contenders:
            cell = result.cell(shape, c.key)
            assert cell.ok and cell.stats.max_abs_err <= ATOL, (op, c.key, cell.status, cell.stats)
