"""Cases c26 and c27: detector code written as its repositories write it exports dynamic by default.

c26: a Deformable-DETR / DINO encoder (``tests/real_code/deformable_detr_style.py``: ``spatial_shapes =
torch.as_tensor([(h, w), ...])``, ``level_start_index`` from its cumsum, ``get_reference_points`` looping
over it with ``torch.linspace``, ``ms_deform_attn_core_pytorch`` splitting ``value`` by ``H_ * W_``).
c27: InternImage's pure-PyTorch DCNv3 (``tests/real_code/internimage_style.py``: ``_get_reference_points``,
``_generate_dilation_grids``, ``torch.tensor([W_in, H_in])``) behind a stride-4 stem.

Each is exported once per configuration with dynamic N/H/W at 1x3x128x128 and default arguments
(then ``dynamo=False`` at opset 11; c27 also ``target="openvino"``), and the written file is run at the
case's second size and compared with PyTorch eager there (1e-4). c26's encoder is exported inside the
two-stage model (which also returns the encoder's memory): one export per configuration serves both tests. Before the export-time rewrites
(``deform_onnx.exporters.rewriters``) every one of these files failed or differed at the second size.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch

import deform_onnx
from deform_onnx.exporters import rewriters
from real_code.deformable_detr_style import Encoder, TwoStage
from real_code.internimage_style import SegNet
from util import ATOL, load_cases

DYNAMIC = {"x": {0: "N", 2: "H", 3: "W"}}
EXPORTS = {"default": {}, "torchscript-11": {"dynamo": False, "opset_version": 11}}


def _case(case_id: str):
    case = load_cases()[case_id]["input"]
    return tuple(case["image"]), tuple(case["second_size"])


def _export(model, shape, **kwargs) -> tuple[bytes, deform_onnx.ExportReport]:
    torch.manual_seed(1)
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kwargs.setdefault("verify_runtimes", ())  # target openvino: its run here is the test's own (issue 35)
        report = deform_onnx.export(model, (torch.randn(shape),), f, input_names=["x"], dynamic_axes=DYNAMIC, **kwargs)
    return f.getvalue(), report


def _eager(model, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return model(x).numpy()


def _ort(data: bytes, x: torch.Tensor) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]


def _close(got, want, what):
    err = float(np.abs(got - want).max())
    assert got.shape == want.shape and np.allclose(got, want, rtol=ATOL, atol=ATOL), f"{what}: max error {err:.3g}"


@pytest.fixture(scope="module")
def c26_model():
    torch.manual_seed(0)
    return Encoder(d_model=32, nhead=4, n_levels=3, n_points=2, layers=1).eval()


def test_c26_runs_at_the_second_size(c26_model, two_stage_file):
    """The encoder's memory, one of the two-stage file's outputs (:class:`_TwoStageAndMemory`), against c26's
    encoder run alone in PyTorch."""
    name, data, report = two_stage_file
    _, second = _case("c26")
    assert report.exporter == ("dynamo" if name == "default" else "torchscript"), report.fallback_reason
    torch.manual_seed(2)
    x = torch.randn(second)
    import onnxruntime as ort

    memory = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[-1]
    _close(memory, _eager(c26_model, x), f"c26 {name} at {second}")


@pytest.fixture(scope="module", params=[pytest.param("default", marks=pytest.mark.slow), "torchscript-11"])
def c26_fused(request):
    """c26 with ``deform_onnx.ops.ms_deform_attn`` (the CUDA op's arguments) in place of the per-level core."""
    torch.manual_seed(0)
    model = Encoder(d_model=32, nhead=4, n_levels=3, n_points=2, layers=1).eval()
    for module in model.modules():
        if hasattr(module, "fused"):
            module.fused = True
    image, _ = _case("c26")
    return request.param, model, *_export(model, image, **EXPORTS[request.param])


def test_c26_on_the_fused_op_runs_at_the_second_size(c26_fused):
    name, model, data, report = c26_fused
    _, second = _case("c26")
    assert report.exporter == ("dynamo" if name == "default" else "torchscript"), report.fallback_reason
    torch.manual_seed(2)
    x = torch.randn(second)
    _close(_ort(data, x), _eager(model, x), f"c26 fused {name} at {second}")


class _TwoStageAndMemory(TwoStage):
    """:class:`TwoStage` returning the encoder's memory too (c26's output), after its own three outputs."""

    def forward(self, x):
        memory, mask_flatten, spatial_shapes = self.encoder(x, with_levels=True)
        output_memory, output_proposals = self.gen_encoder_output_proposals(memory, mask_flatten, spatial_shapes)
        enc_outputs_class = self.class_embed(output_memory)
        enc_outputs_coord_unact = self.bbox_embed(output_memory) + output_proposals
        topk_scores, topk_proposals = torch.topk(enc_outputs_class[..., 0], self.two_stage_num_proposals, dim=1)
        topk_coords_unact = torch.gather(enc_outputs_coord_unact, 1, topk_proposals.unsqueeze(-1).repeat(1, 1, 4))
        return topk_scores, topk_coords_unact.sigmoid(), enc_outputs_class[..., 0], memory


def test_the_two_stage_model_here_is_twostages_own(two_stage_model):
    """:class:`_TwoStageAndMemory` computes what :class:`TwoStage` computes (its forward is copied to add one output)."""
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        got, want = two_stage_model(x), TwoStage.forward(two_stage_model, x)
    assert len(got) == len(want) + 1
    for g, w in zip(got, want):
        assert torch.equal(g, w)


@pytest.fixture(scope="module")
def two_stage_model(c26_model):
    torch.manual_seed(4)
    return _TwoStageAndMemory(c26_model, d_model=32, topk=5).eval()


@pytest.fixture(scope="module", params=list(EXPORTS))
def two_stage_file(request, two_stage_model):
    """One export per configuration for c26 (the memory output) and the two-stage selection."""
    image, _ = _case("c26")
    return request.param, *_export(two_stage_model, image, **EXPORTS[request.param])


def test_two_stage_query_selection_runs_at_the_second_size(two_stage_model, two_stage_file):
    """Deformable DETR's ``gen_encoder_output_proposals`` (``_cur += H_ * W_``, ``mask[:, _cur:(_cur + H_ * W_)]
    .view(N_, H_, W_, 1)``, ``linspace(0, H_ - 1, H_)``) and top-k: one ranking in PyTorch and the file at 2x3x160x96."""
    name, data, report = two_stage_file
    _, second = _case("c26")
    assert report.exporter == ("dynamo" if name == "default" else "torchscript"), report.fallback_reason
    torch.manual_seed(2)
    x = torch.randn(second)
    with torch.no_grad():
        want = [t.numpy() for t in two_stage_model(x)]
    for scores in want[2]:  # every image's top-(k+1) scores apart by more than twice the tolerance
        top = np.sort(scores)[::-1][: two_stage_model.two_stage_num_proposals + 1]
        assert (top[:-1] - top[1:]).min() > 2 * (ATOL + ATOL * np.abs(top).max()), "ambiguous ranking"
    session = __import__("onnxruntime").InferenceSession(data, providers=["CPUExecutionProvider"])
    outputs = ("scores", "boxes", "all scores", "memory")
    for got, w, what in zip(session.run(None, {"x": x.numpy()}), want, outputs, strict=True):
        _close(got, w, f"two-stage {name} {what} at {second}")


@pytest.fixture(scope="module")
def c27_model():
    torch.manual_seed(0)
    model = SegNet(channels=32, group=4).eval()
    with torch.no_grad():  # offsets of a few pixels, so sampling leaves the grid (the zero-init of InternImage doesn't)
        model.dcn.offset.weight.normal_(0, 0.5)
        model.dcn.offset.bias.normal_(0, 1.0)
    return model


@pytest.fixture(scope="module", params=[*EXPORTS, "openvino"])
def c27_file(request, c27_model):
    image, _ = _case("c27")
    kwargs = {"target": "openvino"} if request.param == "openvino" else EXPORTS[request.param]
    return request.param, *_export(c27_model, image, **kwargs)


def test_c27_runs_at_the_second_size(c27_model, c27_file):
    name, data, report = c27_file
    _, second = _case("c27")
    assert report.exporter == ("torchscript" if name == "torchscript-11" else "dynamo"), report.fallback_reason
    torch.manual_seed(2)
    for shape in (second, (2, 3, 160, 96)):
        x = torch.randn(shape)
        want = _eager(c27_model, x)
        _close(_ort(data, x), want, f"c27 {name} on ONNX Runtime at {shape}")
        if name == "openvino":
            pytest.importorskip("openvino", reason="OpenVINO tests need `pip install openvino`")
            import onnx

            import deform_onnx.openvino as dov

            compiled = dov.compile(onnx.load_from_string(data))
            _close(compiled([x.numpy()])[compiled.output(0)], want, f"c27 {name} on OpenVINO at {shape}")


# --- the rewrites themselves ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "start, end, steps", [(0.5, 127.5, 128), (0.0, 4.0, 5), (1.5, 1.5, 1), (-1.0, 1.0, 2), (0.5, 24.5, 25)]
)
def test_linspace_over_a_size_matches_torch(start, end, steps):
    """The export-time linspace (captured with a symbolic ``steps``) gives ATen's values at other sizes too."""

    class Ramp(torch.nn.Module):
        def forward(self, x):
            n = x.shape[1]
            return torch.linspace(start * n / steps, end * n / steps, n)

    with rewriters.while_exporting():
        # captured at a size >= 2 (torch.export fixes a dimension whose example is 1), run at 1 too
        program = torch.export.export(
            Ramp(), (torch.zeros(1, max(steps, 3)),), dynamic_shapes=({1: torch.export.Dim("n")},)
        )
    for n in sorted({steps, 1, 2, 7, 2 * steps + 1}):
        want = torch.linspace(start * n / steps, end * n / steps, n)
        got = program.module()(torch.zeros(1, n))
        assert torch.allclose(got, want, rtol=1e-6, atol=1e-6), (n, (got - want).abs().max())


