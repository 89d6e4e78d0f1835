"""MkDocs hooks of the documentation site (mkdocs.yml ``hooks:``): generated content, never copied text.

Three directives, each an HTML comment on a line of its own (so that the Markdown reads the same on a
forge):

- ``<!-- include: PATH -->``: the whole file PATH (relative to the repository root), e.g. README.md on
  the home page and BENCHMARKS.md on the benchmarks page; its links are rewritten for the site
  (``docs/x.md`` -> ``x.md``, ``BENCHMARKS.md`` -> ``benchmarks.md``).
- ``<!-- block: PATH NAME -->``: the generated block NAME of PATH, the text between
  ``<!-- NAME: begin ... -->`` and ``<!-- NAME: end -->`` that the script measuring it wrote there.
- ``<!-- cli-reference -->``: the command-line reference, generated from the typer app itself by
  typer's own Markdown generator (what ``typer deform_onnx.cli utils docs`` prints).

Files outside docs/ that pages show (the scaling plot) are added to the site in :func:`on_files`.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Files outside docs/ that the site serves, by their path in the repository (= their path in the site).
EXTRA_FILES = ["benchmarks/scaling.png"]

# A directive is a line of its own (the same words inside a code span are text).
_INCLUDE = re.compile(r"^<!--\s*include:\s*(?P<path>\S+)\s*-->[ \t]*$", re.M)
_BLOCK = re.compile(r"^<!--\s*block:\s*(?P<path>\S+)\s+(?P<name>[^>]+?)\s*-->[ \t]*$", re.M)
_CLI = re.compile(r"^<!--\s*cli-reference\s*-->[ \t]*$", re.M)

#: Links of the repository's top-level files, as the site spells them.
_LINKS = [
    (re.compile(r"\]\(docs/"), "]("),
    (re.compile(r"\]\(BENCHMARKS\.md"), "](benchmarks.md"),
    (re.compile(r"\]\(README\.md"), "](index.md"),
]


def block(text: str, name: str) -> str:
    """The generated block ``name`` of ``text`` (its markers included); a ``ValueError`` when absent."""
    pattern = re.compile(
        r"<!--\s*" + re.escape(name) + r"\s*:\s*begin\b[^>]*-->.*?<!--\s*" + re.escape(name) + r"\s*:\s*end\s*-->",
        re.S,
    )
    found = pattern.search(text)
    if found is None:
        raise ValueError(f"no generated block {name!r} (its begin and end markers) in the included file")
    return found.group(0)


def site_links(text: str) -> str:
    """Links of README/BENCHMARKS rewritten for pages inside the site."""
    for pattern, replacement in _LINKS:
        text = pattern.sub(replacement, text)
    return text


def cli_reference() -> str:
    """Markdown of every command's usage, arguments and options, from the typer app."""
    import click
    import typer.cli
    import typer.main

    from deform_onnx.cli import app

    command = typer.main.get_command(app)
    docs = typer.cli.get_docs_for_click(obj=command, ctx=click.Context(command, info_name="deform-onnx"))
    # One level below the page's title: "# `deform-onnx`" -> "## `deform-onnx`", and so on.
    docs = re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", docs, flags=re.M)
    lines, fenced = [], False
    for line in docs.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        lines.append(line if fenced or line.startswith("```") else _literal_brackets(line))
    return "\n".join(lines)


def _literal_brackets(line: str) -> str:
    """Square brackets of help text (``N,C,H[,og=G]``, ``[default: 2]``) as text, not Markdown links."""
    parts = line.split("`")
    # Even parts are outside code spans.
    return "`".join(p.replace("[", "\\[").replace("]", "\\]") if i % 2 == 0 else p for i, p in enumerate(parts))


def _read(path: str) -> str:
    """The text of ``path`` (relative to the repository root); a one-line error when it is missing."""
    file = ROOT / path
    if not file.is_file():
        raise FileNotFoundError(f"docs: {path} (named by an include or block directive) does not exist")
    return file.read_text()


def on_page_markdown(markdown: str, page, config, files) -> str:
    """MkDocs event: fill the page's include, block and cli-reference directives."""
    markdown = _INCLUDE.sub(lambda m: site_links(_read(m["path"])), markdown)
    markdown = _BLOCK.sub(lambda m: site_links(block(_read(m["path"]), m["name"])), markdown)
    return _CLI.sub(lambda _: cli_reference(), markdown)


def on_files(files, config):
    """MkDocs event: add :data:`EXTRA_FILES` (from outside docs/) to the site."""
    from mkdocs.structure.files import File

    for path in EXTRA_FILES:
        files.append(File.generated(config, path, abs_src_path=str(ROOT / path)))
    return files
