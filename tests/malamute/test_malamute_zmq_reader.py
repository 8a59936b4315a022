"""RouterReader over real loopback tcp and ipc, with real DEALER peers."""

import collections
import select
import time

import pytest
import pytest_twisted
import zmq
from twisted.internet import defer, task

from bridge.zmq_reader import DEFAULT_ENDPOINTS, RouterReader


class NoRecheckReader(RouterReader):
    """The reader minus its re-check after sends: what the hazard tests must catch."""

    def _recheck(self):
        pass


class FakeReactor(task.Clock):
    """A reactor we step by hand: readers are registered, time is a Clock."""

    def __init__(self):
        super().__init__()
        self.readers = set()

    def addReader(self, reader):
        self.readers.add(reader)

    def removeReader(self, reader):
        self.readers.discard(reader)

    def step(self):
        """Run the calls due now, but not the ones they schedule (advance(0) would)."""
        for call in [c for c in self.calls if c.getTime() <= self.seconds()]:
            self.calls.remove(call)
            call.called = 1
            call.func(*call.args, **call.kw)


def _reactor():
    from twisted.internet import reactor
    return reactor


@pytest.fixture(params=["tcp", "ipc"])
def endpoint(request, tmp_path):
    if request.param == "tcp":
        return "tcp://127.0.0.1:*"
    return "ipc://%s" % (tmp_path / "router.ipc")


@pytest.fixture
def dealers():
    made = []

    def make(endpoint, **options):
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        for name, value in options.items():
            sock.setsockopt(getattr(zmq, name), value)
        sock.connect(endpoint)
        made.append(sock)
        return sock

    yield make
    for sock in made:
        sock.close(0)


@defer.inlineCallbacks
def collect(dealer, count, timeout):
    """Read up to ``count`` messages from a DEALER without blocking the reactor."""
    got, deadline = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        try:
            got.append(dealer.recv_multipart(zmq.NOBLOCK))
        except zmq.Again:
            yield task.deferLater(_reactor(), 0.002, lambda: None)
    return got


@defer.inlineCallbacks
def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        yield task.deferLater(_reactor(), 0.002, lambda: None)
    return predicate()


def echo_reader(endpoints, cls=RouterReader, **options):
    holder = []
    reader = cls(_reactor(), lambda rid, frames: holder[0].send(rid, [b"re:" + frames[0]]),
                 endpoints, **options)
    holder.append(reader)
    reader.start()
    return reader


def test_default_endpoint():
    assert DEFAULT_ENDPOINTS == ("tcp://*:9999",)


@pytest_twisted.inlineCallbacks
def test_echo(endpoint, dealers):
    reader = echo_reader([endpoint])
    try:
        dealer = dealers(reader.endpoints[0])
        dealer.send_multipart([b"hello"])
        replies = yield collect(dealer, 1, 5)
        assert replies == [[b"re:hello"]]
        assert (reader.received, reader.sent) == (1, 1)
    finally:
        reader.stop()


@pytest_twisted.inlineCallbacks
def test_several_endpoints_at_once(dealers, tmp_path):
    reader = echo_reader(["tcp://127.0.0.1:*", "ipc://%s" % (tmp_path / "b.ipc")])
    try:
        assert reader.endpoints[0].startswith("tcp://127.0.0.1:")
        assert reader.endpoints[1].startswith("ipc://")
        first, second = dealers(reader.endpoints[0]), dealers(reader.endpoints[1])
        first.send_multipart([b"1"])
        second.send_multipart([b"2"])
        assert (yield collect(first, 1, 5)) == [[b"re:1"]]
        assert (yield collect(second, 1, 5)) == [[b"re:2"]]
    finally:
        reader.stop()


def test_bind_failure_leaves_nothing_behind():
    reader = RouterReader(FakeReactor(), lambda *a: None, ["tcp://127.0.0.1:*", "bogus://x"])
    with pytest.raises(zmq.ZMQError):
        reader.start()
    assert reader.endpoints == [] and reader.fileno() == -1


def _pipelined_run(endpoint, dealers, cls, count, timeout):
    """A client that pipelines ``count`` requests while the server answers later."""
    reactor, pending, state = _reactor(), [], {}

    def answer():
        state.pop("call")
        batch, pending[:] = list(pending), []
        for rid, frames in batch:
            reader.send(rid, frames)

    def on_message(rid, frames):
        pending.append((rid, frames))
        if "call" not in state:
            state["call"] = reactor.callLater(0, answer)   # as a broker would: later

    reader = cls(reactor, on_message, [endpoint], batch=64)
    reader.start()
    dealer = dealers(reader.endpoints[0], SNDHWM=0, RCVHWM=0)
    sent = [0]

    def pump():
        for _ in range(10):
            if sent[0] == count:
                return loop.stop()
            dealer.send_multipart([b"%d" % sent[0]], zmq.NOBLOCK)
            sent[0] += 1

    loop = task.LoopingCall(pump)
    loop.start(0.0005)
    d = collect(dealer, count, timeout)
    d.addBoth(lambda result: (loop.running and loop.stop(), reader.stop(), result)[-1])
    return d


