"""Issue 37 item 3: each deployed target checks the whole graph against the ops its converter loads.

The lists are read from each converter's installed package (targets/loadable_ops.py, written by
scripts/loadable_ops.py); a node of another op is refused before the file is written, in one line naming
the op, its node and (dynamo exports) the model's source line, or that it is unknown. No converter runs here.
"""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import deform_onnx
from deform_onnx.exporting.frozen import user_frame
from deform_onnx.targets import resolve_target
from deform_onnx.targets.loadable import loadable_ops
from deform_onnx.targets.rules import violations


def _graph(op: str, opset: int, constant_input: bool = False, **attrs):
    """One ``op`` node reading the graph input ``v`` (or a constant) and a second constant input if it takes one."""
    inputs = ["c" if constant_input else "v"]
    inits = [numpy_helper.from_array(np.ones(4, np.float32), "c")]
    if op == "Pad":
        inputs.append("pads")
        inits.append(numpy_helper.from_array(np.array([1, 1], np.int64), "pads"))
    node = helper.make_node(op, inputs, ["y"], name=f"my_{op}", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("v", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


#: (target, its rule, an ONNX op its converter has no converter for).
LACKING = [
    ("tflite", "onnx2tf loadable ops", "Swish"),
    ("tvm", "tvm loadable ops", "Celu"),
    ("onnx2torch", "onnx2torch loadable ops", "Mish"),
    ("mnn", "mnn loadable ops", "IsNaN"),  # MNN's converter rejects IsNaN (measured; rule "no IsNaN" too)
]


@pytest.mark.parametrize(("target", "rule", "op"), LACKING)
def test_an_op_the_converter_lacks_is_named(target, rule, op):
    assert rule in resolve_target(target).rules
    version, ops, _ = loadable_ops(target)
    assert op not in ops and {"Conv", "Gather", "Reshape"} <= ops
    found = violations(_graph(op, 24 if op == "Swish" else 18), (rule,))
    assert len(found) == 1 and version in found[0], found
    assert f"{op} (1 node(s), first my_{op}, source line unknown: the file records none" in found[0], found


def test_onnx2tf_list_skips_nodes_onnxsim_folds():
    assert violations(_graph("Swish", 24, constant_input=True), ("onnx2tf loadable ops",)) == []


def test_onnx2torch_converts_by_op_version():
    """onnx2torch 1.5.15 has Pad converters for versions 2, 11 and 13: Pad-18 (opset 18) is refused."""
    assert violations(_graph("Pad", 17), ("onnx2torch loadable ops",)) == []
    found = violations(_graph("Pad", 18), ("onnx2torch loadable ops",))
    assert len(found) == 1 and found[0].startswith("onnx2torch loadable ops: Pad-18 "), found


def test_onnx2torch_native_names_the_onnx2torch_target_for_an_op_version_it_lacks():
    """Target onnx2torch-native (opset 19) refused a model's own Reshape-19 / Split-18 naming only --force (a file
    that does not load); the line names target onnx2torch, whose opset 17 onnx2torch converts (docs/targets.md)."""
    found = violations(_graph("Pad", 19), ("onnx2torch-native loadable ops",))
    assert len(found) == 1 and found[0].startswith("onnx2torch-native loadable ops: Pad-19 "), found
    assert found[0].endswith("use target onnx2torch (gather at opset 17), whose ops onnx2torch converts"), found
    (mish,) = violations(_graph("Mish", 19), ("onnx2torch-native loadable ops",))
    assert "use target onnx2torch" not in mish  # no version of Mish converts: the target would not help


class InPlace(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y[:, 0] = x[:, 1] + 1  # an in-place assignment: ScatterElements, which onnx2torch has no converter for
        return y


def test_onnx2torch_refuses_a_model_op_before_writing(tmp_path):
    """The refusal names the op and the model's line: onnx's version converter (18 -> 17) and the IR stamp
    (IR 8 at opset 17) drop the nodes' metadata, so the check reads it before them (and convert_down keeps it)."""
    path = tmp_path / "m.onnx"
    with pytest.raises(ValueError, match=r"onnx2torch loadable ops: Scatter(Elements|ND) .*onnx2torch 1\.5") as info:
        deform_onnx.export(InPlace(), (torch.randn(1, 2, 4, 4),), path, target="onnx2torch", verify_runtimes=())
    assert "\n" not in str(info.value) and not path.exists()
    lines, first = inspect.getsourcelines(InPlace.forward)
    line = first + next(i for i, text in enumerate(lines) if "y[:, 0] =" in text)
    assert f"{os.path.basename(__file__)}:{line} in forward: y[:, 0] = x[:, 1] + 1" in str(info.value), info.value


def test_source_line_is_the_models_frame_not_torchs():
    """torch.fx's stack trace ends in torch's own code for a functional call: the model's frame is named."""
    torch_file = os.path.join(os.path.dirname(torch.__file__), "nn", "functional.py")
    user = '  File "/home/u/vxm/layers.py", line 40, in forward\n    return nnf.grid_sample(src, new_locs)\n'
    inner = f'  File "{torch_file}", line 5000, in grid_sample\n    return torch.grid_sampler(input, grid)\n'
    assert user_frame(user + inner) == "/home/u/vxm/layers.py:40 in forward: return nnf.grid_sample(src, new_locs)"
    assert user_frame(inner).endswith("functional.py:5000 in grid_sample: return torch.grid_sampler(input, grid)")
    assert user_frame("") == ""
