"""The runtime targets other than ``onnxruntime`` (see :mod:`.onnxruntime`), one entry each.

Sources: "measured here" rows ran on a build of that runtime on this project's
machine (tests, or the issue-12 runtime matrix on the bundled example); other
rows are read from the runtime's documentation, source or issue tracker, named
in ``source``.

``F.grid_sample`` beyond 4-D bilinear/nearest (``Target.grid_sample``): only
the runtimes measured to run a form correctly get it as a GridSample node;
every other target gets the gather form for 5-D (TensorRT's GridSample is 4-D
only; OpenVINO rejects 5-D, openvinotoolkit/openvino#37770) and for bicubic
(TensorRT's cubic is wrong at opset >= 20: onnx-tensorrt PR #1060,
NVIDIA/TensorRT#4646; ONNX Runtime's CoreML provider and onnx2tf have none).
"""

from __future__ import annotations

from .base import Fault, Target

_GRIDSAMPLE_20 = Fault(
    what="grid_sample at opset >= 20 (GridSample-20)",
    why="GridSample-20 writes mode='linear'; onnx-tensorrt reads only 'bilinear' and silently samples nearest "
    "(onnx-tensorrt PR #1060, NVIDIA/TensorRT #4646)",
    hits=lambda method, opset: method == "grid_sample" and opset >= 20,
    fix="use method gather, or grid_sample at opset 16 to 19",
    op="deform_conv2d",
)
_WEBGPU_GRIDSAMPLE_20 = Fault(
    what="grid_sample at opset >= 20 (GridSample-20)",
    why="ONNX Runtime Web's WebGPU GridSample knows modes bilinear/nearest/bicubic, not GridSample-20's 'linear' "
    "(onnxruntime-web 1.24.3, lib/wasm/jsep/webgpu/ops/grid-sample.ts)",
    hits=lambda method, opset: method == "grid_sample" and opset >= 20,
    fix="use grid_sample at opset 16 to 19, or gather",
    op="deform_conv2d",
)


def _no_kernel(runtime: str, source: str, fix: str = "use method grid_sample or gather") -> Fault:
    return Fault(
        what="native (DeformConv)",
        why=f"{runtime} has no DeformConv kernel ({source})",
        hits=lambda method, opset: method == "native",
        fix=fix,
        op="deform_conv2d",
    )


