"""Issue 21: the CLI and the package as a new user meets them after a fresh install.

Each test names its item. Models are tiny (3 -> 4 channels, 16x16) and written once
per module into a ``.py`` file that the CLI loads as ``FILE.py:FACTORY``, as a user does.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from deform_onnx.cli import app
from util import probe_many

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

MODELS = textwrap.dedent(
    """
    import torch, torchvision
    from deform_onnx.ops import MSDeformAttnCore


    class Dcn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            gen = torch.Generator().manual_seed(0)
            self.predict = torch.nn.Conv2d(3, 27, 3, padding=1)
            self.dcn = torchvision.ops.DeformConv2d(3, 4, 3, padding=1)
            with torch.no_grad():
                for p in self.parameters():
                    p.copy_(torch.randn(p.shape, generator=gen) / 3)

        def forward(self, x):
            p = self.predict(x)
            return self.dcn(x, p[:, :18], torch.sigmoid(p[:, 18:]))


    class FixedBatch(Dcn):
        # A real-code pattern: the batch written as 1. PyTorch itself fails at N=2.
        def forward(self, x):
            y = super().forward(x)
            return y.view(1, 4, y.shape[2], y.shape[3])


    class FrozenScale(Dcn):
        # float() of a size is a constant to the TorchScript tracer: the file is wrong at other widths.
        def forward(self, x):
            return super().forward(x) * (float(x.shape[-1]) / 16.0)


    class SixD(Dcn):
        # The model's own tensors are 6-D (ncnn's blobs hold at most 4-D after a leading 1).
        def forward(self, x):
            y = super().forward(x)
            z = y.reshape(1, 2, 2, 1, y.shape[2], y.shape[3])
            return (z * 2).reshape(y.shape)


    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

        def forward(self, x):
            return self.conv(x)


    def dcn(): return Dcn()
    def fixed_batch(): return FixedBatch()
    def frozen_scale(): return FrozenScale()
    def sixd(): return SixD()
    def plain(): return Plain()
    def msda(): return MSDeformAttnCore([(4, 4)])
    """
)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("issue21")
    path = folder / "issue21_models.py"
    path.write_text(MODELS)
    return path


def export(*args: str):
    return runner.invoke(app, ["export", *args], env={"COLUMNS": "200"})


def onnx_files(folder: Path) -> list[str]:
    """Every file in ``folder`` (partial files included: they must not stay either)."""
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def no_traceback(result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output, result.output


# -- items 1 and 2: a failed row is a row with its reason, and leaves no file -----------------
def test_second_size_failure_is_a_row_not_a_traceback(models, tmp_path):
    """Item 1: the check at the second size raised out of the command (here: PyTorch at N=2)."""
    out = tmp_path / "out"
    result = export(
        f"{models}:fixed_batch",
        "-s",
        "1,3,16,16",
        "--opset",
        "17",
        "--method",
        "gather",
        "--dynamic",
        "-o",
        str(out),
        "--repeat",
        "1",
    )
    no_traceback(result)
    assert result.exit_code == 1, result.output
    assert re.search(r"gather .* NO ", result.stdout), result.stdout
    # The second size comes from deform_onnx.exporting.sizes (shared with export(), issue 18): its first candidate.
    assert "failed gather@17" in result.stderr and "2,3,48,32" in result.stderr, result.stderr
    assert onnx_files(out) == [], onnx_files(out)  # item 2


def test_row_that_fails_the_cli_check_leaves_no_file(models, tmp_path):
    """Item 2: a file that differs from PyTorch at the second size is not left in the folder."""
    out = tmp_path / "out"
    result = export(
        f"{models}:frozen_scale",
        "-s",
        "1,3,16,16",
        "--opset",
        "17",
        "--method",
        "gather",
        "--exporter",
        "torchscript",
        "--dynamic",
        "-o",
        str(out),
        "--repeat",
        "1",
    )
    no_traceback(result)
    assert result.exit_code == 1, result.output
    assert re.search(r"gather .* NO ", result.stdout), result.stdout
    assert "no file written" in result.stderr, result.stderr
    assert onnx_files(out) == [], onnx_files(out)
    # An earlier file of that name (maybe the user's) is neither replaced nor removed, and the line says so.
    stale = out / "frozen_scale_gather_op17.onnx"
    stale.write_bytes(b"an earlier export")
    again = export(
        f"{models}:frozen_scale",
        "-s",
        "1,3,16,16",
        "--opset",
        "17",
        "--method",
        "gather",
        "--exporter",
        "torchscript",
        "--dynamic",
        "-o",
        str(out),
        "--repeat",
        "1",
    )
    assert again.exit_code == 1 and stale.read_bytes() == b"an earlier export", again.output
    assert "is an earlier file, left as it was" in again.stderr and onnx_files(out) == [stale.name], again.stderr


# -- item 3: a target's graph refusal ------------------------------------------------------------
@pytest.mark.parametrize("target", ["ncnn", "hailo"])
def test_target_refusal_is_exit_2_one_line_no_retry(models, tmp_path, target):
    """ncnn: a graph rule (6-D values); hailo: a model feature its runtime lacks (deformable sampling), refused
    before the export: that one was a failed row ("1 of 1 exports failed the check", exit code 1)."""
    out = tmp_path / "out"
    result = export(f"{models}:sixd", "-s", "1,3,16,16", "--target", target, "--no-verify-runtime", "-o", str(out))
    no_traceback(result)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: target '{target}'"), result.stderr
    assert "--force" in lines[0] and "force=True" not in lines[0], lines[0]
    assert "TorchScript" not in result.output and "┃" not in result.stdout, result.output
    assert not out.exists(), onnx_files(out)  # nothing written, not even the folder


# -- items 4 and 5: check ------------------------------------------------------------------------
def _tiny_model(path: Path, nodes, inputs, outputs, opset: int) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def test_check_target_rule_broken_is_nonzero_one_line(tmp_path):
    """Item 4: a dynamic file checked for tflite (static shapes only) exited 0."""
    f = TensorProto.FLOAT
    path = _tiny_model(
        tmp_path / "dyn.onnx",
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", f, ["N", 3, 4, 4])],
        [helper.make_tensor_value_info("y", f, ["N", 3, 4, 4])],
        17,
    )
    result = runner.invoke(
        app,
        ["check", str(path), "--target", "tflite", "-r", "ort", "--input-shape", "x=1,3,4,4", "--repeat", "0"],
        env={"COLUMNS": "200"},
    )
    no_traceback(result)
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "tflite" in errors[0] and "static shapes" in errors[0], result.stderr


@pytest.fixture(scope="module")
def grid_sample_file(tmp_path_factory) -> Path:
    f = TensorProto.FLOAT
    return _tiny_model(
        tmp_path_factory.mktemp("gs") / "gs.onnx",
        [helper.make_node("GridSample", ["x", "grid"], ["y"], align_corners=0)],
        [helper.make_tensor_value_info("x", f, [1, 2, 5, 5]), helper.make_tensor_value_info("grid", f, [1, 3, 3, 2])],
        [helper.make_tensor_value_info("y", f, [1, 2, 3, 3])],
        16,
    )


def test_check_and_lower_take_one_decision(grid_sample_file, tmp_path):
    """Item 5: check --method gather said "no lower() rows" on a file that lower --method gather rewrites."""
    from deform_onnx.rewrite import read_model
    from deform_onnx.rewrite.lowerable import nodes_lowered

    model = read_model(grid_sample_file)
    assert len(nodes_lowered(model, "gather")) == 1 and nodes_lowered(model, "auto") == []
    lowered = runner.invoke(app, ["lower", str(grid_sample_file), "--method", "gather", "-o", str(tmp_path / "l.onnx")])
    assert lowered.exit_code == 0 and "replaced 1 node" in lowered.stdout, lowered.output
    checked = runner.invoke(
        app,
        ["check", str(grid_sample_file), "--method", "gather", "-r", "ort", "--repeat", "0"],
        env={"COLUMNS": "200"},
    )
    assert checked.exit_code == 0, checked.output
    assert "lower(gather)" in checked.stdout and "no node that lower" not in checked.stdout, checked.stdout
    assert "onnxruntime rows: onnxruntime" in checked.stdout, checked.stdout  # item 10: which distribution ran
    kept = runner.invoke(
        app, ["check", str(grid_sample_file), "--method", "auto", "-r", "ort", "--repeat", "0"], env={"COLUMNS": "200"}
    )
    assert kept.exit_code == 0 and "lower(auto)" not in kept.stdout and "no node that lower" in kept.stdout, kept.output


# -- item 6: one file when every method writes the same graph -------------------------------------
def test_model_without_deformable_op_writes_one_file(models, tmp_path):
    out = tmp_path / "out"
    result = export(f"{models}:plain", "-s", "1,3,16,16", "-o", str(out), "--repeat", "1")
    assert result.exit_code == 0, result.output
    assert onnx_files(out) == ["plain_op17.onnx"], onnx_files(out)
    assert "has no op to lower" in result.stderr, result.stderr


def test_fused_msda_writes_one_file_with_a_note(models, tmp_path):
    out = tmp_path / "out"
    result = export(
        f"{models}:msda",
        "-s",
        "value=1,16,1,4",
        "-s",
        "loc=1,3,1,1,2,2",
        "-s",
        "weights=1,3,1,1,2",
        "-o",
        str(out),
        "--repeat",
        "1",
    )
    assert result.exit_code == 0, result.output
    assert onnx_files(out) == ["msda_op17.onnx"], onnx_files(out)
    assert "share one form" in result.stderr, result.stderr


def test_deformable_model_still_gets_every_method(models):
    """The collapse must not hide a real deformable op (the plan stays one file per method)."""
    import torch

    from deform_onnx.cli._common import load_factory
    from deform_onnx.cli._ops_used import deformable_ops

    assert deformable_ops(load_factory(f"{models}:dcn")().eval(), [torch.randn(1, 3, 8, 8)]) == {"deform_conv2d"}
    net = load_factory(f"{models}:msda")()
    args = [torch.randn(1, 16, 1, 4), torch.rand(1, 3, 1, 1, 2, 2), torch.rand(1, 3, 1, 1, 2)]
    assert deformable_ops(net, args) == {"ms_deform_attn"}


# -- item 7: float64 ------------------------------------------------------------------------------
def test_float64_message_names_the_opset_and_no_verify(models, tmp_path):
    out = tmp_path / "out"
    args = [
        f"{models}:dcn",
        "-s",
        "1,3,16,16",
        "--dtype",
        "float64",
        "--opset",
        "17",
        "--method",
        "gather",
        "-o",
        str(out),
        "--repeat",
        "1",
    ]
    result = export(*args)
    no_traceback(result)
    assert result.exit_code == 1, result.output
    assert "no float64 kernel for Conv (opset 17," in result.stderr, result.stderr
    assert "--no-verify" in result.stderr and "verify=False" not in result.stderr, result.stderr
    assert "trying TorchScript" not in result.stderr, result.stderr  # the other exporter meets the same kernel
    assert onnx_files(out) == []
    unverified = export(*args, "--no-verify")
    assert unverified.exit_code == 0, unverified.output
    assert re.search(r"gather .* UNVERIFIED", unverified.stdout), unverified.stdout
    assert "UNVERIFIED" in unverified.stderr and "--no-verify" in unverified.stderr, unverified.stderr
    written = onnx.load(str(out / "dcn_gather_op17.onnx"))
    assert written.graph.input[0].type.tensor_type.elem_type == TensorProto.DOUBLE


# -- item 8: argument errors answer before torch is imported --------------------------------------
ARG_ERRORS = [
    ["export", "nosuch.py:build", "-s", "1,3,8,8"],  # a missing model file
    ["export", "nosuch_package.models:build", "-s", "1,3,8,8"],  # a module that is not there
    ["export", "m.py:build", "-s", "1,3,8,8", "--opset", "5"],
    ["export", "m.py:build", "-s", "1,3,8,8", "--opset", "99"],
    ["export", "m.py:build", "-s", "1,3,8,8", "--method", "native", "--opset", "12"],
    ["export", "m.py:build", "-s", "1,3,8,8", "--exporter", "dynamo", "--opset", "12"],
    ["export", "m.py:build", "-s", "1,3,8,8", "--ir-version", "3"],
    ["export", "m.py:build", "-s", "1,3,8,8", "--target", "nosuch"],
    ["export", "m.py:build", "-s", "1,a,8,8"],
    ["export", "m.py:build", "-s", "1,3,8,8", "--dtype", "int8"],
    ["export", "m.py:build", "-s", "1,3,8,8", "-o", "missing/x.onnx"],
    ["export", "m.py:build", "-s", "1,3,8,8", "-o", "m.txt"],  # was a folder "m.txt" with the files in it
    ["check", "nosuch.onnx"],
    ["lower", "nosuch.onnx", "-o", "x.onnx"],
]


@pytest.fixture(scope="module")
def arg_errors(tmp_path_factory):
    """Every case of :data:`ARG_ERRORS` run in one interpreter, in order (``util.probe_many``), beside ``m.py``."""
    folder = tmp_path_factory.mktemp("arg_errors")
    (folder / "m.py").write_text("import torch\n\ndef build():\n    return torch.nn.Identity()\n")
    return probe_many(ARG_ERRORS, folder)


@pytest.mark.parametrize("index", range(len(ARG_ERRORS)), ids=[" ".join(a[1:]) for a in ARG_ERRORS])
def test_argument_errors_do_not_import_torch(arg_errors, index):
    result, output = arg_errors[index]
    assert result["code"] == 2, output
    assert "error:" in output and "Traceback" not in output, output
    assert not {"torch", "torchvision"} & set(result["heavy"]), (result, output)


@pytest.mark.parametrize(("output", "hint"), [("m.txt", None), ("m.ONNX", "m.onnx")])
def test_an_output_suffix_no_format_has_is_refused_not_made_a_folder(tmp_path, monkeypatch, output, hint):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text("import torch\n\ndef build():\n    return torch.nn.Identity()\n")
    result = export("m.py:build", "-s", "1,3,8,8", "-o", output)
    assert result.exit_code == 2 and not (tmp_path / output).exists(), result.output
    line = " ".join(result.stderr.split())
    assert f"-o {output}: " in line and ".onnx, .xml, .pte, .tflite, .mlpackage" in line, line
    assert (f"lower case: {hint}" in line) == (hint is not None), line


def test_cli_limits_are_the_exporters():
    """The CLI spells the exporters' opset ranges out (no torch at parse time); they must stay theirs."""
    from deform_onnx.cli import _limits
    from deform_onnx.exporters import torchscript
    from deform_onnx.exporting import api

    assert (_limits.DYNAMO_MIN_OPSET, _limits.DYNAMO_MAX_OPSET) == (api.DYNAMO_MIN_OPSET, api.DYNAMO_MAX_OPSET)
    assert _limits.TORCHSCRIPT_MAX_OPSET == torchscript.MAX_OPSET
    assert _limits.DEFAULT_OPSET == api.DEFAULT_OPSET


