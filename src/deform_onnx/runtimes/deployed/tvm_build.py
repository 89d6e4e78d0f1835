"""How the TVM runner builds a model: the host CPU's LLVM target and a CPU schedule for every kernel (issue 38).

This file's source runs inside the TVM venv (:data:`.runners.TVM` starts with it), so it imports only the
standard library at its top and ``tvm`` inside its functions; it has no ``from __future__`` line (the runner
is one concatenated script).

Why (measured here, apache-tvm 0.27, a 64-channel 3x3 layer at 64x64, one thread): ``tvm.compile(mod,
target="llvm")`` builds for a generic x86-64 CPU (SSE2) and leaves the Relax legalizer's kernels unscheduled
(serial loop nests, no vectorisation, no threads): its dense ``Conv`` ran 282 ms, the DCNv2 layer's
grid_sample file 1542 ms. With the host's ``mcpu`` (:func:`host_target`) and :func:`cpu_rule`'s schedule
the dense ``Conv`` ran 14 ms and the DCNv2 layer 86 ms, without any tuning (the build takes about as long as
before). :func:`grid_sample_legalize` replaces TOPI's bilinear ``grid_sample`` kernel (the grid_sample form's
sampling) with one that computes each output pixel's corners once for all channels; with it, :func:`_inline`
and the reduction's loop order, the layer's grid_sample form on a 4x64x32 batch and with 8 offset groups went
from about 4.2x and 4.6x TVM's own dense ``Conv`` to 2.0x and 2.4x (measured here, 2 threads, both builds
interleaved in one process).
"""

import math
import os


def host_target(num_cores=None):
    """The host CPU's LLVM target: ``{"kind": "llvm", "mcpu": <this CPU>, "num-cores": <cores>}``.

    ``mcpu`` is what ``tvm.target.Target.from_device(tvm.cpu())`` reads from the CPU (e.g. ``"rocketlake"``,
    ``"znver3"``); plain ``"llvm"`` would build for the baseline x86-64 instruction set.
    """
    import tvm  # type: ignore[import-not-found]

    host = tvm.target.Target.from_device(tvm.cpu())
    config = {"kind": "llvm", "num-cores": int(num_cores or os.cpu_count() or 1)}
    if "mcpu" in host.attrs:
        config["mcpu"] = str(host.attrs["mcpu"])
    return tvm.target.Target(config)


def cpu_rule(lanes=16, rows=4):
    """A ``tvm.s_tir.dlight`` rule that schedules every kernel of a legalized module for a CPU.

    First the kernel's spatial blocks are inlined into their spatial consumers where that recomputes only
    index arithmetic (:func:`_inline`: reshapes, slices and transposes around a product stop writing a buffer
    each). Then per block: a reduction (convolution, matmul: spatial loops, then reduction loops) runs its
    outer spatial loops in parallel, those that its largest input does not index innermost among them (a
    matmul's row tiles of one column tile run one after another, reading the same columns of its right-hand
    side), the reduction loops next, then ``rows`` rows of the second-to-last spatial loop unrolled around the
    last spatial loop vectorised (``lanes`` or a multiple of it, up to 4x), its initialisation split out; an
    injective block (reshape, add) runs its outer loops in parallel, and a gather (a block that reads whole
    axes of one buffer, its source, e.g. TOPI's ``grid_sample``) first moves innermost the loop that indexes
    only the source, so the indices and weights it reads, and their arithmetic, stay the same along it,
    unless the block is annotated :data:`KEEP_ORDER` (:func:`grid_sample_legalize`'s sampling block). A
    kernel this cannot schedule is left as it was.
    """
    from tvm import s_tir, tirx
    from tvm.s_tir import dlight  # type: ignore[import-not-found]
    from tvm.s_tir.dlight.analysis import normalize_prim_func  # type: ignore[import-not-found]

    class CpuRule(dlight.ScheduleRule):
        def apply(self, func, target, tunable):
            if not isinstance(func, tirx.PrimFunc):
                return None
            sch = s_tir.Schedule(func)
            if normalize_prim_func(sch) is None:
                return None
            _inline(sch, normalize_prim_func)
            blocks = normalize_prim_func(sch)
            if blocks is None:
                return None
            try:
                for info in blocks:
                    loops, kinds = sch.get_loops(info.block_rv), info.dom_kind()
                    if not loops or len(kinds) != len(loops):
                        continue
                    if "R" in kinds:
                        _reduction(sch, info.block_rv, loops, kinds, lanes, rows)
                    else:
                        _injective(sch, info.block_rv, loops)
            except s_tir.ScheduleError:
                return None
            return sch

    return CpuRule()


