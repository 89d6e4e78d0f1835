"""Cached virtual environments holding one runtime build each (deployed runtimes, tests, scripts).

Each build lives in its own venv under ``$DEFORM_ONNX_VENVS`` (default
``~/.cache/deform-onnx/venvs``), created with ``python -m venv`` and ``pip
install`` from the package registry, so that old runtime builds never mix with
the project's own packages. The cache is safe to share between processes
(terminals, CI jobs, test runs in parallel):

- **A lock per venv**: ``fcntl.flock`` on ``.<name>.lock`` beside it. A process
  that finds the venv missing takes the lock, builds, and releases it; a second
  first use waits for the lock (saying so through ``log``), then finds the venv
  complete and uses it. Removing a venv takes the same lock.
- **A half-built venv is never taken as complete**: the ``.complete`` marker (the
  requirement list) is written last, as a whole (a temporary file renamed), and
  only a venv whose marker matches is used; one without it (a build cut short, a
  crash) or with other requirements is removed and rebuilt under the lock. The
  venv is built in place, under the lock, rather than in a temporary folder moved
  into place: a venv is not relocatable (the ``bin`` scripts' ``#!`` lines and
  ``activate`` hold the absolute build path, and onnx2tf runs ``onnxsim`` through
  its script), and with the lock held and the marker written last the final
  folder is only ever used complete.
- **Stall, not a fixed clock**: each step is watched; it fails when it printed
  nothing and read or wrote nothing (its processes' ``/proc/<pid>/io``, children
  included) for ``timeout`` seconds, however long a large download takes while
  it moves. Progress (pip's lines, and a line every 15 s while a step works
  silently) goes to ``log``.

The steps run in :func:`deform_onnx.runtimes.sealed.install_env` (the user's
``PYTHON*``, venv and ``PIP_*`` settings dropped, except those pip needs to reach
its index). Markers written by earlier versions of this module (the same text)
are accepted: an existing cache is not rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import queue
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .sealed import install_env

__all__ = ["VenvInfo", "cached_venv", "remove_venv", "venv_info", "venv_root"]

#: Seconds between the "still working" lines of a step that prints nothing but reads or writes.
_QUIET_REPORT = 15.0


def venv_root() -> Path:
    """The folder holding the cached venvs (``$DEFORM_ONNX_VENVS`` or ``~/.cache/deform-onnx/venvs``)."""
    return Path(os.environ.get("DEFORM_ONNX_VENVS", Path.home() / ".cache" / "deform-onnx" / "venvs"))


def _wanted(requirements: Sequence[str], options: Sequence[str], inherit: bool) -> str:
    """What the ``.complete`` marker of a venv with these requirements holds."""
    return "\n".join([*options, *requirements, *(["+host site-packages"] if inherit else [])])


def _complete(root: Path, wanted: str, requirements: Sequence[str]) -> bool:
    """Whether the venv at ``root`` is complete with ``wanted`` (or a first-version marker: the version only)."""
    marker = root / ".complete"
    try:
        text = marker.read_text()
    except OSError:
        return False
    return (root / "bin" / "python").exists() and text in (wanted, requirements[0].split("==")[-1])


@contextlib.contextmanager
def _locked(name: str, log: Callable[[str], None] | None) -> Iterator[None]:
    """Hold the lock of the venv ``name`` (``.<name>.lock`` beside it); say so when another process has it."""
    root = venv_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        lock = open(root / f".{name}.lock", "a")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise RuntimeError(f"cannot create the {name} venv in {root}: {exc.strerror or exc}") from None
    with lock as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if log is not None:
                log(f"waiting for another process creating or removing the {name} venv in {root / name}")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _busy(name: str) -> bool:
    """Whether another process holds the lock of the venv ``name`` (creating or removing it)."""
    try:
        with open(venv_root() / f".{name}.lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(f, fcntl.LOCK_UN)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def cached_venv(
    name: str,
    requirements: Sequence[str],
    timeout: float = 300,
    options: Sequence[str] = (),
    inherit: bool = False,
    log: Callable[[str], None] | None = None,
) -> Path:
    """The interpreter of the cached venv ``name`` holding ``requirements``; created if missing.

    Safe to call from several processes at once: one creates the venv, the others wait for it (the
    module's docs: lock, marker, stall).

    Args:
        name: folder name under :func:`venv_root` (e.g. ``"ort-1.16.3"``).
        requirements: pip requirement strings, installed by name from the registry.
        timeout: seconds a step (venv creation, pip install) may stall: print nothing and read or write
            nothing; a step that keeps moving may take longer.
        options: extra ``pip install`` options (e.g. ``["--no-deps"]``); part of what the marker records.
        inherit: also see this interpreter's site-packages (a ``.pth`` file): onnx2torch runs on the project's
            own torch instead of a second 4 GB copy of it.
        log: called with a first line saying the venv is being created (or that another process is creating
            it), then with each line pip prints and a line every 15 s while a step works silently;
            ``None``: nothing is reported.

    Returns:
        Path of the venv's ``bin/python``.

    Raises:
        RuntimeError: the venv could not be created (one line: the step and pip's last line, the stall, or a
            cache folder that cannot be written).
    """
    root = venv_root() / name
    python = root / "bin" / "python"
    wanted = _wanted(requirements, options, inherit)
    if _complete(root, wanted, requirements):
        return python
    with _locked(name, log):
        if _complete(root, wanted, requirements):  # another process created it while this one waited
            return python
        _create(root, python, wanted, requirements, options, inherit, timeout, log)
    return python


def _create(root: Path, python: Path, wanted: str, requirements: Sequence[str], options: Sequence[str],
            inherit: bool, stall: float, log: Callable[[str], None] | None) -> None:  # fmt: skip
    """Build the venv at ``root`` (the caller holds its lock); the marker last."""
    shutil.rmtree(root, ignore_errors=True)
    if log is not None:
        log(f"creating the {root.name} venv in {root} (once): pip install {' '.join(requirements)}")
    steps = [
        [sys.executable, "-m", "venv", str(root)],
        [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off", *options,
         *requirements],
    ]  # fmt: skip
    env = install_env(python)
    for i, step in enumerate(steps):
        returncode, output = _run_step(step, stall, log, root, env)
        if returncode != 0:
            last = (output.strip() or "no output").splitlines()[-1]
            raise RuntimeError(f"could not create {root}: {' '.join(step[2:6])} failed: {last}")
        if i == 0 and inherit:  # before pip: its dependency check sees the host's packages too
            _inherit(root, env)
    fd, tmp = tempfile.mkstemp(prefix=".complete.", dir=root)
    with os.fdopen(fd, "w") as f:
        f.write(wanted)
    os.replace(tmp, root / ".complete")


def _activity(pid: int) -> int | None:
    """Bytes read and written so far by process ``pid`` and its children (``/proc``; ``None`` elsewhere)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            io = dict(line.split(": ") for line in Path(f"/proc/{p}/io").read_text().splitlines())
            total += int(io["rchar"]) + int(io["wchar"])
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, KeyError):
            if p == pid:
                return None
    return total


