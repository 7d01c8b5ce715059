"""Storage: the SQLModel schema, the narrow store protocol, and the SQL implementation."""

from ._protocol import Claim, NewRun, QuotaCheck, RunRecord, ScheduleRecord, StepRecord, Store
from ._sql import DEFAULT_SQLITE_URL, Fenced, SqlStore, parse_database_url
from ._tables import SCHEMA_VERSION

__all__ = ["Claim", "NewRun", "QuotaCheck", "RunRecord", "ScheduleRecord", "StepRecord", "Store", "SqlStore", "Fenced",
           "DEFAULT_SQLITE_URL", "SCHEMA_VERSION", "parse_database_url"]
