"""Every statement the SQL store runs, by name, in one style: plain SQL with ``:name`` parameters.

The store never builds SQL with an expression library: it runs these texts on the driver's
connection (building SQLAlchemy Core statements per call cost more than SQLite itself). Three
conventions, each applied once when a store is made (see :class:`.Queries`):

- ``:name`` is a parameter; for psycopg it becomes ``%(name)s``.
- ``IN (:name)`` given a list binds one parameter per item (``IN (NULL)`` when the list is empty).
- ``{clock}`` is the instant decisions are judged by: the caller's ``:now``, or on PostgreSQL with
  the database clock the server's own, read inside the statement (no round trip of its own).

Where the dialects differ, ``POSTGRESQL`` and ``SQLITE`` hold their own text under the same name.
Unfinished runs are named by ``ACTIVE_SQL`` with literal values, as the partial indexes are defined
(a bound list would not let the planners use them).
"""

from __future__ import annotations

from functools import cache

from .._states import RUN_STATES
from ..rules._slots import SlotRow
from ._records import RunRecord, StepRecord
from ._tables import ACTIVE_SQL, NOTIFY_CHANNEL, RETRYABLE_SQL, TERMINAL_SQL

# A run's, a step's and a slot's columns are their records' fields, in order (the record is the
# row's one shape; tests/unit checks both against the tables): a query selects them in that order,
# so a row reads back as its record positionally.
RUN_COLUMNS = tuple(name for name in RunRecord._fields if name != "fresh")  # fresh: a claim's note
STEP_COLUMNS = ("run_id", *StepRecord._fields)
OPTIONAL_STEP_COLUMNS = STEP_COLUMNS[6:]  # ended_at .. detail: NULL in most records
_SLOT_FIELDS_AS_COLUMNS = {"limit": "limit_name", "key": "limit_key"}
SLOT_COLUMNS = (*(_SLOT_FIELDS_AS_COLUMNS.get(name, name) for name in SlotRow._fields), "due_at")
SCHEDULE_COLUMNS = (
    "namespace",
    "name",
    "workflow",
    "cron",
    "input",
    "concurrency",
    "next_fire_at",
    "last_fire_at",
    "last_run_id",
    "last_error",
    "created_at",
    "updated_at",
)
WORKER_COLUMNS = ("id", "namespace", "host", "pid", "started_at", "heartbeat_at")
ACTIVE_SLOTS = "('waiting', 'reserved', 'busy')"


def _list(columns: tuple[str, ...], prefix: str = "") -> str:
    return ", ".join(prefix + c for c in columns)


def _upsert(table: str, columns: tuple[str, ...], key: str, kept: int) -> str:
    """Insert a row, or overwrite all but its first ``kept`` columns (its key) when it exists."""
    return (
        f"INSERT INTO {table} ({_list(columns)}) VALUES ({_list(columns, ':')}) ON CONFLICT ({key}) "
        f"DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in columns[kept:])
    )


_NEXT_DUE = (
    "SELECT due_at FROM duro_runs WHERE namespace = :namespace AND owner IS NULL AND due_at IS NOT NULL "
    "AND workflow IN (:workflows){versions}{serial} ORDER BY due_at LIMIT 1"
)
# a claimer's versions (see Claim.versions): row values, one pair per (workflow, version) it has
_VERSIONS = " AND ({table}workflow, {table}version) IN (:versions)"


@cache
def next_due_sql(serial: bool, versioned: bool) -> str:
    """When the next run a claim could take falls due (see ``Claims.next_due``)."""
    return _NEXT_DUE.format(
        versions=_VERSIONS.format(table="") if versioned else "",
        serial=" AND NOT (workflow IN (:serial) AND status = 'pending')" if serial else "",
    )


_CLAIM_QUEUED = (
    "UPDATE duro_runs SET owner = :owner, due_at = :now WHERE id = :id AND owner IS NULL "
    f"AND namespace = :namespace AND status IN {ACTIVE_SQL} AND workflow IN (:workflows){{versions}} "
    f"RETURNING {_list(RUN_COLUMNS)}"
)
# an eviction: ``{due}`` is the run's due time as the kind of its wait decides it
_EVICT = (
    "UPDATE duro_runs SET owner = NULL, "
    "due_at = CASE WHEN cancel_requested_at IS NULL THEN {due} ELSE :now END "
    f"WHERE id = :id AND owner = :owner AND status IN {ACTIVE_SQL}"
)

_LIMIT_LOCK = (
    "SELECT capacity_override, max_hold_override_ms, busy, reserved, waiting, next_pos, {clock}, per_key "
    "FROM duro_limits WHERE name = "
)
_STEPS_NOW = "(SELECT count(*) FROM duro_steps WHERE duro_steps.run_id = duro_runs.id)"
# a run it may have been executing: running, or a wait of it over (woken from a sleep, a signal, a
# retry delay, a slot or a child, its status not yet written back to running when the worker died)
_EXECUTING = "(status = 'running' OR due_at <= {clock})"
_RECOVERED = (  # a run it was executing: where its history stood; its attempts count from 0 at a new point
    f"recoveries = CASE WHEN {_EXECUTING} AND (recovered_steps IS NULL OR recovered_steps <> "
    f"{_STEPS_NOW}) THEN 0 ELSE recoveries END, "
    f"recovered_steps = CASE WHEN {_EXECUTING} THEN {_STEPS_NOW} ELSE recovered_steps END"
)
_CANCEL_DUE = "due_at = CASE WHEN cancel_requested_at IS NULL THEN due_at ELSE cancel_requested_at END"
DB_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint"

# -- a keyed limit's keys (duro_limit_keys, see _keys) ---------------------------------------------

_KEY_COUNTS = "limit_key, capacity_override, busy, reserved, waiting"
# a key's slots: by key, the limit a filter (duro_slots_key_queue, see _tables.SlotRequest); the
# rows without a key (rare: queued before the limit was keyed) through the limit's queue
# (a name or key in two places of one statement is cast alike: PostgreSQL deduces one type for it)
_NAME, _KEY = "CAST(:name AS TEXT)", "CAST(:key AS TEXT)"
_KEY_SLOTS = f"duro_slots.limit_key = {_KEY} AND (duro_slots.limit_name || '') = {_NAME}"
_KEYLESS_SLOTS = f"duro_slots.limit_name = {_NAME} AND duro_slots.limit_key IS NULL"
# a key's open_pos: its oldest waiter's pos while it has room (``{room}``), else NULL
_OPEN_POS = (
    "CASE WHEN {waiting} > 0 AND {room} THEN (SELECT min(pos) FROM duro_slots WHERE "
    "{match} AND duro_slots.state = 'waiting') END"
)
_ROW = "duro_limit_keys."
_KEYS_PAGE = (
    f"SELECT {_KEY_COUNTS} FROM duro_limit_keys WHERE limit_name = :name AND limit_key <> '' "
    "AND (busy + reserved + waiting > 0 OR capacity_override IS NOT NULL) "
    "{search}ORDER BY busy + reserved DESC, waiting DESC, limit_key LIMIT :n"
)


