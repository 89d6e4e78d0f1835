"""Shared helpers of the parity tests: configurations, inputs, export, ONNX Runtime, reference.

The reference is always ``torchvision.ops.deform_conv2d`` (through
``torchvision.ops.DeformConv2d``) evaluated in PyTorch on the same tensors;
no expected value is ever typed in.
"""

from __future__ import annotations

import io
import json
import math
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import torch
import torchvision

from deform_onnx.ops.deform_conv.register import LOWERINGS
from deform_onnx.ops.deform_conv.spec import out_size
from deform_onnx.ops.registry import OPS

#: float32 parity tolerance (max abs error), from the project rules.
ATOL = 1e-4

Pair = tuple[int, int]
Bias = bool | str  # True, False or "zeros" (a bias that is present but all zero)


def pair(v) -> Pair:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


@dataclass(frozen=True)
class Config:
    """One deformable convolution layer and its input size (field names as in cases.json)."""

    N: int = 1
    C_in: int = 6
    C_out: int = 6
    H: int = 8
    W: int = 8
    kernel: Pair = (3, 3)
    stride: Pair = (1, 1)
    padding: Pair = (1, 1)
    dilation: Pair = (1, 1)
    groups: int = 1
    offset_groups: int = 1
    mask: bool = True
    bias: Bias = True
    offset_scale: float = 2.0
    dtype: Any = field(default=torch.float32)

    def __post_init__(self):
        for name in ("kernel", "stride", "padding", "dilation"):
            object.__setattr__(self, name, pair(getattr(self, name)))

    @classmethod
    def from_case(cls, case_input: dict) -> Config:
        """Build from a ``cases.json`` ``input`` object."""
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in case_input.items()})

    def at(self, **changes) -> Config:
        return replace(self, **changes)

    def out_hw(self, H: int | None = None, W: int | None = None) -> Pair:
        H = self.H if H is None else H
        W = self.W if W is None else W
        return (
            out_size(H, self.kernel[0], self.stride[0], self.padding[0], self.dilation[0]),
            out_size(W, self.kernel[1], self.stride[1], self.padding[1], self.dilation[1]),
        )

    def fits(self) -> bool:
        """Whether the kernel fits the padded input (torchvision errors otherwise)."""
        ho, wo = self.out_hw()
        return ho >= 1 and wo >= 1

    @property
    def id(self) -> str:
        def p(v):
            return f"{v[0]}x{v[1]}"

        bias = {True: "b", False: "nob", "zeros": "b0"}[self.bias]
        return (
            f"N{self.N}-C{self.C_in}to{self.C_out}-{self.H}x{self.W}-k{p(self.kernel)}-s{p(self.stride)}"
            f"-p{p(self.padding)}-d{p(self.dilation)}-g{self.groups}-og{self.offset_groups}"
            f"-{'m' if self.mask else 'nom'}-{bias}"
        )