def _inline(sch, normalize):
    """Inline each spatial block into its consumers where that recomputes no more than index arithmetic.

    That is: the consumers are spatial (a reduction would redo the producer in its inner loop) and keep their
    loop order (:data:`KEEP_ORDER`), and the block either copies (a reshape, slice, transpose, broadcast: one
    load) or writes at least as many elements as each consumer runs iterations. A fused kernel of reshapes,
    slices and products then writes its output once instead of at every step.
    """
    from tvm import s_tir

    inlined = True
    while inlined:
        inlined = False
        for info in normalize(sch) or []:
            block = info.block_rv
            consumers = sch.get_consumers(block)
            if "R" in info.dom_kind() or not consumers:
                continue
            stmt = sch.get(block)
            fits = all(
                not _reduces(sch.get(c))
                and KEEP_ORDER not in sch.get(c).annotations
                and (_copies(stmt) or _iterations(sch.get(c)) <= _size(stmt.writes[0]))
                for c in consumers
            )
            if not fits:
                continue
            try:
                sch.compute_inline(block)
            except s_tir.ScheduleError:
                continue
            inlined = True
            break


def _reduces(stmt):
    from tvm import tirx

    return any(int(v.iter_type) != tirx.IterVar.DataPar for v in stmt.iter_vars)


def _iterations(stmt):
    from tvm import tirx

    return math.prod(int(v.dom.extent) if isinstance(v.dom.extent, tirx.IntImm) else 1 for v in stmt.iter_vars)


def _copies(stmt):
    from tvm import tirx

    value = getattr(stmt.body, "value", None)
    while isinstance(value, tirx.Cast):
        value = value.value
    return type(value).__name__ in ("BufferLoad", "TensorLoad")  # tvm 0.27 names it TensorLoad


def _extent(sch, loop):
    from tvm import tirx

    e = sch.get(loop).extent
    return int(e) if isinstance(e, tirx.IntImm) else None


def _full_axes(region):
    from tvm import tirx

    return sum(
        1
        for r, d in zip(region.region, region.source.shape, strict=False)
        if isinstance(r.extent, tirx.IntImm) and isinstance(d, tirx.IntImm) and 1 < int(r.extent) == int(d)
    )


def _names(region):
    from tvm import tirx

    return {v.name for r in region.region for v in tirx.analysis.undefined_vars(r.min)}


def _size(region):
    from tvm import tirx

    return math.prod(int(d) if isinstance(d, tirx.IntImm) else 1 for d in region.source.shape)


def _gather_order(sch, block, loops):
    stmt = sch.get(block)
    if KEEP_ORDER in stmt.annotations:
        return loops
    reads = list(stmt.reads)
    if len(reads) < 2 or len(stmt.iter_vars) != len(loops):
        return loops
    source = max(reads, key=_full_axes)
    if _full_axes(source) == 0:
        return loops
    others = set().union(*(_names(r) for r in reads if not r.same_as(source)))
    only = [i for i, v in enumerate(stmt.iter_vars) if v.var.name in _names(source) - others]
    if not only or only[-1] == len(loops) - 1:
        return loops
    order = [loop for i, loop in enumerate(loops) if i != only[-1]] + [loops[only[-1]]]
    sch.reorder(*order)
    return order


def _injective(sch, block, loops):
    from tvm import tirx

    if any(sch.get(loop).kind != tirx.ForKind.SERIAL for loop in loops):
        return  # a block sharing the loops of one scheduled before it (a kernel with several outputs)
    loops = _gather_order(sch, block, loops)
    if len(loops) > 1:
        sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])


def _reduction(sch, block, loops, kinds, lanes, rows):
    n_spatial = len(kinds) - len(kinds.lstrip("S"))
    if n_spatial == 0 or kinds[n_spatial:].strip("R"):
        return  # not spatial loops then reduction loops: left serial
    spatial, reduce = list(loops[:n_spatial]), loops[n_spatial:]
    width = _extent(sch, spatial[-1])
    vector = next((lanes * m for m in (4, 2, 1) if width and width % (lanes * m) == 0), None)
    if vector is None:
        sch.parallel(sch.fuse(*spatial) if len(spatial) > 1 else spatial[0])
        return
    x_outer, x_inner = sch.split(spatial[-1], [None, vector])
    outer, unrolled = spatial[:-1], []
    if outer:
        height = _extent(sch, outer[-1])
        if height and height > rows and height % rows == 0:
            outer[-1], row = sch.split(outer[-1], [None, rows])
            unrolled = [row]
    # the parallel loops that the largest input does not index innermost: consecutive tiles read the same part
    # of it (a matmul's column tile of its right-hand side), which stays in cache
    stmt = sch.get(block)
    written = {w.source.same_as for w in stmt.writes}
    inputs = [r for r in stmt.reads if not any(same(r.source) for same in written)] or list(stmt.reads)
    largest = _names(max(inputs, key=_size))
    indexes = [v.var.name in largest for v in stmt.iter_vars[:n_spatial]]
    tiles = [*outer, x_outer]
    origin = [*range(len(outer)), n_spatial - 1]  # each tile loop's spatial loop
    parallel = [t for t, i in zip(tiles, origin, strict=True) if indexes[i]]
    parallel += [t for t, i in zip(tiles, origin, strict=True) if not indexes[i]]
    sch.reorder(*parallel, *reduce, *unrolled, x_inner)
    sch.parallel(sch.fuse(*parallel) if len(parallel) > 1 else parallel[0])
    for loop in unrolled:
        sch.unroll(loop)
    sch.vectorize(x_inner)
    sch.decompose_reduction(block, reduce[0])