def _key_change(match: str, keyed: bool) -> str:
    """A key's counts changed by a decision (``:busy``, ``:reserved``, ``:waiting``: the changes),
    its row made on first use, and its open_pos set anew."""
    room_new = ":busy + :reserved < :per_key" if keyed else "1 = 1"
    room_old = (
        f"{_ROW}busy + :busy + {_ROW}reserved + :reserved < COALESCE({_ROW}capacity_override, :per_key)"
        if keyed
        else "1 = 1"
    )
    return (
        "INSERT INTO duro_limit_keys (limit_name, limit_key, busy, reserved, waiting, open_pos, updated_at) "
        f"VALUES ({_NAME}, {_KEY}, :busy, :reserved, :waiting, "
        + _OPEN_POS.format(waiting=":waiting", room=room_new, match=match)
        + ", :now) ON CONFLICT (limit_name, limit_key) DO UPDATE SET "
        f"busy = {_ROW}busy + :busy, reserved = {_ROW}reserved + :reserved, "
        f"waiting = {_ROW}waiting + :waiting, open_pos = "
        + _OPEN_POS.format(waiting=f"{_ROW}waiting + :waiting", room=room_old, match=match)
        + ", updated_at = :now"
    )


# a keyed limit's keys counted from its slots, in this order (its per_key changed; a migration)
COUNT_KEYS = ("keys_clear", "keys_zero", "keys_count")

KEY_QUERIES: dict[str, str] = {
    # keys' counts and overrides
    "key_rows": f"SELECT {_KEY_COUNTS} FROM duro_limit_keys WHERE limit_name = :name AND limit_key IN (:keys)",
    "key_row": f"SELECT {_KEY_COUNTS} FROM duro_limit_keys WHERE limit_name = :name AND limit_key = :key",
    # the keys with room and waiters, oldest waiter first (duro_limit_keys_open)
    "open_keys": f"SELECT {_KEY_COUNTS} FROM duro_limit_keys WHERE limit_name = :name "
    "AND open_pos IS NOT NULL ORDER BY open_pos LIMIT :n",
    # a key's queue; the rows without a key
    "key_waiters": f"SELECT {_list(SLOT_COLUMNS)} FROM duro_slots WHERE {_KEY_SLOTS} "
    "AND state = 'waiting' ORDER BY pos LIMIT :n",
    "keyless_waiters": f"SELECT {_list(SLOT_COLUMNS)} FROM duro_slots WHERE {_KEYLESS_SLOTS} "
    "AND state = 'waiting' ORDER BY pos LIMIT :n",
    "key_change": _key_change(_KEY_SLOTS, True),
    "keyless_change": _key_change(_KEYLESS_SLOTS, False),
    # a key with nothing active and no override: its row goes (one key; every idle key of a limit)
    "keys_prune": "DELETE FROM duro_limit_keys WHERE limit_name = :name "
    "AND busy = 0 AND reserved = 0 AND waiting = 0 AND capacity_override IS NULL",
    "key_drop": "DELETE FROM duro_limit_keys WHERE limit_name = :name AND limit_key = :key "
    "AND busy = 0 AND reserved = 0 AND waiting = 0 AND capacity_override IS NULL",
    "key_override_set": "INSERT INTO duro_limit_keys (limit_name, limit_key, capacity_override, busy, "
    "reserved, waiting, updated_at) VALUES (:name, :key, :value, 0, 0, 0, :now) "
    "ON CONFLICT (limit_name, limit_key) DO UPDATE SET capacity_override = excluded.capacity_override, "
    "updated_at = excluded.updated_at",
    "key_override_reset": "UPDATE duro_limit_keys SET capacity_override = NULL, updated_at = :now "
    "WHERE limit_name = :name AND limit_key = :key",
    # a limit's keys counted again from its slots (its per_key changed; a migration)
    "keys_clear": "DELETE FROM duro_limit_keys WHERE limit_name = :name AND capacity_override IS NULL",
    "keys_zero": "UPDATE duro_limit_keys SET busy = 0, reserved = 0, waiting = 0, open_pos = NULL "
    "WHERE limit_name = :name",
    # (open_pos set once, with the room each key has: no row is written twice)
    "keys_count": "INSERT INTO duro_limit_keys (limit_name, limit_key, busy, reserved, waiting, open_pos, "
    "updated_at) SELECT limit_name, COALESCE(limit_key, ''), "
    "sum(CASE WHEN state = 'busy' THEN 1 ELSE 0 END), sum(CASE WHEN state = 'reserved' THEN 1 ELSE 0 END), "
    "sum(CASE WHEN state = 'waiting' THEN 1 ELSE 0 END), CASE WHEN limit_key IS NULL "
    "OR sum(CASE WHEN state IN ('busy', 'reserved') THEN 1 ELSE 0 END) < :per_key "
    "THEN min(CASE WHEN state = 'waiting' THEN pos END) END, :now "
    f"FROM duro_slots WHERE limit_name = {_NAME} AND state IN {ACTIVE_SLOTS} "
    "GROUP BY limit_name, limit_key "
    "ON CONFLICT (limit_name, limit_key) DO UPDATE SET busy = excluded.busy, reserved = excluded.reserved, "
    "waiting = excluded.waiting, open_pos = CASE WHEN excluded.limit_key = '' THEN excluded.open_pos "
    "WHEN excluded.busy + excluded.reserved < COALESCE(duro_limit_keys.capacity_override, :per_key) THEN "
    "(SELECT min(pos) FROM duro_slots WHERE duro_slots.limit_key = excluded.limit_key "
    f"AND (duro_slots.limit_name || '') = {_NAME} AND duro_slots.state = 'waiting') END",
    "limit_per_key": "UPDATE duro_limits SET per_key = :per_key WHERE name = :name",
    # operators: the busiest keys (those containing a text), and how many are active, how many full
    "keys_page": _KEYS_PAGE.format(search=""),
    "keys_page_search": _KEYS_PAGE.format(search="AND instr(limit_key, :search) > 0 "),
    "keys_tally": "SELECT count(*), COALESCE(sum(CASE WHEN busy + reserved >= COALESCE(capacity_override, "
    ":per_key) THEN 1 ELSE 0 END), 0) FROM duro_limit_keys WHERE limit_name = :name AND limit_key <> '' "
    "AND busy + reserved + waiting > 0",
}


# -- rates (duro_rates, duro_rate_keys, duro_rate_waits; see _rates) ------------------------------

RATE_WAIT_COLUMNS = (
    "id",
    "rate_name",
    "rate_key",
    "run_id",
    "cost",
    "pos",
    "state",
    "enqueued_at",
    "timeout_at",
    "granted_at",
    "ended_at",
)
# one queue's rows: by key, the rate a filter (see _tables.RateWait)
_QUEUE = "rate_key = :key AND (rate_name || '') = CAST(:name AS TEXT)"

