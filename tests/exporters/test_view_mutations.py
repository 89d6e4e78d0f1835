"""Chained in-place ops on a view under the TorchScript exporter (``deform_onnx.exporters.view_mutations``).

DAT's ``_get_ref_points`` (``tests/real_code/dat_style.py``) normalises its reference points with
``ref[..., 1].div_(W_key - 1.0).mul_(2.0).sub_(1.0)``; torch's TorchScript ONNX pass kept only the ``div_``,
so ``deform_onnx.export(dat, ..., dynamo=False)`` was refused (0.075 off; the reference points 0.875 off). The
small cases are run through torch's own exporter with the rewrite, against PyTorch; DAT through
``deform_onnx.export`` at opset 11 (the TorchScript exporter), dynamic, run here at a new non-square size.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch

import deform_onnx
from deform_onnx.exporters.view_mutations import rebase_view_mutations, rebased
from real_code.dat_style import build as build_dat
from util import ATOL

#: in-place ops through a view, as model code writes them.
MUTATIONS = {
    "dat chain": lambda ref: ref[..., 1].div_(3.0).mul_(2.0).sub_(1.0),
    "select chain": lambda ref: ref.select(-1, 0).add_(1.0).add_(1.0),
    "nested views": lambda ref: ref[0][..., 1].div_(3.0).mul_(2.0),
    "clamp then scale": lambda ref: ref[:, 1:3].clamp_(0.2, 0.8).mul_(3.0),
    "not a view": lambda ref: ref.mul_(2.0).add_(1.0),
}


class _Mutate(torch.nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        ref = torch.stack((x, x * 2), -1)
        self.body(ref)
        return ref + 0.0


def _run(model, x, opset=17) -> np.ndarray:
    f = io.BytesIO()
    with warnings.catch_warnings(), rebased():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), f, dynamo=False, opset_version=opset)
    session = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_every_mutation_through_a_view_reaches_the_file(name):
    model = _Mutate(MUTATIONS[name])
    x = torch.rand(3, 4, generator=torch.Generator().manual_seed(0))
    got, want = _run(model, x), model(x).numpy()
    assert np.allclose(got, want, rtol=ATOL, atol=ATOL), f"{name}: max error {np.abs(got - want).max():.3g}"


def test_the_chain_is_rebased_on_a_fresh_view():
    """The traced graph of the DAT chain: ``mul_`` and ``sub_`` each read their own ``select`` of the base."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph, _ = torch.jit._get_trace_graph(_Mutate(MUTATIONS["dat chain"]), (torch.rand(3, 4),))
    assert rebase_view_mutations(graph) == 2
    selves = [next(iter(n.inputs())).node().kind() for n in graph.nodes() if n.kind() in ("aten::mul_", "aten::sub_")]
    assert selves == ["aten::select", "aten::select"]


@pytest.fixture(scope="module")
def dat():
    return build_dat()


def test_dat_with_the_torchscript_exporter_runs_at_a_new_size(dat):
    """DAT's block (two ``F.grid_sample``, reference points normalised in place) at opset 11, dynamic N/H/W:
    verified at export, and run here at 2x3x48x24 against PyTorch."""
    f = io.BytesIO()
    torch.manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = deform_onnx.export(
            dat,
            (torch.randn(1, 3, 32, 40),),
            f,
            dynamo=False,
            opset_version=11,
            input_names=["x"],
            dynamic_axes={"x": {0: "N", 2: "H", 3: "W"}},
        )
    assert report.exporter == "torchscript" and report.opset == 11
    x = torch.randn(2, 3, 48, 24, generator=torch.Generator().manual_seed(2))
    session = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        want = [t.numpy() for t in dat(x)]
    for got, w, what in zip(session.run(None, {"x": x.numpy()}), want, ("y", "pos", "reference"), strict=True):
        assert got.shape == w.shape and np.allclose(got, w, rtol=ATOL, atol=ATOL), (
            f"DAT {what}: max error {np.abs(got - w).max():.3g}"
        )