def test_rewrites_are_undone_and_cite_their_source():
    with rewriters.while_exporting() as mode:
        assert isinstance(torch.overrides._get_current_function_mode(), rewriters.SizeMode)
        assert mode is torch.overrides._get_current_function_mode()
    assert not any(isinstance(m, rewriters.SizeMode) for m in torch.overrides._get_current_function_mode_stack())
    assert {"torch.as_tensor", "torch.tensor", "torch.linspace"} <= set(rewriters.REWRITES)
    for rewrite in rewriters.REWRITES.values():
        assert "/" in rewrite.source, rewrite  # repository/path of the pattern it serves
    with pytest.raises(ValueError, match="already has"):
        rewriters.register("torch.linspace", "x/y")(lambda *a, **k: NotImplemented)


def test_eager_calls_inside_the_block_are_torchs_own():
    """Plain numbers take torch's own functions: the verification reference is never rewritten."""
    with rewriters.while_exporting():
        shapes = torch.as_tensor([(4, 6), (2, 3)])
        ramp = torch.linspace(0.5, 3.5, 4)
        sizes = torch.tensor([3, 5], dtype=torch.int32)
    assert shapes.dtype == torch.int64 and shapes.tolist() == [[4, 6], [2, 3]]
    assert torch.equal(ramp, torch.linspace(0.5, 3.5, 4))
    assert sizes.dtype == torch.int32 and sizes.tolist() == [3, 5]


def test_function_rewrites_are_restored():
    """transformers' ``torch_int`` is swapped in every module that bound it, and put back after."""
    generic = pytest.importorskip("transformers.utils.generic")
    rt_detr = pytest.importorskip("transformers.models.rt_detr.modeling_rt_detr")
    original = generic.torch_int
    assert rt_detr.torch_int is original
    with rewriters.while_exporting():
        assert rt_detr.torch_int is not original and generic.torch_int is not original
        assert rt_detr.torch_int(7.0) == 7  # plain numbers: the original's answer
    assert rt_detr.torch_int is original and generic.torch_int is original