RATE_QUERIES: dict[str, str] = {
    "rate_insert": "INSERT INTO duro_rates (name, per_key, next_pos, updated_at) "
    "VALUES (:name, FALSE, 0, :now) ON CONFLICT (name) DO NOTHING",
    "rate_key_insert": "INSERT INTO duro_rate_keys (rate_name, rate_key, waiting, next_pos, granted_cum, "
    "updated_at) VALUES (:name, :key, 0, 0, 0, :now) ON CONFLICT (rate_name, rate_key) DO NOTHING",
    # the queue's row, locked for the transaction (FOR UPDATE OF k on PostgreSQL), the instant, and
    # its rate's override and pause
    "rate_key_lock": "SELECT k.paused_until, k.waiting, {clock}, k.updated_at, k.next_pos, k.granted_cum, "
    "r.limit_override, r.paused_until FROM duro_rate_keys AS k JOIN duro_rates AS r ON r.name = k.rate_name "
    "WHERE k.rate_name = :name AND k.rate_key = :key",
    "rate_key_update": "UPDATE duro_rate_keys SET waiting = :waiting, next_due = :next_due, next_pos = :next_pos, "
    "granted_cum = :cum, updated_at = :now WHERE rate_name = :name AND rate_key = :key",
    "rate_wait_select": f"SELECT {_list(RATE_WAIT_COLUMNS)} FROM duro_rate_waits WHERE id = :id",
    "rate_wait_insert": f"INSERT INTO duro_rate_waits ({_list(RATE_WAIT_COLUMNS)}) "
    f"VALUES ({_list(RATE_WAIT_COLUMNS, ':')}) ON CONFLICT (id) DO NOTHING",
    "rate_heads": f"SELECT {_list(RATE_WAIT_COLUMNS)} FROM duro_rate_waits WHERE {_QUEUE} "
    "AND state = 'waiting' ORDER BY pos LIMIT :n",
    # the window's first grant (its cum, less its cost, is what the queue granted before the
    # window), and its oldest grants: index range scans of duro_rate_waits_granted
    "rate_window_start": f"SELECT cum, cost FROM duro_rate_waits WHERE {_QUEUE} AND state = 'granted' "
    "AND granted_at > :since ORDER BY granted_at, cum LIMIT 1",
    "rate_oldest": f"SELECT granted_at, cost FROM duro_rate_waits WHERE {_QUEUE} AND state = 'granted' "
    "AND granted_at > :since ORDER BY granted_at, cum LIMIT :n",
    "rate_grant": "UPDATE duro_rate_waits SET state = 'granted', granted_at = :now, ended_at = :now, cum = :cum "
    "WHERE id = :id AND state = 'waiting'",
    "rate_declare": "INSERT INTO duro_rates (name, rate_limit, per_ms, per_key, next_pos, updated_at) "
    "VALUES (:name, :limit, :per_ms, :per_key, 0, :now) ON CONFLICT (name) DO UPDATE SET "
    "rate_limit = excluded.rate_limit, per_ms = excluded.per_ms, per_key = excluded.per_key, "
    "updated_at = excluded.updated_at",
    "rate_states": "SELECT name, rate_limit, per_ms, per_key, limit_override, paused_until, "
    "(SELECT COALESCE(sum(waiting), 0) FROM duro_rate_keys AS k WHERE k.rate_name = r.name), "
    "(SELECT COALESCE(sum(cost), 0) FROM duro_rate_waits AS w WHERE w.rate_name = r.name "
    "AND w.state <> 'waiting' AND w.state = 'granted' AND w.ended_at > :now - COALESCE(r.per_ms, 0)) "
    "FROM duro_rates AS r ORDER BY name",
    # the ended waits past every window of the rate, oldest first, in a bounded batch; a wait of a
    # run still unfinished is kept (its replay may read it: a grant its hook step has not recorded)
    "rate_prune": "DELETE FROM duro_rate_waits WHERE id IN (SELECT w.id FROM duro_rate_waits AS w "
    "WHERE w.rate_name = :name AND w.state <> 'waiting' AND w.ended_at < :before AND (w.run_id IS NULL "
    f"OR NOT EXISTS (SELECT 1 FROM duro_runs AS r WHERE r.id = w.run_id AND r.status IN {ACTIVE_SQL})) "
    "ORDER BY w.ended_at LIMIT :n)",
    "rate_key_state": "SELECT (SELECT COALESCE(sum(cost), 0) FROM duro_rate_waits WHERE "
    f"{_QUEUE} AND state = 'granted' AND granted_at > :since), "
    "(SELECT COALESCE(sum(waiting), 0) FROM duro_rate_keys WHERE rate_name = :name AND rate_key = :key), "
    "(SELECT paused_until FROM duro_rate_keys WHERE rate_name = :name AND rate_key = :key)",
    "rate_waiters": f"SELECT {_list(RATE_WAIT_COLUMNS)} FROM duro_rate_waits WHERE rate_name = :name "
    "AND state = 'waiting' ORDER BY rate_key, pos LIMIT :n",
    "rate_waiters_key": f"SELECT {_list(RATE_WAIT_COLUMNS)} FROM duro_rate_waits WHERE {_QUEUE} "
    "AND state = 'waiting' ORDER BY pos LIMIT :n",
    "rate_set_override": "UPDATE duro_rates SET limit_override = :limit, updated_at = :now WHERE name = :name",
    "rate_pause": "UPDATE duro_rates SET paused_until = :until, updated_at = :now WHERE name = :name",
    "rate_key_pause": "UPDATE duro_rate_keys SET paused_until = :until, updated_at = :now "
    "WHERE rate_name = :name AND rate_key = :key",
    # a downstream's 429: a longer pause already set stands
    "rate_pause_extend": "UPDATE duro_rates SET paused_until = CASE WHEN paused_until > :until "
    "THEN paused_until ELSE :until END, updated_at = :now WHERE name = :name RETURNING paused_until",
    "rate_key_pause_extend": "UPDATE duro_rate_keys SET paused_until = CASE WHEN paused_until > :until "
    "THEN paused_until ELSE :until END, updated_at = :now WHERE rate_name = :name AND rate_key = :key "
    "RETURNING paused_until",
    # every waiting queue of the rate decided by the next pass (a raised limit, a resume)
    "rate_queues_due_now": "UPDATE duro_rate_keys SET next_due = :now WHERE rate_name = :name AND waiting > 0",
    "rate_wait_states": "SELECT id, state FROM duro_rate_waits WHERE id IN (:ids)",
    "rate_wait_end": "UPDATE duro_rate_waits SET state = :state, ended_at = :now WHERE id = :id "
    "AND state = 'waiting'",
    "rate_queues_of_runs": "SELECT DISTINCT rate_name, rate_key FROM duro_rate_waits "
    "WHERE state = 'waiting' AND run_id IN (:ids)",
    "rate_leave_runs": f"UPDATE duro_rate_waits SET state = 'left', ended_at = :now WHERE {_QUEUE} "
    "AND state = 'waiting' AND run_id IN (:ids)",
    # through duro_rate_waits_timeout alone: the queue's keys are filters, not an index's range
    "rate_time_out": "UPDATE duro_rate_waits SET state = 'timed_out', ended_at = :now WHERE state = 'waiting' "
    "AND timeout_at IS NOT NULL AND timeout_at <= :now AND (rate_key || '') = CAST(:key AS TEXT) "
    "AND (rate_name || '') = CAST(:name AS TEXT)",
    "rates_due": "SELECT rate_name, rate_key FROM duro_rate_keys WHERE next_due <= :now "
    "AND (rate_name || '') IN (:names) ORDER BY next_due LIMIT :n",
    "rate_timeouts_due": "SELECT DISTINCT rate_name, rate_key FROM duro_rate_waits WHERE state = 'waiting' "
    "AND timeout_at <= :now AND (rate_name || '') IN (:names)",
    "next_rate_due": "SELECT min(due) FROM (SELECT min(next_due) AS due FROM duro_rate_keys "
    "WHERE next_due IS NOT NULL AND (rate_name || '') IN (:names) UNION ALL SELECT min(timeout_at) "
    "FROM duro_rate_waits WHERE state = 'waiting' AND timeout_at IS NOT NULL "
    "AND (rate_name || '') IN (:names)) AS dues",
}


