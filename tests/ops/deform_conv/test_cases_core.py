"""Cases c01, c03, c05, c06, c07, c08 and c11 of ``shared/cases/cases.json`` (TorchScript exporter).

Each test builds the case's input as the case says, exports per its "do"
and checks its "expect"; the expected output is always torchvision's
``deform_conv2d`` on the same tensors. (c05's dynamo-exporter part is tested
with the dynamo exporter.)
"""

from __future__ import annotations

import pytest

from util import (
    DeformLayer,
    assert_close,
    case_config,
    check,
    default_opset,
    export,
    export_and_compare,
    load_cases,
    make_inputs,
    op_types,
    reference,
    run_ort,
)

pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor to a Python boolean:torch.jit.TracerWarning")

EVERY_METHOD = [
    ("native", 19),
    ("native", 20),
    ("grid_sample", 16),
    ("grid_sample", 20),
    ("gather", 11),
    ("gather", 20),
    ("auto", 11),
    ("auto", 17),
]


def _ids(pairs):
    return [f"{m}-op{o}" for m, o in pairs]


def test_cases_file_has_the_core_cases():
    cases = load_cases()
    for case_id in ("c01", "c03", "c05", "c06", "c07", "c08", "c11"):
        assert case_id in cases, f"{case_id} missing from cases.json"
        assert case_config(case_id).fits()


def test_c01_register_default_opset13(register):
    """register() (method "auto"), then export at opset 13: valid and matches."""
    register()
    proto = export_and_compare(case_config("c01"), "auto", 13)
    assert "DeformConv" not in op_types(proto)


@pytest.mark.parametrize("method,opset", [("grid_sample", 16), ("grid_sample", 17), ("gather", 11), ("gather", 17)])
def test_c03_standard_ops_wide_map(register, method, opset):
    """Runtime without DeformConv: no DeformConv node, standard domain only, matches."""
    register(method)
    proto = export_and_compare(case_config("c03"), method, opset)
    assert "DeformConv" not in op_types(proto)
    assert all(n.domain in ("", "ai.onnx") for n in proto.graph.node)
    assert [o.domain for o in proto.opset_import] in ([""], ["ai.onnx"])


@pytest.mark.parametrize("method,opset", EVERY_METHOD, ids=_ids(EVERY_METHOD))
def test_c05_groups_and_stride(register, method, opset):
    """groups=2, offset groups 3, stride 2, N=2: every method matches."""
    register(method)
    export_and_compare(case_config("c05"), method, opset)


C06 = [
    ("native", 19),
    ("grid_sample", 16),
    ("grid_sample", 17),
    ("gather", 11),
    ("gather", 16),
    ("auto", 13),
    ("auto", 17),
]


@pytest.mark.parametrize("method,opset", C06, ids=_ids(C06))
def test_c06_dynamic_batch_height_width(register, method, opset):
    """Export with N, H, W dynamic; run the one file at N=3, H=23, W=9."""
    cfg = case_config("c06")
    register(method)
    model = DeformLayer(cfg)
    data = export(model, make_inputs(cfg), opset, dynamic=True)
    check(data)
    inputs = make_inputs(cfg, seed=7, N=3, H=23, W=9)
    assert inputs["offset"].shape[2:] == (23, 9)  # padding 1, 3x3: output size = input size
    assert_close(run_ort(data, inputs), reference(model, inputs), what=f"c06 {method}@{opset}")


@pytest.mark.parametrize("method", ["auto", "gather"])
def test_c07_opset11(register, method):
    """Opset 11 for an older runtime: declares opset 11, passes the checker, matches."""
    register(method)
    proto = export_and_compare(case_config("c07"), method, 11)
    assert default_opset(proto) == 11
    assert {o.version for o in proto.opset_import} == {11}


C08 = [("auto", 14), ("gather", 14), ("auto", 16), ("gather", 16), ("grid_sample", 16)]


@pytest.mark.parametrize("method,opset", C08, ids=_ids(C08))
def test_c08_opset14_and_16(register, method, opset):
    register(method)
    proto = export_and_compare(case_config("c08"), method, opset)
    assert default_opset(proto) == opset


C11 = EVERY_METHOD + [("auto", 12)]


@pytest.mark.parametrize("shape", ["1xW", "Hx1"])
@pytest.mark.parametrize("method,opset", C11, ids=_ids(C11))
def test_c11_one_pixel_high_or_wide(register, method, opset, shape):
    """H=1 (kernel 1x3) and, transposed, W=1 (kernel 3x1): matches, no NaN."""
    cfg = case_config("c11")
    if shape == "Hx1":
        cfg = cfg.at(H=7, W=1, kernel=(3, 1), padding=(1, 0))
    assert 1 in (cfg.H, cfg.W)
    register(method)
    export_and_compare(cfg, method, opset)  # assert_close also rejects NaN/inf
