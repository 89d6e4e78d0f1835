"""Shared fixtures. Helpers (configs, export, ORT, reference) live in ``tests/util.py``."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest

import deform_onnx

if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist's workers get COLUMNS=80 / LINES=24: the CLI's tables would wrap where a plain run (no
    # terminal, no COLUMNS: 120 wide) does not, so the tests read the same tables either way.
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)
    # Two processes on a 2-core machine: one torch thread each (two threads each oversubscribe the cores; measured
    # 15-35% slower on the same tests). A plain run keeps torch's default.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


@pytest.fixture
def register():
    """``register(method)`` for this test; the symbolic is always removed afterwards.

    ``deform_onnx.register`` is global state (torch's symbolic registry), so a
    test never leaks its method into the next one.
    """

    def _register(method: str = "auto") -> None:
        deform_onnx.register(method)

    yield _register
    deform_onnx.unregister()


@pytest.fixture(scope="session")
def small():
    """:data:`util.SMALL`'s layer, its seeded inputs and PyTorch's output: ``(model, inputs, want)``. Read-only."""
    from util import SMALL, DeformLayer, make_inputs, reference

    model = DeformLayer(SMALL)
    inputs = make_inputs(SMALL)
    return model, inputs, reference(model, inputs)


@pytest.fixture(scope="session")
def example():
    """The bundled DCNv2 backbone (four deformable layers, BN, ReLU, pooling, residuals) on the
    real photo, and its PyTorch output: ``(model, photo [1,3,128,128] float32, output ndarray)``.
    Shared by every test file; tests must not modify the model."""
    import torch

    from deform_onnx.cli.example import example_model, load_photo

    model = example_model()
    photo = load_photo()
    with torch.no_grad():
        want = model(photo).numpy()
    return model, photo, want


@pytest.fixture(scope="session")
def main_job(tmp_path_factory):
    """``deform-onnx export -o OUT --repeat 3``, the README's main job (the bundled example, one file per row of
    the default plan), run once for every test file that reads its table or files: ``(CliRunner result, OUT)``.
    Read-only."""
    from typer.testing import CliRunner

    from deform_onnx.cli import app

    out = tmp_path_factory.mktemp("main") / "nested" / "out"  # created by the command
    return CliRunner().invoke(app, ["export", "-o", str(out), "--repeat", "3"]), out


@pytest.fixture(scope="session")
def c04_native(tmp_path_factory):
    """Case c04 exported natively by plain torch (DeformConv, opset 19): ``(path, layer, inputs)``. Read-only."""
    from models import dynamo_native
    from util import case_config

    path = tmp_path_factory.mktemp("c04") / "c04.onnx"
    layer, inputs = dynamo_native(case_config("c04"), 19, path)
    return path, layer, inputs


@pytest.fixture(scope="session")
def c12_native(tmp_path_factory):
    """Case c12's layer (offsets randn*4: many samples past the border) exported by plain torch at
    opset 20, the exporter's default: ``(path, layer, inputs)``. Read-only."""
    from models import dynamo_native
    from util import case_config

    path = tmp_path_factory.mktemp("c12") / "c12.onnx"
    layer, inputs = dynamo_native(case_config("c12"), 20, path)
    return path, layer, inputs


@pytest.fixture(scope="session")
def family_files(tmp_path_factory):
    """``family_files.get(name)``: deployed runtime family ``name``'s files (``tests/runtime_files.py``): the export
    for its target, which runs it in that family and keeps its converter's files, and the planted copy; made on
    first use, once per test run, for tests/proof and tests/runtimes. Read-only."""
    from runtime_files import FamilyExports

    return FamilyExports(tmp_path_factory.mktemp("families"))


# -- pytest-xdist (README's test command runs two processes) ---------------------

#: Session fixtures that export or convert for minutes: the test files that use one run in one process, so
#: each is made once per run, as in a plain run (``--dist loadscope`` alone would split them by file).
_SHARED_SESSION = ("family_files", "main_job", "c04_native", "c12_native")


@functools.cache
def _shared_group(path: Path) -> str | None:
    """The first of ``_SHARED_SESSION`` that a test or fixture of ``path`` takes as an argument."""
    try:
        text = path.read_text()
    except OSError:
        return None
    return next((name for name in _SHARED_SESSION if re.search(rf"def \w+\([^)]*\b{name}\b", text)), None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadscope``, with the files that share an expensive session fixture as one scope."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    class SharedSessionScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _shared_group(root / nodeid.split("::", 1)[0]) or super()._split_scope(nodeid)

    return SharedSessionScheduling(config, log)


# -- hypothesis profiles (tests/test_fuzz.py) ------------------------------------

FUZZ_ENV = "DEFORM_ONNX_FUZZ"


def _register_fuzz_profiles() -> None:
    from hypothesis import HealthCheck, settings

    common = dict(
        deadline=None,  # one example is an export + an ORT session: 0.1-1 s, and noisy on shared CPUs
        database=None,  # nothing written into the tree; a failure prints its reproduction
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    # CI: the same examples on every run and machine, bounded so test_fuzz.py stays ~1 minute.
    settings.register_profile("ci", max_examples=50, derandomize=True, **common)
    # Long: fresh random examples, >= 2,000 per method (run by hand, recorded in the report).
    settings.register_profile("long", max_examples=2000, derandomize=False, **common)


def pytest_addoption(parser):
    parser.addoption(
        "--fuzz",
        choices=("ci", "long"),
        default=None,
        help=f"hypothesis profile of tests/test_fuzz.py (default: ${FUZZ_ENV} or 'ci')",
    )


def pytest_configure(config):
    import os

    from hypothesis import settings

    _register_fuzz_profiles()
    profile = config.getoption("--fuzz") or os.environ.get(FUZZ_ENV) or "ci"
    if profile not in ("ci", "long"):
        raise pytest.UsageError(f"{FUZZ_ENV}={profile!r}: use 'ci' or 'long'")
    settings.load_profile(profile)
