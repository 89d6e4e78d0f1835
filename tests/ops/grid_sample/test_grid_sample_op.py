"""Case c22: ``F.grid_sample`` exported and lowered (native GridSample, gather), both exporters, ``lower``.

5-D and bicubic (cases c29, c30): tests/test_grid_sample_5d_cubic.py.

One module samples the c22 input with every mode x padding_mode x
align_corners (12 outputs), so each (exporter, opset, method) is one shared
export. Expected values are PyTorch's ``F.grid_sample`` on the same tensors:
bilinear within 1e-4; nearest exact except at points whose pixel coordinate
lies within 1e-6 of a rounding boundary (a half-integer), which are masked
(:func:`_boundary_mask`; the c22 grid has none, which a test asserts, so no
point is skipped in practice).
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim
from typer.testing import CliRunner

import deform_onnx
from deform_onnx.cli import app
from deform_onnx.ops.registry import OPS
from util import ATOL, load_cases, op_types

CONFIGS = list(itertools.product(("bilinear", "nearest"), ("zeros", "border", "reflection"), (True, False)))
NAMES = ["x", "grid"]
#: (exporter, opset, method): each method the opset allows through deform_onnx.export. Not dynamo's gather at 16:
#: its nodes are those of its file at 17 (only the opset import differs, measured here), the costliest export here.
EXPORTS = (
    [("torchscript", 11, m) for m in ("gather", "auto")]
    + [("torchscript", 13, "gather")]
    + [
        (e, o, m)
        for e in ("torchscript", "dynamo")
        for o in (16, 17)
        for m in ("grid_sample", "gather")
        if (e, o, m) != ("dynamo", 16, "gather")
    ]
    + [("torchscript", 16, "auto")]
    + [(e, 20, m) for e in ("torchscript", "dynamo") for m in ("native", "gather")]
)


class AllModes(torch.nn.Module):
    """``F.grid_sample(x, grid)`` for every (mode, padding_mode, align_corners) of :data:`CONFIGS`."""

    def forward(self, x, grid):
        return tuple(F.grid_sample(x, grid, mode=m, padding_mode=p, align_corners=a) for m, p, a in CONFIGS)


def _inputs(seed: int, N: int, C: int, H: int, W: int, gh: int, gw: int, scale: float):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, C, H, W, generator=g)
    grid = torch.tanh(torch.randn(N, gh, gw, 2, generator=g)) * scale
    return x, grid


@pytest.fixture(scope="session")
def c22():
    c = load_cases()["c22"]["input"]
    return _inputs(22, c["N"], c["C"], c["H"], c["W"], c["grid_H"], c["grid_W"], c["grid_scale"]), c["grid_scale"]


def _boundary_mask(grid: torch.Tensor, H: int, W: int, align_corners: bool, eps: float = 1e-6) -> np.ndarray:
    """``[N, Ho, Wo]``: True where x or y unnormalises (float64) to within ``eps`` of a half-integer.

    Those are the only points where nearest sampling may round either way in
    float32. Border clipping and reflection (about integer or half-integer
    points) keep half-integers half-integers, so the test is the same for every padding.
    """
    g = grid.double().numpy()
    near = np.zeros(g.shape[:3], dtype=bool)
    for axis, size in ((0, W), (1, H)):
        p = (g[..., axis] + 1) * (size - 1) / 2 if align_corners else ((g[..., axis] + 1) * size - 1) / 2
        near |= np.abs(p - np.floor(p) - 0.5) < eps
    return near


def _assert_matches(outs: list[np.ndarray], x: torch.Tensor, grid: torch.Tensor, what: str) -> None:
    with torch.no_grad():
        want = [t.numpy() for t in AllModes()(x, grid)]
    assert len(outs) == len(want), what
    for (mode, pad, align), got, exp in zip(CONFIGS, outs, want, strict=True):
        where = f"{what} {mode}/{pad}/align_corners={align}"
        assert got.shape == exp.shape, where
        if mode == "nearest":
            keep = ~_boundary_mask(grid, x.shape[2], x.shape[3], align)[:, None, :, :]
            np.testing.assert_array_equal(np.where(keep, got, 0), np.where(keep, exp, 0), err_msg=where)
        else:
            np.testing.assert_allclose(got, exp, rtol=0, atol=ATOL, err_msg=where)


def _run(proto: onnx.ModelProto, x, grid) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x.numpy(), "grid": grid.numpy()})


@pytest.fixture(scope="session")
def exports(c22, tmp_path_factory):
    """``{(exporter, opset, method): (proto, report)}`` for :data:`EXPORTS` (one export each)."""
    (x, grid), _ = c22
    folder = tmp_path_factory.mktemp("c22")
    out = {}
    for exporter, opset, method in EXPORTS:
        path = folder / f"{exporter}_{opset}_{method}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no silent fallback to the other exporter
            report = deform_onnx.export(
                AllModes(),
                (x, grid),
                path,
                opset_version=opset,
                method=method,
                dynamo=exporter == "dynamo",
                input_names=NAMES,
            )
        out[exporter, opset, method] = (onnx.load(str(path)), report)
    return out


def test_c22_grid_has_no_rounding_boundary_points(c22):
    """The masking in the nearest comparisons skips nothing on c22's grid (so every point is compared)."""
    (x, grid), scale = c22
    assert float(grid.abs().max()) > 1.0, "c22 wants points outside [-1, 1]"
    for align in (True, False):
        assert not _boundary_mask(grid, x.shape[2], x.shape[3], align).any()


