"""Time limits for runtime calls (``deform-onnx check --timeout``).

A :class:`Deadline` is checked between steps; a single ONNX Runtime or
OpenVINO inference is interrupted from outside (ORT's
``RunOptions.terminate``, OpenVINO's ``InferRequest.cancel``), so one slow
call cannot hold the command past the limit. Building a session is not
interruptible and is not counted against it.
"""

from __future__ import annotations

import threading
import time


class DeadlineExceeded(TimeoutError):
    """A step ran past its deadline (the message names the step and the limit)."""


class Deadline:
    """A point in time ``seconds`` from now (``None``: never)."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.end = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float | None:
        """Seconds left (>= 0), or ``None`` without a limit."""
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def passed(self) -> bool:
        """Whether the deadline has passed (never without a timeout)."""
        return self.end is not None and time.monotonic() >= self.end

    def check(self, what: str) -> None:
        """Raise :class:`DeadlineExceeded` naming ``what`` once the deadline has passed."""
        if self.passed():
            raise self.error(what)

    def error(self, what: str) -> DeadlineExceeded:
        """The :class:`DeadlineExceeded` naming ``what`` and the timeout."""
        return DeadlineExceeded(f"timed out: {what} ran longer than --timeout {self.seconds:g} s")


def ort_run(session, names, feeds, deadline: Deadline) -> list:
    """``session.run(names, feeds)``, terminated when ``deadline`` passes.

    Raises:
        DeadlineExceeded: the run did not finish in time.
    """
    import onnxruntime as ort

    left = deadline.left()
    if left is None:
        return session.run(names, feeds)
    if left <= 0:
        raise deadline.error("onnxruntime")
    options = ort.RunOptions()
    box: dict = {}

    def target():
        try:
            box["out"] = session.run(names, feeds, options)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["err"] = e

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(left)
    if worker.is_alive():
        options.terminate = True  # ORT checks it between nodes and returns an error
        worker.join()
        raise deadline.error("onnxruntime")
    if "err" in box:
        raise box["err"]
    return box["out"]


def ov_infer(request, args, deadline: Deadline) -> None:
    """Run an OpenVINO ``InferRequest`` on ``args``, cancelled when ``deadline`` passes.

    Raises:
        DeadlineExceeded: the inference did not finish in time.
    """
    left = deadline.left()
    if left is None:
        request.infer(args)
        return
    if left <= 0:
        raise deadline.error("openvino")
    request.start_async(args)
    if not request.wait_for(max(1, int(left * 1000))):
        request.cancel()
        raise deadline.error("openvino")


def one_line(e: BaseException) -> str:
    """The first non-empty line of an exception's message (with its type when the line is short).

    OpenVINO's messages start with where they were raised ("Exception from src/inference/src/cpp/core.cpp:84:",
    "Check 'false' failed at ..."): those lines are skipped, and its summary of unconverted ops ("-- No conversion
    rule found for operations: ...") is the line, as the deployed runners read it.
    """
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(("Exception from", "Check '"))] or lines
    said = [line for line in said if line.startswith("-- No conversion rule")][:1] or said
    if said:
        line = said[0]
        return f"{type(e).__name__}: {line}" if len(line) < 20 else line
    return type(e).__name__


__all__ = ["Deadline", "DeadlineExceeded", "ort_run", "ov_infer", "one_line"]
