"""The runtimes users deploy to, each converting and running a file in a cached venv of its own.

:mod:`.families` holds the registry (one :class:`Family` per runtime: its venv's pins, its converter's
runner, the artifacts it keeps); :mod:`.runners` the code each runs inside its venv; :mod:`.check` the
rows ``deform-onnx check --runtime`` and :func:`deform_onnx.check_runtimes` print and return.
"""

from .families import FAMILIES, Family, Run, family, first_line, interpreter, names, register_family, run_file, run_meta

__all__ = [
    "FAMILIES",
    "Family",
    "Run",
    "family",
    "first_line",
    "interpreter",
    "names",
    "register_family",
    "run_file",
    "run_meta",
]
