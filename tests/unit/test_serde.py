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