@pytest.mark.parametrize("key", EXPORTS, ids=[f"{e}-{o}-{m}" for e, o, m in EXPORTS])
def test_c22_export_matches_pytorch(exports, c22, key):
    """Valid model at the requested opset and exporter; the right form; every output matches PyTorch."""
    (x, grid), _ = c22
    proto, report = exports[key]
    exporter, opset, method = key
    assert report.exporter == exporter and report.opset == opset
    onnx.checker.check_model(proto, full_check=True)
    ops = op_types(proto)
    native = method in ("native", "grid_sample") or (method == "auto" and opset >= 16)
    if native:
        assert ops.count("GridSample") == len(CONFIGS), ops
        modes = {
            a.s.decode() for n in proto.graph.node if n.op_type == "GridSample" for a in n.attribute if a.name == "mode"
        }
        assert modes == ({"linear", "nearest"} if opset >= 20 else {"bilinear", "nearest"}), modes
    else:
        assert "GridSample" not in ops, ops
    _assert_matches(_run(proto, x, grid), x, grid, f"{key}")


def test_register_overrides_torch_symbolic_and_unregister_restores_it(c22, register, tmp_path):
    """``register('gather')`` wins over torch's own opset-16 grid_sampler symbolic; ``unregister()`` brings it back."""
    import io

    (x, grid), _ = c22

    def ops():
        buf = io.BytesIO()
        torch.onnx.export(AllModes(), (x, grid), buf, dynamo=False, opset_version=16, input_names=NAMES)
        return op_types(onnx.load_from_string(buf.getvalue()))

    register("gather")
    assert "GridSample" not in ops()
    deform_onnx.unregister()
    assert ops().count("GridSample") == len(CONFIGS)


def test_translation_table_covers_grid_sampler():
    table = deform_onnx.translation_table("gather", 17)
    assert torch.ops.aten.grid_sampler.default in table and torch.ops.aten.grid_sampler_2d.default in table


