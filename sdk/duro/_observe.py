"""Log lines for operators: what limits and quotas did, one line each, under the ``duro.*`` loggers.

- ``duro.limits``: a slot granted (with its wait), expired by ``max_hold`` (a ``release_slot`` that
  never happened: a warning), a request timed out, a reservation lapsed;
- ``duro.quota``: a start refused by a concurrency quota;
- ``duro.rates``: a rate paused (by a step's ``RateLimited`` or an operator) and resumed, a wait
  timed out.

Each line names the limit, the rate or the workflow, never a quota key, a rate key, a slot label, a run id or a payload,
and carries the same facts as attributes of the log record (``event``, ``limit`` or ``workflow``,
``wait_ms`` or ``held_ms``), which ``duro dev --log-format json`` prints as fields (see
``duro_devserver.logs``). The lines cost one check each while their logger is off.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .rules._slots import SlotEvent

if TYPE_CHECKING:
    from .store import SqlStore

limits_log = logging.getLogger("duro.limits")
quota_log = logging.getLogger("duro.quota")
rates_log = logging.getLogger("duro.rates")

_LINES = {
    "held": (logging.INFO, "slot.granted", "slot of limit %s granted after waiting %d ms", "wait_ms"),
    "expired": (
        logging.WARNING,
        "slot.expired",
        "slot of limit %s taken back by max_hold after %d ms: its release_slot never happened",
        "held_ms",
    ),
    "timed_out": (logging.INFO, "slot.timed_out", "slot request of limit %s timed out in the queue", None),
    "lapsed": (
        logging.INFO,
        "slot.reservation_lapsed",
        "slot reservation of limit %s lapsed: its run did not take it in time (requeued)",
        None,
    ),
}


def log_slot_events(events: Sequence[SlotEvent]) -> None:
    """A store slot listener (see ``SqlStore.slots.listeners``): one line per event worth a line."""
    log = limits_log
    for kind, limit, ms in events:
        line = _LINES.get(kind)
        if line is None:
            continue
        level, event, message, field = line
        if not log.isEnabledFor(level):
            continue
        if field is None:
            log.log(level, message, limit, extra={"event": event, "limit": limit})
        else:
            log.log(level, message, limit, ms or 0, extra={"event": event, "limit": limit, field: ms or 0})


def log_quota_refused(workflow: str, limit: int) -> None:
    if quota_log.isEnabledFor(logging.INFO):
        quota_log.info(
            "start of workflow %s refused: its concurrency key is at its limit (%d)",
            workflow,
            limit,
            extra={"event": "quota.refused", "workflow": workflow, "quota_limit": limit},
        )


def attach_logs(store: SqlStore) -> None:
    """Log what ``store`` decides about slots (once per store: engines may share one)."""
    listeners = store.slots.listeners
    if log_slot_events not in listeners:
        listeners.append(log_slot_events)


def log_rate(event: str, rate: str, pause_ms: int | None = None, by: str | None = None) -> None:
    """One line for a rate: ``rate.paused`` (for ``pause_ms``, ``by`` a step or an operator, of the
    whole rate or of one key: the key is never written), ``rate.resumed`` or ``rate.timed_out``."""
    log = rates_log
    if not log.isEnabledFor(logging.INFO):
        return
    extra: dict[str, object] = {"event": event, "rate": rate}
    if event == "rate.paused":
        extra |= {"pause_ms": pause_ms or 0, "by": by or "operator"}
        log.info("rate %s paused for %d ms by %s", rate, pause_ms or 0, by or "operator", extra=extra)
    elif event == "rate.resumed":
        log.info("rate %s resumed", rate, extra=extra)
    else:
        log.info("a wait for rate %s timed out in the queue", rate, extra=extra)
