"""The environment each runtime process gets: sealed from the user's Python, pip and venv settings.

A runtime (MNN, ncnn, TVM, onnx2tf, onnx2torch, and ONNX Runtime/OpenVINO run as a
child of this interpreter) converts and runs a file in a process of its own. What
that process inherits decides whether it can reach the user's packages: MNN's
``mnnconvert`` script runs ``pip install -U aliyun-log-python-sdk`` (its telemetry)
through whatever ``pip`` is first on ``PATH``, which in an activated venv is the
user's, and a user ``PYTHONPATH`` puts the user's packages before the runtime's.

:func:`run_env` (converting and running) builds the child's environment from this
process's, with:

- ``PATH``: a folder of refusing ``pip``/``pip3``/``pip3.X`` programs first
  (:func:`blocked_pip`), then the interpreter's own ``bin`` (the runtime's venv),
  then the user's ``PATH`` without the ``bin`` of any Python environment on it
  (the active ``$VIRTUAL_ENV``/``$CONDA_PREFIX``, any folder beside a
  ``pyvenv.cfg`` or ``conda-meta``);
- ``VIRTUAL_ENV`` set to the runtime's venv (removed for this interpreter when it
  is no venv), ``VIRTUAL_ENV_PROMPT`` and ``__PYVENV_LAUNCHER__`` removed;
- no ``PYTHON*`` variable (``PYTHONPATH``, ``PYTHONHOME``, ``PYTHONSTARTUP``,
  ``PYTHONUSERBASE``, ...). Only a runtime that runs in this interpreter (its
  packages are this interpreter's: ``onnxruntime``, ``openvino``) keeps
  ``PYTHONPATH``, since that is how this interpreter found them;
- no ``PIP_*`` variable of the user's; instead ``PIP_NO_INDEX=1`` and
  ``PIP_CONFIG_FILE`` = ``os.devnull`` (no config file's ``find-links``), so that
  even ``python -m pip`` inside the runtime's venv installs nothing;
- HTTP(S) through the standard proxy variables (``http_proxy``, ``https_proxy``,
  ``all_proxy`` and their capitals) sent to a closed local port and ``no_proxy``
  removed: a Python HTTP client (urllib, requests, httpx) a converter starts on
  its own fails at once instead of calling out. The converters need no network;
  MNN's telemetry module is not even imported (the runner calls MNNConvert's
  converter function, not its ``mnnconvert`` script).

:func:`install_env` (``python -m venv`` and ``pip install`` into a runtime's venv)
is the same without the blocked ``pip`` and the network block, and keeps what pip
needs to reach its index the way this machine's pip is configured: the
``PIP_*`` settings of the index and the connection (:data:`PIP_REACH`), the proxy
variables, ``SSL_CERT_FILE``/``SSL_CERT_DIR``/``REQUESTS_CA_BUNDLE``, and pip's
config files (``/etc/pip.conf``, ``/etc/xdg/pip/pip.conf``, ``~/.config/pip/pip.conf``,
``PIP_CONFIG_FILE``), which pip reads itself. Every other ``PIP_*`` setting
(``PIP_TARGET``, ``PIP_PREFIX``, ``PIP_USER``, ``PIP_CONSTRAINT``, ``PIP_NO_DEPS``,
``PIP_REQUIRE_VIRTUALENV``, ...) would change what is installed or where: it is
not passed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["PIP_REACH", "blocked_pip", "install_env", "run_env"]

#: The ``PIP_*`` settings passed to a venv's ``pip install``: where the index is and how to reach it.
PIP_REACH = frozenset({
    "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX", "PIP_TRUSTED_HOST", "PIP_CERT",
    "PIP_CLIENT_CERT", "PIP_PROXY", "PIP_DEFAULT_TIMEOUT", "PIP_TIMEOUT", "PIP_RETRIES", "PIP_CONFIG_FILE",
    "PIP_KEYRING_PROVIDER", "PIP_CACHE_DIR", "PIP_NO_CACHE_DIR", "PIP_DISABLE_PIP_VERSION_CHECK",
})  # fmt: skip
_PROXIES = ("http_proxy", "https_proxy", "all_proxy")
_NO_PROXY = ("no_proxy", "NO_PROXY")
#: Where a converter's own HTTP calls go: a closed port (the discard service, never served here).
_DEAD_PROXY = "http://127.0.0.1:9"
_REFUSE = """#!/bin/sh
echo "deform-onnx: pip is blocked inside a runtime's sealed environment (refused: pip $*)" >&2
exit 1
"""


def _env_bins(environ: Mapping[str, str]) -> set[str]:
    """The ``bin`` folders of the active venv/conda environment named by ``environ``."""
    return {os.path.join(environ[v], "bin") for v in ("VIRTUAL_ENV", "CONDA_PREFIX") if environ.get(v)}


def _python_env_bin(entry: str, active: set[str]) -> bool:
    """Whether the ``PATH`` entry is the ``bin`` (or ``Scripts``) of a Python environment."""
    parent = Path(entry).parent
    return entry.rstrip(os.sep) in active or (parent / "pyvenv.cfg").is_file() or (parent / "conda-meta").is_dir()


def _base(python: Path, environ: Mapping[str, str] | None) -> dict[str, str]:
    """``environ`` without the user's Python, pip and venv settings; ``python``'s ``bin`` first on ``PATH``."""
    environ = os.environ if environ is None else environ
    active = _env_bins(environ)
    drop = {"VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT", "__PYVENV_LAUNCHER__", "PATH"}
    env = {k: v for k, v in environ.items() if k not in drop and not k.startswith(("PYTHON", "PIP_"))}
    bin_dir = str(python.parent)
    rest = [p for p in environ.get("PATH", os.defpath).split(os.pathsep) if p and p != bin_dir]
    env["PATH"] = os.pathsep.join([bin_dir, *(p for p in rest if not _python_env_bin(p, active))])
    venv = python.parent.parent
    if (venv / "pyvenv.cfg").is_file():
        env["VIRTUAL_ENV"] = str(venv)
    return env


def install_env(python: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a step creating the venv of ``python`` (``python -m venv``, ``pip install``).

    ``environ`` (default ``os.environ``) without ``PYTHON*``, the user's venv and the ``PIP_*`` settings
    outside :data:`PIP_REACH`; ``python``'s ``bin`` first on ``PATH``, ``VIRTUAL_ENV`` naming its venv.
    """
    environ = os.environ if environ is None else environ
    env = _base(python, environ)
    env.update({k: v for k, v in environ.items() if k in PIP_REACH})
    return env


