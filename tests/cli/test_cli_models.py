"""``deform-onnx export`` on models as users ship them, real inputs and other dtypes.

TorchScript archives (``torch.jit.save`` of a traced and a scripted model), a
``torch.export`` archive (``.pt2``), ``--inputs file.npz``, several named
``--input-shape`` inputs, ``--dtype float16/float64``, and ``--verbose``. Each
written file is run in ONNX Runtime and compared with the PyTorch model on the
same tensors.
"""

from __future__ import annotations

import textwrap
import warnings

import numpy as np
import onnxruntime as ort
import pytest
import torch
from typer.testing import CliRunner

from deform_onnx.cli import app
from util import assert_close

runner = CliRunner()

MODELS = textwrap.dedent(
    """
    import torch, torchvision

    class Net(torch.nn.Module):
        '''Offsets and mask predicted from the input by a Conv2d: one image input.'''

        def __init__(self):
            super().__init__()
            gen = torch.Generator().manual_seed(0)
            self.predict = torch.nn.Conv2d(3, 27, 3, padding=1)
            self.dcn = torchvision.ops.DeformConv2d(3, 8, 3, padding=1)
            with torch.no_grad():
                for p in self.parameters():
                    p.copy_(torch.randn(p.shape, generator=gen) / 3)

        def forward(self, x):
            p = self.predict(x)
            return self.dcn(x, p[:, :18], torch.sigmoid(p[:, 18:]))

    class Layer(torch.nn.Module):
        '''One DCNv2 layer taking x, offset and mask as inputs (no Conv2d: runs in float64 on ORT).'''

        def __init__(self):
            super().__init__()
            gen = torch.Generator().manual_seed(1)
            self.dcn = torchvision.ops.DeformConv2d(4, 6, 3, padding=1)
            with torch.no_grad():
                for p in self.parameters():
                    p.copy_(torch.randn(p.shape, generator=gen) / 3)

        def forward(self, x, offset, mask):
            return self.dcn(x, offset, mask)
    """
)


def invoke(*args):
    return runner.invoke(app, ["export", *(str(a) for a in args)])


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """A folder with models.py, traced.pt, scripted.pt, program.pt2 and image.npz (one 1x3x12x10 input)."""
    import importlib.util

    root = tmp_path_factory.mktemp("shipped")
    (root / "models.py").write_text(MODELS)
    spec = importlib.util.spec_from_file_location("shipped_models", root / "models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    net = module.Net().eval()
    x = torch.randn(1, 3, 12, 10, generator=torch.Generator().manual_seed(2)) * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.save(torch.jit.trace(net, (x,)), str(root / "traced.pt"))
        torch.jit.save(torch.jit.script(net), str(root / "scripted.pt"))
        torch.export.save(torch.export.export(net, (x,)), str(root / "program.pt2"))
    np.savez(root / "image.npz", image=x.numpy())
    with torch.no_grad():
        want = net(x).numpy()
    return root, module, x, want


def _ort(path, feeds) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in feeds.items()})


@pytest.mark.parametrize(
    "archive,exporter", [("traced.pt", "torchscript"), ("scripted.pt", "torchscript"), ("program.pt2", "dynamo")]
)
def test_archive_with_npz_inputs(shipped, monkeypatch, archive, exporter):
    root, _, x, want = shipped
    monkeypatch.chdir(root)
    out = root / f"{archive}.onnx"
    result = invoke(
        archive, "--inputs", "image.npz", "--method", "grid_sample", "--opset", "17", "-o", out, "--repeat", "1"
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if "grid_sample" in line)
    assert f" {exporter} " in row and "(fallback)" not in row, row  # a ScriptModule goes to TorchScript directly
    assert "image 1x3x12x10 float32" in result.stdout
    (got,) = _ort(out, {"image": x})  # the npz key is the graph input's name
    assert_close(got, want, what=archive)