# -- item 9: README ------------------------------------------------------------------------------
def _readme_block_after(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(heading) :]
    return section[section.index("```") + 3 :].split("```", 1)[0]


def test_readme_export_synopsis_lists_every_option():
    from typer.main import get_command

    from deform_onnx.cli import export_cmd  # noqa: F401

    synopsis = _readme_block_after("## Command line")
    command = get_command(app).commands["export"]
    options = [p.opts for p in command.params if p.param_type_name == "option"]
    missing = sorted(opts[0] for opts in options if not any(re.search(rf"{o}\b", synopsis) for o in opts))
    assert not missing, f"README's export synopsis lacks {missing}"


def test_readme_names_the_environment_size():
    """README's set-up section says how big the environment is, in the block scripts/readme_blocks.py measured."""
    setup = (ROOT / "README.md").read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"<!-- env-size: begin .*?-->(.*?)<!-- env-size: end -->", setup, re.S)
    assert block, "README's set-up section should hold the env-size block (scripts/readme_blocks.py env-size)"
    assert re.search(r"\d+(\.\d+)? GiB on disk", block.group(1)), block.group(1)


# -- items 10 and 11: packaging -----------------------------------------------------------------
def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_onnxruntime_and_scikit_image_are_extras():
    project = _pyproject()["project"]
    names = [re.split(r"[<>=~!\[ ;]", d, maxsplit=1)[0].lower() for d in project["dependencies"]]
    assert "onnxruntime" not in names and "scikit-image" not in names, names
    extras = project["optional-dependencies"]
    assert any(d.startswith("onnxruntime") for d in extras["onnxruntime"])
    assert any(d.startswith("scikit-image") for d in extras["example"])
    assert {"onnxruntime", "scikit-image"} <= {re.split(r"[<>=~! ]", d)[0] for d in extras["test"]}


