"""The Malamute door under hostile input and slow readers, over loopback ZeroMQ.

1. Garbage frames from a raw DEALER (random bytes, truncated or bit-flipped commands,
   extra frames, server-only commands) never crash the broker, never log a bug, get
   only well-formed OK / ERROR / PONG / DELIVER replies, and never disturb the
   sessions of other peers.
2. A reader that stops reading while a writer floods its stream keeps broker memory
   bounded: stream copies for it are dropped and counted, mail for it waits in the core.
"""
import os

import pytest
import pytest_twisted
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from twisted.internet import task
from twisted.logger import globalLogPublisher

from bench.procstat import rss_mb
from mqksbridge.protocols.malamute import codec
from mqksbridge.protocols.zmtp import codec as zmtp
from tests.hostile.test_hostile_handshakes import raw
from tests.support.waits import until

TEXT = st.one_of(st.sampled_from(["", "s", "svc", "weather", "a|b", "[", "(", "*", "x" * 255]),
                 st.text(max_size=20))
CONTENT = st.lists(st.binary(max_size=30), max_size=3).map(tuple)
COMMAND = st.one_of(
    st.builds(codec.ConnectionOpen, TEXT), st.just(codec.ConnectionPing()),
    st.just(codec.ConnectionClose()), st.just(codec.ConnectionPong()),
    st.builds(codec.StreamWrite, TEXT), st.builds(codec.StreamRead, TEXT, TEXT),
    st.builds(codec.StreamCancel, TEXT), st.builds(codec.StreamSend, TEXT, CONTENT),
    st.builds(codec.MailboxSend, TEXT, TEXT, TEXT, st.integers(0, 2**32 - 1), CONTENT),
    st.builds(codec.ServiceSend, TEXT, TEXT, TEXT, st.integers(0, 2**32 - 1), CONTENT),
    st.builds(codec.ServiceOffer, TEXT, TEXT), st.builds(codec.Credit, st.integers(0, 65535)),
    st.builds(codec.Confirm, TEXT, st.integers(0, 65535), TEXT),
    st.builds(codec.Ok, st.integers(0, 65535), TEXT),
    st.builds(codec.StreamDeliver, TEXT, TEXT, TEXT, CONTENT),
)


def _mutate(frames, how, n):
    head = frames[0]
    if how == "truncate":
        return [head[:n % (len(head) + 1)] or b"\xaa", *frames[1:]]
    if how == "flip":
        i = n % len(head)
        return [head[:i] + bytes((head[i] ^ (1 + n % 255),)) + head[i + 1:], *frames[1:]]
    if how == "extra":
        return [*frames, b"extra"]
    return frames


FRAMES = st.one_of(
    st.lists(st.binary(max_size=40), min_size=1, max_size=4),
    st.builds(lambda command, how, n: _mutate(codec.encode(command), how, n), COMMAND,
              st.sampled_from(["keep", "truncate", "flip", "extra"]), st.integers(0, 1000)),
)
GARBAGE = st.lists(FRAMES, min_size=1, max_size=25)
REPLIES = (codec.Ok, codec.Error, codec.ConnectionPong, codec.StreamDeliver,
           codec.MailboxDeliver, codec.ServiceDeliver)


@pytest.fixture
def failure_log():
    failures = []

    def observe(event):
        if event.get("log_failure") is not None:
            failures.append(event["log_failure"])
    globalLogPublisher.addObserver(observe)
    yield failures
    globalLogPublisher.removeObserver(observe)


async def _victims(server):
    """A writer and a reader on names garbage cannot guess, made once per test."""
    if not hasattr(server, "victims"):
        writer = await server.malamute("robust-writer-\x01")
        reader = await server.malamute("robust-reader-\x01")
        await reader.set_consumer("robust-stream-\x01", "")
        await writer.set_producer("robust-stream-\x01")
        server.victims = {"w": writer, "r": reader, "n": 0}
    server.victims["n"] += 1
    return server.victims["w"], server.victims["r"], server.victims["n"]


