"""Graph forms for the litert-torch ``.tflite`` writer, measured in LiteRT (issue 38).

    PYTHONPATH=src python scripts/repro/litert_forms.py                        # every case, every candidate
    PYTHONPATH=src python scripts/repro/litert_forms.py --cases 1x64x64,example --candidates corner-major
    PYTHONPATH=src python scripts/repro/litert_forms.py --pte --cases 1x64x64   # the .pte's forms instead

The ``.tflite`` writer (:mod:`deform_onnx.formats.litert`) asks the lowerings for the graph forms of its
``FORMS`` (:mod:`deform_onnx.builder.forms`) while ``torch.export`` traces them as torch ops. For each case this
script writes the file with the current ``FORMS``, once with each candidate tuple, and with the current
``FORMS`` again (the control: the same form, byte for byte, so its ratio is the noise of the run), by patching
``deform_onnx.formats.litert.FORMS`` around ``deform_onnx.export(model, args, "x.tflite")`` (each file is run in
LiteRT against PyTorch before it is written, as always; a file that does not match is a ``failed`` row). Then
it times every file of the case in this one process: ai-edge-litert's interpreter with 2 threads (as
benchmarks/formats.py runs it), interleaved rounds whose order rotates, the median wall time and the median
process CPU time (``time.process_time``: all threads of this process, so less moved by other jobs on a
shared machine) per call, and each one's ratio to the geometric mean of the current form's two files. One
more session of the first file is made first and never timed: without it the first session made ran
slower than the control of the same bytes (the example net, by about a sixth, in two runs).

Cases: DCNv2 layers ``N x C x H`` (benchmarks/formats.py's ``Layer``: C_in = C_out, 3x3, padding 1, mask,
offsets randn * 2 px), ``NxCxHog8`` the same with 8 offset groups (offset ``[N, 144, H, W]``, mask
``[N, 72, H, W]``), ``example`` (the bundled DCNv2 net on the 128x128 astronaut photo) and ``detr`` (Deformable
DETR's encoder on a 256x256 image: its attention's ``F.grid_sample`` in the gather form).

Candidates (each adds forms to the current ones; ``"corner-major gather"`` overrides ``"four corner gathers"``):
``corner-major``, ``float rows`` (``"float row index"``), ``int32 rows`` (``"float row index"`` +
``"int32 row index"``), ``corner-major int32`` (all three: what the ONNX ``tflite`` target asks for),
``one Pad`` (``"table by one Pad"``), ``flat groups`` (``"flat offset groups"``: the same file as the current
form without offset groups), ``quad`` (``"quad table"``: one gather of a quad table's row per tap instead of four
corner gathers). Measured here (``--candidates quad``, every case but ``detr``): the ``.tflite`` with the quad
table ran faster than the control's spread on 1x256x32 and the example net (two runs each), but slower on 1x64x64
(two runs) and 4x64x32,
and on 1x64x64 og8 faster in one run and within the spread in the next; so the writer does not ask for it. The
``.pte`` with it (``--pte --cases 1x64x64og8 --candidates quad``) ran slower by CPU time, within the spread by wall
time. With ``--pte`` the same for the ``.pte`` writer
(:mod:`deform_onnx.formats.executorch`) and ExecuTorch's runtime (its own thread pool).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as benchmarks/formats.py: no spinning torch workers

import torch  # after the OpenMP setting

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "benchmarks")]

from formats import Layer, detr_case, example_case, layer_case  # noqa: E402

CANDIDATES = {
    "corner-major": ("corner-major gather",),
    "float rows": ("float row index",),
    "int32 rows": ("float row index", "int32 row index"),
    "corner-major int32": ("corner-major gather", "float row index", "int32 row index"),
    "one Pad": ("table by one Pad",),
    "flat groups": ("flat offset groups",),
    "quad": ("quad table",),
}


def og_layer_case(shape: str, groups: int):
    """A DCNv2 layer ``N x C x H`` with ``groups`` offset groups (the deployed bench's ``og8``)."""
    n, c, h = (int(v) for v in shape.split("x"))
    gen = torch.Generator().manual_seed(0)
    args = (torch.randn(n, c, h, h, generator=gen), torch.randn(n, 18 * groups, h, h, generator=gen) * 2,
            torch.randn(n, 9 * groups, h, h, generator=gen).sigmoid())  # fmt: skip
    return f"DCNv2 {shape} og{groups}", Layer(c).eval(), args


def case(name: str):
    """``(label, model, args)`` of a case name (see the module docstring)."""
    if name == "example":
        return example_case(128)
    if name == "detr":
        return detr_case(256)
    if name.endswith("og8"):
        return og_layer_case(name[:-3], 8)
    return layer_case(name)


def write_all(label: str, model, args, out: Path, candidates: dict, pte: bool, reuse: bool) -> tuple[dict, dict]:
    """``{contender: path}`` of the files written and ``{contender: note}`` (max error, write seconds or failure).

    ``reuse``: a file already in ``out`` (an earlier run's ``--keep``) is timed again, not written.
    """
    import deform_onnx
    from deform_onnx.formats import executorch, litert

    module = executorch if pte else litert
    current = module.FORMS
    # the control last: its session is made after the candidates' (the sessions made first ran slower in some runs)
    tuples = {"current": current, **{k: tuple(dict.fromkeys(current + v)) for k, v in candidates.items()}}
    tuples["current (control)"] = current
    paths, notes = {}, {}
    for contender, forms in tuples.items():
        name = "".join(ch for ch in f"{label}_{contender}" if ch not in "()").replace(" ", "_")
        path = out / (name + (".pte" if pte else ".tflite"))
        if reuse and path.exists():
            paths[contender], notes[contender] = path, "reused"
            continue
        started = time.perf_counter()
        module.FORMS = forms
        try:
            report = deform_onnx.export(model, args, path, method="gather")
        except Exception as exc:  # noqa: BLE001 - a file that cannot be written is a row
            notes[contender] = "failed: " + " ".join(str(exc).split())[:200]
            continue
        finally:
            module.FORMS = current
        paths[contender] = path
        notes[contender] = f"max error {report.max_error:.1e}, written in {time.perf_counter() - started:.0f} s"
    return paths, notes


def runners(paths: dict, feeds: list, pte: bool) -> dict:
    """``{contender: callable}`` running each file once (its runtime's session kept alive by the closure)."""
    run = {}
    # a first session of the first file, never timed: the session made first ran slower than a later one of the
    # same bytes (the example net, by a sixth in CPU time), whatever its place in the rounds
    first = [runners_spare(paths, pte)] if paths else []
    for contender, path in paths.items():
        if pte:
            from deform_onnx.formats.executorch import ExecuTorchSession

            session = ExecuTorchSession(path.read_bytes())
            tensors = [torch.from_numpy(f) for f in feeds]
            run[contender] = lambda s=session, t=tensors: s._method.execute(t)
        else:
            from deform_onnx.formats.litert import LiteRTSession

            lite = LiteRTSession(path.read_bytes(), num_threads=2)
            keyed = dict(zip([i.name for i in lite.get_inputs()], feeds, strict=True))
            run[contender] = lambda r=lite._runner, k=keyed, s=lite: r(**k)
    run_spare = first  # alive until the runners are
    return {k: (lambda f=f, _=run_spare: f()) for k, f in run.items()}


def runners_spare(paths: dict, pte: bool):
    """A session of the first file in ``paths`` (see :func:`runners`)."""
    data = next(iter(paths.values())).read_bytes()
    if pte:
        from deform_onnx.formats.executorch import ExecuTorchSession

        return ExecuTorchSession(data)
    from deform_onnx.formats.litert import LiteRTSession

    return LiteRTSession(data, num_threads=2)


def timed(run: dict, rounds: int, warmup: int = 3) -> dict:
    """``{contender: (median wall s, median process CPU s)}`` per call, interleaved with rotating order."""
    names = list(run)
    wall = {n: [] for n in names}
    cpu = {n: [] for n in names}
    for r in range(warmup + rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            time.sleep(0.005)
            t, c = time.perf_counter(), time.process_time()
            run[n]()
            dt, dc = time.perf_counter() - t, time.process_time() - c
            if r >= warmup:
                wall[n].append(dt)
                cpu[n].append(dc)
    return {n: (statistics.median(wall[n]), statistics.median(cpu[n])) for n in names}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="1x64x64,1x256x32,1x64x64og8,4x64x32,example,detr")
    parser.add_argument("--candidates", default=",".join(CANDIDATES), help="names of CANDIDATES, comma-separated")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--pte", action="store_true", help="the .pte writer and ExecuTorch instead")
    parser.add_argument("--keep", type=Path, help="write the files here (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="time the files already in --keep again")
    opts = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(2)
    candidates = {k: CANDIDATES[k] for k in opts.candidates.split(",") if k}
    with tempfile.TemporaryDirectory() as tmp:
        out = opts.keep or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        for name in opts.cases.split(","):
            label, model, args = case(name)
            paths, notes = write_all(label, model, args, out, candidates, opts.pte, opts.reuse)
            load = os.getloadavg()[0]
            times = timed(runners(paths, [a.numpy() for a in args], opts.pte), opts.rounds)
            # the reference: the geometric mean of the current form's two files, whose sessions are made first and
            # last; the control's ratio to it is the run's noise
            pair = [times[k] for k in ("current", "current (control)") if k in times]
            base = tuple(statistics.geometric_mean(p[i] for p in pair) for i in (0, 1))
            same = {k: paths[k].read_bytes() == paths["current"].read_bytes() for k in paths if "current" in paths}
            print(f"\n{label} ({'.pte' if opts.pte else '.tflite'}; {opts.rounds} rounds, load {load:.2f} "
                  f"before, {os.getloadavg()[0]:.2f} after)")  # fmt: skip
            print(f"  {'contender':<20} {'wall ms':>8} {'x cur':>6} {'cpu ms':>8} {'x cur':>6}  file (x cur: to the "
                  "geometric mean of current and its control)")  # fmt: skip
            for contender, note in notes.items():
                if contender not in times:
                    print(f"  {contender:<20} {note}")
                    continue
                w, c = times[contender]
                print(
                    f"  {contender:<20} {w * 1e3:8.2f} {w / base[0]:6.3f} {c * 1e3:8.2f} {c / base[1]:6.3f}  {note}"
                    + ("; the current file's bytes" if same.get(contender) and contender != "current" else "")
                )
            sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
