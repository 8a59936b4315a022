"""The barrier the interop tests use instead of quiet periods (sides.nothing) catches a
delivery that is due, for every door's client."""
import pytest

from tests.interop.sides import unique


@pytest.mark.parametrize("door", ["mqks", "malamute", "textqueue", "twino"])
def test_a_delivery_that_is_due_fails_nothing(net, door):
    subject = unique("due.")
    (reader,) = net.side(door).stream_readers(1, subject)
    mqks = net.side("mqks").client()
    mqks.publish(subject, b"x")                      # confirmed: routed
    with pytest.raises(AssertionError, match="unexpected"):
        reader.nothing()
