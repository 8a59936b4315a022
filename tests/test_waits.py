"""tests/support/waits.py: the tests' one way to wait returns what it waited for and, when
it waits in vain, says what it was."""
import pytest

from tests.support.waits import TimedOut, received, unless, wait_until


def test_returns_the_first_truthy_value():
    values = iter([0, None, [], ["m"]])
    assert wait_until(lambda: next(values), 1, "a message") == ["m"]


def test_a_timeout_names_what_was_awaited_and_is_a_timeout_error():
    with pytest.raises(TimedOut, match=r"after 0\.05 s waiting for the ok: 3 lines so far"):
        wait_until(lambda: False, 0.05, "the ok", detail=lambda: "3 lines so far")
    assert issubclass(TimedOut, AssertionError) and issubclass(TimedOut, TimeoutError)


def test_received_retries_and_unless_gives_up_early():
    attempts = iter([BlockingIOError(), BlockingIOError(), "frame"])

    def receive():
        item = next(attempts)
        if isinstance(item, Exception):
            raise item
        return item
    assert wait_until(received(receive, BlockingIOError), 1, "a frame") == "frame"
    with pytest.raises(AssertionError, match="the broker exited"):
        wait_until(unless(lambda: False, lambda: "the broker exited"), 10, "a line")
