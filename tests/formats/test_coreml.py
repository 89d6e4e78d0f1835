"""``.mlpackage``: rank-6 tensors carried at rank 5, bicubic sampling decomposed, the converted program proven in PyTorch.

Core ML holds tensors of rank <= 5 and samples bilinear / nearest only; Core ML cannot run on Linux. What is
proven here: the rank rewrite (``deform_onnx.formats.rank.lower_rank``) leaves no tensor above rank 5 and the
rewritten program computes what the model computes (batch 2, so the merged axes are not trivial); the writer
runs the exact program it converts against the model and refuses one that differs (planted fault); coremltools
converts Deformable DETR's encoder (issue 37: its ``MSDeformAttn`` views the offsets as
``[N, Lq, M, L, P, 2]``) and a bicubic ``grid_sample`` with default arguments.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

import deform_onnx
from deform_onnx.core.errors import ExportError, VerificationError
from deform_onnx.formats import coreml
from deform_onnx.formats.rank import MAX_RANK, lower_rank
from deform_onnx.formats.torch_export import exported
from models import Neck
from real_code.deformable_detr_style import Encoder, MSDeformAttn


def _needs(module: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


class Attention(torch.nn.Module):
    """Deformable DETR's ``MSDeformAttn`` on given level sizes (``torch.as_tensor`` shapes, as the encoder)."""

    LEVELS = ((4, 4), (2, 3))

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.attn = MSDeformAttn(d_model=8, n_levels=2, n_heads=2, n_points=2)

    def forward(self, query, reference_points, memory):
        shapes = torch.as_tensor(self.LEVELS, dtype=torch.long)
        starts = torch.cat((shapes.new_zeros((1,)), shapes.prod(1).cumsum(0)[:-1]))
        return self.attn(query, reference_points, memory, shapes, starts)


def _attention_args(batch: int = 2, seed: int = 0) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    S = sum(h * w for h, w in Attention.LEVELS)
    return (
        torch.randn(batch, 5, 8, generator=gen),
        torch.rand(batch, 5, 2, 2, generator=gen),
        torch.randn(batch, S, 8, generator=gen),
    )


def _max_rank(ep) -> int:
    vals = [n.meta.get("val") for n in ep.graph.nodes if n.op == "call_function"]
    return max(v.dim() for v in vals if isinstance(v, torch.Tensor))


@pytest.fixture(scope="module")
def attention_program():
    """The attention layer captured and decomposed as the Core ML writer does (no conversion)."""
    model, args = Attention().eval(), _attention_args()
    return model, args, exported(model, args, None, "grid_sample", "Core ML")


def test_rank6_region_is_carried_at_rank5_and_computes_the_same(attention_program):
    model, args, ep = attention_program
    assert _max_rank(ep) == 6
    done, left = lower_rank(ep)
    assert (done, left) == (1, []) and _max_rank(ep) <= MAX_RANK
    other = _attention_args(seed=3)
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(*other), model(*other), rtol=0, atol=1e-6)


def test_gather_form_corner_tables_follow_a_permute():
    """The gather form of DCNv2 permutes a rank-6 corner table: the merged run moves with the permute (batch 2)."""
    model, x = Neck().eval(), torch.randn(2, 4, 5, 6)
    ep = exported(model, (x,), None, "gather", "Core ML")
    assert _max_rank(ep) == 6 and any(n.target is torch.ops.aten.permute.default for n in ep.graph.nodes)
    assert lower_rank(ep) == (1, []) and _max_rank(ep) <= MAX_RANK
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), model(x), rtol=0, atol=1e-5)


def test_rank6_output_is_left_with_its_reason():
    class Rank6Out(torch.nn.Module):
        def forward(self, x):
            return x.view(1, 2, 2, 2, 2, 3) * 2

    ep = exported(Rank6Out(), (torch.randn(2, 24),), None, "grid_sample", "Core ML")
    done, left = lower_rank(ep)
    assert done == 0 and len(left) == 1 and "program output" in left[0]


