"""The MQKS door under hostile input and slow readers, over real loopback sockets.

1. Random bytes on one connection (huge tokens, TABs, NULs, invalid UTF-8, lone `\\r`,
   fragments of real requests) never hurt the broker: another connection's consumer keeps
   getting its deliveries and ping replies, the garbage connection only ever gets reply
   lines (or is closed after an over-long line), and no request fails with a bug.
2. A consumer that stops reading does not make the broker buffer without bound: its
   output stays near the high-water mark, the queue keeps the rest, and everything
   arrives in order once it reads again.
"""
import re
import socket
from collections import deque

import pytest
import pytest_twisted
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.logger import globalLogPublisher

from mqksbridge.bridge.convert import mqks as convert_mqks
from mqksbridge.protocols.malamute import codec
from tests.support.waits import until

REPLY = re.compile(r"^[^ ]* (ok .*|error \d{20}[0-9a-zA-Z]{4})$", re.S)
MAX_LINE = 16 * 1024

WORDS = [
    b" ", b"  ", b"\n", b"\r", b"\r\n", b"\t", b"\x00", b"\xff\xfe", b"\xc3", b"\xe2\x82",
    b"\x0b", b"\x0c", b"\x1c", b"\x85", b"\xa0", b"None", b"--confirm ", b"--confirm",
    b"ping", b"publish", b"consume", b"rebind", b"ack", b"reject", b"delete_consumer",
    b"delete_queue", b"_eval", b"PING", b"--add", b"--remove", b"--remove-mask",
    b"--manual-ack", b"--delete-queue-when-unused", b"--delete-queue-when-unused=",
    b"0", b"1e-05", b"inf", b"nan", b"-1", b"abc", b"--all", b"--worker=0", b"--worker=1",
    b"*", b".", b"e.*", b"q", b"e", b"c", b"len(state.queues)", b"1/0", b"request['client']",
    b"'x'+'y'", b"state.consumers", b"[1]*9", b"__import__('os')",
]
PIECE = st.one_of(
    st.sampled_from(WORDS),
    st.binary(max_size=40),
    st.integers(min_value=1, max_value=3 * MAX_LINE).map(lambda n: b"x" * n),   # huge tokens
)
ACTIONS = [b"ping", b"publish", b"consume", b"rebind", b"ack", b"reject",
           b"delete_consumer", b"delete_queue", b"_eval"]
# Well-formed heads with garbage arguments reach every action's argument parser.
REQUEST = st.builds(
    lambda rid, confirm, action, args: b"%s %s %s%s\n" % (rid, action, confirm, b" ".join(args)),
    st.sampled_from([b"g1", b"g2", b"", b"\x00", b"\xff", b"c", b"None"]),
    st.sampled_from([b"", b"--confirm "]),
    st.sampled_from(ACTIONS),
    st.lists(PIECE, max_size=8),
)
GARBAGE = st.lists(st.one_of(PIECE, REQUEST), max_size=40).map(b"".join)


class FailureLog:
    """Collects logged failures: the door logs one when a request hits a bug."""

    def __init__(self):
        self.failures = []

    def __call__(self, event):
        if event.get("log_failure") is not None:
            self.failures.append(event["log_failure"])


@pytest.fixture
def failure_log():
    log = FailureLog()
    globalLogPublisher.addObserver(log)
    yield log
    globalLogPublisher.removeObserver(log)


async def _victim(server):
    """One consumer and one publisher, made by the first example and kept for the rest."""
    if not hasattr(server, "robust"):
        server.doors["mqks"].max_line = MAX_LINE
        v, p = await server.mqks(), await server.mqks()
        assert await v.request("victim consume --confirm robust-queue-7 robust-event-7") \
            == "victim ok "
        server.robust = {"v": v, "p": p, "n": 0}
    server.robust["n"] += 1
    return server.robust["v"], server.robust["p"], server.robust["n"]


