"""The fused ``deform_onnx::ms_deform_attn`` op in the torch.export formats, called as the CUDA kernels are called.

``spatial_shapes`` and ``level_start_index`` are int64 inputs of the program (mmcv's / Deformable DETR's
``MSDeformAttnFunction`` arguments), and the sampling locations are built inside the model as Deformable DETR
builds them (a view to ``[N, Lq, M, L, P, 2]``: rank 6). One export per format:

- ``.tflite``: litert-torch writes the int64 inputs as int32 (LiteRT's integer type); the file is run again here
  in LiteRT's interpreter on int32 feeds against PyTorch;
- ``.pte``: the fused op is in tests/formats/test_edge_formats.py's shared ``Family`` export (run in
  ExecuTorch there; measured here with int64 level-size inputs too: 2.4e-7, not repeated for the suite's time);
- ``.mlpackage``: the rank-6 locations are carried at rank 5 (``deform_onnx.formats.rank``); converted by
  coremltools, and the program converted is run in PyTorch against the model (Core ML does not run here).

A rank-6 input is refused for Core ML in one line before any work.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import deform_onnx
from deform_onnx.ops import MSDeformAttnCore, ms_deform_attn
from util import ATOL

LEVELS = [(4, 5), (2, 3)]
N, LQ, M, D, P = 1, 5, 2, 4, 2


def _needs(module: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} is not installed")


class KernelCall(torch.nn.Module):
    """Offsets and weights per query to ``ms_deform_attn`` with the level sizes as int64 inputs."""

    def forward(self, value, offsets, logits, spatial_shapes, level_start_index):
        loc = offsets.view(N, LQ, M, len(LEVELS), P, 2).sigmoid()
        attn = logits.softmax(-1).view(N, LQ, M, len(LEVELS), P)
        return ms_deform_attn(value, spatial_shapes, level_start_index, loc, attn)


def _args(seed: int = 0) -> tuple:
    gen = torch.Generator().manual_seed(seed)
    shapes = torch.tensor(LEVELS, dtype=torch.int64)
    sizes = shapes[:, 0] * shapes[:, 1]
    starts = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])
    return (
        torch.randn(N, int(sizes.sum()), M, D, generator=gen),
        torch.randn(N, LQ, M * len(LEVELS) * P * 2, generator=gen) * 2,  # sigmoid: some points near the edges
        torch.randn(N, LQ, M, len(LEVELS) * P, generator=gen),
        shapes,
        starts,
    )


def _want(args) -> np.ndarray:
    with torch.no_grad():
        return KernelCall()(*args).numpy()


@pytest.fixture(scope="module")
def tflite(tmp_path_factory):
    path = tmp_path_factory.mktemp("msda") / "msda.tflite"
    return path, deform_onnx.export(KernelCall(), _args(), path)


@pytest.fixture(scope="module")
def mlpackage(tmp_path_factory):
    path = tmp_path_factory.mktemp("msda") / "msda.mlpackage"
    return path, deform_onnx.export(KernelCall(), _args(), path)


@_needs("litert_torch")
def test_fused_op_to_tflite_takes_int32_level_sizes(tflite):
    from ai_edge_litert.interpreter import Interpreter

    path, report = tflite
    assert report.verified and report.max_error <= ATOL
    runner = Interpreter(model_path=str(path)).get_signature_runner()
    details = sorted(runner.get_input_details().items(), key=lambda kv: int(kv[0].rsplit("_", 1)[-1]))
    assert [np.dtype(d["dtype"]) for _, d in details[3:]] == [np.int32, np.int32]
    args = _args(1)
    out = runner(**{name: a.numpy().astype(d["dtype"]) for (name, d), a in zip(details, args, strict=True)})
    np.testing.assert_allclose(next(iter(out.values())), _want(args), rtol=0, atol=ATOL)


@_needs("coremltools")
def test_fused_op_to_mlpackage_at_rank_5(mlpackage):
    import coremltools as ct

    path, report = mlpackage
    assert (path / "Manifest.json").is_file() and report.verified is False
    assert any("carried at rank 5" in n for n in report.notes), report.notes
    assert any(n.startswith("the program converted") and "matched the model" in n for n in report.notes)
    spec = ct.models.MLModel(str(path), skip_model_load=True).get_spec()
    assert [len(i.type.multiArrayType.shape) for i in spec.description.input] == [4, 3, 4, 2, 1]


def test_rank6_input_is_refused_for_core_ml_before_any_work(tmp_path):
    value, loc = torch.randn(1, 26, 2, 4), torch.rand(1, 5, 2, 2, 2, 2)
    with pytest.raises(
        ValueError, match=r"^Core ML: input 1 has rank 6 \(1x5x2x2x2x2\); Core ML takes tensors of rank <= 5"
    ):
        deform_onnx.export(MSDeformAttnCore(LEVELS), (value, loc, torch.rand(1, 5, 2, 2, 2)), tmp_path / "m.mlpackage")
    assert not list(tmp_path.iterdir())
