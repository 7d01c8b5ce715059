"""Where the fencing tests' steps leave their mark outside duro: one line ``run_id step pid`` per
execution, appended with O_APPEND to ``$FENCE_EFFECTS_DIR/effects.log`` (one short ``os.write``, so
lines from several processes never interleave, and a frozen or killed worker loses none)."""

from __future__ import annotations

import os

EFFECTS_DIR = "FENCE_EFFECTS_DIR"
EFFECTS_FILE = "effects.log"


def mark(run_id: str, step: str) -> str:
    """Record that ``step`` of ``run_id`` executed in this process; the step returns what this returns."""
    directory = os.environ.get(EFFECTS_DIR)
    pid = os.getpid()
    if directory:
        fd = os.open(os.path.join(directory, EFFECTS_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{run_id} {step} {pid}\n".encode())
        finally:
            os.close(fd)
    return f"{step}@{pid}"
