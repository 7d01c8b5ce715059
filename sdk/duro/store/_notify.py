"""Cross-process wakeups (PostgreSQL ``LISTEN``/``NOTIFY``): what a transaction changed, told to the
other processes' workers at its commit.

Each notice is a JSON list: ``["run", namespace]`` (a run to claim), ``["done", run_id, status]``
(a child's end, for its parent), ``["signal", run_id, name]``, ``["slot", slot_id, due_at]``,
``["sched", namespace]``, ``["limits"]``; and ``["reconnected"]`` from the listener itself after
it lost its connection. Losing one costs only latency: workers still poll. SQLite's workers (one
process) only poll.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import URL

try:
    import psycopg
except ModuleNotFoundError:  # no postgres extra: SQLite only (parse_database_url says which to install)
    from .._extras import PSYCOPG as psycopg  # type: ignore[no-redef]  # a stand-in: see _extras.Absent

NOTIFY_CHANNEL = "duro"


def payloads(messages: tuple[list[Any], ...]) -> dict[str, list[str]]:
    """The parameters of the ``notify`` query (see ``_queries``) for these messages."""
    return {"payloads": [json.dumps(m) for m in messages]}


def listen(url: URL, deliver: Callable[[list[Any]], None], stopping: threading.Event) -> None:
    """Block, handing each notice (a decoded JSON list) to ``deliver``, until ``stopping`` is set.
    Reconnects after errors (a restarted server, say) and then delivers ``["reconnected"]``:
    whatever was sent meanwhile was lost, so listeners look again."""
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    first = True
    while not stopping.is_set():
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                if not first:
                    deliver(["reconnected"])
                first = False
                while not stopping.is_set():
                    for note in conn.notifies(timeout=0.1):
                        try:
                            message = json.loads(note.payload)
                        except ValueError:
                            continue
                        if isinstance(message, list) and message:
                            deliver(message)
        except psycopg.Error:
            stopping.wait(0.5)
