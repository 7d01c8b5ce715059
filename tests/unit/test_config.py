import pytest

from duro import ConfigError, Limit, define_workspace


def test_limits_from_objects_and_dicts():
    ws = define_workspace(
        limits={
            "voice-calls": Limit(capacity=20, max_hold="45m"),
            "partner.api_v2": {"capacity": 5, "max_hold": "2h"},
        }
    )
    assert ws.limits["voice-calls"].capacity == 20
    assert ws.limits["voice-calls"].max_hold_ms == 45 * 60_000
    assert ws.limits["partner.api_v2"].max_hold_ms == 7_200_000
    assert ws.workflows is None


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ({"Voice": Limit(1, "1m")}, ["Voice", "lowercase"]),
        ({"x" * 65: Limit(1, "1m")}, ["64"]),
        ({"calls": Limit(0, "1m")}, ["calls", "capacity"]),
        ({"calls": Limit(100_001, "1m")}, ["calls", "capacity"]),
        ({"calls": Limit(True, "1m")}, ["calls", "capacity"]),
        ({"calls": {"max_hold": "1m"}}, ["calls", "capacity"]),
        ({"calls": {"capacity": 2}}, ["calls", "max_hold", "required"]),
        ({"calls": Limit(2, None)}, ["calls", "max_hold"]),
        ({"calls": Limit(2, "31d")}, ["calls", "max_hold", "30 days"]),
        ({"calls": Limit(2, "soon")}, ["calls", "max_hold"]),
        ({"calls": Limit(2, 0)}, ["calls", "max_hold"]),
        ({"calls": {"capacity": 2, "max_hold": "1m", "rate": 3}}, ["calls", "rate"]),
        ({"calls": 5}, ["calls"]),
    ],
)
def test_bad_limits_name_the_limit_and_the_field(limits, words):
    with pytest.raises(ConfigError) as info:
        define_workspace(limits=limits)
    for word in words:
        assert word in str(info.value)


def test_workflow_list_entries():
    ws = define_workspace(workflows=["workflows/a.py", {"path": "workflows/b.py", "serial": True}])
    assert [(e.path, e.serial) for e in ws.workflows] == [("workflows/a.py", False), ("workflows/b.py", True)]


@pytest.mark.parametrize(
    "workflows", ["workflows/a.py", [{"serial": True}], [{"path": "a.py", "serial": "yes"}], [3]]
)
def test_bad_workflow_lists(workflows):
    with pytest.raises(ConfigError):
        define_workspace(workflows=workflows)
