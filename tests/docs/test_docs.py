"""The documentation site builds with warnings as errors, and what it generates is there (issue 31, item 1)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from doc_numbers import ROOT, checked_files


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """``mkdocs build --strict`` of mkdocs.yml into a temporary folder (the `docs` extra)."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",  # not --quiet: it hides the warnings from the strict count too
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout}\n{run.stderr}"
    return out


def _page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text() if name else (site / "index.html").read_text()


def test_readme_test_command_installs_the_docs_extra():
    """CI (README's test command) installs what tests/docs/test_docs.py needs, so the build is not skipped there."""
    lines = [
        line for line in (ROOT / "README.md").read_text().splitlines() if re.match(r"^python3 -m venv .*pytest", line)
    ]
    assert len(lines) == 1, lines
    extras = re.search(r"-e '\.\[([^\]]*)\]'", lines[0])
    assert extras and "docs" in extras.group(1).split(","), lines[0]


def test_home_page_is_the_readme_with_site_links(site):
    home = _page(site, "")
    assert "Set up" in home and "What the main job prints" in home
    assert 'href="guides/deform-conv/"' in home and 'href="docs/' not in home  # README's links, rewritten


def test_api_reference_is_generated_from_the_docstrings(site):
    api = _page(site, "api")
    for name in ("export", "lower", "quantize", "translation_table", "extension", "ms_deform_attn", "DCNv3"):
        assert re.search(rf'id="deform_onnx\.(\w+\.)*{name}"', api), name
    assert "Export <code>model</code> to ONNX with deformable convolution lowered by" in api


def test_cli_reference_is_generated_from_the_app(site):
    """Every command and every option of the typer app appears on the CLI page."""
    from typer.main import get_command

    from deform_onnx.cli import app

    cli = _page(site, "cli")
    group = get_command(app)
    for name, command in group.commands.items():
        assert f"deform-onnx {name}" in cli, name
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("--"):
                    assert opt in cli, (name, opt)


def test_measured_tables_come_from_their_blocks(site):
    """Pages that include a generated block show its table (the block's own first table row)."""
    benchmarks = _page(site, "benchmarks")
    assert "Median time per call" in benchmarks and "scaling.png" in benchmarks
    assert (site / "benchmarks" / "scaling.png").is_file()
    quantization = _page(site, "quantization")
    assert "ORT int8 (deform_onnx.quantize)" in quantization
    assert "ncnn (through pnnx)" in _page(site, "support-matrix")


def test_python_examples_parse():
    """Every ```python block of README and docs is valid Python (the examples are run by hand: README's
    run in 65 s here, too long for the suite)."""
    for path in checked_files():
        for number, code in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), re.S)):
            try:
                ast.parse(code)
            except SyntaxError as error:
                pytest.fail(f"{path.relative_to(ROOT)}: python block {number}: {error}")


def test_no_wrapped_line_starts_a_quote():
    """A prose line that starts with ``>`` (a wrapped ``>= 19``) renders as a block quote: none outside code."""
    for path in checked_files():
        fenced = False
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and line.lstrip().startswith(">"):
                pytest.fail(f"{path.relative_to(ROOT)}:{number}: a line starting with '>' renders as a quote: {line}")