QUERIES: dict[str, str] = {
    # -- schema ----------------------------------------------------------------------------------
    "schema_version": "SELECT value FROM duro_meta WHERE key = 'schema_version'",
    "schema_version_insert": "INSERT INTO duro_meta (key, value) VALUES ('schema_version', :value)",
    "schema_version_update": "UPDATE duro_meta SET value = :value WHERE key = 'schema_version'",
    # -- the connection's own: a key's transaction lock, the database's clock, notices (PostgreSQL)
    "lock_key": "SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))",
    "db_now": f"SELECT {DB_NOW}",
    "notify": f"SELECT pg_notify('{NOTIFY_CHANNEL}', payload) FROM unnest(CAST(:payloads AS text[])) AS payload",
    # -- runs --------------------------------------------------------------------------------------
    "select_run": f"SELECT {_list(RUN_COLUMNS)} FROM duro_runs WHERE id = :id",
    # a new run is due at once (``due_at``: see _tables.Run)
    "insert_run": f"INSERT INTO duro_runs ({_list(RUN_COLUMNS)}, due_at) "
    f"VALUES ({_list(RUN_COLUMNS, ':')}, :created_at)",
    "run_statuses": "SELECT id, status FROM duro_runs WHERE id IN (:ids)",
    "run_in_namespace": "SELECT id FROM duro_runs WHERE id = :id AND namespace = :namespace",
    # a cancel: a run nobody holds that never made a durable call ends at once; any other gets the
    # request, and is due at once (whoever takes it up delivers it: see docs/durability.md)
    "cancel_unstarted": "UPDATE duro_runs SET status = 'cancelled', error = :error, ended_at = :now, "
    "updated_at = :now, wake_at = NULL, due_at = NULL, cancel_requested_at = :now "
    f"WHERE id = :id AND status IN {ACTIVE_SQL} AND owner IS NULL "
    "AND NOT EXISTS (SELECT 1 FROM duro_steps WHERE run_id = :id)",
    "request_cancel": "UPDATE duro_runs SET cancel_requested_at = COALESCE(cancel_requested_at, :now), "
    f"due_at = :now WHERE id = :id AND status IN {ACTIVE_SQL} RETURNING owner, namespace",
    "cancel_requested": "SELECT id FROM duro_runs WHERE id IN (:ids) AND cancel_requested_at IS NOT NULL "
    f"AND status IN {ACTIVE_SQL}",
    # the calls a cancelled run still waited on when it ended, closed with it (a sleep only if it
    # was its last call and had not ended: an earlier one is over, see settle_sleeps)
    "close_open_steps": "UPDATE duro_steps SET status = 'cancelled', ended_at = :now "
    "WHERE run_id = :id AND status = 'waiting' AND (kind <> 'sleep' OR (wake_at > :now AND seq = "
    "(SELECT max(seq) FROM duro_steps WHERE run_id = :id))) "
    "AND EXISTS (SELECT 1 FROM duro_runs WHERE id = :id AND status = 'cancelled')",
    "active_children": f"SELECT id FROM duro_runs WHERE parent_id = :id AND status IN {ACTIVE_SQL}",
    # -- a run's progress, fenced on its owner and on its not having finished -------------------
    "fence": f"UPDATE duro_runs SET updated_at = :now WHERE id = :id AND owner = :owner AND status IN {ACTIVE_SQL}",
    "fence_status": "UPDATE duro_runs SET updated_at = :now, status = :status, wake_at = :wake_at, due_at = :due_at "
    f"WHERE id = :id AND owner = :owner AND status IN {ACTIVE_SQL}",
    "upsert_step": _upsert("duro_steps", STEP_COLUMNS, "run_id, seq", 2),
    "finish_run": "UPDATE duro_runs SET status = :status, output = :output, error = :error, ended_at = :now, "
    f"updated_at = :now, wake_at = NULL, due_at = NULL WHERE id = :id AND owner = :owner AND status IN {ACTIVE_SQL}",
    "select_steps": f"SELECT {_list(STEP_COLUMNS[1:])} FROM duro_steps WHERE run_id = :run_id ORDER BY seq",
    "select_steps_after": f"SELECT {_list(STEP_COLUMNS[1:])} FROM duro_steps "
    "WHERE run_id = :run_id AND seq > :after ORDER BY seq LIMIT :n",
    # a batch of step records (SQLite, see _steps): who owns the runs, then one executemany per kind
    "owners": f"SELECT id, owner, status FROM duro_runs WHERE id IN (:ids) AND status IN {ACTIVE_SQL}",
    "move_run": "UPDATE duro_runs SET updated_at = :now, status = :status, wake_at = :wake_at, due_at = :due_at "
    "WHERE id = :id",
    "time_run": "UPDATE duro_runs SET updated_at = :now, wake_at = :wake_at, due_at = :due_at WHERE id = :id",
    "touch_run": "UPDATE duro_runs SET updated_at = :now WHERE id = :id",
    # -- signals -----------------------------------------------------------------------------------
    "run_status": "SELECT status FROM duro_runs WHERE id = :id",
    "insert_signal": "INSERT INTO duro_signals (run_id, name, payload, created_at) "
    "VALUES (:run_id, :name, :payload, :now)",
    "next_signal": "SELECT id, payload FROM duro_signals WHERE run_id = :run_id AND name = :name "
    "AND consumed_seq IS NULL ORDER BY id LIMIT 1",
    "consume_signal": "UPDATE duro_signals SET consumed_seq = :seq WHERE id = :id",
    "signalled": "SELECT run_id, name FROM duro_signals WHERE run_id IN (:ids) AND consumed_seq IS NULL",
    # -- schedules ---------------------------------------------------------------------------------
    "update_schedule": "UPDATE duro_schedules SET workflow = :workflow, cron = :cron, input = :input, "
    "concurrency = :concurrency, next_fire_at = :next_fire_at, updated_at = :updated_at "
    "WHERE namespace = :namespace AND name = :name",
    "insert_schedule": f"INSERT INTO duro_schedules ({_list(SCHEDULE_COLUMNS)}) "
    f"VALUES ({_list(SCHEDULE_COLUMNS, ':')})",
    "list_schedules": f"SELECT {_list(SCHEDULE_COLUMNS)} FROM duro_schedules WHERE namespace = :namespace "
    "ORDER BY name",
    "delete_schedule": "DELETE FROM duro_schedules WHERE namespace = :namespace AND name = :name",
    "due_schedules": f"SELECT {_list(SCHEDULE_COLUMNS)} FROM duro_schedules WHERE namespace = :namespace "
    "AND next_fire_at <= :now AND workflow IN (:workflows) ORDER BY next_fire_at, name",
    "next_schedule_due": "SELECT min(next_fire_at) FROM duro_schedules WHERE namespace = :namespace "
    "AND workflow IN (:workflows)",
    "claim_schedule_window": "UPDATE duro_schedules SET next_fire_at = :next_due, updated_at = :now "
    "WHERE namespace = :namespace AND name = :name AND next_fire_at = :due",
    "schedule_outcome": "UPDATE duro_schedules SET last_fire_at = :fired_at, last_run_id = :run_id, "
    "last_error = :error WHERE namespace = :namespace AND name = :name",
    # -- workers and leases ------------------------------------------------------------------------
    "insert_worker": f"INSERT INTO duro_workers ({_list(WORKER_COLUMNS)}) "
    "VALUES (:id, :namespace, :host, :pid, :now, :now)",
    "delete_worker": "DELETE FROM duro_workers WHERE id = :id RETURNING namespace",
    # handing a worker's runs back is bookkeeping, not a change to the run: updated_at stays
    # (a run whose cancel was asked for is due: whoever takes it up delivers it)
    # a suspect's attempt (see duro.worker._recovery), counted before its code runs again
    "count_recovery": "UPDATE duro_runs SET recoveries = COALESCE(recoveries, 0) + 1 "
    f"WHERE id = :id AND owner = :owner AND status IN {ACTIVE_SQL} RETURNING recoveries",
    # the first attempt since its worker died at this point: counted only if no attempt was yet
    "count_first_recovery": "UPDATE duro_runs SET recoveries = 1 WHERE id = :id AND owner = :owner "
    f"AND status IN {ACTIVE_SQL} AND COALESCE(recoveries, 0) = 0 RETURNING recoveries",
    # a suspect that reached a wait: its code up to there did not kill a worker
    "clear_recoveries": "UPDATE duro_runs SET recoveries = 0 "
    f"WHERE id = :id AND owner = :owner AND status IN {ACTIVE_SQL}",
    "hand_back": f"UPDATE duro_runs SET owner = NULL, {_CANCEL_DUE} WHERE owner = :id AND status IN {ACTIVE_SQL}",
    # a dead worker's runs: one it was executing (running) counts a recovery, in a row while its
    # history has not grown since the last one (see _tables.Run.recoveries)
    "hand_back_dead": f"UPDATE duro_runs SET owner = NULL, {_CANCEL_DUE}, {_RECOVERED} "
    f"WHERE owner = :id AND status IN {ACTIVE_SQL}",
    # runs whose owner has no row (a worker that went on starting runs after its lease expired, and
    # died before it joined again): handed back as their owner's would have been (duro_runs_owner)
    "hand_back_orphans": f"UPDATE duro_runs SET owner = NULL, {_CANCEL_DUE}, {_RECOVERED} "
    f"WHERE owner IS NOT NULL AND status IN {ACTIVE_SQL} "
    "AND owner NOT IN (SELECT id FROM duro_workers)",
    # a heartbeat: the stamp moves forward by at least 1 (two beats in one millisecond, or a clock
    # that stepped back, still change it: a watcher sees only whether it changed)
    "beat": "UPDATE duro_workers SET heartbeat_at = max(heartbeat_at + 1, :now) WHERE id = :id "
    "RETURNING namespace",
    "stamps": "SELECT id, heartbeat_at FROM duro_workers WHERE namespace = :namespace",
    "owned_runs": f"SELECT owner, count(*) FROM duro_runs WHERE owner IS NOT NULL AND status IN {ACTIVE_SQL} "
    "GROUP BY owner",
    "list_workers": f"SELECT {_list(WORKER_COLUMNS)} FROM duro_workers ORDER BY started_at",
    "local_workers": "SELECT id, pid FROM duro_workers WHERE host = :host",
    # -- claims (the rule itself: see claim_sql) ---------------------------------------------------
    "expire_worker": "DELETE FROM duro_workers WHERE id = :id AND heartbeat_at = :stamp RETURNING id",
    # -- due work (see _tables.Run.due_at) ---------------------------------------------------------
    # the earliest instant an unowned run the worker may claim falls due (duro_runs_due in due order:
    # the first row that fits; a serial workflow's pending runs are woken by their predecessor's end)
    # what a run waits for happened: it is due now (an earlier due time stays; updated_at stays too,
    # it is not a change to the run, and settle_sleeps reads it)
    "make_due": f"UPDATE duro_runs SET due_at = :now WHERE id = :id AND status IN {ACTIVE_SQL} "
    "AND (due_at IS NULL OR due_at > :now)",
    "make_parent_due": f"UPDATE duro_runs SET due_at = :now WHERE id = (SELECT parent_id FROM duro_runs "
    f"WHERE id = :id) AND status IN {ACTIVE_SQL} AND (due_at IS NULL OR due_at > :now)",
    # a worker evicts an idle run (see _commands.Evict): it gives the run up, due when its wait
    # ends; due now if what it waits for happened already (the check is in the same statement)
    "evict_sleep": _EVICT.format(due=":due_at"),
    "evict_signal": _EVICT.format(
        due="CASE WHEN EXISTS (SELECT 1 FROM duro_signals WHERE run_id = :id AND name = :key "
        "AND consumed_seq IS NULL) THEN :now ELSE :due_at END"
    ),
    "evict_slot": _EVICT.format(
        due="CASE WHEN EXISTS (SELECT 1 FROM duro_slots WHERE id = :key AND state <> 'waiting') "
        "THEN :now ELSE :due_at END"
    ),
    "evict_rate": _EVICT.format(
        due="CASE WHEN EXISTS (SELECT 1 FROM duro_rate_waits WHERE id = :key AND state <> 'waiting') "
        "THEN :now ELSE :due_at END"
    ),
    "evict_child": _EVICT.format(
        due=f"CASE WHEN EXISTS (SELECT 1 FROM duro_runs AS child WHERE child.id = :key "
        f"AND child.status NOT IN {ACTIVE_SQL}) THEN :now ELSE :due_at END"
    ),
    # -- limits and slots (see _slots) -------------------------------------------------------------
    "limit_insert": "INSERT INTO duro_limits (name, busy, reserved, waiting, next_pos, updated_at) "
    "VALUES (:name, 0, 0, 0, 0, :now) ON CONFLICT (name) DO NOTHING",
    # the limit's row, locked for the transaction (FOR UPDATE on PostgreSQL), and the instant its
    # decision is judged by, read in the same statement
    "limit_lock": _LIMIT_LOCK + ":name",
    # the same, the limit found by one of its slots
    "limit_lock_of_slot": _LIMIT_LOCK + "(SELECT limit_name FROM duro_slots WHERE id = :id)",
    "limit_update": "UPDATE duro_limits SET busy = :busy, reserved = :reserved, waiting = :waiting, "
    "next_pos = :next_pos, updated_at = :now WHERE name = :name",
    # a release's claimer takes up a queue's head evicted from memory (see _commands.Claimer)
    "claim_queued_run": _CLAIM_QUEUED.format(versions=""),
    "claim_queued_run_versioned": _CLAIM_QUEUED.format(versions=_VERSIONS.format(table="")),
    "select_step": f"SELECT {_list(STEP_COLUMNS[1:])} FROM duro_steps WHERE run_id = :run_id AND seq = :seq",
    "slot_select": f"SELECT {_list(SLOT_COLUMNS)} FROM duro_slots WHERE id = :id",
    "slot_upsert": _upsert("duro_slots", SLOT_COLUMNS, "id", 1),
    "queue_heads": f"SELECT {_list(SLOT_COLUMNS)} FROM duro_slots "
    "WHERE limit_name = :name AND state = 'waiting' ORDER BY pos LIMIT :n",
    # "limit_name || ''": the limits as a filter, never as the index to read (SQLite would read every
    # slot of the limits through duro_slots_queue, then sort): the due index reads the due rows only
    "due_slots": f"SELECT {_list(SLOT_COLUMNS)} FROM duro_slots WHERE due_at <= :now "
    "AND (limit_name || '') IN (:names) ORDER BY due_at LIMIT :n",
    "next_due": "SELECT min(due_at) FROM duro_slots WHERE due_at IS NOT NULL",
    "next_due_of": "SELECT min(due_at) FROM duro_slots WHERE due_at IS NOT NULL "
    "AND (limit_name || '') IN (:names)",
    "run_slots": f"SELECT {_list(SLOT_COLUMNS)} FROM duro_slots WHERE run_id = :run_id "
    "AND state IN ('waiting', 'reserved')",
    "limit_slots": f"SELECT {_list(SLOT_COLUMNS)} FROM duro_slots WHERE limit_name = :name "
    f"AND state IN {ACTIVE_SLOTS} ORDER BY CASE state WHEN 'busy' THEN 0 WHEN 'reserved' THEN 1 "
    "ELSE 2 END, pos LIMIT :n",
    # a page of a limit's slots in one state, after (pos, id): read in order from duro_slots_queue
    "limit_slots_after": f"SELECT {_list(SLOT_COLUMNS)} FROM duro_slots WHERE limit_name = :name "
    "AND state = :state AND (pos, id) > (:pos, :id) ORDER BY pos, id LIMIT :n",
    "limit_key_slots_after": f"SELECT {_list(SLOT_COLUMNS)} FROM duro_slots WHERE limit_name = :name "
    "AND state = :state AND limit_key = :key AND (pos, id) > (:pos, :id) ORDER BY pos, id LIMIT :n",
    "slot_states": "SELECT id, state FROM duro_slots WHERE id IN (:ids)",
    # the hook steps still waiting of a run that ended: closed, with the run's end as their status
    # ("cancelled" or "failed"; "cancelled" for a run that ended any other way) and its end time
    # (whoever closes them, and however late: a second close finds nothing waiting)
    "hook_leave": "UPDATE duro_steps SET ended_at = COALESCE((SELECT ended_at FROM duro_runs WHERE id = :run_id), "
    ":now), status = COALESCE((SELECT status FROM duro_runs "
    f"WHERE id = :run_id AND status IN {RETRYABLE_SQL}), 'cancelled') "
    "WHERE run_id = :run_id AND kind = 'hook' AND status = 'waiting'",
    "limit_rows": "SELECT name, capacity_override, max_hold_override_ms, busy, reserved, waiting, capacity, "
    "max_hold_ms, per_key FROM duro_limits",
    # a worker's config declares a limit (written only when it changed: no lock taken for nothing)
    # (its per_key: by the lock that counts its keys again, see _keys)
    "limit_declare": "UPDATE duro_limits SET capacity = :capacity, max_hold_ms = :max_hold_ms "
    "WHERE name = :name AND (capacity IS NULL OR max_hold_ms IS NULL "
    "OR capacity <> :capacity OR max_hold_ms <> :max_hold_ms)",
    "set_capacity": "UPDATE duro_limits SET capacity_override = :value, updated_at = :now WHERE name = :name",
    "set_max_hold": "UPDATE duro_limits SET max_hold_override_ms = :value, updated_at = :now WHERE name = :name",
}

