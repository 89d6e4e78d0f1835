"""The runtime support table, measured on real runtime builds (issue 12 section 2); not part of the test run.

Exports the bundled example (``deform_onnx.cli.example``) and a few case models
(``/work/shared/cases`` through tests/util.py) once per target with
``deform_onnx.export(..., target=...)``, runs every file on each runtime build
of :data:`matrix_runners.BUILDS` in that build's own cached venv
(:func:`deform_onnx.runtimes.venvs.cached_venv`; created on first use from the
package registry, never mixed with the project's venv), in a subprocess,
compares each output with PyTorch on the same inputs, and writes a markdown
table into docs/support-matrix.md between the ``runtime-matrix`` markers.

With ``--only``, only those builds run and the page's table keeps the other
rows (the heading names the rows re-run).

One row per (build, target): "ran" when every model ran, else the first
error's first line; max abs error over the models that ran; median ms of the
bundled example (timings are indicative only when the machine is shared).

Usage::

    PYTHONPATH=src python scripts/runtime_matrix.py [--only NAME ...] [--print] [--timeout S]
"""

from __future__ import annotations

import argparse
import datetime
import io
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch

ROOT = Path(__file__).resolve().parents[1]
#: The page whose generated block this script writes (between BEGIN and END).
PAGE = ROOT / "docs" / "support-matrix.md"
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT / "scripts")]

from matrix_runners import BUILDS, NOT_RUN, REWRITERS, Build  # noqa: E402

import deform_onnx  # noqa: E402
from deform_onnx.cli.example import example_model, load_photo  # noqa: E402
from deform_onnx.runtimes.sealed import run_env  # noqa: E402
from deform_onnx.runtimes.venvs import cached_venv  # noqa: E402

BEGIN, END = "<!-- runtime-matrix:begin -->", "<!-- runtime-matrix:end -->"
#: The project's float32 rule (max abs error against PyTorch).
ATOL = 1e-4
#: Case models run beside the example: c04 and c12 are border-sensitive, c25 is the IR-version case.
CASES = ("c04", "c12", "c25")
REPEATS = 5


def models() -> list[tuple[str, torch.nn.Module, dict[str, torch.Tensor]]]:
    """(name, module, inputs by name) of the example and each case of :data:`CASES`."""
    from util import DeformLayer, case_config, make_inputs

    out = [("example", example_model(), {"x": load_photo()})]
    for case in CASES:
        cfg = case_config(case)
        out.append((case, DeformLayer(cfg).eval(), make_inputs(cfg)))
    return out


def export_all(work: Path, targets: list[str]) -> dict:
    """Export every model once per target; ``{(model, target): {"path"|"error", "method", "opset"}}``.

    A target written ``"TARGET:METHOD"`` is exported with ``method=METHOD, force=True``: a second graph form
    for a runtime whose target refuses every form, so that the table says what that runtime does with it.
    """
    files = {}
    for name, module, inputs in models():
        with torch.no_grad():
            want = module(*inputs.values()).numpy()
        np.save(work / f"{name}.want.npy", want)
        np.savez(work / f"{name}.feeds.npz", **{k: v.numpy() for k, v in inputs.items()})
        for target in targets:
            path = work / f"{name}__{target.replace('<', 'lt').replace(':', '-')}.onnx"
            # "TARGET:METHOD": the target's other graph form, written with force=True (its rules would refuse it)
            chosen, _, method = target.partition(":")
            try:
                buf = io.BytesIO()
                report = deform_onnx.export(module, tuple(inputs.values()), buf, target=chosen,
                                            method=method or None, force=bool(method),
                                            input_names=list(inputs), output_names=["y"])  # fmt: skip
                path.write_bytes(buf.getvalue())
                files[name, target] = {"path": path, "method": report.method, "opset": report.opset}
            except Exception as exc:  # noqa: BLE001 - recorded in the table
                files[name, target] = {"error": f"export refused: {_first_line(exc)}"}
            print(f"exported {name} for {target}: {files[name, target].get('error', 'ok')}", flush=True)
    return files


def _first_line(exc: BaseException | str) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def _bfloat16_inputs(model: Path) -> list[str]:
    """The graph inputs the file types bfloat16 (the runners feed those in bfloat16; the npz holds float32)."""
    graph = onnx.load(str(model), load_external_data=False).graph
    return [i.name for i in graph.input if i.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16]


