"""The bundled example (main job's network) and its photo input.

The oracle is the example itself evaluated in PyTorch (torchvision's
``deform_conv2d``) on the same photo; no expected value is typed in.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
import torch
import torchvision

import deform_onnx
from deform_onnx.cli.example import EXAMPLE_SIZE, example_model, load_photo, offset_stats
from deform_onnx.cli.export_cmd import DEFAULT_PLAN
from util import ATOL, assert_close, default_opset, op_types, run_ort


@pytest.fixture(scope="module")
def exports(main_job):
    """One file per row of the main job (method, opset, exporter as ``deform-onnx export`` picks them): the files
    conftest's ``main_job`` wrote (the same ``deform_onnx.export`` calls, not repeated here), with their table
    rows (method, opset, exporter, nodes, size, max abs error, ...)."""
    result, out = main_job
    assert result.exit_code == 0, result.stdout + result.stderr
    rows = {}
    for line in result.stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]
        if cells and cells[0] in {m for m, _ in DEFAULT_PLAN}:
            rows[cells[0]] = cells
    return {m: (rows[m], (out / f"example_{m}_op{o}.onnx").read_bytes()) for m, o in DEFAULT_PLAN}


def test_photo_is_a_normalised_real_image():
    photo = load_photo()
    assert photo.shape == (1, 3, EXAMPLE_SIZE, EXAMPLE_SIZE) and photo.dtype == torch.float32
    # ImageNet normalisation of a natural image: roughly zero mean, unit spread, real structure.
    assert abs(float(photo.mean())) < 1.0 and 0.3 < float(photo.std()) < 3.0
    assert float(photo[0, :, 1:, :].sub(photo[0, :, :-1, :]).abs().mean()) > 0.01  # not a flat image
    assert torch.equal(photo, load_photo())  # deterministic
    assert load_photo((40, 60), name="chelsea").shape == (1, 3, 40, 60)
    with pytest.raises(ValueError, match="colour image"):
        load_photo(name="camera")  # grey


def test_example_structure():
    model = example_model()
    convs = [m for m in model.modules() if isinstance(m, torchvision.ops.DeformConv2d)]
    assert len(convs) == 4
    assert any(c.stride == (2, 2) for c in convs)
    assert any(c.groups > 1 for c in convs)
    assert any(b.offset_groups > 1 for b in model.deform_blocks())
    # Seeded: two builds are identical.
    other = example_model()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values()))


def test_offsets_on_the_photo_are_not_near_zero(example):
    model, photo, _ = example
    stats = offset_stats(model, photo)
    print("mean |offset| per deformable convolution (px):", [round(s, 2) for s in stats])
    assert len(stats) == 4
    # Offsets of a pixel or more: sampling lands between pixels and off the image,
    # so a lowering with a wrong corner weight or border rule cannot match.
    assert all(0.75 <= s <= 8.0 for s in stats), stats


@pytest.mark.parametrize("method, opset", DEFAULT_PLAN, ids=[f"{m}-{o}" for m, o in DEFAULT_PLAN])
def test_example_matches_pytorch_on_the_photo(example, exports, method, opset):
    _, photo, want = example
    row, data = exports[method]
    proto = onnx.load_from_string(data)
    onnx.checker.check_model(proto, full_check=True)
    assert default_opset(proto) == opset and int(row[1]) == opset
    assert row[2] == ("dynamo" if opset >= 14 else "torchscript")
    ops = op_types(proto)
    assert ops.count("DeformConv") == (4 if method == "native" else 0), ops
    # The grid_sample lowering samples one kernel row per GridSample (3x3 kernels: 3 per layer).
    assert ops.count("GridSample") == (3 * 4 if method == "grid_sample" else 0), ops
    got = run_ort(data, {"input": photo})
    assert_close(got, want, what=f"example {method}@{opset}")
    # The photo exercises the output: not all zeros (ReLU) and not tiny.
    assert float(np.abs(want).mean()) > 0.1
    assert float(row[5]) <= ATOL  # the max abs error export's own check found


def test_example_dynamic_batch_and_size_dynamo(example, tmp_path):
    """Dynamic N, H, W through the dynamo path: export at 1x3x128x128, run at two other sizes."""
    model, photo, _ = example
    dims = {0: torch.export.Dim("N"), 2: torch.export.Dim("H"), 3: torch.export.Dim("W")}
    path = tmp_path / "dynamic.onnx"
    deform_onnx.export(
        model, (photo,), path, opset_version=17, method="grid_sample", input_names=["image"], dynamic_shapes=(dims,)
    )
    data = path.read_bytes()
    for n, h, w in ((2, 96, 160), (3, 64, 72)):
        x = torch.cat([load_photo((h, w)), load_photo((h, w), name="chelsea"), load_photo((h, w)).flip(-1)][:n])
        with torch.no_grad():
            want = model(x).numpy()
        assert_close(run_ort(data, {"image": x}), want, what=f"dynamic {n}x3x{h}x{w}")