def test_several_named_inputs_in_float64(shipped, monkeypatch):
    root, module, _, _ = shipped
    monkeypatch.chdir(root)
    out = root / "layer64.onnx"
    result = invoke(
        "models.py:Layer",
        "-s",
        "x=1,4,7,6",
        "-s",
        "offset=1,18,7,6",
        "-s",
        "mask=1x9x7x6",
        "--dtype",
        "float64",
        "--method",
        "gather",
        "--opset",
        "16",
        "-o",
        out,
        "--repeat",
        "1",
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "|ort - torch| <= 1e-08 + 1e-08*|torch|" in " ".join(result.stdout.split())  # export()'s float64 rule
    layer = module.Layer().double().eval()
    gen = torch.Generator().manual_seed(5)
    feeds = {
        "x": torch.randn(1, 4, 7, 6, generator=gen, dtype=torch.float64),
        "offset": torch.randn(1, 18, 7, 6, generator=gen, dtype=torch.float64) * 2,
        "mask": torch.rand(1, 9, 7, 6, generator=gen, dtype=torch.float64),
    }
    (got,) = _ort(out, feeds)
    assert got.dtype == np.float64
    with torch.no_grad():
        want = layer(*feeds.values()).numpy()
    assert_close(got, want, atol=1e-10, what="float64 layer")


def test_dtype_float16_and_per_input_dtype(shipped, monkeypatch):
    root, module, _, _ = shipped
    monkeypatch.chdir(root)
    out = root / "net16.onnx"
    result = invoke(
        "models.py:Net",
        "-s",
        "1,3,12,10:float16",
        "--dtype",
        "float16",
        "--method",
        "native",
        "--opset",
        "20",
        "-o",
        out,
        "--repeat",
        "1",
    )
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "0.01 + 0.01*|torch|" in result.stdout
    from deform_onnx.cli.example import load_photo

    # The input the command verified on (the photo for N,3,H,W), run again here independently.
    photo = load_photo((12, 10)).half()
    net = module.Net().half().eval()
    (got,) = _ort(out, {"input": photo})
    with torch.no_grad():
        want = net(photo).float().numpy()
    assert got.dtype == np.float16
    # ONNX Runtime float16 against PyTorch float16, both rounding (outputs up to 4.0): measured 1.2e-2 abs,
    # 5.6e-3 of (1 + |want|), about one float16 ulp at 4 (3.9e-3) plus its accumulation
    assert np.all(np.abs(got.astype(np.float32) - want) <= 1e-2 * (1 + np.abs(want)))


def test_verbose_shows_each_exporter_and_where_it_stopped(shipped, monkeypatch):
    """torch.export cannot capture a ScriptModule and TorchScript stops at opset 20: dynamo at 21 fails.

    --verbose says which exporter stopped where; without it, one line and a hint.
    """
    root, _, _, _ = shipped
    monkeypatch.chdir(root)
    args = [
        "scripted.pt",
        "--inputs",
        "image.npz",
        "--method",
        "native",
        "--opset",
        "21",
        "--exporter",
        "dynamo",
        "-o",
        "forced",
    ]
    quiet = invoke(*args)
    assert quiet.exit_code == 1, quiet.output
    assert "run again with --verbose" in quiet.stderr
    loud = invoke(*args, "--verbose")
    assert loud.exit_code == 1, loud.output
    assert "native@21 dynamo exporter: stopped at torch.export" in loud.stderr and "ScriptModule" in loud.stderr
    assert list((root / "forced").iterdir()) == []


def test_torchscript_symbolic_error_is_one_line_with_the_ir_in_a_note(capfd):
    """Raw register(): a method the opset cannot hold fails with one line; torch's whole-graph dump is gone."""
    import io

    import torchvision

    import deform_onnx

    layer = torchvision.ops.DeformConv2d(2, 2, 3, padding=1).eval()
    x, offset = torch.randn(1, 2, 5, 5), torch.randn(1, 18, 5, 5)
    deform_onnx.register("native")
    try:
        with pytest.raises(ValueError, match=r"needs opset >= 19 but opset 17") as info, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(layer, (x, offset), io.BytesIO(), dynamo=False, opset_version=17)
    finally:
        deform_onnx.unregister()
    captured = capfd.readouterr()
    assert "Torch IR graph at exception" not in captured.out + captured.err
    assert "\n" not in str(info.value)
    (note,) = info.value.__notes__
    assert note.startswith("TorchScript IR around the deformable op:") and "torchvision::deform_conv2d" in note


def test_dynamo_native_at_11_suggests_only_what_works_there():
    from deform_onnx import resolve_method

    with pytest.raises(ValueError, match=r"use one of: gather$"):
        resolve_method("native", 11)  # TorchScript reaches 11: gather works there
    with pytest.raises(ValueError, match=r"raise the opset to 19 or more$"):
        resolve_method("native", 11, path_min_opset=14)  # dynamo: nothing works at 11
    with pytest.raises(ValueError, match=r"use one of: gather$"):
        resolve_method("native", 14, path_min_opset=14)


def test_api_dynamo_native_at_11_names_no_unworkable_method(shipped):
    """Suggestions name only methods that work on the path that will run: without the fallback the
    dynamo path cannot reach 11 at all (no gather suggestion); with it (default) gather at 11 works."""
    import deform_onnx

    _, module, x, _ = shipped
    with pytest.raises(ValueError) as info:
        deform_onnx.export(module.Net().eval(), (x,), "unused.onnx", opset_version=11, method="native", dynamo=True,
                           fallback=False)  # fmt: skip
    assert "gather" not in str(info.value) and "19" in str(info.value)
    with pytest.raises(ValueError) as info:
        deform_onnx.export(module.Net().eval(), (x,), "unused.onnx", opset_version=11, method="native", dynamo=True)
    assert "gather" in str(info.value) and "19" in str(info.value)


def test_verbose_detail_carries_the_ir_note(capsys):
    """What --verbose prints for a TorchScript symbolic error: the stage, the message and the IR note."""
    from types import SimpleNamespace

    from deform_onnx.cli._attempts import print_attempts, stage_and_detail

    exc = ValueError("method 'native' needs opset >= 19 but opset 17 was requested")
    exc.add_note("TorchScript IR around the deformable op:\n%y = torchvision::deform_conv2d(%x, %w, %offset)")
    outcome, detail = stage_and_detail(exc)
    row = SimpleNamespace(job=SimpleNamespace(method="native", opset=17), attempts=[("torchscript", outcome, detail)])
    print_attempts([row])
    err = capsys.readouterr().err
    assert "native@17 torchscript exporter: stopped at the argument and lowering checks" in err
    assert "needs opset >= 19" in err and "torchvision::deform_conv2d(%x, %w, %offset)" in err
