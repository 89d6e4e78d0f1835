"""How the TVM runner builds a model: the host CPU's LLVM target and a CPU schedule for every kernel (issue 38).

This file's source runs inside the TVM venv (:data:`.runners.TVM` starts with it), so it imports only the
standard library at its top and ``tvm`` inside its functions; it has no ``from __future__`` line (the runner
is one concatenated script).

Why (measured here, apache-tvm 0.27, a 64-channel 3x3 layer at 64x64, one thread): ``tvm.compile(mod,
target="llvm")`` builds for a generic x86-64 CPU (SSE2) and leaves the Relax legalizer's kernels unscheduled
(serial loop nests, no vectorisation, no threads): its dense ``Conv`` ran 282 ms, the DCNv2 layer's
grid_sample file 1542 ms. With the host's ``mcpu`` (:func:`host_target`) and :func:`cpu_rule`'s schedule
the dense ``Conv`` ran 14 ms and the DCNv2 layer 86 ms, without any tuning (the build takes about as long as
before).
"""

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

    Per block of each kernel: a reduction (convolution, matmul: spatial loops, then reduction loops) runs its
    outer spatial loops in parallel, the reduction loops next, then ``rows`` rows of the second-to-last spatial
    loop unrolled around the last spatial loop vectorised (``lanes`` or a multiple of it, up to 4x), its
    initialisation split out; an injective block (reshape, add, grid_sample) runs its outer loops in parallel,
    and a gather (a block that reads whole axes of one buffer, its source, e.g. ``grid_sample``) first moves
    innermost the loop that indexes only the source, so the indices and weights it reads, and their
    arithmetic, stay the same along it. A kernel this cannot schedule is left as it was.
    """
    from tvm import s_tir, tirx
    from tvm.s_tir import dlight  # type: ignore[import-not-found]
    from tvm.s_tir.dlight.analysis import normalize_prim_func  # type: ignore[import-not-found]

    class CpuRule(dlight.ScheduleRule):
        def apply(self, func, target, tunable):
            if not isinstance(func, tirx.PrimFunc):
                return None
            sch = s_tir.Schedule(func)
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


def _gather_order(sch, block, loops):
    stmt = sch.get(block)
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
    sch.reorder(*outer, x_outer, *reduce, *unrolled, x_inner)
    sch.parallel(sch.fuse(*outer, x_outer) if outer else x_outer)
    for loop in unrolled:
        sch.unroll(loop)
    sch.vectorize(x_inner)
    sch.decompose_reduction(block, reduce[0])


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
                shape = [int(d) for d in dims]
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
        fold = next((i for i, p in enumerate(passes) if p.info.name == "FoldConstant"), None)
        if fold is not None:  # FoldConstant after fold_constants: it finds nothing left, quickly
            mod = fold_constants(tvm.transform.Sequential(passes[:fold])(mod), target)
        mod = tvm.transform.Sequential(passes[fold or 0 :])(mod)
        mod = dlight.ApplyDefaultSchedule(cpu_rule())(mod)
    kernels = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    scheduled = sum(1 for f in kernels if f.attrs is not None and "tirx.is_scheduled" in f.attrs)
    return tvm.compile(mod, target=target), scheduled, len(kernels)