# pytest-twisted runs each example in the reactor greenlet; no shrinking (slow examples).
@settings(max_examples=60, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(garbage=GARBAGE)
@pytest_twisted.ensureDeferred
async def test_garbage_never_hurts_the_broker_or_other_sessions(server, failure_log, garbage):
    writer, reader, n = await _victims(server)
    attacker = await server.malamute_raw()
    for frames in garbage:
        attacker.send_frames(frames)
    marker = [codec.ConnectionClose(), codec.ConnectionOpen(""), codec.ConnectionPing(),
              codec.ConnectionClose()]
    attacker.send(*marker)
    await writer.send("m", b"%d" % n)
    got = await reader.recv(5)
    assert (got.subject, got.frames) == ("m", (b"%d" % n,))
    assert await writer.ping() < 5
    replies = []
    while replies[-4:] != [codec.Ok(), codec.Ok(), codec.ConnectionPong(), codec.Ok()]:
        command = codec.decode(await attacker.frames(5))     # never a malformed frame
        assert isinstance(command, REPLIES), command
        assert not isinstance(command, codec.Ok) or command.code == 200
        replies.append(command)
    await attacker.nothing()
    assert failure_log == [], [f.getTraceback() for f in failure_log]
    attacker.close()


@pytest_twisted.ensureDeferred
async def test_slow_reader_with_fast_writer_keeps_memory_bounded(server):
    """200k stream messages of 500 bytes (100 MB) towards a reader that does not read."""
    door = server.doors["malamute"]
    reader = await server.malamute_raw("slow")
    await reader.call(codec.StreamRead("flood", ""))
    writer = await server.malamute("fast")
    await writer.set_producer("flood")
    body, total = b"b" * 500, 200_000
    rss_before = rss_mb(os.getpid())
    peak = [rss_before]
    probe = task.LoopingCall(lambda: peak.__setitem__(0, max(peak[0], rss_mb(os.getpid()))))
    probe.start(0.1)
    try:
        await writer.run(lambda c: [c.send("x", body) for _ in range(total)])
    finally:
        probe.stop()
    peak = max(peak[0], rss_mb(os.getpid()))
    await writer.sendto("slow", "mail", b"kept")
    await writer.ping()                     # everything above has been handled
    dropped = door.counters["stream_dropped"]
    assert dropped > total // 2, dropped
    assert peak - rss_before < 60, (rss_before, peak)     # the original grew past 1 GB
    assert len(server.broker.mailboxes["slow"].stored) == 1   # mail waits in the core
    streamed = 0
    while isinstance(command := await reader.recv(5), codec.StreamDeliver):
        streamed += 1
    assert streamed + dropped == total
    assert command == codec.MailboxDeliver("fast", "slow", "mail", "", (b"kept",))
    assert len(server.broker.mailboxes["slow"].stored) == 0


@pytest_twisted.ensureDeferred
async def test_an_address_that_is_not_utf8_is_opened(server):
    """The Twino door announces every new client to its event subscribers; an address
    whose bytes are not UTF-8 once made that announcement raise, so the OPEN got no OK."""
    frames = codec.encode(codec.ConnectionOpen("ab"))
    assert frames[-1].endswith(b"\x02ab")
    peer = await server.malamute_raw()
    peer.send_frames(frames[:-1] + [frames[-1][:-3] + b"\x02\xe9\xff"])
    assert await peer.recv() == codec.Ok(200, "")


@pytest_twisted.ensureDeferred
async def test_commands_before_a_bad_frame_are_answered_then_the_error(server):
    """specs/errors.md: an OPEN and a PING in one write with a frame whose reserved flag is
    set: both are answered (OK, PONG), then the ZMTP ERROR and the close."""
    conn = await raw(server, "malamute", zmtp.Connection("DEALER").preamble()
                     + zmtp.message(codec.encode(codec.ConnectionOpen("early")))
                     + zmtp.message(codec.encode(codec.ConnectionPing())) + b"\x08\x01x")
    await until(lambda: conn.lost, what="the close")
    peer = zmtp.Connection("DEALER")
    assert [codec.decode(m) for m in peer.receive_data(conn.data)] == [
        codec.Ok(), codec.ConnectionPong()]
    assert peer.events[1:] == [zmtp.PeerError("reserved frame flags set (0x08)")]