# -- retention ----------------------------------------------------------------------------------
# Finished runs that ended before :cutoff, oldest end first, from after the last one of the batch
# before (a keyset on duro_runs_ended: a pass never reads a run twice, nor an unfinished one; the
# namespace and the status filters, ``|| ''``, so that no planner reads a namespace's or a status's
# runs instead). Kept: a
# finished child its unfinished parent still names (the parent's replay reads it), and a run whose
# slot has not ended yet (held past the run's end, until a release or its max_hold). A run's slots
# are found through its hook steps (a slot's id is ``<run id>.<seq>``): by primary key, no index more.
_RUN_SLOT_IDS = (
    "SELECT st.run_id || '.' || st.seq FROM duro_steps AS st WHERE st.run_id IN (:ids) AND st.kind = 'hook' "
    "UNION ALL SELECT ps.run_id || '.' || ps.seq FROM duro_past_steps AS ps WHERE ps.run_id IN (:ids) "
    "AND ps.kind = 'hook'"
)
RETENTION_QUERIES = {
    "prune_candidates": "SELECT r.id, r.ended_at FROM duro_runs AS r WHERE (r.namespace || '') = :namespace "
    "AND r.ended_at IS NOT NULL AND r.ended_at < :cutoff AND (r.ended_at, r.id) > (:after_at, :after_id) "
    f"AND (r.status || '') IN {TERMINAL_SQL} AND (r.parent_id IS NULL OR NOT EXISTS (SELECT 1 FROM duro_runs AS p "
    f"WHERE p.id = r.parent_id AND p.status IN {ACTIVE_SQL})) AND NOT EXISTS (SELECT 1 FROM duro_steps AS st "
    "JOIN duro_slots AS sl ON sl.id = st.run_id || '.' || st.seq WHERE st.run_id = r.id AND st.kind = 'hook' "
    "AND sl.ended_at IS NULL) ORDER BY r.ended_at, r.id LIMIT :n",
    "prune_try_lock": "SELECT pg_try_advisory_xact_lock(hashtextextended(:key, 0))",
    "prune_count_steps": "SELECT (SELECT count(*) FROM duro_steps WHERE run_id IN (:ids)) "
    "+ (SELECT count(*) FROM duro_past_steps WHERE run_id IN (:ids))",
    "prune_count_slots": f"SELECT count(*) FROM duro_slots WHERE id IN ({_RUN_SLOT_IDS}) AND ended_at IS NOT NULL",
    # the runs first, their status checked again: only what they return loses its rows
    "prune_runs": f"DELETE FROM duro_runs WHERE id IN (:ids) AND status IN {TERMINAL_SQL} RETURNING id",
    "prune_slots": f"DELETE FROM duro_slots WHERE id IN ({_RUN_SLOT_IDS}) AND ended_at IS NOT NULL",
    "prune_steps": "DELETE FROM duro_steps WHERE run_id IN (:ids)",
    "prune_signals": "DELETE FROM duro_signals WHERE run_id IN (:ids)",
    "prune_past_steps": "DELETE FROM duro_past_steps WHERE run_id IN (:ids)",
    "prune_attempts": "DELETE FROM duro_attempts WHERE run_id IN (:ids)",
    # finished runs that ended at or after :since, oldest end first, after the page before's last
    "finished_since": f"SELECT {_list(RUN_COLUMNS)} FROM duro_runs WHERE ended_at IS NOT NULL "
    "AND ended_at >= :since AND (ended_at, id) > (:after_at, :after_id) ORDER BY ended_at, id LIMIT :n",
    # when the next finished run passes the cutoff: the earliest end not before it
    "next_prune_due": "SELECT min(ended_at) FROM duro_runs WHERE (namespace || '') = :namespace "
    "AND ended_at IS NOT NULL AND ended_at >= :cutoff",
}