@pytest.mark.parametrize(
    "method, opset, dynamo", [("gather", 11, False), ("grid_sample", 16, False), ("gather", 17, True)]
)
def test_dynamic_sizes_run_at_a_new_size(c22, tmp_path, method, opset, dynamo):
    """Dynamic N, H, W (and grid size): exported at c22's size, run at another, matches PyTorch there."""
    (x, grid), scale = c22
    path = tmp_path / "dyn.onnx"
    if dynamo:
        n, h, w, gh, gw = Dim("N"), Dim("H"), Dim("W"), Dim("Ho"), Dim("Wo")
        kw = dict(dynamic_shapes=({0: n, 2: h, 3: w}, {0: n, 1: gh, 2: gw}))
    else:
        kw = dict(dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}, "grid": {0: "N", 1: "Ho", 2: "Wo"}})
    deform_onnx.export(
        AllModes(), (x, grid), path, opset_version=opset, method=method, dynamo=dynamo, input_names=NAMES, **kw
    )
    proto = onnx.load(str(path))
    assert ("GridSample" in op_types(proto)) == (method == "grid_sample")
    x2, grid2 = _inputs(5, 3, 8, 9, 20, 4, 6, scale)
    _assert_matches(_run(proto, x2, grid2), x2, grid2, f"{method}@{opset} dynamic")


def test_nearest_rounds_half_to_even(tmp_path):
    """Coordinates exactly on half-integers (exact in float32): gather rounds them as PyTorch (nearbyint)."""
    x = torch.arange(2 * 1 * 6 * 9, dtype=torch.float32).reshape(2, 1, 6, 9)
    # align_corners=True, W=9: p = (g + 1) * 4, so g = (k + 0.5) / 4 - 1 gives p = k + 0.5 exactly.
    k = torch.arange(0, 8, dtype=torch.float32)
    gx = (k + 0.5) / 4 - 1
    grid = torch.stack([gx, torch.zeros_like(gx)], dim=-1).reshape(1, 1, 8, 2).expand(2, 1, 8, 2).contiguous()

    class Nearest(torch.nn.Module):
        def forward(self, x, grid):
            return F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=True)

    path = tmp_path / "nearest.onnx"
    deform_onnx.export(Nearest(), (x, grid), path, opset_version=11, method="gather", dynamo=False, input_names=NAMES)
    got = _run(onnx.load(str(path)), x, grid)[0]
    want = Nearest()(x, grid).numpy()
    assert np.array_equal(got, want)
    # Half to even, not half away from zero: x = 0.5 -> 0, 1.5 -> 2, 2.5 -> 2; y = (0 + 1) * 2.5 -> 2.
    assert list(want[0, 0, 0, :3]) == [x[0, 0, 2, 0].item(), x[0, 0, 2, 2].item(), x[0, 0, 2, 2].item()]


def test_native_below_16_is_a_clear_error(c22, register):
    import io

    (x, grid), _ = c22
    register("grid_sample")
    needed = OPS["grid_sample"].lowerings["native"].min_opset  # the registry's bound (16)
    with pytest.raises(Exception, match=f"needs opset >= {needed} but opset 13 was requested"):
        torch.onnx.export(AllModes(), (x, grid), io.BytesIO(), dynamo=False, opset_version=13)


# -- lower --method gather on files with GridSample nodes ----------------------
@pytest.mark.parametrize(
    "key", [("torchscript", 16, "grid_sample"), ("dynamo", 20, "native")], ids=["opset16", "opset20"]
)
@pytest.mark.parametrize("opset", [None, 11])
def test_lower_gather_rewrites_grid_sample_nodes(exports, c22, key, opset):
    """No GridSample left; matches ONNX Runtime's GridSample on the original file and PyTorch."""
    (x, grid), _ = c22
    src = exports[key][0]
    out = deform_onnx.lower(src, method="gather", opset=opset)
    onnx.checker.check_model(out, full_check=True)
    assert "GridSample" not in op_types(out)
    assert next(o.version for o in out.opset_import if o.domain in ("", "ai.onnx")) == (opset or key[1])
    got, ref = _run(out, x, grid), _run(src, x, grid)
    for (mode, pad, align), g, r in zip(CONFIGS, got, ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=0, atol=ATOL, err_msg=f"{mode}/{pad}/{align} vs ORT GridSample")
    _assert_matches(got, x, grid, f"lower {key} -> gather")


