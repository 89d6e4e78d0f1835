"""Parity of the TorchScript-exporter path against torchvision, on ONNX Runtime CPU.

Every test exports with ``torch.onnx.export(dynamo=False)`` after
``deform_onnx.register(method)``, checks the file with
``onnx.checker.check_model(full_check=True)`` and compares ORT's output with
``torchvision.ops.deform_conv2d`` on the same tensors (max abs error <= 1e-4).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from util import (
    BANDS,
    FACTORS,
    METHOD_MIN_OPSET,
    Config,
    DeformLayer,
    assert_close,
    assert_lowering,
    check,
    covering_configs,
    default_opset,
    export,
    export_and_compare,
    level_row,
    make_inputs,
    method_opsets,
    reference,
    run_ort,
)

METHODS = tuple(METHOD_MIN_OPSET)

# torchvision's deform_conv2d checks offset.shape[1] in Python: the traced
# value is a channel count, which is static in every export here.
pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor to a Python boolean:torch.jit.TracerWarning")


def _design(method: str, opset: int) -> list[Config]:
    return covering_configs(f"parity-{method}-{opset}")


GRID = [
    pytest.param(method, opset, cfg, id=f"{method}-op{opset}-{cfg.id}")
    for method in METHODS
    for opset in method_opsets(method)
    for cfg in _design(method, opset)
]


@pytest.mark.parametrize("method,opset,cfg", GRID)
def test_grid(register, method, opset, cfg):
    register(method)
    proto = export_and_compare(cfg, method, opset)
    assert_lowering(proto, method, opset)


@pytest.mark.parametrize("method,opset", [(m, o) for m in METHODS for o in method_opsets(m)])
def test_design_covers_every_pair(method, opset):
    """The grid's design for (method, opset) holds every pair of factor levels that can fit."""
    names = list(FACTORS)
    covered = set()
    for cfg in _design(method, opset):
        assert cfg.fits(), cfg.id
        assert cfg.offset_scale == 2.0
        row = level_row(cfg)
        covered |= {(i, row[i], j, row[j]) for i, j in itertools.combinations(range(len(names)), 2)}
    missing = []
    for i, j in itertools.combinations(range(len(names)), 2):
        for a, b in itertools.product(range(len(FACTORS[names[i]])), range(len(FACTORS[names[j]]))):
            if (i, a, j, b) not in covered and _pair_can_fit(names, i, a, j, b):
                missing.append((names[i], FACTORS[names[i]][a], names[j], FACTORS[names[j]][b]))
    assert not missing, missing


def _pair_can_fit(names, i, a, j, b) -> bool:
    """Some config holding this pair fits (sizes at their band's maximum)."""
    fixed = {names[i]: FACTORS[names[i]][a], names[j]: FACTORS[names[j]][b]}
    geometry = ("kernel", "padding", "dilation", "H", "W")
    choices = [(fixed[n],) if n in fixed else FACTORS[n] for n in geometry]
    for kernel, padding, dilation, h, w in itertools.product(*choices):
        cfg = Config(kernel=kernel, padding=padding, dilation=dilation, H=BANDS[h][1], W=BANDS[w][1])
        if cfg.fits():
            return True
    return False


# -- dynamic N, H, W: export once, run at other sizes --------------------------

DYNAMIC_CONFIGS = {
    # grouped, strided, dilated, mask and bias; padding lets H = W = 1 fit.
    "grouped": Config(
        N=2,
        C_in=6,
        C_out=4,
        H=9,
        W=8,
        kernel=(3, 3),
        stride=(2, 1),
        padding=(2, 1),
        dilation=(2, 1),
        groups=2,
        offset_groups=3,
        mask=True,
        bias=True,
    ),
    # plain DCNv1 without bias, non-square kernel, no padding along W.
    "plain": Config(N=1, C_in=6, C_out=6, H=7, W=6, kernel=(3, 2), padding=(1, 0), mask=False, bias=False),
}
#: (N, H, W) run sizes per config, all different from the export size.
DYNAMIC_SIZES = {"grouped": [(3, 13, 5), (1, 1, 20)], "plain": [(2, 5, 17), (3, 20, 2)]}
DYNAMIC_EXPORTS = [
    ("native", 19),
    ("native", 20),
    ("grid_sample", 16),
    ("grid_sample", 20),
    ("gather", 11),
    ("gather", 17),
    ("auto", 13),
    ("auto", 17),
]


@pytest.mark.parametrize("name", list(DYNAMIC_CONFIGS))
@pytest.mark.parametrize("method,opset", DYNAMIC_EXPORTS, ids=[f"{m}-op{o}" for m, o in DYNAMIC_EXPORTS])
def test_dynamic_axes(register, method, opset, name):
    cfg = DYNAMIC_CONFIGS[name]
    register(method)
    model = DeformLayer(cfg)
    data = export(model, make_inputs(cfg), opset, dynamic=True)
    proto = check(data)
    assert default_opset(proto) == opset
    assert_lowering(proto, method, opset)
    graph_input = proto.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in graph_input] == ["N", cfg.C_in, "H", "W"]
    for seed, (n, h, w) in enumerate(DYNAMIC_SIZES[name], start=10):
        inputs = make_inputs(cfg, seed=seed, N=n, H=h, W=w)
        assert_close(run_ort(data, inputs), reference(model, inputs), what=f"{method}@{opset} at {n}x{h}x{w}")


# -- traced and scripted modules -----------------------------------------------

MODULE_KINDS = [("native", 19), ("grid_sample", 17), ("gather", 11), ("auto", 12)]


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
@pytest.mark.filterwarnings("ignore:no signature found for:UserWarning")
@pytest.mark.parametrize("kind", ["traced", "scripted"])
@pytest.mark.parametrize("method,opset", MODULE_KINDS, ids=[f"{m}-op{o}" for m, o in MODULE_KINDS])
def test_traced_and_scripted_modules(register, method, opset, kind):
    cfg = Config(
        N=2,
        C_in=6,
        C_out=4,
        H=7,
        W=9,
        kernel=(3, 2),
        stride=(2, 1),
        padding=(1, 1),
        groups=2,
        offset_groups=3,
        mask=True,
        bias=True,
    )
    register(method)
    model = DeformLayer(cfg)
    inputs = make_inputs(cfg)
    if kind == "traced":
        module = torch.jit.trace(model, tuple(inputs.values()))
    else:
        module = torch.jit.script(model)
    data = export(module, inputs, opset)
    proto = check(data)
    assert default_opset(proto) == opset
    assert_lowering(proto, method, opset)
    assert_close(run_ort(data, inputs), reference(model, inputs), what=f"{kind} {method}@{opset}")