# pytest-twisted runs each hypothesis example of an async test in the reactor greenlet.
# No shrinking: a failing example costs a 10 s timeout, so shrinking would outlast pytest's.
@settings(max_examples=50, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(garbage=GARBAGE)
@pytest_twisted.ensureDeferred
async def test_garbage_never_hurts_other_connections(server, failure_log, garbage):
    v, p, n = await _victim(server)
    g = await server.mqks()
    sent = garbage + b"\nzz ping alive"
    g.send(sent)
    p.send(f"rm{n} publish robust-event-7 payload {n}")
    assert await v.line(10) == f"victim ok rm{n} event=robust-event-7 payload {n}"
    assert await v.request(f"vp{n} ping {n}", 10) == f"vp{n} ok {n}"
    replies, alive = [], False
    while not (g.closed.called and not g.lines):
        try:
            line = await g.line(10)
        except ConnectionError:
            break
        if line == "zz ok alive":
            alive = True
            break
        replies.append(line)
    if not alive:   # closing is allowed only after a line over the limit
        assert any(len(line) > MAX_LINE for line in sent.split(b"\n")), replies
    bad = [line for line in replies if not REPLY.match(line)]
    assert not bad, bad
    g.close()
    await g.closed
    assert failure_log.failures == [], [f.getTraceback() for f in failure_log.failures]


def _connection_of(server, client):
    port = client.transport.getHost().port
    for conn in server.doors["mqks"].connections:
        if conn.transport.getPeer().port == port:
            return conn
    raise AssertionError("no server-side connection for this client")


@pytest_twisted.ensureDeferred
async def test_slow_consumer_keeps_broker_output_bounded(server):
    total, body = 200_000, b"b" * 100
    door = server.doors["mqks"]
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("slow consume --confirm slow-q slow-e") == "slow ok "
    conn = _connection_of(server, c)
    # Small socket buffers on both ends, so the kernel cannot hide the backlog.
    conn.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    c.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    c.transport.pauseProducing()

    line_len = len(b"slow ok m199999 event=slow-e \n") + len(body)
    peaks = {"pending": 0, "buffered": 0}
    transport = conn.transport
    flush = conn.outbox.flush

    def probed_flush():
        peaks["pending"] = max(peaks["pending"], conn.outbox.pending)
        flush()
        buffered = transport._tempDataLen + len(transport.dataBuffer) - transport.offset
        peaks["buffered"] = max(peaks["buffered"], buffered)

    conn.outbox.flush = probed_flush
    p.transport.write(b"".join(b"m%d publish slow-e %s\n" % (n, body) for n in range(total)))
    done = defer.ensureDeferred(p.request("done ping all", 120))
    flow = server.broker.flow
    while not done.called:        # a hold lasts flow_max_hold: let that time pass at once
        await until(lambda: done.called or flow.held, 120, "a hold or the reply")
        if flow.held:
            server.advance(server.config["broker"]["flow_max_hold"])
    assert await done == "done ok all"

    queue = server.broker.queues["slow-q"]
    assert len(queue) >= total // 2, len(queue)      # the queue holds the backlog
    assert conn.outbox.pending <= door.high_water + line_len
    assert peaks["pending"] <= door.high_water + line_len, peaks
    assert peaks["buffered"] <= 2 * (door.high_water + line_len) + 64 * 1024, peaks

    c.transport.resumeProducing()
    await until(lambda: len(c.lines) >= total, 120, "all deliveries")
    expected = [b"slow ok m%d event=slow-e %s" % (n, body) for n in range(total)]
    assert list(c.lines) == expected
    assert len(queue) == 0
    c.lines.clear()
    await c.nothing()


@pytest_twisted.ensureDeferred
async def test_fast_publisher_is_paced_to_a_slow_consumer(server):
    """Flow control (core.flow): the queue stays near the limit instead of taking in all
    the publisher sends, the publisher is held and let go, and nothing is lost."""
    from twisted.internet import task
    total, body = 60_000, b"f" * 100
    c, p = await server.mqks(), await server.mqks()
    assert await c.request("f consume --confirm flow-q flow-e") == "f ok "
    conn = _connection_of(server, c)
    conn.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    c.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    queue, flow = server.broker.queues["flow-q"], server.broker.flow
    peak = [0]
    probe = task.LoopingCall(lambda: peak.__setitem__(0, max(peak[0], len(queue))))
    probe.start(0.002)
    reading = [True]

    def pace():                           # the consumer reads every other 5 ms
        reading[0] = not reading[0]
        (c.transport.resumeProducing if reading[0] else c.transport.pauseProducing)()
    pacer = task.LoopingCall(pace)
    pacer.start(0.005)
    try:
        p.transport.write(b"".join(b"m%d publish flow-e %s\n" % (n, body)
                                   for n in range(total)))
        await until(lambda: len(c.lines) >= total, 120, "all deliveries")
    finally:
        probe.stop()
        pacer.stop()
        c.transport.resumeProducing()
    assert flow.holds > 0 and not flow.held
    one_read = 64 * 1024 // len(b"m59999 publish flow-e \n" + body) + 1
    assert peak[0] <= flow.limit + one_read, peak
    assert list(c.lines) == [b"f ok m%d event=flow-e %s" % (n, body) for n in range(total)]
    assert await p.request("done ping x") == "done ok x"


@pytest_twisted.ensureDeferred
async def test_a_conversion_that_raises_costs_its_connection_not_the_others(
        server, failure_log, monkeypatch):
    """Foreign messages reach MQKS consumers through Outbox.defer and are converted when
    the turn's output is flushed, every connection in one pass: a converter bug for one
    connection closes that connection, and the others flushed in the same pass get their
    lines, then and later (before, they stayed marked dirty and never got output again)."""
    real = convert_mqks.deliveries

    def picky(items):
        if any(prefix.startswith(b"bad ") for prefix, _, _ in items):
            raise ValueError("a converter bug")
        return real(items)
    monkeypatch.setattr(convert_mqks, "deliveries", picky)
    bad, good, p = await server.mqks(), await server.mqks(), await server.mqks()
    assert await bad.request("bad consume --confirm conv-bad conv-e") == "bad ok "
    assert await good.request("good consume --confirm conv-good conv-e") == "good ok "
    writer = await server.malamute_raw("conv-writer")
    assert await writer.call(codec.StreamWrite("mqks")) == codec.Ok()
    writer.send(codec.StreamSend("conv-e", (b"foreign",)))
    line = await good.line(10)
    assert line.startswith("good ok ") and " event=conv-e," in line and line.endswith(" foreign")
    await bad.closed
    assert bad.lines == deque() and len(failure_log.failures) == 1
    assert failure_log.failures[0].check(ValueError)
    p.send("m2 publish conv-e plain")
    assert await good.line(10) == "good ok m2 event=conv-e plain"
    failure_log.failures.clear()
