"""``deform-onnx export``'s row label: the form the file holds, not only the method asked for.

The form comes from :func:`deform_onnx.export`'s report (``report.method``: the
ops each call's lowering wrote, :mod:`deform_onnx.builder.written`). Under
``grid_sample`` a deformable convolution of a dynamic map (``--dynamic``) is
sampled with the exact gather sampler, and under ``-m auto`` a 5-D
``F.grid_sample`` below opset 20 takes the gather form: the method resolved
before the export then names a form the file does not hold.
"""

from __future__ import annotations

from ._export_rows import Result, _remove


def label_written_forms(results: list[Result], notes: list[str]) -> None:
    """Label each written row by the form its file holds, and name its file after that form.

    A row relabelled to one form (``grid_sample@17`` that wrote ``gather``) is renamed
    ``<name>_gather_op17.onnx`` when the CLI named it; when another row that passed already
    writes that name (the ``gather@17`` row of the same plan), the relabelled row holds the
    form that row holds: it is dropped, with a note, rather than written under a name that says
    ``grid_sample``. A mixed file (``grid_sample+gather``) keeps its name. Call before
    :func:`._export_rows._commit`.
    """
    rows = [r for r in results if r.form is not None and r.form != r.job.method]
    by_path = {r.job.path: r for r in results}
    for r in rows:
        asked, form = r.job.method, r.form
        r.job.method = form  # type: ignore[assignment]  # checked: not None
        if r.job.named or "+" in form:  # type: ignore[operator]
            continue
        planned = r.job.path.name.removesuffix(f"_{asked}_op{r.job.opset}.onnx")
        if planned == r.job.path.name:
            continue
        path = r.job.path.with_name(f"{planned}_{form}_op{r.job.opset}.onnx")
        other = by_path.get(path)
        if other is None:
            by_path[path] = r
            r.job.path = path
        elif other.ok:
            _remove(r.partial)
            results.remove(r)
            notes.append(
                f"{asked}@{r.job.opset} wrote the {form} form (the form its calls take here, e.g. a dynamic map "
                f"under grid_sample); {path.name} of the {form}@{r.job.opset} row holds it: not written twice"
            )