def run_one(python: Path, build: Build, model: Path, name: str, inputs: list[str], work: Path, timeout: float) -> dict:
    """Run ``model`` in the build's venv (the package's :func:`~deform_onnx.runtimes.deployed.run_meta`); the
    runner's JSON plus ``max_error`` against PyTorch."""
    from deform_onnx.runtimes.deployed import Family, run_meta

    out = work / f"{model.stem}.{build.name}.{'ext' if build.extension else 'plain'}.out.npy"
    out.unlink(missing_ok=True)
    meta = {"model": str(model), "feeds": str(work / f"{name}.feeds.npz"), "out": str(out), "inputs": inputs,
            "output": "y", "output_shape": list(np.load(work / f"{name}.want.npy").shape), "repeats": REPEATS,
            "src": str(ROOT / "src"), "tool": str(python.parent), "extension": build.extension,
            "bfloat16": _bfloat16_inputs(model)}  # fmt: skip
    run = run_meta(Family(build.name, build.runtime, build.runner), python, meta, out, timeout)
    status: dict = {"version": run.version, "error": run.error, "ms": run.ms}
    if run.error is None and run.output is not None:
        got, want = run.output, np.load(work / f"{name}.want.npy")
        status["max_error"] = float(np.abs(got - want).max()) if got.shape == want.shape else None
        if status["max_error"] is None:
            status["error"] = f"output shape {list(got.shape)}, PyTorch's {list(want.shape)}"
    return status


def rewrite(build: Build, model: Path, timeout: float) -> tuple[Path | None, str]:
    """Apply the build's rewriter (onnxsim / onnxslim) in its own venv: (new file or None, version or error)."""
    venv, code = build.rewriter
    python = cached_venv(venv, REWRITERS[venv], timeout=timeout)
    target = model.with_name(f"{model.stem}.{venv}.onnx")
    try:
        done = subprocess.run([str(python), "-c", code, str(model), str(target)], capture_output=True, text=True,
                              timeout=timeout, env=run_env(python))  # fmt: skip
    except subprocess.TimeoutExpired:
        return None, f"{venv} timed out after {timeout:g} s"
    if done.returncode != 0 or not target.is_file():
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "no output"
        return None, f"{venv} failed: {_first_line(last)}"
    return target, done.stdout.strip().splitlines()[-1]


def measure(build: Build, files: dict, names: list[str], work: Path, timeout: float) -> list[dict]:
    """One row per target of ``build`` (see the module docstring)."""
    rows = []
    try:
        python = build.python(timeout)
    except RuntimeError as exc:
        return [
            {**_row(build, t, files, names, error=f"not run: {_first_line(exc)}"), "build": build.key}
            for t in build.targets
        ]
    for target in build.targets:
        results, version, tool = [], None, None
        for name in names:
            entry = files[name, target]
            if "error" in entry:
                results.append((name, {"error": entry["error"]}))
                continue
            model = entry["path"]
            if build.rewriter:
                model, tool_or_error = rewrite(build, model, timeout)
                if model is None:
                    results.append((name, {"error": tool_or_error}))
                    continue
                tool = tool_or_error
            inputs = list(np.load(work / f"{name}.feeds.npz").keys())
            status = run_one(python, build, model, name, inputs, work, timeout)
            version = status.get("version") or version
            results.append((name, status))
            print(f"  {build.runtime} {target} {name}: {status.get('error') or status.get('max_error')}", flush=True)
        rows.append(_row(build, target, files, names, results=results, version=version, tool=tool))
    for row in rows:
        row["build"] = build.key
    return rows


def _row(build: Build, target: str, files: dict, names: list[str], results=None, version=None, tool=None,
         error=None) -> dict:  # fmt: skip
    entry = files.get((names[0], target), {})
    method, opset = entry.get("method", "-"), entry.get("opset", "-")
    if error is None:
        failed = [(n, r["error"]) for n, r in results if r.get("error")]
        errors = [r["max_error"] for _, r in results if r.get("max_error") is not None]
        worst = max(errors) if errors else None
        if failed:
            ran = f"{failed[0][1]} ({', '.join(n for n, _ in failed)})"
            if errors:
                wrong = f"wrong, max error {worst:.2g}" if worst > ATOL else "within tolerance"
                ran = f"partly: {ran}; the others ran ({wrong})"
        elif worst is not None and worst > ATOL:
            ran = f"ran, wrong: max error {worst:.2g} > {ATOL:g}"
        else:
            ran = "ran"
        example = dict(results).get("example", {})
        ms = example.get("ms")
    else:
        ran, worst, ms = error, None, None
    shown_version = f"{tool} + {version}" if tool and version else (version or "-")
    return {"runtime": build.runtime, "version": shown_version, "target": target, "method": method,
            "opset": opset, "ran": ran, "max_error": worst, "ms": ms}  # fmt: skip


