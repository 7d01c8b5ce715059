"""Storage: the SQLModel schema, the typed commands and records, and the SQL store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ._commands import (
        Claimer,
        Command,
        ConfirmSlot,
        Evict,
        FinishRun,
        GiveUpSlot,
        OwnStep,
        RecordStep,
        ReleaseSlot,
        RequestSlot,
        SendSignal,
        SlotOutcome,
        TakeSignal,
        Waiting,
    )
    from ._connection import LimitState
    from ._rates import RateOutcome, RateWaitRow
    from ._records import (
        MARK,
        AttemptRecord,
        CancelOutcome,
        Claim,
        Fenced,
        Fork,
        NewRun,
        Prune,
        PruneBatch,
        QuotaCheck,
        Redriven,
        Retry,
        RunRecord,
        ScheduleRecord,
        StepRecord,
        WouldWait,
        settle_sleeps,
        store_call,
    )
    from ._sql import SqlStore, Store
    from ._tables import SCHEMA_VERSION
    from ._urls import DEFAULT_SQLITE_URL, parse_database_url

__all__ = [
    "Claimer",
    "Command",
    "ConfirmSlot",
    "FinishRun",
    "GiveUpSlot",
    "OwnStep",
    "RecordStep",
    "ReleaseSlot",
    "RequestSlot",
    "SendSignal",
    "SlotOutcome",
    "TakeSignal",
    "Evict",
    "Waiting",
    "AttemptRecord",
    "CancelOutcome",
    "Fork",
    "Redriven",
    "Retry",
    "Claim",
    "NewRun",
    "QuotaCheck",
    "RunRecord",
    "ScheduleRecord",
    "StepRecord",
    "Store",
    "SqlStore",
    "Fenced",
    "DEFAULT_SQLITE_URL",
    "LimitState",
    "RateOutcome",
    "RateWaitRow",
    "Prune",
    "PruneBatch",
    "SCHEMA_VERSION",
    "parse_database_url",
    "settle_sleeps",
    "MARK",
    "store_call",
    "WouldWait",
]

# Each name loads its module on first use: a command or a record does not load SQLAlchemy.
__getattr__, __dir__ = lazy_names(
    globals(),
    {
        "._commands": (
            "Claimer",
            "Command",
            "ConfirmSlot",
            "FinishRun",
            "GiveUpSlot",
            "OwnStep",
            "RecordStep",
            "ReleaseSlot",
            "RequestSlot",
            "SendSignal",
            "SlotOutcome",
            "TakeSignal",
            "Evict",
            "Waiting",
        ),
        "._records": (
            "AttemptRecord",
            "CancelOutcome",
            "Fork",
            "Redriven",
            "Retry",
            "Claim",
            "Fenced",
            "NewRun",
            "Prune",
            "PruneBatch",
            "QuotaCheck",
            "RunRecord",
            "ScheduleRecord",
            "StepRecord",
            "WouldWait",
            "settle_sleeps",
            "MARK",
            "store_call",
        ),
        "._rates": (
            "RateOutcome",
            "RateWaitRow",
        ),
        "._connection": ("LimitState",),
        "._sql": ("SqlStore", "Store"),
        "._tables": ("SCHEMA_VERSION",),
        "._urls": (
            "DEFAULT_SQLITE_URL",
            "parse_database_url",
        ),
    },
)