def run_env(python: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a runtime's converter and runner run in under ``python`` (see the module's docs).

    Args:
        python: the runtime's interpreter (a cached venv's ``bin/python``, or ``sys.executable`` for the
            runtimes of this interpreter, which keep ``PYTHONPATH``).
        environ: the environment to start from (default ``os.environ``).
    """
    environ = os.environ if environ is None else environ
    env = _base(python, environ)
    if os.path.abspath(python) == os.path.abspath(sys.executable) and environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = environ["PYTHONPATH"]
    env["PATH"] = os.pathsep.join([str(blocked_pip()), env["PATH"]])
    env.update(PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    for name in _NO_PROXY:
        env.pop(name, None)
    for name in _PROXIES:
        env[name] = env[name.upper()] = _DEAD_PROXY
    return env


def blocked_pip() -> Path:
    """A folder of ``pip``, ``pip3`` and ``pip3.X`` programs that refuse (exit 1, saying why on stderr).

    Kept beside the cached venvs (``$DEFORM_ONNX_VENVS/.blocked-pip``, a folder that allows running
    programs, unlike a ``noexec`` /tmp, where ``PATH`` lookup would pass over it to the next ``pip``);
    where that cannot be written (a read-only shared cache), in the temporary folder. Each file is
    written whole (a temporary file renamed) when missing.
    """
    from .venvs import venv_root

    try:
        return _write_refusing(venv_root() / ".blocked-pip")
    except OSError:
        return _write_refusing(Path(tempfile.gettempdir()) / f"deform-onnx-{os.getuid()}-blocked-pip")


def _write_refusing(folder: Path) -> Path:
    """Write the refusing programs into ``folder`` (created) where missing; ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("pip", "pip3", f"pip{sys.version_info[0]}.{sys.version_info[1]}"):
        path = folder / name
        if path.is_file() and os.access(path, os.X_OK) and path.read_text() == _REFUSE:
            continue
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder)
        with os.fdopen(fd, "w") as f:
            f.write(_REFUSE)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
    return folder
