"""Size and format limits per door: a publish over its own door's limit is refused with that
door's error; a message a consumer's door cannot represent is dropped for that consumer
alone, counted and logged, and never truncated (docs/mapping.md "Limits")."""
import pytest

from mqksbridge.bridge.clients.mqks import MqksError
from tests.interop.conftest import MAX_LINE
from tests.interop.sides import nothing, unique


def drops(net, door):
    """The broker's count of copies `door` could not carry, read through MQKS `_eval`."""
    key = f"'unrepresentable.{door}'"
    answer = net.side("mqks").client().eval(f"{key} in state.counters and state.counters[{key}]")
    return 0 if answer == "False" else int(answer)


def test_mqks_line_over_the_limit_is_refused_and_closes(net):
    queue = unique("ch") + "/1"
    (consumer,) = net.side("twino").queue_consumers(queue, 1)
    mqks = net.side("mqks").client()
    mqks.rebind(queue, "--add big")
    with pytest.raises((MqksError, ConnectionError)):
        mqks.publish("big", b"x" * MAX_LINE)
    consumer.nothing()


def test_event_twino_cannot_carry_is_dropped_for_twino_only(net):
    event = "bad\xff".encode("latin-1")               # not UTF-8: no Twino header value
    mqks_side = net.side("mqks")
    mqks = mqks_side.client()
    mqks.consume(unique("q"), [event.decode("utf-8", "surrogateescape")])
    (twino_reader,) = net.side("twino").stream_readers(1, "any")
    before = drops(net, "twino")
    mqks_side.client().publish(event, b"payload")
    got = mqks.recv()
    assert (got.event.encode("utf-8", "surrogateescape"), got.data) == (event, b"payload")
    twino_reader.nothing()
    assert drops(net, "twino") == before + 1


def test_subject_over_255_bytes_is_dropped_for_malamute_readers_only(net):
    event = "long." + "x" * 300
    mqks = net.side("mqks").client()
    mqks.consume(unique("q"), [event])
    reader = net.side("malamute").client()
    reader.set_consumer("mqks", "^long\\.")
    before = drops(net, "malamute")
    net.side("mqks").client().publish(event, b"payload")
    assert mqks.recv().event == event
    nothing(reader)
    assert drops(net, "malamute") == before + 1
    assert reader.ping() >= 0


def test_direct_message_malamute_cannot_carry_is_refused_at_publish(net):
    owner = net.side("malamute").client()
    sender = net.side("twino").client()
    long_subject = [("Subject", "s" * 256)]
    assert sender.request(owner.address, b"x", headers=long_subject).content_type == 406
    nack = sender.send_direct(owner.address, b"x", headers=long_subject, wait_ack=True)
    assert (nack.ok, nack.reason) == (False, "unrepresentable")
    assert sender.send_direct(owner.address, b"x", headers=[("Subject", "s" * 255)],
                              wait_ack=True).ok
    assert owner.recv(10).subject == "s" * 255
    nothing(owner)


def test_empty_subject_is_never_taken_by_a_malamute_worker(net):
    """zrex matches no pattern against an empty subject: the request waits for a consumer
    without a pattern (another door's), as unmatched Malamute requests wait."""
    queue = unique("ch") + "/1"
    (worker,) = net.side("malamute").queue_consumers(queue, 1)
    producer = net.side("twino").client()
    channel = queue.split("/")[0]
    producer.push(channel, 1, b"no subject", headers=[("Subject", "")])
    producer.ping()
    worker.nothing()
    (mqks,) = net.side("mqks").queue_consumers(queue, 1)
    got = mqks.recv()
    assert (got.subject, got.frames) == ("", (b"no subject",))


def test_nul_in_a_subject_is_dropped_for_malamute_readers(net):
    """Malamute strings are C strings: the reader's pattern sees `nul.`, the subject it would
    be handed cannot be written; dropped and counted, never cut at the NUL."""
    event = unique("nul.") + "\x00tail"
    mqks = net.side("mqks").client()
    mqks.consume(unique("q"), [event])
    reader = net.side("malamute").client()
    reader.set_consumer("mqks", "^nul\\.")
    before = drops(net, "malamute")
    net.side("mqks").client().publish(event, b"payload")
    assert mqks.recv().event == event
    nothing(reader)
    assert drops(net, "malamute") == before + 1