class DeformLayer(torch.nn.Module):
    """``torchvision.ops.DeformConv2d`` taking ``(x, offset[, mask])`` as graph inputs."""

    def __init__(self, cfg: Config, seed: int = 0):
        super().__init__()
        self.has_mask = cfg.mask
        self.conv = torchvision.ops.DeformConv2d(
            cfg.C_in,
            cfg.C_out,
            kernel_size=cfg.kernel,
            stride=cfg.stride,
            padding=cfg.padding,
            dilation=cfg.dilation,
            groups=cfg.groups,
            bias=cfg.bias is not False,
        )
        gen = torch.Generator().manual_seed(seed)
        fan_in = (cfg.C_in // cfg.groups) * cfg.kernel[0] * cfg.kernel[1]
        with torch.no_grad():
            # Unit-scale outputs, so that 1e-4 is a meaningful absolute tolerance.
            self.conv.weight.copy_(torch.randn(self.conv.weight.shape, generator=gen) / math.sqrt(fan_in))
            if self.conv.bias is not None:
                if cfg.bias == "zeros":
                    self.conv.bias.zero_()
                else:
                    self.conv.bias.copy_(torch.randn(self.conv.bias.shape, generator=gen))
        self.to(cfg.dtype)
        self.eval()

    def forward(self, x, offset, mask=None):
        return self.conv(x, offset, mask if self.has_mask else None)


#: A small layer with every parameter non-trivial (tests/test_dynamo.py, tests/test_export_api.py):
#: groups 2, offset groups 3, mask and bias on, stride, padding and dilation different per axis.
SMALL = Config(N=1, C_in=6, C_out=6, H=9, W=8, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2,
               offset_groups=3, mask=True, bias=True)  # fmt: skip
#: DCNv2 with groups 2, offset groups 3, a 3x2 kernel, stride 2 on rows, dilation 2 on rows, a batch of 2
#: (the graph checks: tests/ops/deform_conv/test_graph_properties.py, tests/targets/test_graph_safety.py).
DCNV2_GROUPED = Config(N=2, C_in=6, C_out=4, H=9, W=7, kernel=(3, 2), stride=(2, 1), padding=(1, 1), dilation=(2, 1),
                       groups=2, offset_groups=3, mask=True, bias=True)  # fmt: skip
#: The same layer on a 6x5 map with stride 2 on columns instead (edge values, dtypes).
DCNV2_ASYMMETRIC = DCNV2_GROUPED.at(H=6, W=5, stride=(1, 2))
#: Uneven stride, padding and dilation with groups and offset groups on a 9x11 map: a swapped (h, w),
#: (dy, dx) or group layout fails (the mmcv / OpenVINO node tests: rewrite, runtimes).
UNEVEN = Config(C_in=8, C_out=6, H=9, W=11, kernel=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2,
                offset_groups=2)  # fmt: skip


def make_inputs(cfg: Config, seed: int = 1, N=None, H=None, W=None) -> dict[str, torch.Tensor]:
    """Seeded inputs: ``x = randn``, ``offset = randn * offset_scale``, ``mask = rand``.

    ``N``, ``H``, ``W`` override the config's sizes (offset and mask follow the output size).
    """
    N = cfg.N if N is None else N
    H = cfg.H if H is None else H
    W = cfg.W if W is None else W
    ho, wo = cfg.out_hw(H, W)
    taps = cfg.kernel[0] * cfg.kernel[1]
    gen = torch.Generator().manual_seed(seed)
    inputs = {
        "x": torch.randn(N, cfg.C_in, H, W, generator=gen),
        "offset": torch.randn(N, 2 * cfg.offset_groups * taps, ho, wo, generator=gen) * cfg.offset_scale,
    }
    if cfg.mask:
        inputs["mask"] = torch.rand(N, cfg.offset_groups * taps, ho, wo, generator=gen)
    return {k: v.to(cfg.dtype) for k, v in inputs.items()}


def reference(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> np.ndarray:
    """torchvision's output on ``inputs`` (the oracle)."""
    with torch.no_grad():
        return model(*inputs.values()).numpy()


def export(
    model: torch.nn.Module,
    inputs: dict[str, torch.Tensor],
    opset: int,
    dynamic: bool = False,
) -> bytes:
    """``torch.onnx.export(dynamo=False)`` to bytes; ``dynamic`` makes N, H, W dynamic on every input."""
    names = list(inputs)
    dynamic_axes = None
    if dynamic:
        dynamic_axes = {"x": {0: "N", 2: "H", 3: "W"}, "y": {0: "N", 2: "Ho", 3: "Wo"}}
        for name in names[1:]:
            dynamic_axes[name] = {0: "N", 2: "Ho", 3: "Wo"}
    buf = io.BytesIO()
    torch.onnx.export(
        model,
        tuple(inputs.values()),
        buf,
        dynamo=False,
        opset_version=opset,
        input_names=names,
        output_names=["y"],
        dynamic_axes=dynamic_axes,
    )
    return buf.getvalue()


def check(model_bytes: bytes) -> onnx.ModelProto:
    """Load and run ``onnx.checker.check_model(full_check=True)``; returns the model."""
    proto = onnx.load_from_string(model_bytes)
    onnx.checker.check_model(proto, full_check=True)
    return proto


def run_ort(model_bytes: bytes, inputs: dict[str, torch.Tensor]) -> np.ndarray:
    """Run on ONNX Runtime CPU; returns the single output."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    feeds = {k: v.numpy() for k, v in inputs.items()}
    (out,) = sess.run(None, feeds)
    return out


def assert_close(got: np.ndarray, want: np.ndarray, atol: float = ATOL, what: str = "") -> None:
    """Same shape, all finite, max abs error <= ``atol``."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != reference {want.shape}"
    assert np.isfinite(got).all(), f"{what}: output has NaN/inf"
    err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) if got.size else 0.0
    assert err <= atol, f"{what}: max abs error {err:.3g} > {atol:g}"


class Planted:
    """An ONNX Runtime CPU session (for ``verify(session=...)``) whose first output holds ``value`` at flat
    index ``at``: a fault planted at a distance from a verification rule's bound that the test computed."""

    def __init__(self, data: bytes, at: int, value: float):
        self._session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        self.at, self.value = at, value

    def get_inputs(self):
        return self._session.get_inputs()

    def get_outputs(self):
        return self._session.get_outputs()

    def run(self, names, feeds):
        outputs = self._session.run(names, feeds)
        outputs[0] = outputs[0].copy()
        outputs[0].flat[self.at] = self.value
        return outputs


def op_types(proto: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in proto.graph.node]


def default_opset(proto: onnx.ModelProto) -> int:
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


def export_and_compare(cfg: Config, method: str, opset: int, seed: int = 0) -> onnx.ModelProto:
    """The whole parity check for one config: export, checker, opset, ORT vs torchvision.

    The caller registers ``method`` first (``register`` is global state).
    Returns the checked model so that callers can assert graph properties.
    """
    model = DeformLayer(cfg, seed=seed)
    inputs = make_inputs(cfg, seed=seed + 1)
    data = export(model, inputs, opset)
    proto = check(data)
    assert default_opset(proto) == opset
    assert_close(run_ort(data, inputs), reference(model, inputs), what=f"{method}@{opset} {cfg.id}")
    return proto


# -- cases from ../shared/cases/cases.json -------------------------------------

CASES_ENV = "DEFORM_ONNX_CASES"


def cases_path() -> Path:
    """``$DEFORM_ONNX_CASES`` if set, else ``shared/cases/cases.json`` beside the repository if present,
    else the snapshot ``tests/data/cases.json`` (a fresh clone, e.g. CI, has no shared/ folder beside it)."""
    env = os.environ.get(CASES_ENV)
    if env:
        return Path(env)
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "cases" / "cases.json"
    return shared if shared.is_file() else Path(__file__).resolve().parent / "data" / "cases.json"


def load_cases() -> dict[str, dict]:
    """All cases by id. Raises ``FileNotFoundError`` naming the env var if the file is missing."""
    path = cases_path()
    if not path.is_file():
        raise FileNotFoundError(
            f"cases file not found at {path}: put the shared/ folder beside the repository "
            f"or set {CASES_ENV} to the path of cases.json"
        )
    with open(path) as f:
        return {c["id"]: c for c in json.load(f)["cases"]}


def case_config(case_id: str) -> Config:
    return Config.from_case(load_cases()[case_id]["input"])


# -- the parity grid: a seeded pairwise covering design ------------------------

#: Opsets of the grid, and where each method is allowed.
GRID_OPSETS = (11, 12, 16, 17, 19, 20)
#: Read from the op registry (the one place the bounds live): native 19, grid_sample 16, gather and auto 11.
METHOD_MIN_OPSET = {**{m: low.min_opset for m, low in LOWERINGS.items()}, "auto": OPS["deform_conv2d"].min_opset}

#: Factor levels of the grid (issue 2, section 5). "H"/"W" are size bands; the
#: size itself is drawn from the band, and "1" is the one-pixel edge case.
FACTORS: dict[str, tuple] = {
    "N": (1, 2),
    "C_in": (6, 12),  # multiples of lcm(groups, offset_groups) = 6
    "kernel": ((1, 1), (3, 3), (3, 2)),
    "stride": ((1, 1), (2, 1)),
    "padding": ((0, 0), (1, 1), (2, 0)),
    "dilation": ((1, 1), (2, 1)),
    "groups": (1, 2),
    "offset_groups": (1, 3),
    "mask": (True, False),
    "bias": (True, False, "zeros"),
    "H": ("1", "2-7", "8-20"),
    "W": ("1", "2-7", "8-20"),
}
BANDS = {"1": (1, 1), "2-7": (2, 7), "8-20": (8, 20)}


def method_opsets(method: str) -> list[int]:
    return [o for o in GRID_OPSETS if o >= METHOD_MIN_OPSET[method]]


def _row_pairs(row: tuple[int, ...]) -> set[tuple[int, int, int, int]]:
    """Every (factor i, level, factor j, level) pair a row of level indices covers."""
    return {(i, row[i], j, row[j]) for i in range(len(row)) for j in range(i + 1, len(row))}


def level_row(cfg: Config) -> tuple[int, ...]:
    """The level indices of a config (inverse of the grid's row -> config mapping)."""

    def band(size):
        return next(i for i, b in enumerate(BANDS.values()) if b[0] <= size <= b[1])

    row = []
    for name, levels in FACTORS.items():
        value = getattr(cfg, name)
        row.append(band(value) if name in ("H", "W") else levels.index(value))
    return tuple(row)


def covering_configs(seed: str, candidates: int = 64) -> list[Config]:
    """A deterministic set of configs covering every pair of factor levels (where the kernel fits).

    Greedy (AETG-style): for the first uncovered pair, draw ``candidates``
    random rows that hold it, keep those whose kernel fits the padded input,
    and take the one covering most uncovered pairs. ``seed`` (a string) makes
    the design reproducible across runs and machines.
    """
    rng = random.Random(seed)
    names = list(FACTORS)
    sizes = [len(FACTORS[n]) for n in names]
    uncovered = set()
    for i in range(len(names)):
        for j in range(i + 1, len(names)):
            uncovered |= {(i, a, j, b) for a in range(sizes[i]) for b in range(sizes[j])}
    configs: list[Config] = []
    while uncovered:
        i, a, j, b = min(uncovered)
        best, best_score = None, 0
        for _ in range(candidates):
            row = [rng.randrange(s) for s in sizes]
            row[i], row[j] = a, b
            cfg = _row_config(names, row, rng)
            if not cfg.fits():
                continue
            score = len(_row_pairs(tuple(row)) & uncovered)
            if score > best_score:
                best, best_score = (tuple(row), cfg), score
        if best is None:  # no fitting config holds this pair
            uncovered.discard((i, a, j, b))
            continue
        uncovered -= _row_pairs(best[0])
        configs.append(best[1])
    return configs


def _row_config(names: list[str], row: list[int], rng: random.Random) -> Config:
    values = {n: FACTORS[n][k] for n, k in zip(names, row)}
    for axis in ("H", "W"):
        lo, hi = BANDS[values[axis]]
        values[axis] = rng.randint(lo, hi)
    values["C_out"] = rng.choice((4, 6)) if values["groups"] == 2 else rng.choice((3, 4, 6))
    return Config(offset_scale=2.0, **values)


# -- graph inspection -------------------------------------------------------------


def samples_with_grid_sample(proto: onnx.ModelProto) -> bool:
    """Whether grid_sample's GridSample form applies to this file's input: static H and W of at most
    ``BILINEAR_MAX_SIZE`` (else its exact gather sampler does, see ``lowering/grid_sample.py``)."""
    from deform_onnx.ops.deform_conv.lower_grid_sample import BILINEAR_MAX_SIZE

    dims = proto.graph.input[0].type.tensor_type.shape.dim[2:4]
    return all(d.HasField("dim_value") and d.dim_value <= BILINEAR_MAX_SIZE for d in dims)


def assert_lowering(proto: onnx.ModelProto, method: str, opset: int) -> None:
    """The graph holds the lowering that ``method`` resolves to at ``opset``
    (``auto``: grid_sample at opset >= 16, gather below); grid_sample holds GridSample
    where its precision rule lets it (:func:`samples_with_grid_sample`)."""
    ops = op_types(proto)
    resolved = method if method != "auto" else ("grid_sample" if opset >= 16 else "gather")
    if resolved == "native":
        assert ops.count("DeformConv") == 1, ops
    else:
        assert "DeformConv" not in ops, ops
        assert ("GridSample" in ops) == (resolved == "grid_sample" and samples_with_grid_sample(proto)), ops


def graph_tensors(proto: onnx.ModelProto) -> list[np.ndarray]:
    """Every constant tensor of the graph: initializers and tensor attributes (Constant, ConstantOfShape, ...)."""
    from onnx import numpy_helper

    arrays = [numpy_helper.to_array(t) for t in proto.graph.initializer]
    for node in proto.graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                arrays.append(numpy_helper.to_array(attr.t))
    return arrays


def non_weight_constants(proto: onnx.ModelProto, model: torch.nn.Module) -> list[np.ndarray]:
    """Graph constants that are not a parameter of ``model`` (nor a reshape/transpose of one).

    A constant is a parameter if it holds the same multiset of values.
    """
    params = [np.sort(p.detach().numpy().ravel()) for p in model.parameters()]
    out = []
    for a in graph_tensors(proto):
        flat = np.sort(a.ravel())
        if any(flat.shape == p.shape and np.array_equal(flat, p) for p in params):
            continue
        out.append(a)
    return out


def run_ov(model, inputs: dict[str, torch.Tensor]) -> np.ndarray:
    import deform_onnx.openvino as dov

    compiled = dov.compile(model, device="CPU", precision="f32")
    assert dov.inference_precision(compiled) == "f32"
    (out,) = compiled([v.numpy() for v in inputs.values()]).values()
    return np.asarray(out)


ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


#: Packages that take seconds to import; none may load before a command does real work.
HEAVY = ("torch", "torchvision", "onnx", "onnxruntime", "onnx_ir", "onnxscript", "openvino", "skimage", "scipy")


#: Runs the console script's entry point in-process, then reports what got imported.
PROBE = """
import json, sys
args, watched = json.loads(sys.argv[1]), set(json.loads(sys.argv[2]))
from deform_onnx.cli import main
sys.argv = ["deform-onnx", *args]
try:
    main()
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
else:
    code = 0
sys.stdout.flush()
heavy = sorted({m.split(".")[0] for m in sys.modules} & watched)
print("\\nPROBE " + json.dumps({"code": code, "modules": len(sys.modules), "heavy": heavy}))
"""


def probe(args: list[str], cwd: Path) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    line = [s for s in proc.stdout.splitlines() if s.startswith("PROBE ")]
    assert line, proc.stdout + proc.stderr
    return json.loads(line[-1][6:]), proc.stdout + proc.stderr


#: :data:`PROBE` for several commands in one interpreter (one start-up instead of one each): each command's
#: output between ``PROBE-START i`` and its ``PROBE`` line; ``heavy`` and ``modules`` are cumulative, so a
#: command that imports a heavy package fails its own case and every later one (nothing is masked).
PROBE_MANY = """
import json, sys
cases, watched = json.loads(sys.argv[1]), set(json.loads(sys.argv[2]))
from deform_onnx.cli import main
for i, args in enumerate(cases):
    print(f"\\nPROBE-START {i}", flush=True)
    sys.argv = ["deform-onnx", *args]
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    else:
        code = 0
    sys.stdout.flush()
    sys.stderr.flush()
    heavy = sorted({m.split(".")[0] for m in sys.modules} & watched)
    print("\\nPROBE " + json.dumps({"code": code, "modules": len(sys.modules), "heavy": heavy}), flush=True)
"""


def probe_many(cases: list[list[str]], cwd: Path) -> list[tuple[dict, str]]:
    """:func:`probe` for each of ``cases`` in one subprocess, in order: ``[(result, that command's output)]``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE_MANY, json.dumps(cases), json.dumps(HEAVY)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )
    out = []
    for i in range(len(cases)):
        assert f"PROBE-START {i}\n" in proc.stdout, proc.stdout
        chunk = proc.stdout.split(f"PROBE-START {i}\n", 1)[1].split(f"PROBE-START {i + 1}\n", 1)[0]
        line = [s for s in chunk.splitlines() if s.startswith("PROBE ")]
        assert line, chunk
        out.append((json.loads(line[-1][6:]), chunk))
    return out


def assert_topk_unambiguous(scores: np.ndarray, k: int, TOL: float = 1e-4) -> float:
    """PyTorch's top-(k+1) scores are more than ``2 * (TOL + TOL*|s|)`` apart, so a file whose scores are
    each within ``TOL + TOL*|s|`` of them selects the same k queries in the same order. Returns the gap."""
    s = np.sort(scores.reshape(-1))[::-1][: k + 1]
    gap = float((s[:-1] - s[1:]).min())
    bound = 2 * (TOL + TOL * float(np.abs(s).max()))
    assert gap > bound, f"top-{k} encoder scores {gap:.2e} apart, not above {bound:.2e}: the ranking is ambiguous"
    return gap


#: Ops of onnx-tensorrt's docs/operators.md marked supported ("Y") that a lowering
#: may use (TensorRT 8.5 list, opset <= 17; GridSample and IsNaN are listed there),
#: plus DeformConv (TensorRT >= 10.1, through its ModulatedDeformConv2d plugin).
TENSORRT_OPS = frozenset(
    """Abs Add And Cast Ceil Clip Concat Constant ConstantOfShape Conv Div Einsum Equal Expand Flatten
    Floor Gather GatherElements GatherND Gemm Greater GreaterOrEqual GridSample Identity IsNaN Less
    LessOrEqual MatMul Max Min Mod Mul Neg Not Or Pad Range Reciprocal ReduceMax ReduceMin ReduceSum
    Relu Reshape Resize Round ScatterND Shape Sigmoid Sign Size Slice Split Squeeze Sub Sum Tile
    Transpose Unsqueeze Where Xor DeformConv""".split()
)
