"""References that can prove a file (issue 35 item 5): top-k ties.

When PyTorch float32 and a float64 copy of the model choose differently at a discrete op (top-k over scores
with ties: RT-DETR's query selection), the two references disagree by a whole feature, and the float64 rule
("within 2x PyTorch float32's own error against float64") would call a file verified that agrees with neither
(it did: the tie model below was verified with the file 2.0 off float64 and 1.0 off PyTorch float32). Such a
file is refused, naming the output and the op; the same model at inputs without ties is verified.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

import deform_onnx
from deform_onnx.core.errors import VerificationError
from deform_onnx.exporting.choices import discrete_flip
from deform_onnx.exporting.verification import verify

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::UserWarning")


class TopKTie(torch.nn.Module):
    """Scores ``x + bump`` whose top-1 index gathers a feature row (row i holds i).

    At ``x = 1`` on the first four entries the bumps (1e-9, 2e-9) vanish in float32: four exact ties (PyTorch
    CPU picks one, ONNX Runtime the lowest index), while float64 picks index 2.
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("bump", torch.tensor([0.0, 1e-9, 2e-9, 0.0, -1.0, -1.0, -1.0, -1.0]))
        self.register_buffer("feats", torch.arange(8.0).reshape(8, 1).repeat(1, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, idx = (x + self.bump).topk(1, dim=-1)
        return self.feats[idx.reshape(-1)] * 1.0


def _tied() -> torch.Tensor:
    x = torch.zeros(1, 8)
    x[0, :4] = 1.0
    return x


@pytest.fixture(scope="module")
def tie_file() -> bytes:
    """The tie model's ONNX file, written unverified (the file under test)."""
    buf = io.BytesIO()
    deform_onnx.export(TopKTie().eval(), (_tied(),), buf, verify=False)
    return buf.getvalue()


def test_the_references_disagree_at_the_tie():
    """The premise, computed here: PyTorch float32 and float64 pick different rows at the tie input."""
    model = TopKTie().eval()
    with torch.no_grad():
        f32 = model(_tied())
        f64 = TopKTie().double().eval()(_tied().double())
    assert not torch.equal(f32.double(), f64)
    assert discrete_flip(model, (_tied(),)) == "aten.topk (call 1)"


def test_a_file_off_pytorch_at_a_tie_is_refused_not_verified(tie_file):
    """The file (ONNX Runtime breaks the tie by the lowest index) is off PyTorch float32 and off float64: refused,
    naming the output and the op, instead of passed by the float64 rule."""
    with pytest.raises(VerificationError, match=r"output '.*' differs .* choose differently at aten\.topk"):
        verify(TopKTie().eval(), (_tied(),), tie_file)


def test_export_at_a_tie_writes_nothing(tmp_path: Path):
    with pytest.raises(VerificationError, match=r"the float64 rule cannot prove this output"):
        deform_onnx.export(TopKTie().eval(), (_tied(),), tmp_path / "tie.onnx")
    assert list(tmp_path.iterdir()) == []


def test_the_same_file_without_ties_is_verified(tie_file):
    """Distinct scores: every reference agrees and the file is verified against PyTorch itself."""
    x = torch.randn(1, 8, generator=torch.Generator().manual_seed(0))
    model = TopKTie().eval()
    assert discrete_flip(model, (x,)) is None
    (check,) = verify(model, (x,), tie_file).checks.values()
    assert check.reference == "pytorch" and check.error == 0.0
