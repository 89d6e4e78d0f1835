"""The deformable-convolution suite's goals (issues 5 and 13): :func:`evaluate_goals`, from one run's ratios."""

from __future__ import annotations

from .harness import BenchResult, Goal
from .report import extra_bytes

#: Contender all ratios are taken to.
REFERENCE = "ort-native"
#: The lower bound every contender is also compared with (issue 13).
LIMIT = "ort-dense"


def evaluate_goals(result: BenchResult) -> list[Goal]:
    """The goals of issues 5 and 13, from this run's numbers."""
    out = []

    def fmt(ratio):
        return "—" if ratio is None else f"{ratio:.2f}x"

    def ratio_goal(name, key, limit, worst=False, to=None):
        g = result.worst_ratio(key, to) if worst else result.geomean_ratio(key, to)
        out.append(
            Goal(name, fmt(g) if not worst or g is None else f"worst {g:.2f}x", None if g is None else g <= limit)
        )

    def speed_goal(name, slow, fast, limit):
        s = result.geomean_ratio(slow, fast)  # geomean of time(slow) / time(fast)
        out.append(Goal(name, "n/a" if s is None else f"{s:.2f}x faster", None if s is None else s >= limit))

    ratio_goal("grid_sample lowering <= 1.2x ORT native (geomean)", "ort-grid_sample", 1.2)
    ratio_goal("stretch: grid_sample lowering <= 1.0x ORT native", "ort-grid_sample", 1.0)
    speed_goal("gather lowering >= 3x faster than the old exporter", "ort-old", "ort-gather", 3.0)
    speed_goal("grid_sample lowering >= 5x faster than torchvision eager", "torch", "ort-grid_sample", 5.0)
    speed_goal("gather lowering >= 3x faster than torchvision eager", "torch", "ort-gather", 3.0)
    ratio_goal("OpenVINO + extension <= 1.1x ORT native", "ov-extension", 1.1)
    ratio_goal("issue 13: grid_sample <= 1.0x ORT native at every shape", "ort-grid_sample", 1.0, worst=True)
    ratio_goal("issue 13: gather <= 1.5x ORT native at every shape", "ort-gather", 1.5, worst=True)
    for key in ("ort-grid_sample", "ort-gather"):
        ratio_goal(
            f"issue 13 stretch: {key.removeprefix('ort-')} within 1.5x of the dense Conv at every shape",
            key,
            1.5,
            worst=True,
            to=LIMIT,
        )
    ratio_goal("issue 13: OpenVINO after lower() <= 1.0x ORT native (geomean)", "ov-lowered", 1.0)
    lowered = [k for k in ("ort-grid_sample", "ort-gather") if k in {c.key for c in result.contenders}]
    all_consts = [result.cell(s, k).stats.largest_constant_bytes for s in result.shapes for k in lowered]
    consts = [c for c in all_consts if c is not None]
    all_extra = [extra_bytes(result, s, k) for s in result.shapes for k in lowered]
    extra = [e for e in all_extra if e is not None]
    out.append(
        Goal(
            "no lowered node adds > 64 KB to the file beyond the weights",
            (
                f"largest constant {max(consts) / 1024:.1f} KB; whole lowering adds at most "
                f"{max(extra) / 1024:.1f} KB over the native file"
            )
            if consts and extra
            else "n/a",
            (max(consts) <= 64 * 1024) if consts else None,
        )
    )
    for key in lowered:
        all_ratios = [result.memory_ratio(s, key) for s in result.shapes]
        ratios = [r for r in all_ratios if r is not None]
        out.append(
            Goal(
                f"peak memory of {key.removeprefix('ort-')} lowering <= 1.5x native (every shape)",
                f"worst {max(ratios):.2f}x" if ratios else "n/a",
                (max(ratios) <= 1.5) if ratios else None,
            )
        )
    return out
