"""The package's layout keeps its shape: no import circle between its modules, no module over ~500 lines.

The import graph is read with ``ast`` from ``src/deform_onnx`` (no import is
run): an edge for every module-level ``import`` / ``from ... import`` of one of
the package's own modules (imports inside functions, and ``if TYPE_CHECKING:``
blocks, run later or never, so they cannot form an import-time circle). A
``from pkg import name`` counts as an import of ``pkg.name`` when that is a
module, else of ``pkg``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "deform_onnx"
#: Lines a module may have; a longer one should be split by concern.
MAX_LINES = 500
#: Modules allowed over :data:`MAX_LINES`, each with the reason.
LONG_MODULES: dict[str, str] = {}


def _module_name(path: Path) -> str:
    parts = ["deform_onnx", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(tree: ast.Module):
    """Import statements that run when the module is imported (module body, incl. plain if/try blocks)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            stack.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body])


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports at import time."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _top_level_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join([*base, node.module] if node.module else base)
                else:
                    module = node.module or ""
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names]
            edges.update(t for t in targets if t in MODULES and t != name)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order, the first repeated at the end), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_graph_is_read():
    """The graph sees the package's real edges (a reader that found none would pass the next test)."""
    graph = import_graph()
    assert "deform_onnx.ops.registry" in graph["deform_onnx.exporters.torchscript"]
    assert "deform_onnx.ops.deform_conv.spec" in graph["deform_onnx.ops.deform_conv.lower_native"]
    assert "deform_onnx.builder.base" in graph["deform_onnx.builder"]


def test_find_cycle_sees_a_planted_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_size(name):
    lines = len(MODULES[name].read_text().splitlines())
    if name in LONG_MODULES:
        return
    assert lines <= MAX_LINES, f"{name} has {lines} lines (> {MAX_LINES}): split it by concern"


def test_public_import_paths_survive_the_layout():
    """Issue 20, item 5: the public names and module paths users import keep working after the moves."""
    import importlib

    import deform_onnx

    for name in ("export", "lower", "register", "unregister", "translation_table", "resolve_method",
                 "DeformConvSpec", "LOWERINGS", "METHODS", "TARGETS", "TARGET_NAMES", "resolve_target",
                 "DCNv3", "dcnv3_core", "dcnv4_core"):  # fmt: skip
        assert getattr(deform_onnx, name) is not None, name
    from deform_onnx.ops import MSDeformAttnCore, ms_deform_attn

    assert isinstance(MSDeformAttnCore, type)
    assert deform_onnx.ops.ms_deform_attn is ms_deform_attn and callable(ms_deform_attn)  # the function, not a module
    from deform_onnx.ops.dcnv3 import DCNv3, dcnv3_core, dcnv4_core, kernel_points  # noqa: F401

    assert DCNv3 is deform_onnx.DCNv3
    assert callable(importlib.import_module("deform_onnx.openvino").extension)
    assert callable(importlib.import_module("deform_onnx.cli").main)


def test_every_op_names_its_file_nodes():
    """Issue 20, item 1: ``lower`` finds each op's file nodes through the registry, not a list of ops.

    Every op with file nodes (``onnx_nodes``) names a sources module with the file-node interface
    (``nodes_lowered``, ``lower_node``), and :func:`deform_onnx.rewrite.lowerable.nodes_lowered` asks
    exactly those modules.
    """
    from unittest import mock

    from deform_onnx.ops import registry
    from deform_onnx.rewrite import lowerable

    modules = registry.sources()
    assert {m.__name__ for m in modules} == {e.sources for e in registry.OPS.values() if e.onnx_nodes}
    for module in modules:
        assert callable(module.nodes_lowered) and callable(module.lower_node), module.__name__
    asked = []
    fakes = [mock.Mock(nodes_lowered=lambda m, meth, o, n=m.__name__: asked.append(n) or [n]) for m in modules]
    with mock.patch.object(lowerable, "sources", return_value=fakes):
        found = lowerable.nodes_lowered(mock.Mock(opset_imports={"": 17}), "auto")
    assert found == asked == [m.__name__ for m in modules]


