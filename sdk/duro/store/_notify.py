"""Cross-process wakeups (PostgreSQL ``LISTEN``/``NOTIFY``): what a transaction changed, told to the
other processes' workers at its commit.

Each notice is a JSON list: ``["run", namespace]`` (a run to claim), ``["done", run_id, status]``
(a child's end, for its parent), ``["signal", run_id, name]``, ``["slot", slot_id, due_at]``,
``["sched", namespace]``, ``["limits"]``; and ``["reconnected"]`` from the listener itself after
it lost its connection. Losing one costs only latency: workers still poll.

SQLite has no notices: ``watch_sqlite`` reads the file's ``PRAGMA data_version`` every 50 ms and
says ``["changed"]`` (look again) when another process committed, so that workers in several
processes on one file hear a cancel, a signal or a freed slot within a poll pass of it, not a poll
interval.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import URL

from . import _psycopg
from ._tables import NOTIFY_CHANNEL


def payloads(messages: tuple[list[Any], ...]) -> dict[str, list[str]]:
    """The parameters of the ``notify`` query (see ``_queries``) for these messages."""
    return {"payloads": [json.dumps(m) for m in messages]}


def listen(
    url: URL,
    deliver: Callable[[list[Any]], None],
    stopping: threading.Event,
    ready: threading.Event | None = None,
) -> None:
    """Block, handing each notice (a decoded JSON list) to ``deliver``, until ``stopping`` is set;
    ``ready`` is set once the first ``LISTEN`` is in place (a worker starts claiming then: a run
    announced before it is found by its first pass, one after by its notice). Reconnects after
    errors (a restarted server, say) and then delivers ``["reconnected"]``: whatever was sent
    meanwhile was lost, so listeners look again."""
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    first = True
    psycopg = _psycopg.driver
    while not stopping.is_set():
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                if ready is not None:
                    ready.set()
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


WATCH_S = 0.05  # how often watch_sqlite reads the file's data_version
AMBIGUOUS_READS = 10  # a change that may be this process's own is said at most every 10 reads (0.5 s)


def watch_sqlite(
    path: str, own_writes: Callable[[], int], deliver: Callable[[list[Any]], None], stopping: threading.Event
) -> None:
    """Block, delivering ``["changed"]`` after another process committed to the SQLite file at
    ``path``, until ``stopping`` is set. ``data_version`` moves at every commit of any other
    connection, this process's own included: when ``own_writes`` (this process's write
    transactions) moved too, the change may be ours alone, and it is said at most every
    ``AMBIGUOUS_READS`` reads (a busy worker looks again twice a second, not at every commit). Errors (the
    file locked, replaced, gone) are waited out."""
    conn: sqlite3.Connection | None = None
    version = writes = None
    unsaid = AMBIGUOUS_READS  # reads since an ambiguous change was last said
    while not stopping.wait(WATCH_S):
        try:
            if conn is None:
                conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
                version = None
            now_writes = own_writes()
            now_version = conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            if conn is not None:
                conn.close()
            conn = None
            continue
        if version is not None and now_version != version:
            if now_writes == writes:
                deliver(["changed"])
            elif unsaid >= AMBIGUOUS_READS:
                unsaid = 0
                deliver(["changed"])
        version, writes, unsaid = now_version, now_writes, unsaid + 1
    if conn is not None:
        conn.close()
