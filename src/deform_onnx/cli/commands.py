"""Imports every command module so that each registers on the app."""

# Each command lives in its own module; add new ones here.
from . import check_cmd, lower_cmd  # noqa: E402,F401
from . import export_cmd  # noqa: E402,F401
from . import bench_cmd  # noqa: E402,F401
from . import targets_cmd  # noqa: E402,F401
from . import quantize_cmd  # noqa: E402,F401