# -- re-driving runs (see store._runs) ---------------------------------------------------------
PAST_STEP_COLUMNS = ("run_id", "attempt", *StepRecord._fields)
ATTEMPT_COLUMNS = ("run_id", "attempt", "status", "error", "ended_at", "resume_seq", "version", "retried_at")
REDRIVE_QUERIES = {
    # the retry's decision, taken only by the retry that finds the run as it read it: of two
    # concurrent retries, the second finds it pending (PostgreSQL: it waits for the first's commit)
    "retry_run": "UPDATE duro_runs SET status = 'pending', attempt = attempt + 1, version = :version, "
    "output = NULL, error = NULL, ended_at = NULL, owner = NULL, wake_at = NULL, due_at = :now, "
    "cancel_requested_at = NULL, recoveries = NULL, recovered_steps = NULL, updated_at = :now "
    f"WHERE id = :id AND attempt = :attempt AND status IN {RETRYABLE_SQL} RETURNING {_list(RUN_COLUMNS)}",
    "insert_attempt": f"INSERT INTO duro_attempts ({_list(ATTEMPT_COLUMNS)}) VALUES ({_list(ATTEMPT_COLUMNS, ':')})",
    "select_attempts": f"SELECT {_list(ATTEMPT_COLUMNS[1:])} FROM duro_attempts WHERE run_id = :run_id "
    "ORDER BY attempt",
    "insert_past_step": f"INSERT INTO duro_past_steps ({_list(PAST_STEP_COLUMNS)}) "
    f"VALUES ({_list(PAST_STEP_COLUMNS, ':')})",
    "select_past_steps": f"SELECT {_list(PAST_STEP_COLUMNS[1:])} FROM duro_past_steps WHERE run_id = :run_id "
    "ORDER BY seq, attempt",
    "drop_steps_from": "DELETE FROM duro_steps WHERE run_id = :run_id AND seq >= :seq",
    "slot_states": "SELECT id, state FROM duro_slots WHERE id IN (:ids)",
    "drop_ended_slots": "DELETE FROM duro_slots WHERE id IN (:ids) AND ended_at IS NOT NULL",
    "rate_grants": "SELECT w.id, w.granted_at, r.per_ms FROM duro_rate_waits AS w LEFT JOIN duro_rates AS r "
    "ON r.name = w.rate_name WHERE w.id IN (:ids) AND w.state = 'granted'",
    "give_back_signals": "UPDATE duro_signals SET consumed_seq = NULL WHERE run_id = :run_id "
    "AND consumed_seq >= :seq",
    "copy_steps": f"INSERT INTO duro_steps ({_list(STEP_COLUMNS)}) SELECT :new_id, {_list(STEP_COLUMNS[1:])} "
    "FROM duro_steps WHERE run_id = :run_id AND seq < :cut",
    # a bulk retry's candidates: runs that ended in [since, until), oldest end first, a page after
    # the last one of the page before (duro_runs_ended)
    "ended_between": f"SELECT {_list(RUN_COLUMNS)} FROM duro_runs WHERE ended_at IS NOT NULL "
    "AND ended_at >= :since AND ended_at < :until AND (ended_at, id) > (:after_at, :after_id) "
    "AND (namespace || '') = :namespace ORDER BY ended_at, id LIMIT :n",
}


