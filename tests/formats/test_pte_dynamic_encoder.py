"""An RT-DETR-style encoder (tests/real_code/rtdetr_style.py, as lyuwenyu/RT-DETR writes it) to ``.pte`` with a
dynamic H, as ``deform-onnx export --dynamic -o m.pte`` asks for it (H from half to twice the example's).

Two causes stopped it, neither the deformable op's decomposition:

- capture: the model's ``value_list[level].flatten(2).permute(0, 2, 1).reshape(bs * n_head, c, h, w)`` makes torch
  prove ``(16 + 16*k) % (1 + k) == 0`` (``h*w`` with a static ``w``: sympy distributes the 16) and torch.export
  refused H ("Not all values of H ... satisfy the generated guard"); :func:`deform_onnx.formats.capture.capture`
  now captures with backed sizes size-oblivious, as torch's ONNX exporter does;
- lowering: ``torch.linspace(0.5, h - 0.5, h)`` over a level's size leaves ``torch.sym_float`` (and deform-onnx's
  linspace rewrite ``torch.sym_max``) in the program, which executorch 1.5.1's edge verifier refused
  ("AssertionError") though its own ``to_executorch`` maps them to runtime ops
  (:func:`deform_onnx.formats.executorch._edge_config`).

One module-scoped export; the written file is loaded again and run at a size the export did not check.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import deform_onnx
from real_code.rtdetr_style import Encoder

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("executorch") is None, reason="executorch is not installed"),
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    torch.manual_seed(0)
    model = Encoder().eval()
    path = tmp_path_factory.mktemp("pte_encoder") / "encoder.pte"
    H = torch.export.Dim("H", min=8, max=32)  # half to twice the example's, as the CLI's --dynamic
    report = deform_onnx.export(model, (torch.randn(1, 3, 16, 16),), path, dynamic_shapes=({2: H},))
    return path, model, report


def test_written_and_checked_at_both_bounds(written):
    path, _, report = written
    assert path.is_file() and report.verified
    checked = [shapes[0] for shapes in report.checked_shapes]
    assert (1, 3, 8, 16) in checked and (1, 3, 32, 16) in checked, checked


def test_runs_at_a_new_size_in_executorch(written):
    """H = 22: not a size the export checked, not a multiple of the stem's stride 4 (levels 11 and 6 rows)."""
    from executorch.runtime import Runtime

    path, model, report = written
    assert (1, 3, 22, 16) not in [shapes[0] for shapes in report.checked_shapes]
    program = Runtime.get().load_program(path.read_bytes())  # kept: the method points into it (a freed one crashes)
    method = program.load_method("forward")
    x = torch.randn(1, 3, 22, 16, generator=torch.Generator().manual_seed(22))
    (got,) = method.execute([x])
    with torch.no_grad():
        np.testing.assert_allclose(got.numpy(), model(x).numpy(), rtol=1e-4, atol=1e-4)
