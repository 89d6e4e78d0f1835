"""Imports every command module so that each registers on the app."""

# Each command lives in its own module; add new ones here.
from . import check_cmd, lower_cmd  # noqa: F401
from . import export_cmd  # noqa: F401
from . import bench_cmd  # noqa: F401
from . import targets_cmd  # noqa: F401
