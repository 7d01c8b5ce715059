"""Where steps leave their mark outside duro: one line per execution, appended to a file of the
executing process (``$CHAOS_EFFECTS_DIR/effects-<pid>.log``), so a count of executions survives
duro, the database and a SIGKILL of the worker (``os.write`` of one short line with O_APPEND)."""

from __future__ import annotations

import os
import time

EFFECTS_DIR = "CHAOS_EFFECTS_DIR"


def mark(run_id: str, step: str) -> str:
    """Record that ``step`` of ``run_id`` executed here and now; the step returns what this returns."""
    directory = os.environ.get(EFFECTS_DIR)
    pid = os.getpid()
    if directory:
        at = time.time_ns() // 1_000_000  # noqa: TID251 - user code stamping its own log with the wall clock
        line = f"{run_id}\t{step}\t{pid}\t{at}\n".encode()
        path = os.path.join(directory, f"effects-{pid}.log")
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    return f"{step}@{pid}"