#: Modules outside ``ops/<op>/`` that may name an op of the family, each with the reason.
NAMES_OPS: dict[str, str] = {
    "deform_onnx.targets.table": "data: which runtime mishandles which op's lowering (Fault.op)",
    "deform_onnx.targets.onnxruntime": "data: ONNX Runtime's DeformConv kernel by version (Fault.op)",
    "deform_onnx.targets.fastest": "data (generated): the op the deployed-runtimes bench's layer calls",
}
#: Layers that loop over the registry (issue 29 item 1).
LOOPING_LAYERS = ("deform_onnx.rewrite", "deform_onnx.targets", "deform_onnx.exporters", "deform_onnx.cli._ops_used")


def _code_strings(tree: ast.Module) -> set[str]:
    """The string constants of a module's code: docstrings left out (they may name the ops they serve)."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    }


def _op_spellings() -> set[str]:
    """What names an op in code: its registry name (unless it is also a method's), torch ops and file node kinds."""
    from deform_onnx.ops.registry import METHODS, OPS

    names = {name for name in OPS if name not in METHODS}
    for entry in OPS.values():
        names.update(entry.torch_ops)
        names.update(op_type for _, op_type in entry.onnx_nodes)
        names.update(low.node for low in entry.lowerings.values() if low.node is not None)
    return names


@pytest.mark.parametrize("layer", LOOPING_LAYERS)
def test_layers_name_no_op(layer):
    """The rewrite driver, targets, exporters and the CLI's op scan import no op folder and spell no op in their
    code: a new op is one folder (its ``register.py``), not edits across the package."""
    spellings = _op_spellings()
    assert {"deform_conv2d", "DeformConv", "aten::grid_sampler", "TRTDCNv3"} <= spellings  # the reader sees them
    graph = import_graph()
    checked = 0
    for name, path in MODULES.items():
        if not (name == layer or name.startswith(layer + ".")) or name in NAMES_OPS:
            continue
        checked += 1
        named = sorted(_code_strings(ast.parse(path.read_text())) & spellings)
        assert not named, f"{name} spells op(s) {named} in its code: loop over the registry (deform_onnx.ops.registry)"
        imported = [m for m in graph[name] if m.startswith("deform_onnx.ops.") and m.count(".") > 2]
        assert not imported, f"{name} imports an op folder at import time: {imported}"
    assert checked, layer


#: The package's top level: layers (folders) and these modules only.
TOP_LEVEL_MODULES = {
    "__init__.py",
    "__main__.py",
    "openvino.py",
    "onnx2torch.py",
}  # the public paths (re-exports; python -m)


def test_top_level_holds_layers_not_loose_modules():
    """Issue 29 item 2: logic lives in named layers; the top holds the public names and one public path."""
    loose = {p.name for p in PACKAGE.glob("*.py")} - TOP_LEVEL_MODULES
    assert not loose, f"modules at the package top: {sorted(loose)}; move them into a layer (core/, exporting/, ...)"


# -- short signatures, short functions (issue 29 item 3) -------------------------------------------
#: Parameters a function may take (``self``/``cls`` not counted); settings travel as one object beyond it.
MAX_PARAMETERS = 8
#: Lines a function body may have (its signature and docstring not counted); longer ones are split in named steps.
MAX_BODY_LINES = 80
#: Functions allowed more parameters, each with the reason (``module:qualified name``).
MANY_PARAMETERS: dict[str, str] = {
    "deform_onnx.exporting.api:export": "the public API: torch.onnx.export's keywords and deform-onnx's own",
    "deform_onnx.quantize.api:quantize": "the public API (keyword-only options)",
    "deform_onnx.runtimes:run_paths": "public (deform_onnx.runtimes): keyword-only options of the paths run",
    "deform_onnx.runtimes.deployed.check:check_runtimes": "the public API (keyword-only options)",
    "deform_onnx.runtimes.deployed.families:run_file": "public (deform_onnx.runtimes.deployed): keyword-only run options",
    "deform_onnx.bench.harness:run_suite": "public (deform_onnx.bench): keyword-only timing options",
    "deform_onnx.ops.deform_conv.spec:DeformConvSpec.from_shapes": "public: torchvision's deform_conv2d arguments",
    "deform_onnx.ops.deform_conv.binding:emit_deform_conv2d": "torchvision::deform_conv2d's schema (14 arguments)",
    "deform_onnx.ops.deform_conv.binding:make_symbolic.deform_conv2d": "torchvision::deform_conv2d's schema",
    "deform_onnx.ops.deform_conv.binding:translations.deform_conv2d": "torchvision::deform_conv2d's schema",
    "deform_onnx.ops.dcnv3.reference:dcnv3_core": "InternImage's dcnv3_core_pytorch arguments",
    "deform_onnx.ops.dcnv3.reference:dcnv4_core": "DCNv4's arguments (InternImage's, plus softmax)",
    "deform_onnx.ops.dcnv3.reference:DCNv3.__init__": "InternImage's DCNv3 layer arguments",
    "deform_onnx.ops.dcnv3.dcnv4:DCNv4.__init__": "OpenGVLab/DCNv4's DCNv4 module arguments (checkpoints load as is)",
    "deform_onnx.exporters.aten_detectors:emit_sdpa": "aten::scaled_dot_product_attention's schema",
    "deform_onnx.exporters.aten_detectors:_sdpa_symbolic": "aten::scaled_dot_product_attention's schema",
    "deform_onnx.exporters.size_ranges:linspace": "torch.linspace's signature (it replaces it while exporting)",
    "deform_onnx.runtimes.references:_deform_conv_op.DeformConv._run": "onnx.reference's OpRun: DeformConv's inputs "
    "and attributes",
    "deform_onnx.cli.export_cmd:export_command": "the command's options (typer); the body passes them on as one "
    "ExportArgs",
    "deform_onnx.cli.check_cmd:check_command": "the command's options (typer); passed on as one CheckArgs",
    "deform_onnx.cli.quantize_cmd:quantize_command": "the command's options (typer)",
    "deform_onnx.cli.bench_cmd:bench_command": "the command's options (typer)",
}
#: Functions allowed a longer body, each with the reason.
LONG_FUNCTIONS: dict[str, str] = {}


def _functions():
    """``(qualified name, parameter count, body lines)`` of every function of the package."""

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = child.args
                names = [x.arg for x in (*a.posonlyargs, *a.args)]
                count = len(names) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
                count -= bool(names) and names[0] in ("self", "cls") and bool(prefix)
                body = child.body
                if (
                    len(body) > 1
                    and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)
                ):
                    body = body[1:]  # the docstring
                yield f"{prefix}{child.name}", count, child.end_lineno - body[0].lineno + 1
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")

    for module, path in MODULES.items():
        for name, count, lines in walk(ast.parse(path.read_text()), ""):
            yield f"{module}:{name}", count, lines


