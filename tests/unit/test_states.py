"""Every list of statuses is derived from the types of ``duro._states``: they cannot drift apart."""

from __future__ import annotations

from duro import RunStatus
from duro._states import ENDED, RETRYABLE, RUN_STATES, UNFINISHED, WAITING


def test_the_lists_split_a_runs_statuses_in_two():
    assert set(UNFINISHED) | set(ENDED) == set(RUN_STATES)
    assert not set(UNFINISHED) & set(ENDED)
    assert set(RETRYABLE) < set(ENDED) and set(WAITING) < set(UNFINISHED)


def test_the_public_enum_names_the_same_statuses_in_the_same_order():
    assert tuple(status.value for status in RunStatus) == RUN_STATES
    assert tuple(status.value for status in RunStatus if status.terminal) == ENDED