@pytest_twisted.inlineCallbacks
def test_pipelined_client_gets_every_reply(endpoint, dealers):
    replies = yield _pipelined_run(endpoint, dealers, RouterReader, 3000, 20)
    assert [int(frames[0]) for frames in replies] == list(range(3000))


@pytest_twisted.inlineCallbacks
def test_pipelined_client_stalls_without_recheck(endpoint, dealers):
    """The same run with the re-check removed must stall: the test above can fail."""
    stalled = []
    for _ in range(3):
        replies = yield _pipelined_run(endpoint, dealers, NoRecheckReader, 3000, 2)
        stalled.append(len(replies) < 3000)
        if stalled[-1]:
            break
    assert stalled[-1]


def _wait_readable(fd, timeout=2.0):
    return bool(select.select([fd], [], [], timeout)[0])


@pytest.mark.parametrize("cls, expected", [(RouterReader, 2), (NoRecheckReader, 1)])
def test_send_swallowing_the_wakeup(endpoint, dealers, cls, expected):
    """Step by step: a send between an arrival and our read eats ZMQ_FD's signal."""
    clock, got = FakeReactor(), []
    reader = cls(clock, lambda rid, frames: got.append((rid, frames)), [endpoint])
    reader.start()
    try:
        dealer = dealers(reader.endpoints[0])
        dealer.send_multipart([b"a"])
        while not got:
            assert _wait_readable(reader.fileno())
            reader.doRead()
            clock.advance(0)
        dealer.send_multipart([b"b"])
        assert _wait_readable(reader.fileno())  # "b" signalled, not read yet
        time.sleep(0.01)                         # past libzmq's command throttle
        reader.send(got[0][0], [b"reply"])       # processes the pending command...
        assert not _wait_readable(reader.fileno(), 0.2)   # ...so the FD stays quiet
        clock.advance(0)
        assert len(got) == expected
        assert [frames for _, frames in got][:expected] == [[b"a"], [b"b"]][:expected]
    finally:
        reader.stop()


def test_batch_bound_and_one_call_per_batch(dealers, endpoint):
    clock, got = FakeReactor(), []
    reader = RouterReader(clock, lambda rid, frames: got.append(frames), [endpoint], batch=10)
    reader.start()
    try:
        dealer = dealers(reader.endpoints[0])
        for i in range(35):
            dealer.send_multipart([b"%d" % i])
        deadline = time.monotonic() + 5
        while len(got) < 35 and time.monotonic() < deadline:
            if reader._pass is None:
                _wait_readable(reader.fileno(), 0.05)
                reader.doRead()
            else:
                before = len(got)
                assert len(clock.getDelayedCalls()) == 1
                clock.step()
                assert len(got) - before <= 10
        assert got == [[b"%d" % i] for i in range(35)]
    finally:
        reader.stop()


@pytest_twisted.inlineCallbacks
def test_unknown_peer_is_counted_not_queued(endpoint):
    reader = RouterReader(_reactor(), lambda *a: None, [endpoint])
    reader.start()
    try:
        assert reader.send(b"\x00nope", [b"x"]) is False
        assert (reader.unroutable, reader.backlogged, reader.sent) == (1, 0, 0)
        yield task.deferLater(_reactor(), 0.02, lambda: None)
    finally:
        reader.stop()


@pytest_twisted.inlineCallbacks
def test_slow_peer_backlog_is_bounded_then_flushed(endpoint, dealers):
    """A peer that does not read fills its pipe; we queue a bounded backlog, in order."""
    peers = []
    reader = RouterReader(_reactor(), lambda rid, frames: peers.append(rid), [endpoint],
                          sndhwm=2, peer_backlog=5)
    reader.start()
    try:
        dealer = dealers(reader.endpoints[0], RCVHWM=2, RCVBUF=4096)
        dealer.send_multipart([b"hi"])
        assert (yield wait_for(lambda: peers))
        big = b"x" * 200_000
        results = [reader.send(peers[0], [b"%d" % i, big]) for i in range(60)]
        assert reader.backlogged == 5
        assert results.count(False) == reader.dropped > 0
        accepted = [i for i, ok in enumerate(results) if ok]
        frames = yield collect(dealer, len(accepted), 10)
        assert [int(f[0]) for f in frames] == accepted
        assert reader.backlogged == 0 and not reader._backlog
    finally:
        reader.stop()


def test_forget_discards_a_backlog():
    reader = RouterReader(FakeReactor(), lambda *a: None, [])
    reader._socket = object()       # never touched: the peer is already backlogged
    reader._backlog[b"p"] = collections.deque([[b"1"], [b"2"]])
    reader.backlogged = 2
    assert reader.forget(b"p") == 2
    assert (reader.backlogged, reader.dropped, reader.forget(b"p")) == (0, 2, 0)


@pytest_twisted.inlineCallbacks
def test_stop_is_idempotent_and_send_after_stop_drops(endpoint):
    reader = RouterReader(_reactor(), lambda *a: None, [endpoint])
    reader.start()
    reader.stop()
    reader.stop()
    assert reader.send(b"x", [b"y"]) is False and reader.dropped == 1
    yield task.deferLater(_reactor(), 0, lambda: None)