def _run_step(step: list[str], stall: float, log: Callable[[str], None] | None, root: Path,
              env: dict[str, str] | None = None) -> tuple[int, str]:  # fmt: skip
    """Run one creation step: ``(return code, its output)``; each output line goes to ``log`` as it comes.

    Raises:
        RuntimeError: the step stalled: no output and no bytes read or written for ``stall`` seconds (its
            process group is killed).
    """
    lines: list[str] = []
    what = " ".join(step[2:6])
    proc = subprocess.Popen(step, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)  # fmt: skip
    assert proc.stdout is not None
    got: queue.Queue[str | None] = queue.Queue()

    def read(stream=proc.stdout) -> None:
        for x in stream:
            got.put(x)
        got.put(None)

    threading.Thread(target=read, daemon=True).start()
    last = reported = time.monotonic()
    seen = _activity(proc.pid)
    with proc:
        try:
            while True:
                try:
                    line = got.get(timeout=0.5)
                except queue.Empty:
                    line = ""
                now = time.monotonic()
                if line is None:
                    break
                if line:
                    last = reported = now
                    lines.append(line)
                    if log is not None and line.strip():
                        log(line.strip())
                    continue
                moved = _activity(proc.pid)
                if moved is not None and moved != seen:
                    seen, last = moved, now
                    if log is not None and now - reported >= _QUIET_REPORT:
                        reported = now
                        log(f"{root.name}: {what}: working ({moved / 1e6:.0f} MB read and written so far)")
                if now - last > stall:
                    tail = next((x.strip() for x in reversed(lines) if x.strip()), "no output")
                    raise RuntimeError(f"could not create {root}: {what} stalled: no output and nothing read or "
                                       f"written for {stall:g} s (last line: {tail[:200]})")  # fmt: skip
        except BaseException:  # the stall, or Ctrl-C (the step runs in a session of its own: it would go on)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        proc.wait()
    return proc.returncode, "".join(lines)