#: A block annotation: :func:`cpu_rule` keeps the block's loop order (the last loop, innermost, runs along the
#: output's contiguous axis) instead of moving a gather's source-only loop innermost.
KEEP_ORDER = "deform_onnx.keep_loop_order"


def grid_sample_legalize(bb, call):
    """``relax.image.grid_sample`` (bilinear, zeros padding, NCHW, 4-D) as two kernels' worth of blocks.

    TOPI's kernel computes each output's four corners and weights from the grid inside the channel loop; the
    rule's gather order (channels innermost) keeps that arithmetic out of the loop but writes the output
    and reads the source a channel plane apart. Here one block computes, per batch and output pixel, each
    corner's flat source index and its weight (0 outside the map, TOPI's and ONNX's zeros padding), and a
    second one samples every channel, output rows along the contiguous axis. Measured here (one
    ``GridSample`` of a 64-channel DCNv2 layer's kernel row, 2 threads): 1x64x64 2.7 -> 1.0 ms, 4x64x32
    2.0 -> 0.8 ms, 8 offset groups 2.7 -> 1.4 ms (against TOPI's with channels in tiles of 8 innermost, its
    best order). Any other mode, padding or layout, or a map and grid of two dtypes (which TOPI refuses,
    as a deployment's TVM does): TOPI's.
    """
    import tvm

    data, grid = call.args
    attrs = call.attrs
    sinfo = getattr(data, "struct_info", None) or getattr(data, "ty", None)  # tvm 0.27 names it ty
    grid_info = getattr(grid, "struct_info", None) or getattr(grid, "ty", None)
    if (
        getattr(sinfo, "dtype", None) != getattr(grid_info, "dtype", None)  # TOPI refuses it: so does this
        or attrs.method != "bilinear"
        or attrs.padding_mode != "zeros"
        or attrs.layout != "NCHW"
        or getattr(sinfo, "ndim", -1) != 4
    ):
        return tvm.ir.Op.get("relax.image.grid_sample").get_attr("FLegalize")(bb, call)
    return bb.call_te(_bilinear_zeros, data, grid, bool(attrs.align_corners), primfunc_name_hint="grid_sample")


