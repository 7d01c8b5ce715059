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
    unloaded = json.dumps(
        {
            "type": "not_imported_anywhere.Boom",
            "module": "not_imported_anywhere",
            "qualname": "Boom",
            "message": "m",
            "state": {"args": [], "attributes": {}},
        }
    )
    assert type(restore_error(unloaded)) is DuroError
