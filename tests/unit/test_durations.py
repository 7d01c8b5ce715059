from datetime import timedelta

import pytest

from duro import DuroError
from duro._durations import format_ms, to_ms


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("500ms", 500),
        ("10s", 10_000),
        ("45m", 2_700_000),
        ("2h", 7_200_000),
        ("30d", 2_592_000_000),
        ("1h30m", 5_400_000),
        ("1.5s", 1500),
        (250, 250),
        (0, 0),
        (timedelta(seconds=3), 3000),
    ],
)
def test_durations_parse(value, ms):
    assert to_ms(value) == ms


@pytest.mark.parametrize("value", ["", "10", "ten seconds", "5w", "-1s", -5, 1.5, True, False, None, [1]])
def test_bad_durations_name_the_value_and_the_forms(value):
    with pytest.raises(DuroError) as info:
        to_ms(value, "sleep duration")
    assert "sleep duration" in str(info.value)


@pytest.mark.parametrize(
    "value", [" 2h", "2h ", "2H", "2Ms", "1h 30m", "2 h", "\t2h", "2h\n", "\u0662h", "2h\x00"]
)
def test_the_grammar_is_exact_no_spaces_no_capitals(value):
    """Only the documented spellings: what the SDK accepts, the API, CLI and Studio accept too."""
    with pytest.raises(DuroError) as info:
        to_ms(value, "max_hold")
    assert "lowercase" in str(info.value) and "no spaces" in str(info.value)


def test_format_is_the_shortest_exact_unit():
    assert [format_ms(v) for v in (90_000, 500, 3_600_000, 0, 86_400_000)] == [
        "90s",
        "500ms",
        "1h",
        "0ms",
        "1d",
    ]


@pytest.mark.parametrize("value", ["3651d", "87601h", "99999999999999999999d", 10**15, timedelta(days=4000)])
def test_durations_longer_than_ten_years_are_refused_naming_the_value(value):
    with pytest.raises(DuroError, match="longer than 10 years") as refused:
        to_ms(value, "timeout")
    assert "timeout" in str(refused.value)


def test_ten_years_is_the_longest():
    assert to_ms("3650d") == 3650 * 86_400_000