def test_lower_keeps_grid_sample_for_native_and_auto(exports):
    src = exports["torchscript", 17, "grid_sample"][0]
    for method in ("native", "grid_sample", "auto"):
        assert op_types(deform_onnx.lower(src, method=method)).count("GridSample") == len(CONFIGS), method


def test_cli_lower_method_gather(exports, c22, tmp_path):
    (x, grid), _ = c22
    src = tmp_path / "gs.onnx"
    onnx.save(exports["dynamo", 17, "grid_sample"][0], str(src))
    dst = tmp_path / "gs_gather.onnx"
    result = CliRunner().invoke(app, ["lower", str(src), "-o", str(dst), "--method", "gather"])
    assert result.exit_code == 0, result.output
    assert "GridSample" in result.output  # the table names the replaced node kind
    out = onnx.load(str(dst))
    assert "GridSample" not in op_types(out)
    _assert_matches(_run(out, x, grid), x, grid, "cli lower")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_gather_dtypes(c22, tmp_path, dtype):
    """float64 matches PyTorch to 1e-10 (opset 13: ONNX Runtime has no float64 Clip-11); float16 computes
    coordinates and weights in float32 (as the deformable-convolution gather lowering does), so it is
    compared with PyTorch's float32 result on the same float16 values (PyTorch's own float16 CPU result
    is ~3e-2 off it on this input)."""
    (x, grid), _ = c22
    x, grid = x.to(dtype), grid.to(dtype)
    path = tmp_path / "dtype.onnx"
    deform_onnx.export(
        AllModes(), (x, grid), path, opset_version=13, method="gather", dynamo=False, input_names=NAMES, verify=False
    )
    got = _run(onnx.load(str(path)), x, grid)
    assert all(g.dtype == np.dtype(str(dtype).split(".")[1]) for g in got)
    with torch.no_grad():
        want = (
            [t.numpy() for t in AllModes()(x.double(), grid.double())]
            if dtype == torch.float64
            else [t.double().numpy() for t in AllModes()(x.float(), grid.float())]
        )
    atol = 1e-10 if dtype == torch.float64 else 4e-3
    for (mode, pad, align), g, w in zip(CONFIGS, got, want, strict=True):
        keep = ~_boundary_mask(grid.float(), x.shape[2], x.shape[3], align)[:, None] if mode == "nearest" else True
        np.testing.assert_allclose(
            np.where(keep, g.astype(np.float64), 0),
            np.where(keep, w, 0),
            rtol=0,
            atol=atol,
            err_msg=f"{dtype} {mode}/{pad}/{align}",
        )


@pytest.mark.parametrize(
    "key", [("torchscript", 11, "gather"), ("torchscript", 16, "grid_sample")], ids=["gather", "native"]
)
def test_openvino_runs_both_forms(exports, c22, key):
    """OpenVINO (CPU, f32) on the gather and the GridSample file: same PyTorch comparison."""
    pytest.importorskip("openvino", reason="OpenVINO tests need `pip install openvino`")
    import deform_onnx.openvino as dov

    (x, grid), _ = c22
    compiled = dov.compile(exports[key][0], device="CPU", precision="f32")
    outs = [np.asarray(v) for v in compiled([x.numpy(), grid.numpy()]).values()]
    _assert_matches(outs, x, grid, f"OpenVINO {key}")


def test_lower_gather_refuses_what_it_cannot_lower():
    """A GridSample node the gather form cannot express (rank 3) is a one-line error naming the node, not a wrong file.

    5-D and bicubic nodes lower (tests/test_grid_sample_5d_cubic.py); 5-D cubic is refused there.
    """
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("GridSample", ["x", "grid"], ["y"], name="gs", mode="linear")],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5]),
            helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 3, 1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    with pytest.raises(ValueError, match=r"node gs \(GridSample\): grid_sample: input has rank 3"):
        deform_onnx.lower(model, method="gather")
    assert op_types(deform_onnx.lower(model, method="native")) == ["GridSample"]  # kept as is