def test_readme_setup_commands_use_the_extras():
    readme = (ROOT / "README.md").read_text()
    tests = [line for line in readme.splitlines() if re.match(r"^python3 -m venv .*pytest", line)]
    assert len(tests) == 1, tests  # .ci/run greps exactly this line
    main_job = [line for line in readme.splitlines() if re.match(r"^python3 -m venv .*deform-onnx export$", line)]
    assert len(main_job) == 1 and "onnxruntime" in main_job[0] and "example" in main_job[0], main_job


def _fake_dist(site: Path, name: str, version: str, top: str = "onnxruntime") -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{top}\n")
    (info / "RECORD").write_text(f"{top}/__init__.py,,\n")


def test_distribution_is_read_from_metadata(tmp_path):
    """Item 10: which distribution provides the module (fake metadata; the real one is tested below)."""
    from deform_onnx.runtimes.ort_distribution import find

    assert find(path=[str(tmp_path)]) is None
    _fake_dist(tmp_path, "numpy-like", "1.0", top="numpy_like")
    _fake_dist(tmp_path, "onnxruntime-gpu", "1.31.1")
    found = find(path=[str(tmp_path)])
    assert found is not None and found.names == ("onnxruntime-gpu",) and str(found) == "onnxruntime-gpu 1.31.1"
    _fake_dist(tmp_path, "onnxruntime", "1.32.0")  # two distributions of one module: both named
    both = find(path=[str(tmp_path)])
    assert both.names == ("onnxruntime", "onnxruntime-gpu") and "also installed: onnxruntime-gpu" in str(both)


