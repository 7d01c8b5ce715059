"""Replay: a run's recorded durable calls, and the sequence number each new call takes.

Every durable call takes the run's next sequence number. If the history holds a record at that
number, the call returns (or raises) what was recorded, after checking the record is of the same
kind and name; otherwise :class:`NonDeterminismError`. A run dropped from memory comes back by
replaying its history from the store: nothing but this object is needed to put it where it was.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._errors import NonDeterminismError
from .._states import StepKind
from ..store import StepRecord


class History:
    """The recorded calls of one run by sequence number, and the next number to take."""

    __slots__ = ("run_id", "_records", "_next")

    def __init__(self, run_id: str, records: Iterable[StepRecord] = ()) -> None:
        self.run_id = run_id
        self._records = {rec.seq: rec for rec in records}
        self._next = 0

    def __len__(self) -> int:
        """How many calls are recorded (replayed, when the run is loaded from the store)."""
        return len(self._records)

    def take(self, kind: StepKind, name: str) -> tuple[int, StepRecord | None]:
        """The next sequence number, and its record if the run made this call before. A record of
        another call raises :class:`NonDeterminismError` (the code changed under a recorded run)."""
        seq = self._next
        self._next += 1
        rec = self._records.get(seq)
        if rec is not None and (rec.kind, rec.name) != (kind, name):
            raise NonDeterminismError(self.run_id, seq, f"{rec.kind} {rec.name!r}", f"{kind} {name!r}")
        return seq, rec

    @property
    def next_seq(self) -> int:
        """The sequence number the next durable call takes (how many calls were made so far)."""
        return self._next

    def peek(self) -> StepRecord | None:
        """The record at the next sequence number, without taking it (a patch marker's choice)."""
        return self._records.get(self._next)

    def recorded(self, seq: int) -> bool:
        """Whether the replay found a record at ``seq`` (a live run never looks back at a call it passed)."""
        return seq in self._records
