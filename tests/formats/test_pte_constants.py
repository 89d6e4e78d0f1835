"""A ``.pte`` whose folded constants are slices of one parameter (the lowerings' per-tap weights) runs right.

``constant_prop_pass`` folds ``w[k]`` into a view of ``w``'s storage; XNNPACK serialized such a constant from
the start of the storage (every tap ran with ``w[0]``), so the writer copies each folded view first
(:func:`deform_onnx.formats.executorch.compact_constants`). Parity is against the model's own PyTorch outputs.
"""

from __future__ import annotations

import pytest
import torch

import deform_onnx
from deform_onnx.core.errors import VerificationError

pytest.importorskip("executorch")


class Taps(torch.nn.Module):
    """``sum_k x @ w[k]``: each product's weight a slice of one ``[3, 8, 8]`` parameter."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 8, 8, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        return sum(x @ self.w[k] for k in range(3))


def test_slices_of_one_weight_run_as_pytorch(tmp_path):
    from deform_onnx.formats.executorch import ExecuTorchSession

    x = torch.randn(16, 8)
    path = tmp_path / "taps.pte"
    deform_onnx.export(Taps().eval(), (x,), path)
    x2 = torch.randn(16, 8)
    (got,) = ExecuTorchSession(path.read_bytes()).run(None, {"input_0": x2.numpy()})
    with torch.no_grad():
        torch.testing.assert_close(torch.from_numpy(got), Taps().eval()(x2), rtol=1e-5, atol=1e-5)


def test_views_left_as_folded_are_refused(tmp_path, monkeypatch):
    """Without the copy the program runs every tap with the first slice: the writer's check refuses it."""
    from deform_onnx.formats import executorch

    monkeypatch.setattr(executorch, "compact_constants", lambda ep: None)
    path = tmp_path / "taps.pte"
    with pytest.raises(VerificationError):
        deform_onnx.export(Taps().eval(), (torch.randn(16, 8),), path)
    assert not path.exists()
