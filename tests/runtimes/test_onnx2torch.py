"""``deform_onnx.onnx2torch.register()``: onnx2torch converts ONNX ``DeformConv`` to ``torchvision.ops.deform_conv2d``.

One hand-built opset-19 file holds four ``DeformConv`` nodes (with and without mask and bias, groups and offset
groups, stride 2 with dilation 2 and asymmetric pads); the onnx2torch runner (which calls ``register()`` for a file
with ``DeformConv``) converts and runs it in the onnx2torch venv, and every output is compared with torchvision
on the same tensors. Target ``onnx2torch-native`` writes the native form and its export runs in onnx2torch; the
same file without ``register()`` is refused by onnx2torch (the converter is what makes it load).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
import torchvision
from onnx import TensorProto, helper, numpy_helper

import deform_onnx
from deform_onnx import onnx2torch as o2t_api
from deform_onnx.runtimes.deployed import family, interpreter, run_file
from deform_onnx.targets.loadable import unloadable

needs_registry = pytest.mark.skipif(
    os.environ.get("DEFORM_ONNX_NO_DEPLOYED_RUNTIMES") == "1", reason="DEFORM_ONNX_NO_DEPLOYED_RUNTIMES=1"
)

_G = torch.Generator().manual_seed(0)
X = torch.randn(1, 4, 7, 7, generator=_G)
#: name -> (W, B or None, attributes, offset and mask spatial size, with mask)
CASES = {
    "masked": (torch.randn(6, 4, 3, 3, generator=_G), torch.randn(6, generator=_G), {"pads": [1, 1, 1, 1]}, (7, 7), True),
    "plain": (torch.randn(6, 4, 3, 3, generator=_G), None, {}, (5, 5), False),
    "grouped": (torch.randn(6, 2, 3, 3, generator=_G), None, {"pads": [1, 1, 1, 1], "group": 2, "offset_group": 2},
                (7, 7), True),
    # pads [top, left, bottom, right]: output 3x2
    "strided": (torch.randn(6, 4, 3, 3, generator=_G), torch.randn(6, generator=_G),
                {"pads": [1, 0, 2, 1], "strides": [2, 2], "dilations": [2, 2]}, (3, 2), True),
}  # fmt: skip


def _offset_groups(name: str) -> int:
    return CASES[name][2].get("offset_group", 1)


def _feeds() -> list[torch.Tensor]:
    """x, then each case's offset (``randn * 2``) and mask (``rand``), in the graph inputs' order."""
    g = torch.Generator().manual_seed(1)
    feeds = [X]
    for name, (_, _, _, (h, w), masked) in CASES.items():
        og = _offset_groups(name)
        feeds.append(torch.randn(1, og * 18, h, w, generator=g) * 2)
        if masked:
            feeds.append(torch.rand(1, og * 9, h, w, generator=g))
    return feeds


def _model(path: Path) -> Path:
    """The four ``DeformConv`` nodes at opset 19 (weights and biases initializers; grouped: ``B`` given empty)."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 7, 7])]
    nodes, inits, outputs = [], [], []
    for name, (weight, bias, attrs, (h, w), masked) in CASES.items():
        og = _offset_groups(name)
        inputs.append(helper.make_tensor_value_info(f"{name}_offset", TensorProto.FLOAT, [1, og * 18, h, w]))
        inits.append(numpy_helper.from_array(weight.numpy(), f"{name}_W"))
        names = ["x", f"{name}_W", f"{name}_offset"]
        if bias is not None:
            inits.append(numpy_helper.from_array(bias.numpy(), f"{name}_B"))
        names.append(f"{name}_B" if bias is not None else "")
        if masked:
            inputs.append(helper.make_tensor_value_info(f"{name}_mask", TensorProto.FLOAT, [1, og * 9, h, w]))
            names.append(f"{name}_mask")
        while names[-1] == "":
            names.pop()
        nodes.append(helper.make_node("DeformConv", names, [name], name=name, kernel_shape=[3, 3], **attrs))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 6, h, w]))
    graph = helper.make_graph(nodes, "deform_convs", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


class Reference(torch.nn.Module):
    """torchvision's ``deform_conv2d`` on the same tensors: the cases' ONNX attributes written as its arguments.

    The asymmetric pads (top 1, left 0, bottom 2, right 1) as ``padding=(1, 0)`` with the extra bottom row and right
    column padded first: not the converter's way (it pads all four sides and passes ``padding=0``).
    """

    def forward(self, x, *feeds):  # type: ignore[no-untyped-def]
        it, outs = iter(feeds), []
        for weight, bias, attrs, _, masked in CASES.values():
            offset = next(it)
            mask = next(it) if masked else None
            pads = attrs.get("pads", [0, 0, 0, 0])
            inp = F.pad(x, (0, pads[3] - pads[1], 0, pads[2] - pads[0]))
            outs.append(
                torchvision.ops.deform_conv2d(
                    inp,
                    offset,
                    weight,
                    bias,
                    attrs.get("strides", [1, 1]),
                    pads[:2],
                    attrs.get("dilations", [1, 1]),
                    mask,
                )
            )
        return tuple(outs)


@pytest.fixture(scope="module")
def deform_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _model(tmp_path_factory.mktemp("o2t") / "deform_convs.onnx")


@needs_registry
def test_converter_matches_torchvision(deform_file: Path) -> None:
    """Every case's output from onnx2torch (with ``register()``) matches torchvision on the same tensors."""
    (row,) = deform_onnx.check_runtimes(deform_file, ["onnx2torch"], model=Reference(), args=tuple(_feeds()), repeats=1)
    assert row.error is None, row.error
    assert "deform_onnx.onnx2torch.register()" in (row.version or ""), row.version
    assert [n for n, _ in row.outputs] == list(CASES)
    assert row.ok, row.failure


@needs_registry
def test_without_register_onnx2torch_refuses_deform_conv(deform_file: Path, tmp_path: Path) -> None:
    """The planted fault: the runner without ``register()`` (``extension=False``) cannot convert the file."""
    fam = dataclasses.replace(family("onnx2torch"), extension=False)
    feeds = dict(zip(["x", *(i.name for i in onnx.load(deform_file).graph.input[1:])], (t.numpy() for t in _feeds())))
    run = run_file(fam, interpreter(fam), deform_file, feeds, [], tmp_path, repeats=1)
    assert run.error is not None and "DeformConv" in run.error, run.error


def test_loadable_rule_accepts_deform_conv_only_with_register(deform_file: Path) -> None:
    """Target ``onnx2torch`` names ``DeformConv-19`` as unloadable; target ``onnx2torch-native``'s rule loads it."""
    model = onnx.load(deform_file)
    (line,) = unloadable(model, "onnx2torch")
    assert line.startswith("DeformConv (4 node(s)"), line
    assert unloadable(model, "onnx2torch-native") == []


def test_register_without_onnx2torch_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnx2torch", None)
    with pytest.raises(RuntimeError, match=r"^deform_onnx.onnx2torch.register\(\) needs onnx2torch: pip install"):
        o2t_api.register()


@needs_registry
def test_target_onnx2torch_native_runs_there(tmp_path: Path) -> None:
    """``export(target="onnx2torch-native")``: a DCNv2 layer as one ``DeformConv`` node at opset 19, run in
    onnx2torch (with ``register()``) against PyTorch before it is written."""

    class DCN(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.off = torch.nn.Conv2d(4, 27, 3, padding=1)
            self.dcn = torchvision.ops.DeformConv2d(4, 8, 3, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            o = self.off(x)
            return self.dcn(x, o[:, :18], torch.sigmoid(o[:, 18:]))

    path = tmp_path / "dcn.onnx"
    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    report = deform_onnx.export(DCN().eval(), (x,), path, input_names=["x"], target="onnx2torch-native")
    assert report.runtimes and report.runtimes[0].startswith("onnx2torch "), report.runtimes
    assert "deform_onnx.onnx2torch.register()" in report.runtimes[0], report.runtimes
    model = onnx.load(path)
    assert [n.op_type for n in model.graph.node].count("DeformConv") == 1
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 19


def test_a_converter_key_error_is_named_as_such(tmp_path: Path) -> None:
    """onnx2torch reads a Conv's bias from the initializers only; the TorchScript exporter writes two equal biases
    as one initializer and an Identity (the CLI's gather@11 row of an mmdet-style DCN), and the runtime's row said
    only "'layer.2.conv2.conv_offset.bias'" (a KeyError's text). The runners' ``first_line`` names the KeyError now
    (run here as a runner that raises one, in this interpreter: the same code, without a venv's start-up)."""
    from deform_onnx.runtimes.deployed import Family, runners
    from deform_onnx.runtimes.deployed.families import run_meta

    np.savez(tmp_path / "feeds.npz", x=np.zeros(1, np.float32))
    script = (
        runners._HEAD + "try:\n    {}['conv.bias']\nexcept Exception as exc:\n    done('1', error=first_line(exc))\n"
    )
    meta = {"feeds": str(tmp_path / "feeds.npz"), "outputs": ["y"], "out": str(tmp_path / "out.npz")}
    run = run_meta(Family("key-error-test", "key", script), Path(sys.executable), meta, tmp_path / "out", timeout=60)
    assert run.error == "KeyError: 'conv.bias'", run.error
