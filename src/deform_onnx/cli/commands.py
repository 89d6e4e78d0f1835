"""Imports every command module so that each registers on the app."""

# Each command lives in its own module; add new ones here.
from . import (  # noqa: F401
    bench_cmd,
    check_cmd,
    export_cmd,
    lower_cmd,
    quantize_cmd,
    runtimes_cmd,
    targets_cmd,
)