QUERIES.update(REDRIVE_QUERIES)
QUERIES.update(KEY_QUERIES)
QUERIES.update(RATE_QUERIES)
QUERIES.update(RETENTION_QUERIES)

# a start's insert that finds its id taken does nothing (PostgreSQL: see _runs), and a run to claim
# is announced in the same statement when it was inserted
_INSERT_RUN_NEW = QUERIES["insert_run"] + " ON CONFLICT (id) DO NOTHING"


def _fenced_step(fence: str) -> str:
    """PostgreSQL: a step's upsert behind the run's fence, in one statement: the step is written
    only if the fence touched the run, and the statement's row count is the fence's."""
    return (
        f"WITH fence AS ({fence} RETURNING id) INSERT INTO duro_steps ({_list(STEP_COLUMNS)}) "
        f"SELECT id, {_list(STEP_COLUMNS[1:], ':')} FROM fence ON CONFLICT (run_id, seq) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in STEP_COLUMNS[2:])
    )


POSTGRESQL: dict[str, str] = {
    "insert_run_new": _INSERT_RUN_NEW,
    "insert_run_announced": f"WITH ins AS ({_INSERT_RUN_NEW} RETURNING 1) "
    f"SELECT pg_notify('{NOTIFY_CHANNEL}', :notice) FROM ins",
    "keys_page_search": _KEYS_PAGE.format(search="AND strpos(limit_key, :search) > 0 "),
    "limit_lock": QUERIES["limit_lock"] + " FOR UPDATE",
    "rate_key_lock": QUERIES["rate_key_lock"] + " FOR UPDATE OF k",
    "limit_lock_of_slot": QUERIES["limit_lock_of_slot"] + " FOR UPDATE",
    # a slot read beside its run's fence (see Connector.send_slot_read): the count the fence
    # touched, then the slot's columns (NULL when there is no such slot)
    "slot_select_fenced": f"WITH fence AS ({QUERIES['fence'].replace(':id', ':run_id')} RETURNING 1) "
    f"SELECT (SELECT count(*) FROM fence), {_list(SLOT_COLUMNS, 's.')} "
    "FROM (VALUES (1)) AS one LEFT JOIN duro_slots s ON s.id = :id",
    # a decision that wrote one slot: its upsert and the limit's counts in one statement
    "slot_upsert_counted": f"WITH slot AS ({QUERIES['slot_upsert']}) {QUERIES['limit_update']}",
    # the rows of runs about to be handed back (see _steps.Steps._evict), in id order
    "lock_runs": "SELECT id FROM duro_runs WHERE id IN (:ids) ORDER BY id FOR UPDATE",
    "finish_run": QUERIES["finish_run"] + " RETURNING parent_id",  # a child's end is announced (see _steps)
    # the same in one statement: one row if it ended the run, and a child's end announced
    "finish_run_announced": f"WITH f AS ({QUERIES['finish_run']} RETURNING parent_id) "
    "SELECT CASE WHEN parent_id IS NULL THEN 1 "
    f"ELSE (SELECT 1 FROM pg_notify('{NOTIFY_CHANNEL}', :notice)) END FROM f",
    "beat": QUERIES["beat"].replace("max(", "GREATEST("),
    "fenced_step": _fenced_step(QUERIES["fence"].replace(":id", ":run_id")),
    # the run's own status and timer: named apart from the step's
    "fenced_step_status": _fenced_step(
        QUERIES["fence_status"]
        .replace(":id", ":run_id")
        .replace(":status", ":run_status")
        .replace(":wake_at", ":run_wake_at")
        .replace(":due_at", ":run_due_at")
    ),
}
SQLITE: dict[str, str] = {}


