"""Written artifacts are complete and readable like any file the user writes (issue 35 item 8).

The IR writer, the kept converter files and quantize's outputs were renamed from ``mkstemp``'s 0600
temporaries; they now go through :func:`deform_onnx.core.atomic_io.commit_copies` and get ``0o666`` less
the umask. A ``keep_artifacts`` folder that is missing is refused before any conversion work.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import deform_onnx
from deform_onnx.core.atomic_io import commit_copies


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _private(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)  # what mkstemp and the converters' own temporaries give
    return path


def test_commit_copies_gives_the_umask_mode_all_or_none(tmp_path, umask_022):
    src = tmp_path / "src"
    src.mkdir()
    a, b = _private(src / "m.bin", b"weights"), _private(src / "m.xml", b"<net/>")
    out = tmp_path / "out"
    out.mkdir()
    written = commit_copies([(a, out / "m.bin"), (b, out / "m.xml")])
    assert written == [out / "m.bin", out / "m.xml"]
    assert [p.read_bytes() for p in written] == [b"weights", b"<net/>"]
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in written)
    # A copy that fails (its source is missing) renames nothing and leaves no temporary file.
    again = tmp_path / "again"
    again.mkdir()
    with pytest.raises(FileNotFoundError):
        commit_copies([(a, again / "m.bin"), (src / "missing.xml", again / "m.xml")])
    assert list(again.iterdir()) == []
    with pytest.raises(FileNotFoundError, match="does not exist"):  # a missing folder: before any copy
        commit_copies([(a, tmp_path / "nowhere" / "m.bin")])


def test_kept_converter_files_get_the_umask_mode(tmp_path, umask_022):
    """check_runtimes(keep_artifacts=...) keeps each converter's files through ``_keep``."""
    from deform_onnx.runtimes.deployed.check import _keep

    made = tmp_path / "work"
    made.mkdir()
    files = [(_private(made / "out.xml", b"<net/>"), ".xml"), (_private(made / "out.bin", b"w"), ".bin")]
    kept = tmp_path / "kept"
    kept.mkdir()
    paths = _keep(files, kept, "model")
    assert sorted(p.name for p in paths) == ["model.bin", "model.xml"]
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in paths)


def test_keep_artifacts_naming_a_missing_folder_is_refused_before_any_work(tmp_path, monkeypatch):
    import deform_onnx.exporting.api as api
    from deform_onnx.cli import app

    def no_work(*args, **kwargs):
        raise AssertionError("export work started before keep_artifacts was checked")

    monkeypatch.setattr(api, "_choose", no_work)
    monkeypatch.setattr(api, "format_for", no_work)
    missing = tmp_path / "missing"
    with pytest.raises(FileNotFoundError, match="keep_artifacts .*missing.*create it first"):
        deform_onnx.export(torch.nn.Identity(), (torch.zeros(1),), tmp_path / "m.onnx",
                           verify_runtimes=["onnxruntime"], keep_artifacts=missing)  # fmt: skip
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="keep_artifacts"):
        deform_onnx.export(torch.nn.Identity(), (torch.zeros(1),), tmp_path / "m.onnx",
                           verify_runtimes=["onnxruntime"], keep_artifacts=tmp_path / "file")  # fmt: skip
    result = CliRunner().invoke(app, ["export", "--verify-runtime", "onnxruntime", "--keep-artifacts", str(missing),
                                      "-o", str(tmp_path / "m.onnx")])  # fmt: skip
    assert result.exit_code == 2 and "--keep-artifacts" in result.output and "does not exist" in result.output
    assert not (tmp_path / "m.onnx").exists()


def test_export_keeps_the_verify_runtimes_files_with_the_umask_mode(tmp_path, umask_022):
    """export(verify_runtimes=["openvino"], keep_artifacts=...): the .onnx and the kept IR are 0644 under umask 022."""
    pytest.importorskip("openvino")
    from runtimes.test_deployed import TinyDCN

    kept = tmp_path / "kept"
    kept.mkdir()
    path = tmp_path / "tiny.onnx"
    x = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    deform_onnx.export(TinyDCN().eval(), (x,), path, verify_runtimes=["openvino"], keep_artifacts=kept)
    written = [path, kept / "tiny.xml", kept / "tiny.bin"]
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in written), [oct(p.stat().st_mode) for p in written]