def table(rows: list[dict], command: str, names: list[str]) -> str:
    """The markdown block written between the page's markers."""
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    head = [
        f"Generated by `{command}` on {today} (one run; models: the bundled example on its photo, "
        f"cases {', '.join(n for n in names if n != 'example')}; float32; max abs error against PyTorch over "
        "the models that ran; median ms of the bundled example over "
        f"{REPEATS} runs on a shared, loaded 2-core machine: timings are indicative only).",
        "",
        "| runtime | version | target | method | opset | ran, or the error's first line | max abs error | median ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    body = [row_line(r) for r in rows]
    for family, why in NOT_RUN.items():
        body.append(f"| {family} | - | - | - | - | {why} | - | - |")
    return "\n".join(head + body)


def row_line(r: dict) -> str:
    """One markdown table row."""
    err = "-" if r["max_error"] is None else f"{r['max_error']:.1e}"
    ms = "-" if r["ms"] is None else f"{r['ms']:.1f}"
    ran = str(r["ran"]).replace("|", "\\|")
    cells = [r["runtime"], r["version"], f"`{r['target']}`", r["method"], r["opset"], ran, err, ms]
    return "| " + " | ".join(map(str, cells)) + " |"


def _owner(line: str) -> tuple[str, str] | None:
    """``(build key, target)`` of an old table row, or ``None`` for a row no build of :data:`BUILDS` writes.

    Builds sharing a runtime name are told apart by the version their venv pins (``ort-1.16.3``
    wrote "1.16.3"); the unpinned one (``ort-newest``) takes the rest.
    """
    cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
    runtime, version, target = cells[0], cells[1], cells[2].strip("`")
    found = [b for b in BUILDS if b.runtime == runtime and target in b.targets]
    if len(found) > 1:
        pin = lambda b: b.name.split("-", 1)[-1]  # noqa: E731
        pinned = [b for b in found if any(ch.isdigit() for ch in pin(b))]
        found = [b for b in pinned if pin(b) in version] or [b for b in found if b not in pinned]
    return (found[0].key, target) if len(found) == 1 else None


def merged_table(old_block: str, rows: list[dict], command: str, keys: list[str]) -> str:
    """The page's table with the rows of a partial run (``--only``) replaced or added, in :data:`BUILDS` order.

    Rows of builds not run keep their old line (rows that no build of :data:`BUILDS` writes any more
    go); the heading keeps its old text and says which rows were re-run.
    """
    old_lines = old_block.strip().splitlines()
    is_row = lambda line: line.startswith("| ") and not line.startswith(("| runtime ", "|---"))  # noqa: E731
    head = [line for line in old_lines if not is_row(line) and not line.startswith("Rows of ")]
    old_rows = {}
    for line in filter(is_row, old_lines):
        owner = _owner(line)
        if owner is not None:
            old_rows[owner] = line
    new_rows = {(r["build"], r["target"]): row_line(r) for r in rows}
    order = [(b.key, t) for b in BUILDS for t in b.targets]
    body = [new_rows.get(k) or old_rows[k] for k in dict.fromkeys(order) if k in new_rows or k in old_rows]
    body += [f"| {family} | - | - | - | - | {why} | - | - |" for family, why in NOT_RUN.items()]
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    note = f"Rows of {', '.join(keys)} re-run on {today} by `{command}` (the same models and rules)."
    table_at = next(i for i, line in enumerate(head) if line.startswith("| runtime "))
    return "\n".join([*head[:table_at], note, "", *head[table_at:], *body])


def read_readme_block() -> str:
    """The text between the markers in docs/support-matrix.md (the markers must be there)."""
    text = PAGE.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{PAGE.relative_to(ROOT)} has no {BEGIN} ... {END} markers: add them where the table goes")
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def write_readme(block: str) -> None:
    """Replace the text between the markers in docs/support-matrix.md (the markers must be there)."""
    readme = PAGE
    read_readme_block()
    text = readme.read_text()
    before, rest = text.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    readme.write_text(f"{before}{BEGIN}\n{block}\n{END}{after}")


def main(argv: list[str] | None = None) -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", nargs="*", help="keys of the builds to run (venv name; onnxsim, onnxslim; NAME+ext; default: all)"
    )
    parser.add_argument(
        "--print", "--no-readme", dest="no_readme", action="store_true", help="print the table instead of writing it"
    )
    parser.add_argument("--timeout", type=float, default=400, help="seconds per venv creation step and per run")
    parser.add_argument("--work", type=Path, help="folder for the exported files (default: a temporary one)")
    args = parser.parse_args(argv)
    builds = [b for b in BUILDS if not args.only or b.key in args.only]
    targets = list(dict.fromkeys(t for b in builds for t in b.targets))
    work = args.work or Path(tempfile.mkdtemp(prefix="runtime-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    files = export_all(work, targets)
    names = list(dict.fromkeys(n for n, _ in files))
    rows = []
    for build in builds:
        print(f"{build.runtime} ({build.key})", flush=True)
        rows.extend(measure(build, files, names, work, args.timeout))
    command = "PYTHONPATH=src python scripts/runtime_matrix.py"
    command += f" --only {' '.join(args.only)}" if args.only else ""
    block = table(rows, command, names)
    if args.only and not args.no_readme:  # a partial run: the other rows of the page's table stay
        block = merged_table(read_readme_block(), rows, command, args.only)
    (work / "table.md").write_text(block)
    print(block)
    if not args.no_readme:
        write_readme(block)
    print(f"done in {time.time() - started:.0f} s; files in {work}")


if __name__ == "__main__":
    main()
