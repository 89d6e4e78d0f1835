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
    why="GridSample-20 renamed 'bilinear'/'bicubic' to 'linear'/'cubic'; onnx-tensorrt's parser checks only the "
    "old names and silently samples nearest (reproduced with TensorRT 11.1 and TensorRT-RTX 1.5: onnx-tensorrt "
    "PR #1060, open, fixes NVIDIA/TensorRT #4646; no release known fixed)",
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


def _no_grid_sample(why: str, fix: str) -> Fault:
    return Fault(
        what="grid_sample (GridSample)",
        why=why,
        hits=lambda method, opset: method == "grid_sample",
        fix=fix,
        op="deform_conv2d",
    )


_ONNX2TORCH_NO_GRID_SAMPLE = (
    "onnx2torch has no GridSample converter ('Converter is not implemented ... GridSample', measured here)"
)

#: What ``tensorrt`` pins admitting a release before 10.1 refuse (:mod:`.versions`).
TENSORRT_BEFORE_PLUGIN = _no_kernel(
    "TensorRT before 10.1",
    "onnx-tensorrt parses DeformConv through the ModulatedDeformConv2d plugin from 10.1",
    "use method gather (the target's pick), or pin tensorrt>=10.1",
)

#: microsoft/onnxruntime#32275 (2026-08-26, closed): the WebGPU EP's GridSample gives wrong results in
#: RT-DETR-family deformable-attention decoders (cosine similarity to the CPU EP 0.52 from the first
#: GridSample on). The release with the fix is not established (the thread and the release notes read here
#: name no fixing PR), so every onnxruntime-web version gets the gather form (:mod:`.versions`).
WEBGPU_32275 = Fault(
    what="grid_sample (GridSample on WebGPU)",
    why="the WebGPU EP's GridSample gives wrong results in RT-DETR-family decoders (microsoft/onnxruntime#32275; "
    "no onnxruntime-web release known fixed)",
    hits=lambda method, opset: method == "grid_sample",
    fix="use method gather (the target's pick)",
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
        # 8 channels per GridSample batch entry: the grid_sample layer's one-thread CPU time 0.83-0.93x /
        # 0.81-0.92x / 0.85-0.94x on DCNv2 1x64x64 / 1x256x32 / 4x64x32 in 4 runs (wall, on a loaded machine,
        # 0.86-1.01x / 0.82-0.95x / 0.84-0.96x; blocks of 16 and 32 up to 0.96x and 0.98x CPU; og8 unchanged;
        # measured here, OpenVINO 2026.4, 11-21 interleaved rounds: scripts/repro/channel_blocks.py)
        forms=("GridSample channel blocks of 8",),
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
        # measured here (2026.4.1): a ceil_mode max pool keeps a last window PyTorch drops; a ceil_mode average
        # counting pads divides its partial last window otherwise (tests/targets/test_ncnn_pooling.py)
        repairs=("ceil_mode pooling explicit",),
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
        repairs=("ceil_mode pooling explicit",),  # the same frontend as target openvino
    ),
    Target(
        name="tensorrt",
        runtime="TensorRT (onnx-tensorrt parser; DeformConv through the ModulatedDeformConv2d plugin from 10.1)",
        method="gather",
        opset=17,
        reason="GridSample results reported wrong since TensorRT 10.14 (NVIDIA/TensorRT #4813, pytorch/TensorRT "
        "#4074): gather unless asked; native needs the ModulatedDeformConv2d plugin",
        source="read: issues named; GridSample-20: onnx-tensorrt PR #1060 (open: no release known fixed); "
        "graph rules tested (tests/targets/test_targets.py, tests/targets/test_graph_safety.py)",
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
        runtime="ONNX Runtime WebGPU execution provider (onnxruntime-web, native WebGPU EP), any version",
        method="gather",
        opset=17,
        reason="no DeformConv kernel; GridSample gives wrong results in RT-DETR-family decoders (#32275) and no "
        "release is known fixed: gather (pin a version: webgpu>=X, see deform_onnx.targets.versions)",
        source="read: microsoft/onnxruntime#32275; onnxruntime-web 1.24.3 docs/webgpu-operators.md and "
        "ops/grid-sample.ts (modes bilinear/nearest/bicubic, not GridSample-20's 'linear'); GridSample in the "
        "native WebGPU EP from 1.26 (#28264, 1.26.0 release notes)",
        options=("no DeformConv", "no GridSample"),
        faults=(WEBGPU_32275, _WEBGPU_GRIDSAMPLE_20, _no_kernel("WebGPU", "webgpu-operators.md")),
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
        reason="gather, the offset groups' indices computed on 2-D values and folded into the gathered rows: the "
        "bundled example and cases c04, c12, c25 run on LiteRT; with the default 5-D index values onnx2tf misplaces "
        "the group axis (off by 1.8); computed per group apart they match too, but 8 groups made 7.8x the LiteRT ops "
        "and onnx2tf took 328 s instead of 75 s (one conversion each) at the same speed; the grid_sample form does "
        "not convert",
        source="measured here (scripts/runtime_matrix.py: onnx2tf 1.29 -> LiteRT 2.1; scripts/repro/tflite_forms.py; "
        "scripts/op_matrix.py: the 5-D and bicubic gather forms and the fused MSDA op run, Deformable DETR's "
        "per-level MSDA core converted 1.0 off at its stack(dim=-2).flatten(-2), right with repair "
        "'stack flatten as Concat': scripts/repro/onnx2tf_stack_flatten.py; F.grid_sample flow warps on square maps "
        "3.6 off, right with form 'flat sampling grid' and repair 'constant operand last': "
        "scripts/repro/tflite_warps.py; an RT-DETR-style MSDA encoder with an 8x8 level of 8 channels per head 0.48 "
        "off, right with form 'table padded flat': tests/targets/test_tflite_msda.py; offset groups: "
        "scripts/repro/tflite_offset_groups.py)",
        # measured here: float16 files failed in onnx2tf's conversion or took float32 input in LiteRT
        options=("onnx2tf float32", "no IsNaN", "static shapes", "onnx2tf loadable ops"),
        faults=(
            _no_kernel(
                "onnx2tf",
                "not run here: the matrix runs the standard-op forms",
                fix="use method gather (the grid_sample form does not convert)",
            ),
        ),
        status="measured here",
        # the last three: measured faster in LiteRT (deform_onnx.builder.forms; scripts/repro/litert_op_profile.py)
        forms=(
            "flat offset groups",
            "flat sampling grid",
            "table padded flat",
            "corner-major gather",
            "float row index",
            "int32 row index",
        ),
        repairs=(
            "stack flatten as Concat",
            "constant operand last",
            "GELU divisor as [1]",
            "square input read by Max",
            "output names without ':'",
        ),
    ),
    Target(
        name="ncnn",
        runtime="ncnn through pnnx",
        method="grid_sample",
        opset=17,
        reason="grid_sample without the NaN guard (pnnx's torch.eq has no ncnn layer), one GridSample per offset "
        "group (ncnn has no batch axis), every tap at once contracted by a Conv (kernel K x 1, stride K: ncnn "
        "repacks 2-D columns for a MatMul), static shapes up to 512 px a side; the gather form's 6-D values fit no "
        "ncnn blob. A NaN offset then gives runtime-defined values. GridSample cubic, and 5-D GridSample-20 "
        "(opset_version=20), run on ncnn; their gather forms do not load (torch.eq, torch.unbind)",
        source="measured here (scripts/runtime_matrix.py, scripts/op_matrix.py: pnnx 20261020 -> ncnn 1.0.20261020 "
        "Python bindings; cubic and 5-D within 5.6e-6 for every padding and align_corners; "
        "scripts/repro/ncnn_rank5.py)",
        # "ncnn float32" first: the refusal names the first rule broken, and no change to the graph helps a float16
        # model (Grounding DINO in float16 was refused for its 6-D values, then would have been for its dtype)
        options=(
            "ncnn float32",
            "no NaN guard",
            "ncnn blobs",
            "ncnn loadable ops",
            "GridSample batch 1",
            "static shapes",
        ),
        # measured here (case c38, voxelmorph): ncnn does not load ScatterElements / GatherND
        # measured here: TorchScript's torch.chunk left a '?' batch that the blob rule refused; folded, it loads
        # measured here: ncnn's Pooling divides a ceil_mode tail window by the whole kernel (count_include_pad=1)
        # and keeps a last window PyTorch drops (tests/targets/test_ncnn_pooling.py)
        # measured here: pnnx 20261020 writes every Reduce* (ReduceMean/Max/Sum/L2, keepdims 1 or 0) as a Reduction
        # over the ONNX axes unshifted for ncnn's missing batch axis (ReduceMean over 1 reduced H, over (2, 3) W
        # only); GlobalAveragePool/MaxPool, full-axis pools, a ones Conv and Transpose + MaxPool ran right
        # (tests/targets/test_ncnn_reduce.py)
        repairs=(
            "scatter as Concat",
            "index list as Concat",
            "static shape arithmetic folded",
            "ceil_mode pooling explicit",
            "reductions as pooling and Conv",
            # measured here: pnnx writes Equal as torch.eq, which ncnn does not load (CenterNet's heat-map NMS)
            "float Equal as arithmetic",
            # measured here: pnnx writes Tile as torch.tile, which ncnn does not load (RepPoints' grid points)
            "Tile as Concat",
        ),
        faults=(_no_kernel("ncnn", "not run here: the matrix runs the standard-op forms"),),
        status="measured here",
        # the contraction as a Conv: 2.0-2.4x faster on ncnn than the MatMul of 2-D columns (measured here,
        # DCNv2 1x64x64 and 1x256x32, 3 interleaved rounds: ncnn repacks the columns for each reshape and MatMul)
        # every offset group by one GridSample over the groups' maps stacked along H: DCNv2 1x64x64 og8 in
        # 0.85-0.95x the CPU time of one GridSample per group at one thread (8 runs), 0.48-0.82x at ncnn's default
        # threads (5 runs; the control file 0.94-1.06x at one thread, 0.75-0.98x and once 2.5x at the default;
        # measured here, ncnn 1.0.20261020, 9-15 interleaved rounds on a loaded machine:
        # scripts/repro/offset_groups_along_h.py); one offset group: the same file
        forms=("no NaN guard", "batch 1", "contraction as Conv", "offset groups along H"),
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
        reason="grid_sample, every tap in one GridSample contracted by a 1x1 Conv over the whole map (MNN's MatMul of "
        "sampled columns ran 1.1-2.2x slower); grid_sample@17 and gather@11 (NaN guard Equal(g, g), no IsNaN) run "
        "within 2.1e-5 on the bundled "
        "example and cases c04, c12, c25; F.grid_sample with padding reflection takes the gather form (MNN's "
        "GridSample reflection is off by 2.1 to 3.8, its gather form within 1.2e-7), bicubic too (GridSample cubic off "
        "by 0.66 to 0.84); 5-D GridSample-20 (opset_version=20) runs within 1.3e-6",
        source="measured here (scripts/runtime_matrix.py, scripts/op_matrix.py: MNN 3.6.1, MNNConvert + runtime)",
        options=("no IsNaN", "no GridSample reflection", "mnn loadable ops"),
        # every tap in one GridSample, contracted by a 1x1 Conv, the whole map at once: 1.1-2.2x faster on MNN
        # than one MatMul per band (DCNv2 1x64x64 / 4x64x32 / 1x64x64 og8 / 1x256x32: 3.30x / 3.73x / 3.91x /
        # 2.14x MNN's own dense Conv, was 3.85x / 4.15x / 8.79x / 2.74x; measured here, 3 interleaved rounds)
        # 32 channels per GridSample batch entry: MNN's GridSample about half as long, the layer's CPU time
        # 0.90-0.91x on DCNv2 1x64x64 / 4x64x32 / 1x256x32 (measured here, 9 interleaved rounds; og8 unchanged)
        forms=("no GridSample reflection", "taps as channels", "whole map", "GridSample channel blocks"),
        grid_sample=("5-D",),  # GridSample-20 5-D within 1.3e-6 (opset_version=20); its GridSample cubic is off by 0.8
        faults=(_no_kernel("MNN", "not run here: the matrix runs the standard-op forms"),),
        status="measured here",
        # measured here (MNN 3.6.1): Add/Sub/Mul/Div(4-D constant, Conv output) feeding GridSample samples a wrong
        # layout (BasicVSR++'s flow_warp of feat_prop = zeros + backbone(...): 0.011 to 1e17 off, varying run to
        # run); with the value first it is right (tests/targets/test_mnn_constant_first.py)
        # measured here: MNN keeps a last ceil_mode pooling window PyTorch drops (tests/targets/test_ncnn_pooling.py)
        # measured here: MNN 3.6.1 swaps the output axes of Einsum("bmn,bcn->bcm") (DAT's attention,
        # tests/targets/test_mnn_einsum.py)
        # measured here: MNN 3.6.1 runs the ScatterElements of x[:, i] = y wrong (VFNet's star offsets,
        # tests/targets/test_vfnet_tood.py; PWC-Net's in-place vgrid[:, 1, :, :] = ... kept the unnormalised y,
        # 22 off, tests/targets/test_mnn_scatter.py); as Slice + Concat it matches
        # measured here: MNNConvert 3.6.1 folds a ConstantOfShape without its value attribute into uninitialised
        # memory, differently per conversion (scripts/repro/mnn_constant_of_shape.py)
        repairs=(
            "constant operand last",
            "ceil_mode pooling explicit",
            "Einsum as MatMul",
            "scatter as Concat",
            "ConstantOfShape value written",
        ),
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
        options=("tvm loadable ops",),
        faults=(_no_kernel("TVM 0.27's relax ONNX frontend", "its convert map has no DeformConv"),),
        # "rows per image": the fused ms_deform_attn lowering's Range over N*M made TVM refuse a dynamic batch
        forms=("GridSample one dtype", "rows per image"),
        # measured here: a TorchScript export's torch.chunk (Slice ends computed from Shape) lost its shapes in the
        # frontend ("Reshape expects the input tensor to have known shape"); folded, it converts and matches
        # measured here: a float16 GroupNorm's InstanceNormalization 0.17 off in TVM (statistics in float16)
        repairs=("static shape arithmetic folded", "float16 InstanceNormalization in float32"),
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
        options=("no DeformConv", "no GridSample", "no Reshape allowzero", "onnx2torch loadable ops"),
        # measured here: onnx2torch clamps with float bounds, so an int64 Clip (RT-DETRv2's discrete sampling
        # coordinates) became float32 and its GatherND refused it
        repairs=("Reshape allowzero 0", "integer Clip as Max/Min"),
        faults=(
            _no_kernel(
                "onnx2torch",
                "'Converter is not implemented', measured here",
                "use target onnx2torch-native (native with deform_onnx.onnx2torch.register()), or method gather",
            ),
            _no_grid_sample(
                _ONNX2TORCH_NO_GRID_SAMPLE,
                "use method gather",
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
        name="onnx2torch-native",
        runtime="onnx2torch 1.5 with deform_onnx.onnx2torch.register() (DeformConv -> torchvision deform_conv2d)",
        method="native",
        opset=19,
        reason="register() converts DeformConv to one torchvision.ops.deform_conv2d call, where the gather form is "
        "~270 small torch ops; DeformConv needs opset 19, where onnx2torch 1.5.15 lacks some ops' newer versions "
        "(Pad-18, Reshape-19, Reduce*-18: named by the loadable-ops rule; target onnx2torch then; a Split with "
        "static pieces is written as Slice, repair 'Split as Slice')",
        source="measured here (tests/runtimes/test_onnx2torch.py; scripts/runner_builds.py onnx2torch)",
        options=("no GridSample", "no Reshape allowzero", "onnx2torch-native loadable ops"),
        # onnx2torch has no Split-18 (every Split at opset 19): mmdet's DCNv2 torch.chunk, as Slice-13
        repairs=("Reshape allowzero 0", "Split as Slice", "integer Clip as Max/Min"),
        faults=(
            _no_grid_sample(
                _ONNX2TORCH_NO_GRID_SAMPLE,
                "use method native (the target's pick)",
            ),
            Fault(
                what="native at opset < 19",
                why="DeformConv is an ONNX op from opset 19",
                hits=lambda method, opset: method == "native" and opset < 19,
                fix="use opset 19 (the target's pick)",
                op="deform_conv2d",
            ),
        ),
        status="measured here",
    ),
    Target(
        name="rknn",
        runtime="Rockchip RKNN-Toolkit2 (ONNX -> .rknn, RK3588/RK3576/... NPU)",
        method="gather",
        opset=17,
        reason="GridSample and DeformConv are not in RKNN's op table (GridSample ran on the CPU in RF-DETR's "
        "profile, #366; runtime 2.3.2 refuses it as a CPU op, #478): the gather form with Gather (GatherND is not "
        "supported either), Sum written as Add and static Range as constants; opsets 12 to 19",
        source="read: airockchip/rknn-toolkit2 doc/RKNNToolKit2_OP_Support-v2.1.0.md (ONNX opset 19); "
        "airockchip/rknn_model_zoo#366; airockchip/rknn-toolkit2#276, #478; rknn-toolkit2 v1.6.0 release notes "
        "('Support ONNX model of OPSET 12~19'); not run here (no RKNN toolkit or board)",
        options=("no DeformConv", "no GridSample", "rknn ops"),
        repairs=("Sum as Add", "Range as constant"),
        faults=(
            _no_kernel("RKNN", "RKNNToolKit2_OP_Support-v2.1.0.md: DeformConv Not Supported", "use method gather"),
            _no_grid_sample(
                "GridSample is Not Supported in RKNN's op table; it ran on the CPU, not the NPU "
                "(airockchip/rknn_model_zoo#366), and runtime 2.3.2 refuses it (airockchip/rknn-toolkit2#478)",
                "use method gather (the target's pick)",
            ),
            Fault(
                what="opset outside 12 to 19",
                why="RKNN-Toolkit2 converts ONNX opsets 12 to 19 (v1.6.0 release notes; its op table is for opset 19)",
                hits=lambda method, opset: not 12 <= opset <= 19,
                fix="use opset 17 (the target's pick), or 12 to 19",
            ),
        ),
    ),
    Target(
        name="qnn",
        runtime="ONNX Runtime QNN execution provider (Qualcomm AI Engine Direct, HTP/NPU backend)",
        method="grid_sample",
        opset=20,
        reason="GridSample is in the QNN EP's op list and DeformConv is not; GridSample-20 ('linear', 4-D) is what "
        "the EP's HTP tests run at opset 20, so grid_sample@20; no dynamic shapes",
        source="read: onnxruntime/onnxruntime-qnn docs/execution_providers/QNN-ExecutionProvider.md (Supported ONNX "
        "operators; 'QNN EP does not support models with dynamic shapes'); QNN EP GridSample HTP tests "
        "(GridSample_Linear_* at opset 20); not run here (no Qualcomm device)",
        options=("no DeformConv", "static shapes"),
        faults=(_no_kernel("the QNN EP", "its Supported ONNX operators list"),),
    ),
    Target(
        name="hailo",
        runtime="Hailo Dataflow Compiler (hailo parser onnx, Hailo-8/8L/10)",
        method="gather",
        opset=13,
        reason="Hailo's parser refuses RT-DETR's sampling (DFC 3.30, hailo_model_zoo#161) and no public source shows "
        "a deformable-sampling form it parses: a model with deformable sampling is refused; force=True writes the "
        "gather form at opset 13 (the opset Hailo's support suggests), unverified",
        source="read: hailo-ai/hailo_model_zoo#161 (hailo parser onnx fails on YOLO11 + RTDETRDecoder), "
        "hailo-ai/hailo_model_zoo#95 (export with opset 13); not run here (no Hailo DFC)",
        options=("no DeformConv", "no GridSample", "no data-dependent gather"),
        faults=(_no_kernel("Hailo", "hailo_model_zoo#161", "use method gather with force=True (unverified)"),),
        lacks=(
            (
                "deformable sampling",
                "Hailo's parser refuses RT-DETR's sampling (hailo-ai/hailo_model_zoo#161) and no form is known to parse",
                "run the sampling outside the Hailo graph (end the parse before it, as Hailo's end-node names do)",
            ),
        ),
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