def test_the_installed_distribution_is_named():
    from importlib import metadata

    from deform_onnx.runtimes.ort_distribution import find

    found = find()
    assert found is not None
    assert found.version == metadata.distribution(found.names[0]).version
    files = [str(f) for f in metadata.distribution(found.names[0]).files or ()]
    assert any(f.startswith("onnxruntime/") for f in files), found


def test_missing_onnxruntime_is_one_line_naming_the_extra(monkeypatch, tmp_path):
    import deform_onnx.runtimes.ort_distribution as od

    monkeypatch.setattr(od, "find", lambda path=None: None)
    result = export("-o", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    line = f"error: {od.MISSING}; or pass --no-verify to write the files unchecked"
    assert result.stderr.strip().splitlines() == [line], result.stderr
    assert "deform-onnx[onnxruntime]" in result.stderr and "onnxruntime-gpu" in result.stderr
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what verify() meets without any distribution
    with pytest.raises(ModuleNotFoundError, match=r"deform-onnx\[onnxruntime\]"):
        od.require()


def test_missing_scikit_image_is_one_line_naming_the_extra(monkeypatch, tmp_path):
    import deform_onnx.core.extras as extras
    from deform_onnx.cli._inputs import InputSpec
    from deform_onnx.cli._models import from_specs
    from deform_onnx.cli.example import load_photo

    monkeypatch.setattr(extras, "has_skimage", lambda: False)
    result = export("-o", str(tmp_path / "out"))
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [f"error: {extras.EXAMPLE_MISSING}"], result.stderr
    assert "deform-onnx[example]" in result.stderr
    with pytest.raises(ModuleNotFoundError, match=r"deform-onnx\[example\]"):
        load_photo()
    # A user's image-shaped input needs no photo: seeded noise, and the description says so.
    assert "seeded normal noise" in from_specs([InputSpec(None, (1, 3, 8, 8))], "float32").description


#: The onnxruntime-gpu build the test installs (the newest on PyPI when written); its cached venv holds
#: only that wheel (--no-deps): 256 MB download, 365 MB installed, ~20 s to create (measured here).
ORT_GPU = "1.31.1"
#: Seconds allowed to create that venv (download + install).
ORT_GPU_CREATE_TIMEOUT = 300


def _without_cpu_onnxruntime(folder: Path) -> Path:
    """``folder`` filled with links to this environment's site-packages entries, except the CPU ``onnxruntime``
    module and distribution: torch, onnx, ... for a venv that holds onnxruntime-gpu only."""
    import site

    folder.mkdir(parents=True, exist_ok=True)
    for packages in map(Path, dict.fromkeys(site.getsitepackages())):
        for entry in packages.iterdir():
            name = entry.name.lower()
            cpu_ort = name == "onnxruntime" or (name.startswith("onnxruntime-") and name.endswith(".dist-info"))
            if not cpu_ort and not name.endswith(".pth") and not (folder / entry.name).exists():
                (folder / entry.name).symlink_to(entry)
    return folder


@pytest.mark.slow
def test_another_distribution_verifies_on_cpu(models, tmp_path):
    """Item 10 in a real environment: onnxruntime-gpu is the only ONNX Runtime distribution (README's
    "checked in ONNX Runtime: onnxruntime-gpu ..." line), and the export is verified on its CPU provider.

    The venv (runtimes.venvs.cached_venv, as tests/runtimes/test_old_runtime.py) holds onnxruntime-gpu alone;
    torch and the rest come from this environment through PYTHONPATH, minus the CPU onnxruntime (a venv
    with torch would hold its CUDA libraries, ~6 GB). The CUDA provider is not used (no GPU needed).
    """
    import subprocess

    from deform_onnx.runtimes.venvs import cached_venv

    if os.environ.get("DEFORM_ONNX_NO_OLD_RUNTIMES"):  # the switch of the other cached-venv row (README)
        pytest.skip("DEFORM_ONNX_NO_OLD_RUNTIMES is set: the onnxruntime-gpu row is not run")
    try:
        python = cached_venv(
            f"ort-gpu-{ORT_GPU}", [f"onnxruntime-gpu=={ORT_GPU}"], ORT_GPU_CREATE_TIMEOUT, ["--no-deps"]
        )
    except RuntimeError as exc:
        pytest.fail(f"{exc}; this row needs the package registry (set DEFORM_ONNX_NO_OLD_RUNTIMES=1 to skip it)")
    others = _without_cpu_onnxruntime(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(others)]), "COLUMNS": "200"}
    code = "from importlib import metadata; metadata.distribution('onnxruntime')"
    assert subprocess.run([python, "-c", code], env=env, capture_output=True, check=False).returncode != 0, (
        "premise: no CPU onnxruntime distribution in that environment"
    )
    proc = subprocess.run(
        [python, "-c", "from deform_onnx.cli import main; main()", "export", f"{models}:dcn", "-s", "1,3,16,16",
         "--method", "gather", "--opset", "17", "-o", str(tmp_path / "out"), "--repeat", "1"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("checked in ONNX Runtime:"))
    assert line == f"checked in ONNX Runtime: onnxruntime-gpu {ORT_GPU}, CPU execution provider", line
    assert (tmp_path / "out" / "dcn_gather_op17.onnx").is_file()
