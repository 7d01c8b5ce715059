import pickle
from datetime import timedelta

import pytest

from duro import Concurrency, ConcurrencyLimitError, ConfigError
from duro.rules._quota import admit, retry_after


@pytest.mark.parametrize(
    ("key", "limit", "active", "admitted"),
    [
        ("k", 3, 0, True),
        ("k", 3, 2, True),
        ("k", 3, 3, False),
        ("k", 3, 7, False),
        ("k", 0, 0, False),
        ("k", -1, 0, False),
        (None, 1, 99, True),
        ("k", None, 99, True),
    ],
)
def test_admission_table(key, limit, active, admitted):
    decision = admit(key, limit, active)
    assert decision.admitted is admitted
    assert (decision.key, decision.limit, decision.active) == (key, limit, active)


@pytest.mark.parametrize(
    ("durations_ms", "active", "limit", "seconds"),
    [
        ([], 3, 3, 1),  # no history: retry soon
        ([60_000], 1, 1, 60),
        ([60_000, 60_000, 60_000], 2, 2, 30),  # two runs hold the quota: the first ends sooner
        ([60_000], 2, 1, 60),  # over a lowered limit: both must end
        ([60_000], 4, 2, 45),  # three of four must end
        ([10_000, 60_000, 90_000], 1, 1, 60),  # the median: one slow or quick run does not decide
        ([1_001], 1, 1, 2),  # rounded up: never told to come back before a place can free
        ([200], 8, 8, 1),  # at least 1 s
        ([3_600_000], 1, 1, 300),  # at most 5 minutes
        ([60_000], 0, 0, 300),  # a quota that admits nothing: the longest wait
        ([60_000], 5, -1, 300),
        ([-5, 4_000], 1, 1, 2),  # a clock that went back counts as 0
    ],
)
def test_the_retry_after_estimate(durations_ms, active, limit, seconds):
    assert retry_after(durations_ms, active, limit) == seconds


def test_concurrency_retry_after_is_a_positive_duration_in_whole_seconds():
    assert Concurrency(key="k", limit=1).retry_after_s is None
    assert Concurrency(key="k", limit=1, retry_after="30s").retry_after_s == 30
    assert Concurrency(key="k", limit=1, retry_after="1500ms").retry_after_s == 2
    assert Concurrency(key="k", limit=1, retry_after=timedelta(minutes=10)).retry_after_s == 600
    for bad in ("0s", 0, "soon", -5, True):
        with pytest.raises(ConfigError, match="retry_after"):
            Concurrency(key="k", limit=1, retry_after=bad)


def test_the_refusal_keeps_its_retry_after_when_pickled():
    err = ConcurrencyLimitError("chat", "tenant:a", 2, 2, retry_after=30)
    again = pickle.loads(pickle.dumps(err))
    assert (again.workflow, again.key, again.limit, again.active, again.retry_after) == (
        "chat",
        "tenant:a",
        2,
        2,
        30,
    )
    assert str(again) == str(err)
    assert ConcurrencyLimitError("chat", "k", 1, 1).retry_after == 1
