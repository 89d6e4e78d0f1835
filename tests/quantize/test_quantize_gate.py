"""quantize's accuracy gate and its per-element lowering check (issue 35 items 4 and 8), on an 8-channel DCNv2 layer.

The issue's case: calibrated at 1e-3 scale and run at unit scale, the INT8 file was written at cosine
0.35 and the CLI printed "wrote". Here the evaluation inputs are one at the calibration's scale (which
the file keeps) and one at unit scale (which it misses), so a gate that measured the first input only
would let it through. One native export for the module; each quantization is of that file.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn
from torchvision.ops import DeformConv2d
from typer.testing import CliRunner

import deform_onnx
from deform_onnx.quantize.gate import DEFAULT_MAX_ERROR, DEFAULT_MIN_COSINE, AccuracyError


class Small(nn.Module):
    """stem -> offset/mask predictor -> DCNv2."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.off = nn.Conv2d(8, 27, 3, padding=1)
        self.dcn = DeformConv2d(8, 8, 3, padding=1)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        o = self.off(h)
        return self.dcn(h, o[:, :18], torch.sigmoid(o[:, 18:]))


def inputs(count: int, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 3, 16, 16, generator=g) for _ in range(count)]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The layer exported native (opset 19), calibrated at 1e-3 scale; evaluated at 1e-3 scale, then unit scale."""
    tmp = tmp_path_factory.mktemp("gate")
    x = inputs(4)
    native = tmp / "small.onnx"
    deform_onnx.export(Small().eval(), (x[0],), native, method="native", opset_version=19)
    calibration = [t * 1e-3 for t in x[:3]]
    evaluation = [x[3] * 1e-3, x[3]]
    npz = tmp / "eval.npz"
    np.savez(npz, arr_0=np.concatenate([t.numpy() for t in evaluation]))
    return {"tmp": tmp, "native": native, "calibration": calibration, "evaluation": evaluation, "npz": npz}


def run(path, x: torch.Tensor) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]


def cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_a_file_calibrated_at_another_scale_is_refused_naming_the_output_and_input(small):
    dst = small["tmp"] / "refused.onnx"
    with pytest.raises(AccuracyError) as info:
        deform_onnx.quantize(small["native"], dst, small["calibration"], eval_inputs=small["evaluation"])
    text = str(info.value)
    assert "\n" not in text and "'deform_conv2d'" in text and "input 2 of 2" in text, text
    assert "cosine" in text and "nothing written" in text and "accept=True (CLI: --accept-accuracy)" in text
    assert isinstance(info.value, deform_onnx.VerificationError)  # the family of "checked, not written"
    assert not dst.exists()


def test_cli_refuses_with_exit_1_and_accept_accuracy_writes_and_says_so(small):
    from deform_onnx.cli import app

    dst = small["tmp"] / "cli.onnx"
    npz = small["tmp"] / "calibration.npz"
    np.savez(npz, arr_0=np.concatenate([t.numpy() for t in small["calibration"]]))
    args = ["quantize", str(small["native"]), "-o", str(dst), "-c", str(npz), "--eval", str(small["npz"])]
    result = CliRunner().invoke(app, args)
    output = " ".join(result.output.split())
    assert result.exit_code == 1 and "failed:" in output and "'deform_conv2d'" in output, result.output
    assert "wrote" not in output and not dst.exists()
    result = CliRunner().invoke(app, [*args, "--accept-accuracy"])
    output = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert f"wrote {dst} (below the accuracy bound: written because --accept-accuracy was given)" in output
    assert "BELOW the bound" in output and "accept=True (CLI: --accept-accuracy) was given" in output
    # The written file itself, rerun: it keeps the calibration's scale and misses unit scale (the refusal was right).
    native = [run(small["native"], x) for x in small["evaluation"]]
    int8 = [run(dst, x) for x in small["evaluation"]]
    assert cosine(int8[0], native[0]) >= DEFAULT_MIN_COSINE > cosine(int8[1], native[1])


def test_accept_writes_and_the_report_covers_every_evaluation_input(small):
    """report.outputs is the worst over both inputs: the second one's figures, as the written file gives them."""
    dst = small["tmp"] / "accepted.onnx"
    umask = os.umask(0o022)
    try:
        report = deform_onnx.quantize(
            small["native"], dst, small["calibration"], eval_inputs=small["evaluation"], accept=True
        )
    finally:
        os.umask(umask)
    assert dst.stat().st_mode & 0o777 == 0o644  # a normal file's mode under umask 022
    assert report.accepted and report.eval_samples == 2
    assert any(n.startswith("below the accuracy bound") and "input 2 of 2" in n for n in report.notes)
    (out,) = report.outputs
    native = [run(small["native"], x) for x in small["evaluation"]]
    int8 = [run(dst, x) for x in small["evaluation"]]
    cosines = [cosine(q, f) for q, f in zip(int8, native)]
    errors = [float(np.abs(q - f).max() / np.abs(f).max()) for q, f in zip(int8, native)]
    assert (out.cosine_input, out.error_input) == (1, 1)
    assert out.cosine == pytest.approx(min(cosines), abs=1e-4) and out.max_error == pytest.approx(max(errors), rel=1e-3)
    assert report.output_cosine == out.cosine and out.max_error > DEFAULT_MAX_ERROR