TABLE: tuple[Target, ...] = (
    Target(
        name="openvino",
        runtime="OpenVINO 2023.3 to 2026.4 (plain ONNX frontend, or tools that read the file without an extension)",
        method="grid_sample",
        opset=17,
        reason="plain OpenVINO rejects DeformConv; grid_sample@17 and gather@11 run within 2.1e-5 on 2023.3-2026.4",
        source="measured here (tests/test_openvino.py; scripts/runtime_matrix.py); GridSample cubic within 5.3e-6, "
        "5-D GridSample rejected (openvinotoolkit/openvino#37770; tests/test_grid_sample_5d_cubic.py)",
        options=("no DeformConv",),
        grid_sample=("cubic",),
        faults=(
            Fault(
                what="native (DeformConv)",
                why="OpenVINO 2026.4 rejects DeformConv, and newer frontends map it with "
                "bilinear_interpolation_pad=false (off by 2-6 at borders, measured here)",
                hits=lambda method, opset: method == "native",
                fix="use target openvino-extension (native with deform_onnx.openvino.extension()), or grid_sample",
                op="deform_conv2d",
            ),
        ),
        status="measured here",
    ),
    Target(
        name="openvino-extension",
        runtime="OpenVINO >= 2025.0 with deform_onnx.openvino.extension()",
        method="native",
        opset=19,
        reason="the extension maps DeformConv to DeformableConvolution-8 with bilinear_interpolation_pad "
        "(torchvision's border rule)",
        source="measured here (tests/test_openvino.py, cases c04 and c12)",
        status="measured here",
        grid_sample=("cubic",),  # the same frontend as target openvino for GridSample
    ),
    Target(
        name="tensorrt",
        runtime="TensorRT >= 10.1 (onnx-tensorrt parser)",
        method="gather",
        opset=17,
        reason="GridSample results reported wrong since TensorRT 10.14 (NVIDIA/TensorRT #4813, pytorch/TensorRT "
        "#4074): gather unless asked; native needs the ModulatedDeformConv2d plugin",
        source="read: issues named; graph rules tested (tests/test_targets.py, tests/test_graph_safety.py)",
        options=("no GridSample-20", "integer-only shape tensors"),
        faults=(_GRIDSAMPLE_20,),
    ),
    Target(
        name="tensorrt-rtx",
        runtime="TensorRT-RTX (onnx-tensorrt parser, no plugins)",
        method="gather",
        opset=17,
        reason="no deformable-convolution plugin; the parser's GridSample faults as for tensorrt",
        source="read: onnx-tensorrt PR #1060, NVIDIA/TensorRT #4646, #4813",
        options=("no GridSample-20", "no DeformConv", "integer-only shape tensors"),
        faults=(_GRIDSAMPLE_20, _no_kernel("TensorRT-RTX", "no deformable plugin")),
    ),
    Target(
        name="directml",
        runtime="ONNX Runtime DirectML execution provider",
        method="grid_sample",
        opset=17,
        reason="every op of grid_sample@17 has a DirectML kernel; DeformConv has none (it would run on the CPU "
        "provider with copies per layer)",
        source="read: ONNX Runtime docs/OperatorKernels.md (DmlExecutionProvider); op list tested "
        "(tests/test_graph_safety.py)",
        options=("no DeformConv",),
        faults=(_no_kernel("DirectML", "OperatorKernels.md"),),
    ),
    Target(
        name="webgpu",
        runtime="ONNX Runtime WebGPU execution provider (onnxruntime-web, native WebGPU EP)",
        method="grid_sample",
        opset=17,
        reason="GridSample kernel (4-D, bilinear) but no DeformConv; GridSample-20's 'linear' is not a mode it knows",
        source="read: onnxruntime-web 1.24.3 docs/webgpu-operators.md and ops/grid-sample.ts",
        options=("no DeformConv", "no GridSample-20"),
        faults=(_WEBGPU_GRIDSAMPLE_20, _no_kernel("WebGPU", "webgpu-operators.md")),
    ),
    Target(
        name="coreml",
        runtime="ONNX Runtime CoreML execution provider",
        method="gather",
        opset=17,
        reason="no DeformConv kernel; Gather/Clip/MatMul are plain tensor ops (nodes CoreML cannot take run on "
        "ONNX Runtime's CPU provider)",
        source="read: ONNX Runtime CoreML EP operator list; not run here (no Apple machine)",
        options=("no DeformConv",),
        faults=(_no_kernel("ONNX Runtime's CoreML provider", "its operator list (read)"),),
    ),
    Target(
        name="tflite",
        runtime="TFLite / LiteRT through onnx2tf (which runs onnxsim 0.4.36 first)",
        method="gather",
        opset=13,
        reason="gather, each offset group's indices computed apart: the bundled example and cases c04, c12, c25 "
        "run on LiteRT; with one index computation for all groups onnx2tf misplaces the group axis (off by 1.8), "
        "and the grid_sample form does not convert",
        source="measured here (scripts/runtime_matrix.py: onnx2tf 1.29 -> LiteRT 2.1; scripts/repro/tflite_forms.py; "
        "scripts/op_matrix.py: the 5-D and bicubic gather forms and the fused MSDA op run, Deformable DETR's "
        "per-level MSDA core converted 1.0 off at its stack(dim=-2).flatten(-2), right with repair "
        "'stack flatten as Concat': scripts/repro/onnx2tf_stack_flatten.py)",
        options=("no IsNaN", "static shapes"),
        faults=(
            _no_kernel(
                "onnx2tf",
                "not run here: the matrix runs the standard-op forms",
                fix="use method gather (the grid_sample form does not convert)",
            ),
        ),
        status="measured here",
        forms=("offset groups apart",),
        repairs=("stack flatten as Concat",),
    ),
    Target(
        name="ncnn",
        runtime="ncnn through pnnx",
        method="grid_sample",
        opset=17,
        reason="grid_sample without the NaN guard (pnnx's torch.eq has no ncnn layer), one GridSample per offset "
        "group (ncnn has no batch axis), static shapes up to 512 px a side; the gather form's 6-D values fit no "
        "ncnn blob. A NaN offset then gives runtime-defined values. GridSample cubic, and 5-D GridSample-20 "
        "(opset_version=20), run on ncnn; their gather forms do not load (torch.eq, torch.unbind)",
        source="measured here (scripts/runtime_matrix.py, scripts/op_matrix.py: pnnx 20261020 -> ncnn 1.0.20261020 "
        "Python bindings; cubic and 5-D within 5.6e-6 for every padding and align_corners; "
        "scripts/repro/ncnn_rank5.py)",
        options=("no NaN guard", "ncnn blobs", "ncnn loadable ops", "GridSample batch 1", "static shapes"),
        # measured here (case c38, voxelmorph): ncnn does not load ScatterElements / GatherND
        repairs=("scatter as Concat", "index list as Concat"),
        faults=(_no_kernel("ncnn", "not run here: the matrix runs the standard-op forms"),),
        status="measured here",
        forms=("no NaN guard", "batch 1"),
        grid_sample=("5-D", "cubic"),
        # measured here (scripts/op_matrix.py): GridSample-20 5-D within 4.2e-7; the gather form at 17 does not load
        needs=(
            (
                "5-D grid_sample",
                20,
                "GridSample-20 loads on ncnn; the gather form of lower opsets does not: no ncnn layer for torch.unbind",
            ),
        ),
    ),
    Target(
        name="mnn",
        runtime="MNN 3.6 (MNNConvert + runtime)",
        method="grid_sample",
        opset=17,
        reason="grid_sample@17 and gather@11 (NaN guard Equal(g, g), no IsNaN) run within 2.1e-5 on the bundled "
        "example and cases c04, c12, c25; F.grid_sample with padding reflection takes the gather form (MNN's "
        "GridSample reflection is off by 2.1 to 3.8, its gather form within 1.2e-7), bicubic too (GridSample cubic off "
        "by 0.66 to 0.84); 5-D GridSample-20 (opset_version=20) runs within 1.3e-6",
        source="measured here (scripts/runtime_matrix.py, scripts/op_matrix.py: MNN 3.6.1, MNNConvert + runtime)",
        options=("no IsNaN", "no GridSample reflection"),
        forms=("no GridSample reflection",),
        grid_sample=("5-D",),  # GridSample-20 5-D within 1.3e-6 (opset_version=20); its GridSample cubic is off by 0.8
        faults=(_no_kernel("MNN", "not run here: the matrix runs the standard-op forms"),),
        status="measured here",
    ),
    Target(
        name="tvm",
        runtime="Apache TVM 0.27 (relax ONNX frontend, llvm)",
        method="grid_sample",
        opset=17,
        reason="gather@11 and grid_sample@17 ran within 2.1e-5; GridSample cubic and 5-D GridSample-20 "
        "(opset_version=20) within 4.8e-7 for every padding and align_corners",
        source="measured here (scripts/runtime_matrix.py, scripts/op_matrix.py: apache-tvm 0.27)",
        status="measured here",
        grid_sample=("5-D", "cubic"),
    ),
    Target(
        name="onnx2torch",
        runtime="onnx2torch 1.5 (ONNX -> torch.fx module)",
        method="gather",
        opset=17,
        reason="onnx2torch has no converter for GridSample or DeformConv; the gather form converts and runs. "
        "Reshape(allowzero=1) (torch's dynamo view/reshape) is refused by onnx2torch: dropped where the shape is a "
        "constant without 0 (the same values)",
        source="measured here (scripts/runtime_matrix.py, scripts/op_matrix.py: onnx2torch 1.5.15 on torch 2.14.1)",
        options=("no DeformConv", "no GridSample", "no Reshape allowzero"),
        repairs=("Reshape allowzero 0",),
        faults=(
            _no_kernel("onnx2torch", "'Converter is not implemented', measured here", "use method gather"),
            Fault(
                what="grid_sample (GridSample)",
                why="onnx2torch has no GridSample converter ('Converter is not implemented ... GridSample', "
                "measured here)",
                hits=lambda method, opset: method == "grid_sample",
                fix="use method gather",
                op="deform_conv2d",
            ),
            Fault(
                what="opset >= 18",
                why="onnx2torch 1.5.15 has no converter for the opset-18/19 versions of Pad, Reshape and Equal "
                "('Converter is not implemented ... Pad, version=18' / 'Reshape, version=19', measured here with "
                "scripts/op_matrix.py)",
                hits=lambda method, opset: opset >= 18,
                fix="use opset 17 (the target's pick) or lower",
            ),
        ),
        status="measured here",
    ),
    Target(
        name="generic",
        runtime="any ONNX runtime or converter",
        method="gather",
        opset=11,
        reason="the widest graph: Gather, Clip, MatMul and shape ops at the oldest opset reached (IR 6)",
        source="the ONNX operator schemas (Gather, Clip, MatMul at opset 11)",
        options=("no DeformConv",),
    ),
)
