"""The op family on every runtime family (issue 19 item 7), measured on the newest builds; not part of the test run.

scripts/runtime_matrix.py runs deformable convolution on every build; this runs the
other ops deform-onnx exports, each small, once per family on that family's newest
build (:data:`FAMILIES`: a build of :data:`matrix_runners.BUILDS` and the target
its file is exported for). Per op model of :func:`op_models` and family:
``deform_onnx.export(..., target=T)`` (what export did: method and opset, or
"export refused: " and the error's first line), then the build's runner
(:mod:`matrix_runners`, in the build's own cached venv), then the output against
PyTorch's on the same inputs at the project's float32 rule (max abs error
<= 1e-4); the bfloat16 rows (:mod:`op_matrix_bfloat16`) against the float32 model at the bfloat16
rule. The table goes into docs/support-matrix.md between the ``op-matrix`` markers.

Usage::

    PYTHONPATH=src python scripts/op_matrix.py [--only KEY ...] [--ops NAME ...] [--print] [--timeout S]

With ``--only`` / ``--ops`` the page's other rows stay (rows are told apart by op and runtime).
"""

from __future__ import annotations

import argparse
import datetime
import io
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
#: The page whose generated block this script writes (between BEGIN and END).
PAGE = ROOT / "docs" / "support-matrix.md"
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT / "scripts")]

import op_matrix_bfloat16 as bf16  # noqa: E402
from matrix_runners import BUILDS, Build  # noqa: E402
from runtime_matrix import _first_line, rewrite, run_one  # noqa: E402

import deform_onnx  # noqa: E402

BEGIN, END = "<!-- op-matrix:begin -->", "<!-- op-matrix:end -->"
#: The project's float32 rule (max abs error against PyTorch), for every op here.
ATOL = 1e-4
#: (build key of :data:`matrix_runners.BUILDS`, target its files are exported for): the newest build per family.
FAMILIES: tuple[tuple[str, str], ...] = (
    ("ort-newest", "onnxruntime"),
    ("ov-newest", "openvino"),
    ("onnxsim", "onnxruntime"),
    ("onnxslim", "onnxruntime"),
    ("mnn", "mnn"),
    ("tvm", "tvm"),
    ("pnnx", "ncnn"),
    ("onnx2tf", "tflite"),
    ("onnx2torch", "onnx2torch"),
)


#: Op model key -> the table's op column, in table order (:func:`op_models` builds them).
LABELS: dict[str, str] = {
    "gs4d": "grid_sample 4-D bilinear, zeros, align_corners=False",
    "gs4d-reflection": "grid_sample 4-D bilinear, reflection, align_corners=True",
    "gs5d": "grid_sample 5-D trilinear, zeros, align_corners=False",
    "gs5d-20": "grid_sample 5-D trilinear, zeros, align_corners=False, `opset_version=20`",
    "gs-bicubic": "grid_sample 4-D bicubic, zeros, align_corners=False",
    "msda": "MSDA, the fused op (`MSDeformAttnCore`)",
    "msda-plain": "MSDA, Deformable DETR's PyTorch core (one grid_sample per level)",
    "dcnv3": "DCNv3 layer (`deform_onnx.DCNv3`, NHWC)",
    "dcn-bands": "DCNv2 layer at 64x64 output pixels (lowered in 2 row bands)",
    **bf16.LABELS,
}

#: Export options beside ``target=`` per op key (5-D GridSample-20 needs opset 20; the targets pick 17 to 19).
EXPORT_OPTIONS: dict[str, dict] = {"gs5d-20": {"opset_version": 20}}


class GridSample(torch.nn.Module):
    """``F.grid_sample(x, grid, **options)``: the op as models call it."""

    def __init__(self, **options):
        super().__init__()
        self.options = options

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(x, grid, **self.options)


