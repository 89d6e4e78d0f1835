"""A pytest plugin that writes each test's time as it finishes, so a run stopped early still tells.

    SUITE_TIMER_LOG=run.tsv PYTHONPATH=src:scripts pytest -q -p suite_timer
    python scripts/suite_durations.py --from-log run.tsv --note "..."

One line per test, tab-separated: seconds (setup, call and teardown together; a module- or session-scoped
fixture counts in the first test that uses it), outcome (``passed`` or ``failed``), seconds since the run
started, node id.
"""

from __future__ import annotations

import os
import time

_acc: dict[str, list] = {}
_start = time.time()


def pytest_runtest_logreport(report) -> None:
    """Add one phase's duration to its test; write the test's line after its teardown."""
    seconds_outcome = _acc.setdefault(report.nodeid, [0.0, "passed"])
    seconds_outcome[0] += report.duration
    if report.failed:
        seconds_outcome[1] = "failed"
    if report.when == "teardown":
        with open(os.environ["SUITE_TIMER_LOG"], "a") as f:
            f.write(f"{seconds_outcome[0]:.3f}\t{seconds_outcome[1]}\t{time.time() - _start:.0f}\t{report.nodeid}\n")
