"""The store's commands in the shape of calls, for the contract tests: ``record_step(store, run_id,
owner, step, ...)`` is ``store.steps.apply(RecordStep(...))``, with a hook given as (run id, owner, step).
Each returns what the command's result says, as the tests read it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from duro.definitions._config import LimitConfig
from duro.rules._slots import SlotRow
from duro.store import (
    ConfirmSlot,
    FinishRun,
    GiveUpSlot,
    OwnStep,
    RecordStep,
    ReleaseSlot,
    RequestSlot,
    StepRecord,
    Store,
    TakeSignal,
)

Hook = tuple[str, str | None, StepRecord]


def _own(hook: Hook | OwnStep | None) -> OwnStep | None:
    return hook if hook is None or isinstance(hook, OwnStep) else OwnStep(*hook)


def record_step(
    store: Store,
    run_id: str,
    owner: str | None,
    step: StepRecord | None,
    run_status: str | None = None,
    wake_at: int | None = None,
    now: int = 0,
) -> bool:
    return store.steps.apply(RecordStep(run_id, owner, step, run_status, wake_at, now))


def finish_run(
    store: Store, run_id: str, owner: str | None, status: str, output: str | None, error: str | None, now: int
) -> bool:
    return store.steps.apply(FinishRun(run_id, owner, status, output, error, now))


def take_signal(
    store: Store, run_id: str, owner: str | None, name: str, step: StepRecord
) -> StepRecord | None:
    return store.steps.apply(TakeSignal(run_id, owner, name, step))


def slot_request(
    store: Store,
    config: LimitConfig,
    slot_id: str,
    run_id: str | None,
    label: str | None,
    timeout_at: int | None,
    now: int,
    hook: Hook | None = None,
) -> SlotRow | None:
    return store.steps.apply(RequestSlot(config, slot_id, run_id, label, timeout_at, now, _own(hook))).row


def slot_confirm(
    store: Store, config: LimitConfig, slot_id: str, now: int, hook: Hook | None = None
) -> tuple[SlotRow | None, list[SlotRow]]:
    outcome = store.steps.apply(ConfirmSlot(config, slot_id, now, _own(hook)))
    return outcome.row, list(outcome.granted)


def slot_give_up(
    store: Store, config: LimitConfig, slot_id: str, now: int, hook: Hook | None = None
) -> SlotRow | None:
    return store.steps.apply(GiveUpSlot(config, slot_id, now, _own(hook))).row


def slot_release(
    store: Store,
    configs: Mapping[str, LimitConfig],
    slot_id: str,
    now: int,
    reason: str = "release",
    hook: Hook | None = None,
    waiting_here: Mapping[str, Hook] | None = None,
) -> tuple[SlotRow | None, bool, list[SlotRow]]:
    local_waiters = {slot: OwnStep(*waiter) for slot, waiter in (waiting_here or {}).items()}
    outcome = store.steps.apply(ReleaseSlot(configs, slot_id, now, reason, _own(hook), local_waiters))
    return outcome.row, outcome.released, list(outcome.granted)


_COMMANDS: dict[str, Any] = {"record_step": RecordStep, "finish_run": FinishRun}


def apply_batch(store: Store, ops: Sequence[tuple[str, tuple[Any, ...]]]) -> list[Any]:
    """``store.steps.apply_batch`` of (name, args) pairs: ``("record_step", (run_id, owner, step, ...))``."""
    return store.steps.apply_batch([_COMMANDS[name](*args) for name, args in ops])
