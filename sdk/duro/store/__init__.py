"""Storage: the SQLModel schema, the narrow store protocol, and the SQL implementation."""

from ._commands import (
    Command,
    ConfirmSlot,
    FinishRun,
    GiveUpSlot,
    OwnStep,
    RecordStep,
    ReleaseSlot,
    RequestSlot,
    SlotOutcome,
    TakeSignal,
)
from ._protocol import Store
from ._records import (
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
from ._slots_sql import LimitState
from ._sql import DEFAULT_SQLITE_URL, SqlStore, parse_database_url
from ._tables import SCHEMA_VERSION

__all__ = [
    "Command",
    "ConfirmSlot",
    "FinishRun",
    "GiveUpSlot",
    "OwnStep",
    "RecordStep",
    "ReleaseSlot",
    "RequestSlot",
    "SlotOutcome",
    "TakeSignal",
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
