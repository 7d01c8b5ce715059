from duro import ConcurrencyLimitError, DuroError
from duro._serde import describe_error, error_summary, restore_error


class Unpicklable(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}-{b}")
        self.lock = __import__("threading").Lock()


def test_errors_round_trip_with_their_type():
    err = restore_error(describe_error(ConcurrencyLimitError("wf", "tenant:a", 3, 3)))
    assert isinstance(err, ConcurrencyLimitError) and (err.key, err.limit, err.active) == ("tenant:a", 3, 3)


def test_unpicklable_errors_fall_back_to_a_description():
    text = describe_error(Unpicklable(1, 2))
    err = restore_error(text)
    assert isinstance(err, DuroError) and "Unpicklable" in str(err) and "1-2" in str(err)
    assert error_summary(text)["message"] == "1-2"


class _Coded(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(code, message)
        self.code = code


def test_an_error_comes_back_as_its_own_class_with_its_arguments_and_attributes():
    restored = restore_error(describe_error(_Coded(7, "out of lines")))
    assert type(restored) is _Coded and restored.args == (7, "out of lines") and restored.code == 7


def test_a_nested_cause_comes_back_too():
    from duro import ChildWorkflowError

    restored = restore_error(describe_error(ChildWorkflowError("c.1", "kid", KeyError("k"), "child failed")))
    assert type(restored) is ChildWorkflowError and type(restored.cause) is KeyError


def test_stored_errors_are_data_never_code():
    """Nothing stored is unpickled, and only an exception class already loaded is ever called: a
    row that names anything else (or carries an old pickle) comes back as a DuroError describing it."""
    import base64
    import json
    import pickle

    old = json.dumps(
        {"type": "builtins.ValueError", "message": "m", "pickle": base64.b64encode(pickle.dumps(1)).decode()}
    )
    assert type(restore_error(old)) is DuroError
    hostile = json.dumps(
        {
            "type": "os.system",
            "module": "os",
            "qualname": "system",
            "message": "m",
            "state": {"args": [{"value": "touch /tmp/duro-pwned"}], "attributes": {}},
        }
    )
    restored = restore_error(hostile)
    assert type(restored) is DuroError and str(restored) == "os.system: m"
    evicted = json.dumps(
        {
            "type": "not_imported_anywhere.Boom",
            "module": "not_imported_anywhere",
            "qualname": "Boom",
            "message": "m",
            "state": {"args": [], "attributes": {}},
        }
    )
    assert type(restore_error(evicted)) is DuroError


def test_a_divergence_is_stored_with_both_calls_and_its_seq():
    """A NonDeterminismError's ``detail`` (seq, recorded, asked) is stored beside the usual keys, and
    the public summary carries it; other errors have none."""
    import json

    from duro import NonDeterminismError

    text = describe_error(NonDeterminismError("r.1", 3, "step 'reserve'", "step 'refund'"))
    stored = json.loads(text)
    assert stored["detail"] == {"seq": 3, "recorded": "step 'reserve'", "asked": "step 'refund'"}
    assert {"type", "module", "qualname", "message", "traceback", "state"} <= stored.keys()
    summary = error_summary(text)
    assert summary["detail"] == stored["detail"] and "sequence number 3" in summary["message"]
    restored = restore_error(text)
    assert type(restored) is NonDeterminismError and (restored.seq, restored.asked) == (3, "step 'refund'")

    # stored before ``detail`` existed: the summary reads it from the constructor's arguments
    del stored["detail"]
    assert error_summary(json.dumps(stored))["detail"] == {
        "seq": 3,
        "recorded": "step 'reserve'",
        "asked": "step 'refund'",
    }

    other = describe_error(ValueError("nope"))
    assert "detail" not in json.loads(other) and "detail" not in error_summary(other)
