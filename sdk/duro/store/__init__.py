"""Storage: the SQLModel schema, the narrow store protocol, and the SQL implementation."""

from ._commands import (
    Adopter,
    Command,
    ConfirmSlot,
    FinishRun,
    GiveUpSlot,
    OwnStep,
    RecordStep,
    ReleaseSlot,
    RequestSlot,
    SendSignal,
    SlotOutcome,
    TakeSignal,
    Unload,
    Waiting,
)
from ._protocol import Store
from ._records import (
    CancelOutcome,
    Claim,
    Fenced,
    NewRun,
    QuotaCheck,
    RunRecord,
    ScheduleRecord,
    StepRecord,
    WouldWait,
    settle_sleeps,
)
from ._slot_rows import LimitState
from ._sql import SqlStore
from ._tables import SCHEMA_VERSION
from ._urls import DEFAULT_SQLITE_URL, parse_database_url

__all__ = [
    "Adopter",
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
    "Unload",
    "Waiting",
    "CancelOutcome",
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
    "SCHEMA_VERSION",
    "parse_database_url",
    "settle_sleeps",
    "WouldWait",
]
