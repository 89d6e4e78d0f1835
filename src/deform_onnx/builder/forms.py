"""Graph forms a runtime target asks the lowerings for while they emit (a context, not a parameter).

The exporters call the lowerings through torch's machinery (a TorchScript
symbolic, a dynamo translation), which passes no options; a target's forms
reach the lowerings through this context instead, set around the export by
:func:`deform_onnx.export` and :func:`deform_onnx.lower`:

- ``"batch 1"``: no value gets a leading axis other than the model's batch.
  The grid_sample form folds offset groups into the batch axis (``[N*G, C/G,
  H, W]``, one GridSample for all groups); ncnn has no batch axis (pnnx drops
  a leading 1 and fails on any other: measured here, "layer load_param ...
  tensor_split failed" on the bundled example's 2-offset-group layer), so this
  form samples each offset group with its own GridSample instead (G nodes of
  1/G the size: the same work).
- ``"contraction as Conv"``: the grid_sample form samples every tap of a band
  with one GridSample in (output row, tap) order, ``[N, C, Hb*K, Wo]``, and
  contracts it with a ``Conv`` (the weight as a ``K x 1`` kernel, stride
  ``(K, 1)``, the bias in it) instead of reshaping the columns to 2-D for a
  ``MatMul``. ncnn repacks its packed blobs for every such reshape and for its
  ``MatMul``; its convolution reads the packed map as it is (measured here:
  scripts/deployed_forms.py).
- ``"taps as channels"``: the grid_sample form samples every tap of a band with one GridSample in
  (tap, output row) order, ``[N, C, K*Hb, Wo]``, reads it as ``[N, C*K, Hb, Wo]`` and contracts it with
  a ``1 x 1`` ``Conv`` (the weight as ``[Co, C*K, 1, 1]``, the bias in it). MNN runs its ``MatMul``
  with the weight first as a slow CPU MatMul and its ``K x 1`` stride-``K`` Conv no faster than the
  1x1 one; with ``"whole map"``, this is MNN's fastest form (measured here: MNN 3.6.1 through
  :func:`deform_onnx.runtimes.deployed.run_file`, per op with its ``runSessionWithCallBackInfo``).
  ncnn runs it slower than ``"contraction as Conv"`` (it repacks the columns for the reshape).
- ``"offset groups along H"`` (with ``"contraction as Conv"`` or ``"taps as channels"``): the grid_sample form
  of a deformable convolution with more than one offset group (one convolution group, static sizes) stacks the
  groups' maps along H, each between zero rows (``[N, C/G, G*(H+2), W]``), clamps each sample's row into its own
  band (a row outside the band reads only zero rows: torchvision's zero padding) and samples every group's taps
  with one GridSample of ``C/G`` channels; one mask product, and the contraction ``Conv`` reads the weight's input
  channels in (channel in group, group, tap) order, so no ``Concat`` of the groups' columns
  (:func:`~deform_onnx.ops.deform_conv.lower_grid_sample.stacks_offset_groups`). The same numbers within
  GridSample's coordinate rounding of the taller map (at most
  :data:`~deform_onnx.ops.deform_conv.lower_grid_sample.STACKED_MAX_ROWS` rows). Without a leading axis other
  than the batch, it needs no ``"batch 1"``, which it replaces where it applies. On ncnn, with 8 offset groups,
  it ran faster than one GridSample per group at one thread and at ncnn's default threads (in smaller row bands
  faster still at one thread, but slower at the default threads on the loaded machine); on MNN it ran slower
  than MNN's groups in the batch (measured here: scripts/repro/offset_groups_along_h.py). The ``ncnn`` target
  asks for it.
- ``"offset groups apart"``: the gather form computes the sample indices and
  weights of each offset group on its own (``G`` index computations of one
  group, each reading its channel slice of one shared table) instead of one
  computation with a ``G`` axis; the same numbers and work. onnx2tf's
  NCHW->NHWC layout guesses misplace that axis in the 5-D/6-D index tensors
  (measured here: the bundled example, 2 offset groups in its last block,
  converted to LiteRT off by 1.8; apart, within 1.2e-5).
- ``"flat offset groups"``: the gather form of deformable convolution computes the corner rows and
  weights of every offset group in one computation on 2-D values ``[K*N*Hb, Wo*G]`` (row: tap, image,
  output row; column: output column, group) and gathers each corner of a tap for all groups at once
  (1-D indices of length ``N*Hb*Wo*G`` into the ``[N*(H+3)*(W+3)*G, C/G]`` table); the same numbers
  (:mod:`deform_onnx.ops.deform_conv.gather_flat`). No value of the index math has more than 3 axes, so
  onnx2tf's layout guesses have nothing to misplace, and the converted file has one ``Gather`` per
  corner and tap instead of one per corner, tap and group (``"offset groups apart"``, which it
  overrides): with 8 offset groups 846 LiteRT ops instead of 6610 and an onnx2tf conversion of 75 s
  instead of 328 s (one each), at the same LiteRT speed (measured here: scripts/repro/tflite_offset_groups.py). Only with more than
  one offset group: with one, LiteRT ran the default form faster. The ``tflite`` target asks for it.
- ``"flat sampling grid"``: the gather form of ``grid_sample`` (4-D and 5-D) reshapes the grid to
  ``[N * points, k]`` first, so every coordinate, index and weight is 1-D instead of ``[N, Ho, Wo]``;
  the same numbers. onnx2tf takes a value whose non-batch axes are all equal (a square output) for a
  transposed one and re-lays out its indices (a flow warp on a 16x16 image off by 3.1 in LiteRT,
  measured here: :mod:`deform_onnx.ops.grid_sample.flat`).
- ``"table padded flat"``: the gather samplers' zero-padded row table
  (:func:`~deform_onnx.sampler.gather.padded_channel_rows`) is padded on 2-D views (``[N*C*H, W]`` along W,
  then ``[N*C, H*(W+3)]`` along H) instead of concatenating zero blocks to the 4-D map; the same numbers.
  onnx2tf cannot tell NCHW from NHWC when C == H == W and concatenated the blocks to such a map along the wrong
  axis: an RT-DETR-style encoder whose 8x8 level has 8 channels per head came out 0.48 off PyTorch in LiteRT
  (measured here: tests/targets/test_tflite_msda.py). The ``tflite`` target asks for it.
- ``"rows per image"``: the fused ``ms_deform_attn`` lowering (:mod:`deform_onnx.ops.msda.lower`, opset >= 12)
  gathers each image's rows ``[N, M*S, D]`` with ``GatherND`` (``batch_dims=1``) at row ``m*S + start_l + ...``
  instead of one flat ``Gather`` over ``[N*M*S, D]`` whose row index counts images with ``Range(0, N*M)``
  reshaped to ``[N, 1, M, 1, 1]``; the same numbers. TVM 0.27's relax ONNX frontend loses the batch through that
  Range and refused the reshape at a dynamic batch ("Reshape requires the input new shape to be Shape. However,
  the given one is relax.TensorType", measured here). The ``tvm`` target asks for it.
- ``"no NaN guard"``: the samplers leave out the ``Where(Equal(p, p), ...)``
  that maps a NaN sample coordinate outside the image
  (:func:`~deform_onnx.sampler.gather.nan_guard`). pnnx traces that ``Equal`` as ``torch.eq``,
  which ncnn has no layer for (measured here: "layer torch.eq not exists or
  registered"). Finite and infinite offsets give the same numbers (the
  ``Clip`` stays); a NaN offset gives whatever the runtime's ``Clip`` and
  ``GridSample``/``Gather`` make of NaN: runtime-defined values, not 0. Only
  the lowerings' own guards go; the model's other nodes are left as written.
- ``"GridSample 4-D only"``: 5-D ``F.grid_sample`` calls take the trilinear /
  nearest gather form instead of GridSample-20 (OpenVINO rejects 5-D
  GridSample: openvinotoolkit/openvino#37770; TensorRT's is 4-D only).
- ``"no GridSample cubic"``: bicubic calls take the 16-tap gather form
  instead of GridSample ``cubic`` (TensorRT's is wrong at opset >= 20; CoreML,
  onnx2tf have none).
- ``"no GridSample reflection"``: calls with ``padding_mode="reflection"`` take
  the gather form instead of GridSample ``reflection`` (MNN 3.6.1 samples
  reflection wrong, bilinear and nearest, both ``align_corners``: off by 2.1 to
  3.8 on 4-D points outside the image, measured here with scripts/op_matrix.py;
  its gather form matches).
- ``"gather where GridSample cannot"``: a call the method would write as a
  GridSample the opset cannot hold (5-D below opset 20) takes the gather
  form instead of raising. Every target and method ``auto`` set it
  (:meth:`~deform_onnx.targets.Choice.emitting`): then each call gets the form that holds.
- ``"integer contraction"``: the grid_sample form contracts each kernel row's
  sampled columns with a ``MatMul`` whose second input is a 2-D constant
  weight, accumulated with ``Sum`` (:mod:`deform_onnx.ops.deform_conv.integer_contraction`), so that ONNX
  Runtime fuses the quantized contraction into ``MatMulIntegerToFloat``
  (used by :func:`deform_onnx.quantize`).
- ``"weight first"`` (with ``"integer contraction"``, a constant weight and
  one image per contraction): the weight is the ``MatMul``'s *first* input,
  its rows normalised to a largest magnitude of 1 and the row scales applied
  after (``Mul``), so the result needs no transposes; :func:`deform_onnx.quantize`
  asks for it for ONNX Runtime
  (:func:`~deform_onnx.ops.deform_conv.integer_contraction.weight_first_contraction`).
- ``"DeformConv sampler"`` (with ``"weight first"``, opset >= 19): the columns
  are sampled by a depthwise ``DeformConv`` with a one-hot weight (the
  runtime's kernel samples and masks) and contracted by the weight-first
  ``MatMul`` (:mod:`deform_onnx.ops.deform_conv.sampler_columns`); for ONNX
  Runtime >= 1.25, which has the kernel.
- ``"four corner gathers"``: the gather samplers
  (:class:`~deform_onnx.sampler.gather.BilinearCorners`) take rows of every
  width in four ``Gather`` nodes, each scaled by its corner's weight (``Mul``)
  and added, never the one stacked ``Gather`` and batched ``MatMul`` of 1x4
  matrices: ExecuTorch's XNNPACK delegate takes the ``Mul``/``Add``, while the
  batched ``MatMul`` brings ``expand_copy`` nodes that run on its portable
  kernels. The ``.pte`` writer asks for it (:mod:`deform_onnx.formats.executorch`).
- ``"whole map"``: the deformable convolution lowerings sample and contract
  the whole output map at once, never in row bands
  (:func:`~deform_onnx.ops.deform_conv.common.row_bands`): half the nodes or
  fewer. ExecuTorch's lowering time grows with the node count (a 64-channel
  layer at 64x64 is two bands otherwise); the ``.pte`` writer asks for it.
  The ``mnn`` target too: with ``"taps as channels"`` MNN ran the 64x64 layer in one piece 10% faster
  than in two bands (its columns, ``C*K*Ho*Wo`` values, are then alive at once).
- ``"GridSample channel blocks"``: the grid_sample form of deformable convolution samples each offset group's
  channels in blocks of 32 (:data:`~deform_onnx.ops.deform_conv.lower_grid_sample.BLOCK_CHANNELS`) when it has
  more than 32 and a multiple of 32: the map read as ``[N*G*blocks, 32, H, W]``, the grid repeated for each block
  (``Expand``), one GridSample; the same numbers and the same sampled columns in memory. MNN's CPU GridSample
  reads every 8-channel pack of a point's corners from planes a power of two apart (its packed layout); with 64
  or more channels per point, per-op (``runSessionWithCallBackInfo``, one thread) its GridSample took about half
  the time in blocks of 32 (measured here, MNN 3.6.1 on the DCNv2 layers of BENCHMARKS.md; blocks of 16 and 8
  ran slower than 32). The ``mnn`` target asks for it.
- ``"GridSample channel blocks of 8"``: the same in blocks of 8 channels
  (:data:`~deform_onnx.ops.deform_conv.lower_grid_sample.SMALL_BLOCK_CHANNELS`; it overrides the form above).
  OpenVINO's CPU GridSample at one thread ran the DCNv2 layers of BENCHMARKS.md faster in blocks of 8 in every
  interleaved run, blocks of 16 and 32 less reliably (measured here: scripts/repro/channel_blocks.py, OpenVINO
  2026.4). The ``openvino`` target asks for it.
- ``"float row index"``: the gather form of deformable convolution computes each sample's corner row
  (:func:`~deform_onnx.sampler.gather.padded_channel_rows`) in the coordinate dtype and casts it to int64
  once, where the sizes are static and every row number is a whole number that dtype holds exactly
  (:data:`~deform_onnx.ops.deform_conv.lower_gather.FLOAT_ROWS_MAX`); otherwise in int64 as always. The
  same indices: ExecuTorch's XNNPACK delegate takes the float products and sums, which otherwise run on
  its portable kernels in int64 (two casts to int64 and four int64 passes instead of one cast). The
  ``.pte`` writer asks for it.

- ``"table by one Pad"``: the gather samplers' zero-padded row table
  (:func:`~deform_onnx.sampler.gather.padded_channel_rows`) pads the map with one ``Pad`` instead of
  concatenating zero blocks along H, then W: one pass over the map instead of two. ExecuTorch's XNNPACK
  delegate takes the ``Pad``; the ONNX graphs keep the blocks (onnx's version converter, which
  ``torch.onnx.export`` runs below opset 18, has no adapter for ``Pad``). The ``.pte`` writer asks for it.
- ``"corner-major gather"``: the gather samplers (:class:`~deform_onnx.sampler.gather.BilinearCorners`) take the
  four corners of ``M`` points, rows of every width, with one ``Gather`` of ``[4, M]`` rows (corner axis first: the per-corner rows
  and weights concatenated as whole blocks), weight them with one broadcast ``Mul`` by ``[4, M, 1]`` and sum
  them with one ``ReduceSum`` over the corner axis; never the batched ``MatMul`` of ``[M, 1, 4]`` by
  ``[M, 4, C]`` nor a corner axis last. In LiteRT (through onnx2tf) the batched MatMul of 1x4 matrices was the
  largest cost of the DCNv2 layer's gather form after its contraction, and the last-axis ``Concat`` of ``[..., 1]``
  corner values ran element by element (``scripts/repro/litert_op_profile.py``); with 8 offset groups (8-channel
  rows) it also ran faster than four ``Gather`` nodes and a ``Sum``. The ``tflite`` target asks for it.
- ``"int32 row index"`` (with ``"float row index"``): the corner rows computed in float are cast to int32, not
  int64, where every row number fits (:func:`~deform_onnx.ops.deform_conv.gather_flat.row_index_type`): LiteRT's
  ``Gather`` then reads int32 indices and onnx2tf's negative-index fix (``Less``, ``Cast``, ``Mul``, ``Add`` on
  each dynamic index tensor) runs in int32. The ``tflite`` target asks for it (and for ``"float row index"``).
- ``"quad table"``: the gather samplers (:class:`~deform_onnx.sampler.gather.BilinearCorners`) read the four
  corners of a point with ONE ``Gather`` of its top-left row from a quad table built once per layer
  (:func:`~deform_onnx.sampler.gather.quad_table`: the row table and its copies shifted by one pixel, one row of
  pixels and both, side by side, ``[R - row - step, 4*width]``; four ``Slice`` nodes and a ``Concat``): a quarter
  of the gathered rows, each four times wider, no index of the other three corners; the rows are weighted by a
  broadcast ``Mul`` of ``[M, 4, 1]`` and summed by a ``ReduceSum`` over the corner axis (the other weightings
  tried: :func:`~deform_onnx.sampler.gather.quad_table`). The same corners and
  weights (the sum's order may round differently); it overrides the corner forms above, and with
  ``"flat offset groups"`` the table steps by the offset groups. No target asks for it: through onnx2tf,
  LiteRT ran the ``tflite`` target's file with it, in each weighting tried, no faster than the target's own
  form beyond the control's spread on the benchmark's DCNv2 layers (slower on most), though op by op its
  ``Gather`` nodes and index work took a fraction of the time and the weighting more; ONNX Runtime ran its
  gather form slower with it on every one of them; the ``.tflite`` writer's file (litert-torch) ran faster with
  it on some and slower on others (measured here: scripts/repro/tflite_offset_groups.py,
  scripts/repro/quad_table_ort.py, scripts/repro/litert_forms.py; the ``.pte``'s quad tables:
  scripts/repro/pte_corner_tables.py).
- ``"GridSample one dtype"``: a ``GridSample`` of a float16 map on the float32 grid the lowerings compute
  float16 coordinates in (:func:`~deform_onnx.sampler.coords.coordinate_dtype`) takes the map cast to float32
  and its result cast back to float16: ONNX lets the two dtypes differ, TVM 0.27's ONNX frontend does not
  (measured here: "Binary operators must have the same datatype" on a float16 DCN layer's grid_sample
  form). The sampling runs in float32 on the float16 values, then rounds once. A float16 map on a float16 grid (a
  model's own ``F.grid_sample`` in float16: MSDA's core) is sampled in float32 too, the grid cast up exactly: TVM
  0.27's legalized ``GridSample`` of a float16 map returns float32 whatever the grid, so a float16 op reading it
  was refused the same way (Grounding DINO's encoder in float16).

Nested blocks add their forms to the enclosing block's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

__all__ = ["EMIT_FORMS", "graph_forms", "wants"]

#: The forms a lowering can be asked for while emitting.
EMIT_FORMS = (
    "batch 1",
    "contraction as Conv",
    "taps as channels",
    "offset groups apart",
    "offset groups along H",
    "flat offset groups",
    "flat sampling grid",
    "no NaN guard",
    "GridSample 4-D only",
    "no GridSample cubic",
    "no GridSample reflection",
    "gather where GridSample cannot",
    "integer contraction",
    "weight first",
    "DeformConv sampler",
    "four corner gathers",
    "whole map",
    "GridSample channel blocks",
    "GridSample channel blocks of 8",
    "GridSample one dtype",
    "float row index",
    "table by one Pad",
    "table padded flat",
    "rows per image",
    "corner-major gather",
    "int32 row index",
    "quad table",
)
_ACTIVE: ContextVar[frozenset[str]] = ContextVar("deform_onnx_graph_forms", default=frozenset())


@contextlib.contextmanager
def graph_forms(forms) -> Iterator[None]:
    """Ask the lowerings for ``forms`` (names of :data:`EMIT_FORMS`; others are ignored) inside the block."""
    token = _ACTIVE.set(_ACTIVE.get() | frozenset(f for f in forms if f in EMIT_FORMS))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def wants(form: str) -> bool:
    """Whether the active target asked for ``form``."""
    return form in _ACTIVE.get()