def _inherit(root: Path, env: dict[str, str] | None = None) -> None:
    """Let the venv at ``root`` import this interpreter's packages (after its own)."""
    paths = dict.fromkeys(site.getsitepackages() + [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    purelib = Path(subprocess.run([str(root / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True, env=env).stdout.strip())  # fmt: skip
    (purelib / "_deform_onnx_host.pth").write_text("\n".join(paths) + "\n")


@dataclass
class VenvInfo:
    """What the cache holds for one venv (:func:`venv_info`).

    Attributes:
        name: its folder under :func:`venv_root`.
        path: that folder.
        state: ``"installed"`` (complete, with the requirements asked for), ``"missing"``, ``"being created"``
            (another process holds its lock), ``"incomplete"`` (a folder without the marker: a build cut short;
            rebuilt on next use), ``"other requirements"`` (complete with another requirement list: rebuilt on
            next use).
        versions: ``{distribution: version}`` installed (of the requirements' names; all when none are given).
        size: bytes on disk (files, not following links).
    """

    name: str
    path: Path
    state: str
    versions: dict[str, str] = field(default_factory=dict)
    size: int = 0


def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def venv_info(
    name: str, requirements: Sequence[str] = (), options: Sequence[str] = (), inherit: bool = False
) -> VenvInfo:
    """The state, installed versions and size of the cached venv ``name`` (read from disk; runs nothing).

    ``requirements``/``options``/``inherit``: what it should hold (as given to :func:`cached_venv`); none
    given: any complete venv counts as installed.
    """
    import re
    from importlib.metadata import PathDistribution

    root = venv_root() / name
    if not root.is_dir():
        return VenvInfo(name, root, "missing")
    marker = root / ".complete"
    if not marker.is_file():
        state = "being created" if _busy(name) else "incomplete"
    elif not requirements or _complete(root, _wanted(requirements, options, inherit), requirements):
        state = "installed"
    else:
        state = "other requirements"
    wanted = {_norm(re.split(r"[=<>!~\[; ]", r, maxsplit=1)[0]) for r in requirements}
    versions = {}
    for meta in sorted(root.glob("lib/python*/site-packages/*.dist-info")):
        dist = PathDistribution(meta)
        dist_name = dist.metadata["Name"] or ""
        if dist_name and (not wanted or _norm(dist_name) in wanted):
            versions[dist_name] = dist.version
    size = 0
    for folder, _, files in os.walk(root):
        for f in files:
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(folder, f)).st_size
    return VenvInfo(name, root, state, versions, size)


def remove_venv(name: str, log: Callable[[str], None] | None = None) -> bool:
    """Remove the cached venv ``name`` (under its lock: waits for a process creating it); whether it existed."""
    root = venv_root() / name
    if not root.exists():
        return False
    with _locked(name, log):
        # the marker first: a venv cut short while being removed is incomplete, never taken as complete
        with contextlib.suppress(FileNotFoundError):
            (root / ".complete").unlink()
        shutil.rmtree(root, ignore_errors=True)
    return True