def _grid_inputs(shape: list[int], grid: list[int], span: float, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    return {"x": x, "grid": (torch.rand(*grid, generator=g) * 2 - 1) * span}


def op_models() -> list[tuple[str, torch.nn.Module, dict[str, torch.Tensor]]]:
    """(key of :data:`LABELS`, module, inputs by name), batch 1 throughout (ncnn has no batch axis).

    Shapes from cases c22 (4-D), c29 (5-D), c30 (bicubic), c23 (MSDA) and c24 (DCNv3) of
    ``/work/shared/cases``, batch 1; sample points partly outside the input.
    """
    from deform_onnx.ops import MSDeformAttnCore, MSDeformAttnReference
    from deform_onnx.ops.dcnv3 import DCNv3
    from util import load_cases

    cases = load_cases()
    c29, c30 = cases["c29"]["input"], cases["c30"]["input"]
    out = [
        ("gs4d", GridSample(align_corners=False), _grid_inputs([1, 8, 13, 17], [1, 5, 7, 2], 1.2, 22)),
        ("gs4d-reflection", GridSample(padding_mode="reflection", align_corners=True),
         _grid_inputs([1, 8, 13, 17], [1, 5, 7, 2], 1.2, 22)),
        ("gs5d", GridSample(align_corners=False),
         _grid_inputs([1, *c29["input"][1:]], [1, *c29["grid"][1:]], c29["grid_range"][1], 29)),
        ("gs5d-20", GridSample(align_corners=False),
         _grid_inputs([1, *c29["input"][1:]], [1, *c29["grid"][1:]], c29["grid_range"][1], 29)),
        ("gs-bicubic", GridSample(mode="bicubic", align_corners=False),
         _grid_inputs(c30["input"], c30["grid"], c30["grid_range"][1], 30)),
    ]  # fmt: skip
    c23 = cases["c23"]["input"]
    levels = [tuple(s) for s in c23["levels"]]
    g = torch.Generator().manual_seed(23)
    M, D, Lq, P, L = c23["heads"], c23["head_dim"], c23["queries"], c23["points"], len(levels)
    msda = {
        "value": torch.randn(1, sum(h * w for h, w in levels), M, D, generator=g),
        "sampling_locations": torch.rand(1, Lq, M, L, P, 2, generator=g) * 1.2 - 0.1,
        "attention_weights": torch.randn(1, Lq, M, L * P, generator=g).softmax(-1).view(1, Lq, M, L, P),
    }
    out.append(("msda", MSDeformAttnCore(levels), msda))
    out.append(("msda-plain", MSDeformAttnReference(levels), msda))
    c24 = cases["c24"]["input"]
    torch.manual_seed(24)
    dcn = DCNv3(c24["channels"], c24["kernel"], c24["stride"], c24["pad"], c24["dilation"], c24["group"],
                c24["offset_scale"], c24["remove_center"]).eval()  # fmt: skip
    with torch.no_grad():  # offsets of a few pixels, some points outside the image (as tests/test_dcnv3.py)
        dcn.offset.weight.mul_(6.0)
        dcn.mask.weight.mul_(3.0)
    x = torch.randn(1, c24["H"], c24["W"], c24["channels"], generator=torch.Generator().manual_seed(24))
    out.append(("dcnv3", dcn, {"x": x}))
    # A map over common.BAND_PIXELS: the standard-op lowerings cut it into row bands (ncnn: batch 1)
    from util import Config, DeformLayer, make_inputs

    cfg = Config(C_in=8, C_out=8, H=64, W=64)
    out.append(("dcn-bands", DeformLayer(cfg).eval(), make_inputs(cfg)))
    return out + bf16.models(GridSample)


def export_ops(work: Path, targets: list[str], ops: list[str] | None = None) -> dict:
    """Export each op model once per target: ``{(op, target): {"path"|"error", "method", "opset"}}``."""
    files = {}
    for key, module, inputs in op_models():
        if ops and key not in ops:
            continue
        if bf16.is_bfloat16(inputs):  # numpy has no bfloat16: float32 feeds, the float32 model's output
            want, feeds = bf16.reference(module, inputs)
        else:
            with torch.no_grad():
                want = module(*inputs.values()).numpy()
            feeds = {k: v.numpy() for k, v in inputs.items()}
        np.save(work / f"{key}.want.npy", want)
        np.savez(work / f"{key}.feeds.npz", **feeds)
        for target in targets:
            path = work / f"{key}__{target.replace('<', 'lt')}.onnx"
            try:
                buf = io.BytesIO()
                report = deform_onnx.export(module, tuple(inputs.values()), buf, target=target,
                                            input_names=list(inputs), output_names=["y"],
                                            **EXPORT_OPTIONS.get(key, {}))  # fmt: skip
                path.write_bytes(buf.getvalue())
                method = f"{report.method}: {graph_form(onnx.load_from_string(buf.getvalue()))}"
                files[key, target] = {"path": path, "method": method, "opset": report.opset}
            except Exception as exc:  # noqa: BLE001 - recorded in the table
                files[key, target] = {"error": f"export refused: {_first_line(exc)}"}
            print(f"exported {key} for {target}: {files[key, target].get('error', 'ok')}", flush=True)
    return files


def graph_form(model: onnx.ModelProto) -> str:
    """What the written graph samples with: its ``GridSample`` nodes (rank, mode) or "standard ops".

    ``export`` reports the method it resolved for the model; a call the target cannot run as
    GridSample (5-D below opset 20, cubic where the runtime lacks it) still takes the gather form.
    """
    shapes = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    shapes.update({v.name: v for v in model.graph.input})
    kinds = []
    for node in model.graph.node:
        if node.op_type == "GridSample":
            mode = next((a.s.decode() for a in node.attribute if a.name == "mode"), "bilinear")
            value = shapes.get(node.input[0])
            rank = len(value.type.tensor_type.shape.dim) if value is not None else 4
            kinds.append(f"GridSample {rank}-D {mode}")
        elif node.op_type == "DeformConv":
            kinds.append("DeformConv")
    return ", ".join(sorted(set(kinds))) if kinds else "standard ops"


def verdict(status: dict) -> str:
    """The "ran" cell of one run: "ran", "ran, wrong: max error X", or the error's first line.

    A bfloat16 row's ``status["within"]``: :func:`op_matrix_bfloat16.within` of its output.
    """
    if status.get("error"):
        return str(status["error"])
    err = status.get("max_error")
    if "within" in status:
        if status["within"]:
            return "ran"
        rule = f"{bf16.ATOL:g} + {bf16.RTOL:g}|want|"
        return f"ran, wrong: max error {err:.2g}, over {rule}" if err is not None else "ran, no comparable output"
    if err is None or not np.isfinite(err) or err > ATOL:
        return f"ran, wrong: max error {err:.2g} > {ATOL:g}" if err is not None else "ran, no comparable output"
    return "ran"


def measure(build: Build, target: str, files: dict, ops: list[str], work: Path, timeout: float) -> list[dict]:
    """One row per op of ``ops`` on ``build`` with the files exported for ``target``."""
    base = {"runtime": build.runtime, "target": target, "build": build.key}
    try:
        python = build.python(timeout)
    except RuntimeError as exc:
        why = f"not run: {_first_line(exc)}"
        return [{**base, "op": op, "version": "-", "method": "-", "opset": "-", "ran": why, "max_error": None}
                for op in ops]  # fmt: skip
    rows = []
    for op in ops:
        entry = files[op, target]
        row = {**base, "op": op, "method": entry.get("method", "-"), "opset": entry.get("opset", "-")}
        status: dict = {"error": entry.get("error")}
        tool = None
        if "error" not in entry:
            model: Path | None = entry["path"]
            if build.rewriter:
                model, tool = rewrite(build, entry["path"], timeout)
                status = {"error": tool} if model is None else status
            if model is not None:
                inputs = list(np.load(work / f"{op}.feeds.npz").keys())
                status = run_one(python, build, model, op, inputs, work, timeout)
                if op in bf16.LABELS and status.get("max_error") is not None:
                    got = np.load(work / f"{model.stem}.{build.name}.{'ext' if build.extension else 'plain'}.out.npy")
                    status["within"] = bf16.within(got, np.load(work / f"{op}.want.npy"))
        version = status.get("version")
        row["version"] = f"{tool} + {version}" if tool and version else (version or "-")
        row["ran"], row["max_error"] = verdict(status), status.get("max_error")
        print(f"  {build.key} {op}: {row['ran']} ({row['max_error']})", flush=True)
        rows.append(row)
    return rows


def row_line(r: dict) -> str:
    """One markdown row: op, runtime, version, target, method, opset, ran, max abs error."""
    err = "-" if r["max_error"] is None else f"{r['max_error']:.1e}"
    ran = str(r["ran"]).replace("|", "\\|")
    cells = [LABELS.get(r["op"], r["op"]), r["runtime"], r["version"], f"`{r['target']}`", r["method"], r["opset"],
             ran, err]  # fmt: skip
    return "| " + " | ".join(map(str, cells)) + " |"


HEADER = (
    "| op | runtime | version | target | method | opset | ran, or the error's first line | max abs error |",
    "|---|---|---|---|---|---|---|---|",
)


def table(rows: list[dict], command: str, old_block: str = "") -> str:
    """The markdown block between the page's markers, in :data:`LABELS` x :data:`FAMILIES` order.

    Rows of ``old_block`` (the page's table) that were not re-run stay; rows of ops or runtimes
    no longer listed go.
    """
    today = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    new = {(LABELS.get(r["op"], r["op"]), r["runtime"]): row_line(r) for r in rows}
    old = {}
    for line in old_block.strip().splitlines():
        if line.startswith("| ") and line not in HEADER:
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            old[cells[0], cells[1]] = line
    runtimes = [b.runtime for key, _ in FAMILIES for b in BUILDS if b.key == key]
    merged = {**old, **new}
    body = [merged[k] for op in LABELS.values() for rt in runtimes if (k := (op, rt)) in merged]
    generated = [line for line in old_block.strip().splitlines() if line.startswith("Generated by ")]
    notes = [line for line in old_block.strip().splitlines() if line.startswith("Rows of ")]
    if generated:  # a partial run: the full run's heading stays, with a line naming what was re-run
        ops = "; ".join(dict.fromkeys(LABELS.get(r["op"], r["op"]) for r in rows))
        runtimes_run = "; ".join(dict.fromkeys(r["runtime"] for r in rows))
        note = f"Rows of {ops} on {runtimes_run} re-run on {today} by `{command}`."
        head = [generated[0], "", *(x for n in notes for x in (n, "")), note, "", *HEADER]
    else:
        head = [
            f"Generated by `{command}` on {today} (batch 1, float32, small shapes; max abs error against PyTorch "
            f"on the same inputs; 'wrong' means over {ATOL:g}; bfloat16 rows: against the float32 model, 'wrong' "
            f"means over {bf16.ATOL:g} + {bf16.RTOL:g}\\|want\\|, the project's bfloat16 rule). Each family's newest build runs the file exported "
            "for its own target; 'method' and 'opset' are what `deform_onnx.export(..., target=...)` wrote.",
            "",
            *HEADER,
        ]
    return "\n".join(head + body)


def read_readme_block() -> str:
    """The text between the markers in docs/support-matrix.md, or "" when they are missing."""
    text = PAGE.read_text()
    return text.split(BEGIN, 1)[1].split(END, 1)[0] if BEGIN in text and END in text else ""


def write_readme(block: str) -> None:
    """Replace the text between the markers in docs/support-matrix.md (the markers must be there)."""
    readme = PAGE
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{PAGE.relative_to(ROOT)} has no {BEGIN} ... {END} markers: add them where the table goes")
    before, rest = text.split(BEGIN, 1)
    tmp = readme.with_suffix(".md.tmp")
    tmp.write_text(f"{before}{BEGIN}\n{block}\n{END}{rest.split(END, 1)[1]}")
    tmp.replace(readme)


def main(argv: list[str] | None = None) -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="build keys of FAMILIES to run (default: all)")
    parser.add_argument("--ops", nargs="*", help="op keys to run (gs4d, gs5d, gs-bicubic, msda, dcnv3, ...)")
    parser.add_argument(
        "--print", "--no-readme", dest="no_readme", action="store_true", help="print the table instead of writing it"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds per venv creation step and per run")
    parser.add_argument("--work", type=Path, help="folder for the exported files (default: a temporary one)")
    args = parser.parse_args(argv)
    families = [(k, t) for k, t in FAMILIES if not args.only or k in args.only]
    builds = {b.key: b for b in BUILDS}
    work = args.work or Path(tempfile.mkdtemp(prefix="op-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    files = export_ops(work, list(dict.fromkeys(t for _, t in families)), args.ops)
    ops = list(dict.fromkeys(op for op, _ in files))
    rows = []
    for key, target in families:
        print(f"{builds[key].runtime} ({key}, target {target})", flush=True)
        rows.extend(measure(builds[key], target, files, ops, work, args.timeout))
    command = "PYTHONPATH=src python scripts/op_matrix.py"
    command += f" --only {' '.join(args.only)}" if args.only else ""
    command += f" --ops {' '.join(args.ops)}" if args.ops else ""
    partial = bool(args.only or args.ops)
    block = table(rows, command, read_readme_block() if partial else "")
    (work / "table.md").write_text(block)
    print(block)
    if not args.no_readme:
        write_readme(block)
    print(f"done in {time.time() - started:.0f} s; files in {work}")


if __name__ == "__main__":
    main()
