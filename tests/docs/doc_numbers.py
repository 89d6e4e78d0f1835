"""The numbers rule of README.md, BENCHMARKS.md and docs/*.md (issue 32, item 5).

Every measured figure in those files sits in a generated block, written by the script that measured
it, between ``<!-- NAME: begin ... -->`` and ``<!-- NAME: end -->`` markers, each at the start of a line (``bench/report.py``'s
``write_marked_section`` and the scripts' own writers; the colon may touch ``begin``/``end``). The
hand-written rest holds no measured figure. What counts as one (:data:`PATTERNS`):

- a ratio, ``1.23x`` or ``8x`` (a number, then ``x`` or the multiplication sign, then no letter or digit: shapes such as
  ``3x3`` and ``1x3x128x128`` are not ratios);
- a percentage, ``12%``;
- a time, ``4.2 ms``, ``40 s``, ``8 min``;
- a size, ``77 MB``, ``6.8 GiB``, ``2,266,252,160 bytes``;
- an error or other value in scientific notation with a fractional mantissa, ``2.1e-6`` (two
  significant digits: how this project reports a measured error);
- a decimal with three or more fractional digits, ``0.99892`` (cosines, errors); a dotted version
  such as ``1.0.20261020`` is not one;
- a decimal said to be off, ``1.8 off``, ``off by 0.35``;
- a count of what a run produced: ``386 nodes``, ``4434 NaN``, ``1356 passed``, ``3 failed``;
- a load average, ``load average 2.3``.

Not figures: versions (``onnxruntime 1.32``), opsets, IR versions, shapes, issue and case numbers,
and rules of the project, which are not measurements: tolerances are written with a one-digit
mantissa (``1e-4``, ``8e-2``: not matched), and a bound after a comparison (``<= 1.2x``, ``>= 3x``,
``at most 5%``) is a goal or a rule. The few other rules that read like figures are in
:data:`ALLOWED`, each with its reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: name -> regular expression of one kind of measured figure.
PATTERNS: dict[str, re.Pattern[str]] = {
    "ratio": re.compile(r"(?<![\w.])\d+(?:\.\d+)?[x\u00d7](?![\w])"),
    "percentage": re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?%"),
    "time": re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|seconds?|min|minutes?|h|hours?)(?![\w])"),
    "size": re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*\s?(?:bytes|B|KB|KiB|kB|MB|MiB|GB|GiB|TB|TiB)(?![\w])"),
    "scientific": re.compile(r"(?<![\w.])\d+\.\d+e[-+]?\d+(?![\w])", re.I),
    "long decimal": re.compile(r"(?<![\w.])\d+\.\d{3,}(?![\w.]*\d)"),
    "off by": re.compile(r"(?<![\w.])\d+\.\d+\s+off\b|\boff by (?:up to |about |~)?\d"),
    "count": re.compile(r"(?<![\w.])\d[\d,]*\s+(?:nodes|NaN|passed|failed)\b"),
    "load average": re.compile(r"load average (?:of |about |~)?\d"),
}

#: A figure right after one of these is a bound (a goal or a rule), not a measurement.
_BOUND = re.compile(r"(?:<=|>=|≤|≥|<|>|\bat most|\bat least)\s*~?\s*$")

#: Phrases that read like measured figures but are rules or facts of a format; each with its reason.
#: A finding inside one of these phrases is allowed.
ALLOWED: dict[str, str] = {
    "2 GiB": "protobuf's message size limit (a fact of the format), not a measurement",
    "1 KiB": "the size from which export moves a tensor to the external-data file (a rule of the code)",
    "2x PyTorch float32's own error": "verification.FLOAT64_FACTOR, the float64 rule (a rule, not a measurement)",
    "2x PyTorch's rounding": "the same FLOAT64_FACTOR rule",
    "(8x larger)": "bfloat16's unit roundoff over float16's, 2^-8 / 2^-11 (arithmetic)",
    "the 2GiB limit imposed by the protobuf library": "protobuf's own error message, quoted",
    "0.485,0.456,0.406": "ImageNet's normalisation mean, an input of the example command",
    "0.229,0.224,0.225": "ImageNet's normalisation std, an input of the example command",
}

#: Generated blocks: marker name -> the source file that writes its markers (a block no script writes is
#: not generated). The test checks that the file spells the begin marker.
GENERATORS: dict[str, str] = {
    "deform-onnx bench": "src/deform_onnx/bench/deform_conv.py",  # benchmarks/run.py
    "deform-onnx bench --op grid_sample": "src/deform_onnx/bench/sampling.py",
    "msda": "src/deform_onnx/bench/sampling.py",  # benchmarks/msda.py
    "deform-onnx bench --op grid_sample_5d": "src/deform_onnx/bench/grid_sample_forms.py",
    "deform-onnx bench --op grid_sample_bicubic": "src/deform_onnx/bench/grid_sample_forms.py",
    "scaling": "src/deform_onnx/bench/scaling.py",  # benchmarks/scaling.py
    "precision fix": "benchmarks/precision.py",
    "deform-onnx quantize": "benchmarks/quantize.py",
    "deform-onnx row bands": "benchmarks/row_bands.py",
    "runtime-matrix": "scripts/runtime_matrix.py",
    "op-matrix": "scripts/op_matrix.py",
    "edge-matrix": "scripts/op_matrix_edge.py",
    "deform-onnx formats": "benchmarks/formats.py",
    "pte corner tables": "scripts/repro/pte_corner_tables.py",
    "main-job": "scripts/readme_blocks.py",
    "env-size": "scripts/readme_blocks.py",
    "runtime-venvs": "scripts/runtime_venvs.py",  # docs/runtimes.md
    "ci-venvs": "scripts/runtime_venvs.py",  # README.md
    "deployed runtimes": "scripts/runtime_venvs.py",  # BENCHMARKS.md
    "runner builds": "scripts/runner_builds.py",  # BENCHMARKS.md
    "suite-durations": "scripts/suite_durations.py",  # docs/development.md
}

# Markers start a line (the same words inside a code span are text, not a marker).
_BLOCK = re.compile(
    r"^<!--\s*(?P<name>[^:<>]+?)\s*:\s*begin\b[^>]*-->(?P<body>.*?)^<!--\s*(?P=name)\s*:\s*end\s*-->",
    re.S | re.M,
)
_MARKER = re.compile(r"^<!--\s*(?P<name>[^:<>]+?)\s*:\s*(?P<kind>begin|end)\b[^>]*-->", re.M)


@dataclass(frozen=True)
class Finding:
    """One measured figure in hand-written text."""

    path: str
    line: int
    kind: str
    figure: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind} {self.figure!r} in: {self.text.strip()[:160]}"


def checked_files(root: Path = ROOT) -> list[Path]:
    """README.md, BENCHMARKS.md and every Markdown page under docs/."""
    return [root / "README.md", root / "BENCHMARKS.md", *sorted((root / "docs").rglob("*.md"))]


def blocks(text: str) -> list[tuple[str, int, int]]:
    """``(name, start, end)`` of each generated block (markers included)."""
    return [(m["name"].strip(), m.start(), m.end()) for m in _BLOCK.finditer(text)]


def unpaired_markers(text: str) -> list[str]:
    """Markers outside any complete block (a begin without its end, or the reverse)."""
    spans = [(s, e) for _, s, e in blocks(text)]
    return [m.group(0) for m in _MARKER.finditer(text) if not any(s <= m.start() < e for s, e in spans)]


def hand_written(text: str) -> str:
    """``text`` with every generated block blanked out (newlines kept, so line numbers stay)."""
    out = text
    for _, start, end in blocks(text):
        out = out[:start] + re.sub(r"[^\n]", " ", out[start:end]) + out[end:]
    return out


def _allowed_spans(line: str) -> list[tuple[int, int]]:
    spans = []
    for phrase in ALLOWED:
        spans += [(m.start(), m.end()) for m in re.finditer(re.escape(phrase), line)]
    return spans


def findings(text: str, path: str = "<text>") -> list[Finding]:
    """Measured figures in the hand-written part of ``text``."""
    found = []
    for number, line in enumerate(hand_written(text).splitlines(), start=1):
        allowed = _allowed_spans(line)
        for kind, pattern in PATTERNS.items():
            for m in pattern.finditer(line):
                if _BOUND.search(line[: m.start()]):
                    continue
                if any(s <= m.start() and m.end() <= e for s, e in allowed):
                    continue
                found.append(Finding(path, number, kind, m.group(0), line))
    return found


if __name__ == "__main__":  # list the findings: python tests/docs/doc_numbers.py
    for path in checked_files():
        for finding in findings(path.read_text(), str(path.relative_to(ROOT))):
            print(finding)