def _bilinear_zeros(data, grid, align_corners):
    from tvm import te, tirx

    _, channels, height, width = data.shape
    batch, _, out_h, out_w = grid.shape
    real = grid.dtype  # the map's (grid_sample_legalize)

    def pixel(v, size):  # TOPI's unnormalisation
        size = tirx.Cast(real, size)
        return (v + 1.0) * (size - 1.0) / 2.0 if align_corners else -0.5 + (v + 1.0) * size / 2.0

    def corner(n, k, h, w):
        y, x = pixel(grid[n, 1, h, w], height), pixel(grid[n, 0, h, w], width)
        y0, x0 = te.floor(y).astype("int32"), te.floor(x).astype("int32")
        dy, dx = (k // 2).astype("int32"), (k % 2).astype("int32")
        fy, fx = y - y0.astype(real), x - x0.astype(real)
        yi, xi = y0 + dy, x0 + dx
        inside = tirx.all(yi >= 0, yi < height, xi >= 0, xi < width)
        weight = tirx.if_then_else(dy == 1, fy, 1.0 - fy) * tirx.if_then_else(dx == 1, fx, 1.0 - fx)
        zero = tirx.const(0, "int32")
        return [
            tirx.if_then_else(inside, yi * width.astype("int32") + xi, zero),
            tirx.if_then_else(inside, weight, tirx.const(0.0, real)),
        ]

    index, weight = te.compute((batch, 4, out_h, out_w), corner, name="corners")

    def sample(n, c, h, w):
        total = tirx.const(0.0, real)
        for k in range(4):
            i = index[n, k, h, w]
            total = total + data[n, c, i // width, i % width] * weight[n, k, h, w]
        return total

    return te.compute((batch, channels, out_h, out_w), sample, name="grid_sample", attrs={KEEP_ORDER: 1})


def fold_constants(mod, target):
    """``mod`` (legalized) with every kernel call whose arguments are all constants replaced by its value.

    The same result as ``relax.transform.FoldConstant``, which compiles each such kernel apart with LLVM (the
    ONNX frontend writes dozens: index normalisation of each ``Gather``, shapes as tensors): measured here, 13 of
    a 4-channel DCNv2 file's 14 s of build, 7 of a 64-channel one's 8 s. Here they are compiled in one module
    and run in order. ``build`` runs ``FoldConstant`` after it, for anything this leaves.
    """
    import tvm
    from tvm import relax

    call_tir = tvm.ir.Op.get("relax.call_tir")
    Constant = getattr(relax, "Constant", None) or tvm.ir.expr.Constant  # tvm 0.27 moved it
    main = mod["main"]
    known: dict = {}
    calls: list = []
    for block in main.body.blocks:
        for binding in block.bindings:
            call = binding.value
            if not (isinstance(call, relax.Call) and call.op == call_tir and len(call.args) == 2):
                continue
            args = getattr(call.args[1], "fields", None)
            sinfo = getattr(binding.var, "struct_info", None) or getattr(binding.var, "ty", None)
            dims = getattr(getattr(sinfo, "shape", None), "values", None)
            dtype = getattr(sinfo, "dtype", None)
            if args is None or dims is None or not dtype:
                continue
            if all(isinstance(a, Constant) or (isinstance(a, relax.Var) and a in known) for a in args):
                try:
                    shape = [int(d) for d in dims]
                except TypeError:  # a size known only at run time (a Range's length, a Var): FoldConstant's or the VM's
                    continue
                known[binding.var] = (shape, dtype)
                calls.append((binding.var, call.args[0], args))
    if not calls:
        return mod
    kernels = tvm.IRModule({gv: mod[gv].with_attr("global_symbol", gv.name_hint) for _, gv, _ in calls})
    lib = tvm.compile(kernels, target=target)
    device = tvm.cpu()
    values: dict = {}
    for var, gv, args in calls:
        shape, dtype = known[var]
        out = tvm.runtime.empty(shape, dtype, device)
        inputs = [values[a] if a in values else (a.data if hasattr(a, "data") else a.value) for a in args]
        lib[gv.name_hint](*inputs, out)
        values[var] = out

    @relax.expr_functor.mutator
    class Substitute(relax.PyExprMutator):
        def visit_var_(self, var):
            return relax.const(values[var]) if var in values else var

        def visit_dataflow_var_(self, var):
            return relax.const(values[var]) if var in values else var

    mod["main"] = Substitute().visit_expr(main)
    return relax.transform.DeadCodeElimination()(mod)


def build(mod, target):
    """Legalize ``mod`` (a Relax module from the ONNX frontend), schedule its kernels (:func:`cpu_rule`) and
    compile it for ``target`` (:func:`host_target`).

    Returns:
        ``(executable, scheduled, kernels)``: what ``relax.VirtualMachine`` runs, and how many of the module's
        kernels :func:`cpu_rule` scheduled, of how many.
    """
    import tvm
    from tvm import relax
    from tvm.relax.backend.cpu_generic import pipeline  # type: ignore[import-not-found]
    from tvm.s_tir import dlight

    mod = relax.transform.DecomposeOpsForInference()(mod)
    with target:
        passes = pipeline.library_dispatch_passes(target) + pipeline.legalize_passes(target)
        legalize = relax.transform.LegalizeOps({"relax.image.grid_sample": grid_sample_legalize})
        passes = [legalize if p.info.name == "LegalizeOps" else p for p in passes]
        fold = next((i for i, p in enumerate(passes) if p.info.name == "FoldConstant"), None)
        if fold is not None:  # FoldConstant after fold_constants: it finds nothing left, quickly
            mod = fold_constants(tvm.transform.Sequential(passes[:fold])(mod), target)
        mod = tvm.transform.Sequential(passes[fold or 0 :])(mod)
        mod = dlight.ApplyDefaultSchedule(cpu_rule())(mod)
    kernels = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    scheduled = sum(1 for f in kernels if f.attrs is not None and "tirx.is_scheduled" in f.attrs)
    return tvm.compile(mod, target=target), scheduled, len(kernels)