@cache
def count_sql(statuses: tuple[str, ...], scoped: bool) -> str:
    """A quota's count: one indexed count on (concurrency_key, status), the statuses as literals
    (unknown ones dropped) so that the partial index ``duro_runs_quota`` serves it."""
    known = [s for s in statuses if s in RUN_STATES]
    listed = ", ".join(f"'{s}'" for s in known) or "NULL"
    sql = f"SELECT count(*) FROM duro_runs WHERE concurrency_key = :key AND status IN ({listed})"
    return sql + " AND namespace = :namespace" if scoped else sql


def recent_durations_sql(scoped: bool) -> str:
    """How long a key's last completed runs lasted, newest end first: a walk of ``duro_runs_quota``
    from its (key, 'completed') end, stopped at ``:n`` rows."""
    where = "concurrency_key = :key AND status = 'completed'" + (
        " AND namespace = :namespace" if scoped else ""
    )
    return f"SELECT ended_at - created_at FROM duro_runs WHERE {where} ORDER BY ended_at DESC LIMIT :n"


# list_runs: each filter given adds its condition. A page reads duro_runs_list (or, for unfinished
# runs, duro_runs_active) newest first and stops at its limit: the namespace is a filter (``|| ''``)
# so that no planner reads a namespace's every run through another index and sorts them
LIST_RUNS_FILTERS = {
    "namespace": "(namespace || '') = :namespace",
    "workflow": "workflow = :workflow",
    "statuses": "status IN (:statuses)",
    "key": "concurrency_key = :key",
    "tag": "tags LIKE :tag",  # :tag is the pattern, %"tag"%
    "before": "(created_at, id) < (:before_at, :before_id)",
    "unfinished": f"status IN {ACTIVE_SQL}",
}


@cache
def list_runs_sql(filters: tuple[str, ...]) -> str:
    where = " AND ".join(LIST_RUNS_FILTERS[f] for f in filters) or "1 = 1"
    return f"SELECT {_list(RUN_COLUMNS)} FROM duro_runs WHERE {where} ORDER BY created_at DESC, id DESC LIMIT :limit"


# The claim rule, once, for both databases. Claimable: unfinished runs of the claimer's namespace and
# workflows with no owner that are due (``due_at``, see _tables.Run: pending and running runs are due
# from when they were written; a waiting run when its wait ends), in due order, read through the
# partial index duro_runs_due (unowned runs with a due time only: a million runs asleep until next
# week cost a claim nothing). A dead worker's runs are handed back when its lease expires (see
# _claims), in the same transaction. With serial workflows, a pending run of one starts only when no
# other run of it is active and it is the oldest pending one; the rest wait (pending) in creation
# order.
_CLAIMABLE = (
    "SELECT duro_runs.id, duro_runs.status AS was FROM duro_runs "
    "WHERE duro_runs.namespace = :namespace AND duro_runs.owner IS NULL AND duro_runs.due_at IS NOT NULL "
    f"AND duro_runs.due_at <= :now AND duro_runs.status IN {ACTIVE_SQL} "
    "AND duro_runs.workflow IN (:workflows)"
)
_SERIAL = (
    " AND NOT (duro_runs.workflow IN (:serial) AND duro_runs.status = 'pending' AND ("
    "EXISTS (SELECT 1 FROM duro_runs AS other WHERE other.namespace = :namespace "
    "AND other.workflow = duro_runs.workflow AND other.status IN ('running', 'suspended', 'blocked')) "
    "OR duro_runs.id <> (SELECT other.id FROM duro_runs AS other WHERE other.namespace = :namespace "
    "AND other.workflow = duro_runs.workflow AND other.status = 'pending'{versions} "
    "ORDER BY other.created_at, other.id LIMIT 1)))"
)
_DUE_FIRST = " ORDER BY duro_runs.due_at, duro_runs.id LIMIT :limit"
# Claiming changes a run's record (and updated_at) only when it starts it: taking up a run handed
# back or left by a dead worker is bookkeeping.
_CLAIMING = (
    "UPDATE duro_runs SET owner = :owner, "
    "updated_at = CASE WHEN duro_runs.status = 'pending' THEN {clock} ELSE duro_runs.updated_at END, "
    "status = CASE WHEN duro_runs.status = 'pending' THEN 'running' ELSE duro_runs.status END"
)


@cache
def claim_sql(dialect: str, serial: bool, versioned: bool = False) -> tuple[str, ...]:
    """The claim's statements; the last returns each claimed run with its status before the claim
    (``was``: a run taken from pending never executed, see ``RunRecord.fresh``).

    PostgreSQL: one statement, the candidates locked with ``FOR UPDATE SKIP LOCKED`` (a worker
    skips the rows another is claiming). SQLite: the candidates, then the update of their ids
    (SQLite's RETURNING cannot name an UPDATE's FROM; under ``BEGIN IMMEDIATE`` nothing changes in
    between)."""
    versions = _VERSIONS.format(table="duro_runs.") if versioned else ""
    # a serial workflow's next run is its oldest pending one of the versions this worker has: one of a
    # version no live worker has waits for such a worker without holding the others up for ever
    serial_sql = (
        _SERIAL.format(versions=_VERSIONS.format(table="other.") if versioned else "") if serial else ""
    )
    candidates = _CLAIMABLE + versions + serial_sql + _DUE_FIRST
    returning = f"RETURNING {_list(RUN_COLUMNS, 'duro_runs.')}"
    if dialect == "postgresql":
        return (
            f"{_CLAIMING} FROM ({candidates} FOR UPDATE SKIP LOCKED) AS taken "
            f"WHERE duro_runs.id = taken.id {returning}, taken.was",
        )
    return candidates, f"{_CLAIMING} WHERE duro_runs.id IN (:ids) {returning}"


@cache
def upsert_steps_sql(shape: int) -> str:
    """The upsert of step rows of one ``shape`` (see ``_steps.step_rows``: which optional columns
    the rows fill, a bit each): the optional columns it leaves out are set NULL when the row
    exists, as a full upsert would."""
    present = [c for bit, c in enumerate(OPTIONAL_STEP_COLUMNS) if shape >> bit & 1]
    columns = [*STEP_COLUMNS[:6], *present]
    updates = [f"{c} = excluded.{c}" for c in columns[2:]]
    updates += [f"{c} = NULL" for c in OPTIONAL_STEP_COLUMNS if c not in present]
    return (
        f"INSERT INTO duro_steps ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)}) "
        f"ON CONFLICT (run_id, seq) DO UPDATE SET {', '.join(updates)}"
    )
