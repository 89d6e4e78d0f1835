"""``deform-onnx export``'s row label: the form the file was written in, not only the method asked for.

Under ``-m auto`` (and with a target) the lowering is chosen per call
(:func:`deform_onnx.ops.grid_sample.call.grid_sample_call`): a 5-D ``F.grid_sample`` below opset 20, or a
call the target's runtime cannot run as GridSample, takes the gather form. The method resolved
before the export (``grid_sample`` at opset >= 16) then names a form the file does not hold.
"""

from __future__ import annotations

from ._export_rows import Result


def label_written_forms(results: list[Result], net, tensors) -> None:
    """Relabel each written row whose ``grid_sample`` method wrote no GridSample node as ``gather``.

    Also renames the row's planned file (``<name>_grid_sample_op17.onnx`` -> ``<name>_gather_op17.onnx``)
    when the CLI named it and no other row has that name. A model with no deformable op keeps its label
    (every method writes the same graph then). Call before :func:`._export_rows._commit`.
    """
    rows = [
        r
        for r in results
        if r.op_types is not None and r.job.method == "grid_sample" and "GridSample" not in r.op_types
    ]
    if not rows:
        return
    from ._ops_used import deformable_ops, grid_sample_formed_ops

    ops = deformable_ops(net, tensors)
    if ops is not None and not ops & grid_sample_formed_ops():
        return
    taken = {r.job.path for r in results}
    for r in rows:
        planned = r.job.path.name.removesuffix(f"_{r.job.method}_op{r.job.opset}.onnx")
        r.job.method = "gather"
        if not r.job.named and planned != r.job.path.name:
            path = r.job.path.with_name(f"{planned}_gather_op{r.job.opset}.onnx")
            if path not in taken:
                taken.add(path)
                r.job.path = path
