"""A ``.pte``'s memory plan sized from the declared ``Dim`` ranges, not from ranges a backend retrace narrowed.

ExecuTorch plans each tensor of a dynamic program at its upper bound: the bound of its symbolic size over
the ranges its ``ShapeEnv`` holds for the input symbols (``var_to_range``; ExecuTorch's
``ConstraintBasedSymShapeEvalPass``). Those ranges are the declared ``Dim`` ranges after ``torch.export``,
but the passes after it retrace the program with fake tensors on the same ``ShapeEnv``, and PyTorch's fake
convolution (torch 2.14.1, ``fake_impls.conv``) asks ``torch._C._select_conv_backend`` which CPU kernel eager
would run, for the memory format of its fake output. For a float32 ``conv2d`` with one image, one group and a
kernel of at most 3x3 that choice tests ``N*C*H*W > 20480`` (oneDNN or the native kernel) on the symbolic
sizes: the test is decided at the example's size and kept as a guard, which narrows the input's range. Measured
with executorch 1.5.1 (XNNPACK's ``FuseBatchNormPass`` retraces each delegate; ``to_executorch`` retraces
again): a 16-channel ``Conv2d`` on ``[1, 16, H, 32]`` with ``Dim("H", min=16, max=128)`` and a 32-row example
leaves ``16*32*H <= 20480``, so H planned up to 40; the bundled example net (its 16-channel plain block at a
quarter of the input size, a 128x128 example) up to 160 of a declared 256. No deform_onnx lowering takes part.

The guard is about which eager kernel a fake tensor imitates, not about the program: :func:`declared_bounds`
gives ``to_executorch`` a symbolic-shape pass that puts the declared ranges back before it sizes the tensors.
The file is still run at every declared bound before it is written
(:func:`~deform_onnx.formats.torch_export.prove`), and a plan that holds less is still refused there.
"""

from __future__ import annotations

import torch

__all__ = ["declared_bounds", "restore_ranges"]


def _shape_envs(graph_module: torch.fx.GraphModule) -> list:
    """The shape environments behind the symbolic sizes of ``graph_module``'s values (each once)."""
    envs: dict[int, object] = {}
    for node in graph_module.graph.nodes:
        value = node.meta.get("val")
        for t in value if isinstance(value, list | tuple) else (value,):
            if isinstance(t, torch.Tensor):
                for d in t.shape:
                    if isinstance(d, torch.SymInt):
                        env = d.node.shape_env
                        envs.setdefault(id(env), env)
    return list(envs.values())


def restore_ranges(graph_module: torch.fx.GraphModule, ranges: dict) -> int:
    """Set each input symbol's range in ``graph_module``'s shape environments back to ``ranges``; how many changed.

    ``ranges``: an exported program's ``range_constraints`` (symbol -> ``ValueRanges``: the declared ``Dim``
    ranges). Symbols an environment does not hold are left alone.
    """
    changed = 0
    for env in _shape_envs(graph_module):
        for symbol, declared in ranges.items():
            held = env.var_to_range.get(symbol)
            if held is not None and held != declared:
                env.var_to_range[symbol] = declared
                changed += 1
    return changed


def declared_bounds(ranges: dict):
    """ExecuTorch's ``ConstraintBasedSymShapeEvalPass`` run over ``ranges`` (``ExecutorchBackendConfig``'s
    ``sym_shape_eval_pass``): each tensor is planned at its bound over the declared ranges (:func:`restore_ranges`).
    """
    from executorch.exir.passes.sym_shape_eval_pass import ConstraintBasedSymShapeEvalPass

    class AtDeclaredBounds(ConstraintBasedSymShapeEvalPass):
        def call(self, graph_module):
            restore_ranges(graph_module, ranges)
            return super().call(graph_module)

    return AtDeclaredBounds()
