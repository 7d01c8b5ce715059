"""Cross-process wakeups (PostgreSQL ``LISTEN``/``NOTIFY``): what a transaction changed, told to the
other processes' workers at its commit.

A notice is typed in the code (``Notice``: a ``TypedDict`` per kind, its ``kind`` a ``Literal``) and
travels as a JSON list, its kind first (:func:`wire`, :func:`read`): a run to claim
(``["run", namespace]``), a child's end for its parent (``["done", run_id, status]``), a signal, a
cancel request, a slot reserved for a waiter (``["slot", slot_id, due_at]``), a rate's grant, a
schedule changed, limits or rates to look at again; and ``reconnected`` from the listener itself
after it lost its connection. Losing one costs only latency: workers still poll. A list an older
or newer worker sent that this one does not know is dropped.

SQLite has no notices: ``watch_sqlite`` reads the file's ``PRAGMA data_version`` every 50 ms and
says ``changed`` (look again) when another process committed, so that workers in several
processes on one file hear a cancel, a signal or a freed slot within a poll pass of it, not a poll
interval.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypedDict, cast, get_args, get_type_hints

from sqlalchemy.engine import URL

from . import _psycopg
from ._tables import NOTIFY_CHANNEL


class RunNotice(TypedDict):
    kind: Literal["run"]  # a run to claim, in this namespace (None: any)
    namespace: str | None


class DoneNotice(TypedDict):
    kind: Literal["done"]  # a run ended: its parent may go on
    run_id: str
    status: str


class SignalNotice(TypedDict):
    kind: Literal["signal"]
    run_id: str
    name: str


class CancelNotice(TypedDict):
    kind: Literal["cancel"]
    run_id: str


class SlotNotice(TypedDict):
    kind: Literal["slot"]  # a slot reserved for a waiter
    slot_id: str
    due_at: int | None


class RateNotice(TypedDict):
    kind: Literal["rate"]  # a rate's wait granted
    wait_id: str


class ScheduleNotice(TypedDict):
    kind: Literal["sched"]
    namespace: str


class LookAgain(TypedDict):
    # limits or rates changed; notices lost (reconnected) or another process wrote (SQLite: changed)
    kind: Literal["limits", "rates", "reconnected", "changed"]


Notice = (
    RunNotice
    | DoneNotice
    | SignalNotice
    | CancelNotice
    | SlotNotice
    | RateNotice
    | ScheduleNotice
    | LookAgain
)


def _fields() -> dict[str, tuple[str, ...]]:
    """Each kind's fields, in their order on the wire: read from the notice types themselves."""
    fields = {}
    for notice_type in get_args(Notice):
        hints = get_type_hints(notice_type)
        for kind in get_args(hints["kind"]):
            fields[kind] = tuple(name for name in hints if name != "kind")
    return fields


FIELDS: dict[str, tuple[str, ...]] = _fields()


def wire(notice: Notice) -> str:
    """A notice as it travels: a JSON list, its kind first, then its fields in order."""
    fields = cast(Mapping[str, Any], notice)
    return json.dumps([notice["kind"], *(fields[name] for name in FIELDS[notice["kind"]])])


def read(message: Any) -> Notice | None:
    """The notice a decoded JSON list is, or ``None`` (a kind this process does not know, a field
    missing)."""
    if not isinstance(message, list) or not message or not isinstance(message[0], str):
        return None
    names = FIELDS.get(message[0])
    if names is None or len(message) < 1 + len(names):
        return None
    return cast(Notice, {"kind": message[0], **dict(zip(names, message[1:], strict=False))})


def payloads(notices: tuple[Notice, ...]) -> dict[str, list[str]]:
    """The parameters of the ``notify`` query (see ``_queries``) for these notices."""
    return {"payloads": [wire(notice) for notice in notices]}


def listen(
    url: URL,
    deliver: Callable[[Notice], None],
    stopping: threading.Event,
    ready: threading.Event | None = None,
) -> None:
    """Block, handing each notice to ``deliver``, until ``stopping`` is set;
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
                    deliver({"kind": "reconnected"})
                first = False
                while not stopping.is_set():
                    for note in conn.notifies(timeout=0.1):
                        try:
                            notice = read(json.loads(note.payload))
                        except ValueError:
                            continue
                        if notice is not None:
                            deliver(notice)
        except psycopg.Error:
            stopping.wait(0.5)


WATCH_S = 0.05  # how often watch_sqlite reads the file's data_version
AMBIGUOUS_READS = 10  # a change that may be this process's own is said at most every 10 reads (0.5 s)


def watch_sqlite(
    path: str, own_writes: Callable[[], int], deliver: Callable[[Notice], None], stopping: threading.Event
) -> None:
    """Block, delivering a ``changed`` notice after another process committed to the SQLite file at
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
                deliver({"kind": "changed"})
            elif unsaid >= AMBIGUOUS_READS:
                unsaid = 0
                deliver({"kind": "changed"})
        version, writes, unsaid = now_version, now_writes, unsaid + 1
    if conn is not None:
        conn.close()