def test_bounds_are_checked_before_any_work(small):
    from deform_onnx.cli import app

    dst = small["tmp"] / "never.onnx"
    for bad in ({"min_cosine": 1.5}, {"max_error": 0.0}, {"max_error": float("nan")}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            deform_onnx.quantize(small["native"], dst, [np.zeros((1, 3, 2, 2), np.float32)], **bad)  # bad data too
    result = CliRunner().invoke(
        app, ["quantize", str(small["native"]), "-o", str(dst), "-c", str(small["npz"]), "--min-cosine", "2"]
    )
    assert result.exit_code == 2 and "--min-cosine" in result.output and not dst.exists()


def test_cli_defaults_are_the_gates():
    """The CLI spells its defaults out (no import at parse time): they are the library's."""
    import inspect

    from deform_onnx.cli.quantize_cmd import quantize_command

    params = inspect.signature(quantize_command).parameters
    assert params["min_cosine"].default.default == DEFAULT_MIN_COSINE
    assert params["max_error"].default.default == DEFAULT_MAX_ERROR


def _plant(lowered: onnx.ModelProto, channels: int, value: float) -> onnx.ModelProto:
    """``lowered`` with ``value`` added to the first ``channels`` channels of its output."""
    planted = onnx.ModelProto()
    planted.CopyFrom(lowered)
    out = planted.graph.output[0].name
    for node in planted.graph.node:
        node.output[:] = [f"{o}_unplanted" if o == out else o for o in node.output]
    shift = np.zeros((1, 2 * channels, 1, 1), np.float32)
    shift[:, :channels] = value
    planted.graph.initializer.append(onnx.numpy_helper.from_array(shift, "planted_shift"))
    planted.graph.node.append(onnx.helper.make_node("Add", [f"{out}_unplanted", "planted_shift"], [out]))
    return planted


def _with_large_half(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` whose output gets a second half: a 1x1 convolution of the input with weights ~1e4."""
    big = onnx.ModelProto()
    big.CopyFrom(model)
    g = big.graph
    out, name = g.output[0].name, g.input[0].name
    for node in g.node:
        node.output[:] = [f"{o}_dcn" if o == out else o for o in node.output]
    weight = np.random.default_rng(0).standard_normal((8, 3, 1, 1)).astype(np.float32) * 1e4
    g.initializer.append(onnx.numpy_helper.from_array(weight, "big_weight"))
    g.node.extend([
        onnx.helper.make_node("Conv", [name, "big_weight"], ["big"]),
        onnx.helper.make_node("Concat", [f"{out}_dcn", "big"], [out], axis=1),
    ])  # fmt: skip
    g.output[0].type.tensor_type.shape.dim[1].dim_value = 16
    return big


def test_lowering_check_is_per_element_a_fault_beside_a_large_half_is_refused(small, tmp_path, monkeypatch):
    """+0.5 on the DCN channels of an output whose other half is ~1e4 times larger: within 1e-4 of the output's
    largest value (the old rule), far outside the float32 tolerance of those elements; refused, nothing written."""
    from deform_onnx.quantize import api
    from deform_onnx.quantize.lowering import check_lowering, lower_for_quantization

    x = inputs(3, seed=5)
    native = tmp_path / "halves.onnx"
    onnx.save(_with_large_half(onnx.load(small["native"])), native)
    model = onnx.load(native)
    lowered, _ = lower_for_quantization(model, None, "onnxruntime")
    feeds = [{model.graph.input[0].name: t.numpy()} for t in x]
    want = run(native, x[0])
    assert 1e-4 * np.abs(want).max() > 0.5 and np.abs(want[:, :8]).max() < 10  # the case: premise
    check_lowering(native, model, lowered, feeds)  # the true lowering passes, element by element
    with pytest.raises(
        ValueError, match=r"the lowered float model's output .* misses the reference at .* elements.*atol 0\.0001"
    ):
        check_lowering(native, model, _plant(lowered, 8, 0.5), feeds)
    real = api.lower_for_quantization
    monkeypatch.setattr(api, "lower_for_quantization", lambda *a: (_plant(real(*a)[0], 8, 0.5), real(*a)[1]))
    dst = tmp_path / "halves_int8.onnx"
    with pytest.raises(ValueError, match="lowered float model.s output .* misses the reference"):
        deform_onnx.quantize(native, dst, [t for t in x], eval_inputs=x[0])
    assert not dst.exists()


def test_lowering_check_covers_every_evaluation_input(small):
    """A fault only on the second input (planted: +0.5 where the input's largest value is above 10) is refused."""
    from deform_onnx.quantize.lowering import check_lowering, lower_for_quantization

    native, x = small["native"], inputs(2, seed=3)
    model = onnx.load(native)
    lowered, _ = lower_for_quantization(model, None, "onnxruntime")
    feeds = [{model.graph.input[0].name: t.numpy()} for t in (x[0], x[1] * 100)]
    planted = onnx.ModelProto()
    planted.CopyFrom(lowered)
    g = planted.graph
    out, name = g.output[0].name, g.input[0].name
    for node in g.node:
        node.output[:] = [f"{o}_unplanted" if o == out else o for o in node.output]
    g.initializer.extend([
        onnx.numpy_helper.from_array(np.array(10.0, np.float32), "ten"),
        onnx.numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        onnx.numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
    ])  # fmt: skip
    g.node.extend([
        onnx.helper.make_node("ReduceMax", [name], ["input_max"], keepdims=0),
        onnx.helper.make_node("Greater", ["input_max", "ten"], ["large"]),
        onnx.helper.make_node("Where", ["large", "half", "zero"], ["planted"]),
        onnx.helper.make_node("Add", [f"{out}_unplanted", "planted"], [out]),
    ])  # fmt: skip
    check_lowering(native, model, planted, feeds[:1])  # the first input alone does not show it
    with pytest.raises(ValueError, match="on evaluation input 2 of 2"):
        check_lowering(native, model, planted, feeds)
