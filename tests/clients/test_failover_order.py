"""The order in which a client tries its addresses, the bound on the tries, and how the
command reads an address list from a door URL. No broker: `attempt` stands for a
connection, and the URL is only parsed."""
import pytest

from mqksbridge.bridge.cli import doors
from mqksbridge.bridge.clients.failover import AllAddressesDown, Failover


def attempts(down):
    """An attempt that refuses the addresses in `down`, and the list of what it tried."""
    tried = []

    def attempt(address):
        tried.append(address)
        if address in down:
            raise ConnectionRefusedError(f"{address} refused")
        return address
    return attempt, tried


def test_the_first_live_address_in_order_then_the_next_after_the_current():
    moves = []
    failover = Failover(["a", "b", "c"], backoff=0,
                        on_failover=lambda old, new: moves.append((old, new)))
    attempt, tried = attempts({"a"})
    assert failover.connect(attempt) == "b" and tried == ["a", "b"]
    assert moves == [] and failover.moves == 0          # the first connect is no move
    attempt, tried = attempts({"c"})
    assert failover.connect(attempt) == "a" and tried == ["c", "a"]   # wraps around
    assert moves == [("b", "a")] and failover.current == "a" and failover.moves == 1


def test_all_down_after_the_bounded_passes_names_each_address():
    failover = Failover(["a", "b"], rounds=2, backoff=0)
    attempt, tried = attempts({"a", "b"})
    with pytest.raises(AllAddressesDown, match="after 2 passes: a: a refused; b: b refused"):
        failover.connect(attempt)
    assert tried == ["a", "b", "a", "b"] and failover.current is None


def test_an_error_other_than_a_connection_one_is_the_callers():
    """A refused login or a protocol error: trying the next address would not help."""
    failover = Failover(["a", "b"], backoff=0)
    attempt, tried = attempts(set())

    def refused(address):
        attempt(address)
        raise ValueError("refused")
    with pytest.raises(ValueError):
        failover.connect(refused)
    assert tried == ["a"]


def test_an_operation_is_retried_after_each_successful_reconnect_and_timeouts_are_not():
    failover = Failover(["a", "b"], backoff=0)
    failover.connect(lambda address: address)
    outcomes = [ConnectionResetError(), BrokenPipeError(), "done"]
    reconnects = []

    def operation():
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    assert failover.retrying(lambda: reconnects.append(1), operation) == "done"
    assert reconnects == [1, 1]

    def late(what):
        raise TimeoutError(what)
    with pytest.raises(TimeoutError, match="late"):
        failover.retrying(reconnects.clear, late, "late")
    assert reconnects == [1, 1]


@pytest.mark.parametrize("url, addresses", [
    ("mqks://h1:1,h2", [("h1", 1), ("h2", 25000)]),
    ("twino://h1,127.0.0.1:7", [("h1", 22200), ("127.0.0.1", 7)]),
    ("malamute://tcp://h1:9,tcp://h2:10", ["tcp://h1:9", "tcp://h2:10"]),
])
def test_a_door_url_lists_addresses_separated_by_commas(url, addresses):
    door = doors.open_door(url, 1.0)
    assert (door.endpoints if door.name == "malamute" else door.addresses) == addresses


@pytest.mark.parametrize("url, says", [
    ("mqks://h1:1,h2:99999", "bad port"),
    ("malamute://tcp://h1:9,tcp://h2", "tcp://HOST:PORT"),
    ("twino://h1,h2/jobs", "nothing after it"),
])
def test_a_bad_address_anywhere_in_the_list_is_a_usage_error(url, says):
    with pytest.raises(doors.Usage, match=says):
        doors.open_door(url, 1.0)
