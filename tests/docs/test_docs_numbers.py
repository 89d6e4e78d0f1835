"""Issue 32, item 5: README.md, BENCHMARKS.md and docs/*.md hold no measured figure outside a generated block.

The rule and its allow-list live in ``doc_numbers.py`` beside this file; ``python tests/docs/doc_numbers.py``
lists the findings.
"""

from __future__ import annotations

import re

import pytest
from doc_numbers import ALLOWED, GENERATORS, ROOT, blocks, checked_files, findings, unpaired_markers


def _texts() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in checked_files()}


def test_hand_written_text_holds_no_measured_figure():
    found = [str(f) for path, text in _texts().items() for f in findings(text, path)]
    assert not found, "measured figures outside generated blocks (move them into a script's block, or remove):\n" + (
        "\n".join(found)
    )


def test_every_block_is_paired_and_written_by_its_script():
    for path, text in _texts().items():
        assert not unpaired_markers(text), (path, unpaired_markers(text))
        for name, _, _ in blocks(text):
            assert name in GENERATORS, f"{path}: block {name!r} has no generating script in doc_numbers.GENERATORS"
            source = (ROOT / GENERATORS[name]).read_text()
            assert re.search(re.escape(name) + r"\s*:\s*begin", source), (
                f"{GENERATORS[name]} does not write the markers of block {name!r}"
            )


def test_every_allowed_phrase_is_still_used():
    """An allow-list entry no file needs any more is removed, so the list stays the few real exceptions."""
    everything = "\n".join(_texts().values())
    unused = [phrase for phrase in ALLOWED if phrase not in everything]
    assert not unused, unused


README_LINE = "The grid_sample lowering runs at {} native's time on this stack."


@pytest.mark.parametrize(
    ("figure", "kind"),
    [
        ("1.23x", "ratio"),
        ("8x", "ratio"),
        ("4.2 ms", "time"),
        ("40 s", "time"),
        ("77 MB", "size"),
        ("6.8 GiB", "size"),
        ("12%", "percentage"),
        ("an error of 2.1e-6", "scientific"),
        ("cosine 0.99892", "long decimal"),
        ("1.8 off", "off by"),
        ("4434 NaN outputs", "count"),
        ("load average 2.3", "load average"),
    ],
)
def test_a_planted_figure_is_caught(figure, kind):
    """A figure typed into README's hand-written text is found; the same figure inside a block is not."""
    readme = (ROOT / "README.md").read_text()
    planted = readme.replace("## Limits\n", "## Limits\n\n" + README_LINE.format(figure) + "\n", 1)
    assert planted != readme
    found = findings(planted, "README.md")
    assert [f.kind for f in found] == [kind], found
    assert found[0].figure in figure and found[0].text.startswith("The grid_sample lowering")
    inside = readme.replace(
        "<!-- main-job: end -->", README_LINE.format(figure) + "\n<!-- main-job: end -->", 1
    )  # inside the generated main-job block: the script wrote it
    assert inside != readme and findings(inside, "README.md") == []


@pytest.mark.parametrize(
    "text",
    [
        "onnxruntime 1.32.0 and OpenVINO 2026.4.1, torch 2.14.1",
        "opset 17, IR 8, issue 32, case c31",
        "a 1x3x128x128 input, a 3x3 kernel, 128x128 -> 192x96",
        "float32 within 1e-4, float16 1e-2, bfloat16 8e-2",
        "goal: grid_sample <= 1.2x native, gather at least 3x faster",
        "pnnx 1.0.20261020, apache-tvm 0.27.0.post1",
        "protobuf's 2 GiB limit",
    ],
)
def test_rules_and_versions_are_not_figures(text):
    assert findings(text) == [], findings(text)