def test_an_op_along_the_merged_axes_is_refused_in_one_line(tmp_path):
    """Every run of axes meets a sum over it: refused before the (slow) conversion, nothing written."""

    class Across(torch.nn.Module):
        def forward(self, x):
            y = x.view(2, 2, 2, 2, 2, 3).exp()
            return y.sum((0, 2, 4)) + y.sum((1, 3, 5)).sum(-1, keepdim=True)

    with pytest.raises(ExportError, match=r"^Core ML: the program holds tensors of rank > 5.*nothing was written$"):
        deform_onnx.export(Across(), (torch.randn(4, 24),), tmp_path / "across.mlpackage")
    assert not list(tmp_path.iterdir())


def test_planted_fault_in_the_converted_program_is_refused(tmp_path, monkeypatch):
    """A rank rewrite that changes a value: the program check refuses it before conversion; nothing written."""

    def wrong(ep):
        done, left = lower_rank(ep)
        node = next(n for n in ep.graph.nodes if n.target is torch.ops.aten.grid_sampler_2d.default)
        with ep.graph.inserting_after(node):
            bad = ep.graph.call_function(torch.ops.aten.mul.Tensor, (node, 1.001))
        node.replace_all_uses_with(bad, delete_user_cb=lambda user: user is not bad)
        bad.meta["val"] = node.meta["val"]
        ep.graph_module.recompile()
        return done, left

    monkeypatch.setattr(coreml, "lower_rank", wrong)
    with pytest.raises(VerificationError, match=r"PyTorch \(the program converted to Core ML\)"):
        deform_onnx.export(Attention(), _attention_args(batch=1), tmp_path / "attn.mlpackage")
    assert not list(tmp_path.iterdir())


@_needs("coremltools")
@pytest.mark.slow
def test_deformable_detr_encoder_to_mlpackage(tmp_path):
    """Deformable DETR's encoder (stem, three levels, MSDeformAttn as the repository writes it), defaults."""
    torch.manual_seed(0)
    path = tmp_path / "encoder.mlpackage"
    report = deform_onnx.export(Encoder().eval(), (torch.randn(1, 3, 32, 32),), path)
    assert (path / "Manifest.json").is_file() and report.format == "coreml" and report.verified is False
    assert any("carried at rank 5" in n for n in report.notes), report.notes
    assert any(n.startswith("the program converted") for n in report.notes)


@_needs("coremltools")
def test_bicubic_grid_sample_to_mlpackage(tmp_path):
    """Bicubic (which Core ML lacks) as the 16-tap gather form beside a bilinear call that stays Core ML's.

    Then ``F.max_pool2d(y, 2)`` without a stride (the Spatial Transformer tutorial's, ``tests/real_code/stn_style.py``):
    coremltools 9.0 refused it ("node max_pool2d_with_indices got 2 input(s), expected minimum 3 inputs") until
    the writer gave it its stride (``coreml.explicit_pool_strides``).
    """

    class Resampler(torch.nn.Module):
        def forward(self, x, grid):
            cubic = F.grid_sample(x, grid, mode="bicubic", padding_mode="reflection", align_corners=False)
            return F.max_pool2d(cubic + F.grid_sample(x, grid, mode="bilinear", align_corners=False), 2)

    gen = torch.Generator().manual_seed(0)
    args = (torch.randn(1, 2, 5, 6, generator=gen), torch.rand(1, 3, 4, 2, generator=gen) * 2.4 - 1.2)
    path = tmp_path / "cubic.mlpackage"
    report = deform_onnx.export(Resampler(), args, path)
    assert (path / "Manifest.json").is_file()
    assert any("bicubic grid_sample written as its 16-tap gather form" in n for n in report.notes)
    assert "aten.grid_sampler_2d.default" in report.op_types  # the bilinear call
    assert any(n.startswith("the program converted") for n in report.notes)