FUNCTIONS = {name: (count, lines) for name, count, lines in _functions()}


def test_functions_are_read():
    """The reader sees the package's functions (one that found none would pass the next tests)."""
    assert (
        FUNCTIONS["deform_onnx.exporting.api:export"][0] == 22
    )  # the public keywords (format=, verify_runtimes=, keep_artifacts=, precision=)
    assert FUNCTIONS["deform_onnx.ops.registry:register"] == (1, 2)
    assert FUNCTIONS["deform_onnx.ops.registry:_Registry.add"][0] == 1  # self not counted


def test_no_long_signatures():
    """No function takes more than :data:`MAX_PARAMETERS` parameters, but those of :data:`MANY_PARAMETERS`."""
    long = {n: c for n, (c, _) in FUNCTIONS.items() if c > MAX_PARAMETERS and n not in MANY_PARAMETERS}
    assert not long, f"functions over {MAX_PARAMETERS} parameters (pass one options object): {long}"
    stale = [n for n in MANY_PARAMETERS if n not in FUNCTIONS or FUNCTIONS[n][0] <= MAX_PARAMETERS]
    assert not stale, f"allowed but gone or short now: drop them from MANY_PARAMETERS: {stale}"


def test_no_long_functions():
    """No function body runs over :data:`MAX_BODY_LINES` lines, but those of :data:`LONG_FUNCTIONS`."""
    long = {n: lines for n, (_, lines) in FUNCTIONS.items() if lines > MAX_BODY_LINES and n not in LONG_FUNCTIONS}
    assert not long, f"functions over {MAX_BODY_LINES} lines (split them in named steps): {long}"
    stale = [n for n in LONG_FUNCTIONS if n not in FUNCTIONS or FUNCTIONS[n][1] <= MAX_BODY_LINES]
    assert not stale, f"allowed but gone or short now: drop them from LONG_FUNCTIONS: {stale}"
