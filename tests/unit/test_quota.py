import pytest

from duro._quota import admit


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
