"""The Malamute door's session logic with a fake socket and a fake clock (no ZeroMQ):
exact frames out for each command and state, deterministic expiry and backpressure."""
import pytest
from twisted.logger import formatEvent, globalLogPublisher

from mqksbridge.bridge.malamute.door import MalamuteDoor
from mqksbridge.bridge.engine import EmbeddedEngine
from mqksbridge.core import Client, Consumer, FakeClock, Message
from mqksbridge.core.limits import SizeLimit
from mqksbridge.protocols.malamute import codec
from mqksbridge.protocols.malamute.codec import decode, encode

OK, PONG, E500, E300 = [b"\xaa\xa8\x0e\x00\xc8\x00"], [b"\xaa\xa8\x03"], \
    [b"\xaa\xa8\x0f\x01\xf4\x00"], [b"\xaa\xa8\x0f\x01\x2c\x00"]


class FakeSocket:
    """Records what the door sends; peers in `gone` are unreachable, in `full` busy."""

    def __init__(self):
        self.sent = []
        self.gone = set()
        self.full = set()
        self.clients = {}
        self.unopened = {}          # connections without a session (none here)
        self.disconnected = []

    def disconnect(self, rid):
        self.disconnected.append(rid)

    def send(self, rid, frames):
        if rid in self.gone:
            return False
        self.sent.append((rid, [bytes(f) for f in frames]))
        return True

    def busy(self, rid):
        return rid in self.full

    def attach_client(self, rid, client):
        self.clients[rid] = client

    def link(self, rid):
        return FakeLink(self, rid)

    def fill(self, rid):
        """What the ROUTER does when a peer's socket is full: pause its client."""
        self.full.add(rid)
        self.clients[rid].pause()

    def drain(self, rid):
        self.full.discard(rid)
        self.clients[rid].resume()

    def take(self, rid):
        mine = [f for r, f in self.sent if r == rid]
        self.sent = [(r, f) for r, f in self.sent if r != rid]
        return mine


class FakeLink:
    """A peer's connection as its session's deliveries see it (ZmtpConnection)."""

    def __init__(self, socket, rid):
        self.socket, self.rid = socket, rid

    def send(self, frames):
        return self.socket.send(self.rid, frames)

    def offer(self, frames):
        return None if self.socket.busy(self.rid) else self.send(frames)


@pytest.fixture
def door():
    broker = EmbeddedEngine(FakeClock())
    d = MalamuteDoor(broker, timeout=10.0, check_interval=1.0)
    d.transport = FakeSocket()
    return d


def send(door, rid, command):
    door.received(rid, encode(command))


def opened(door, rid, address):
    send(door, rid, codec.ConnectionOpen(address))
    assert door.transport.take(rid)[0] == OK


def test_start_state_answers_500_and_close_ok(door):
    for command in (codec.ConnectionPing(), codec.StreamWrite("s"), codec.Credit(1),
                    codec.Confirm("t"), codec.Ok()):
        send(door, b"A", command)
    send(door, b"A", codec.ConnectionClose())
    assert door.transport.take(b"A") == [E500] * 5 + [OK]
    assert door.peers == {}


def test_connected_replies(door):
    opened(door, b"A", "alice")
    send(door, b"A", codec.ConnectionPing())
    send(door, b"A", codec.StreamWrite("w"))
    send(door, b"A", codec.StreamRead("w", "x"))
    send(door, b"A", codec.StreamCancel("never-read"))
    send(door, b"A", codec.ServiceOffer("svc", ""))
    send(door, b"A", codec.MailboxSend("nobody", "s", "t", 0, (b"x",)))
    send(door, b"A", codec.ServiceSend("svc2", "s", "t", 0, (b"x",)))
    send(door, b"A", codec.Credit(5))
    assert door.transport.take(b"A") == [PONG, OK, OK, OK, OK]


@pytest.mark.parametrize("command,reply", [
    (codec.ConnectionOpen("again"), E500), (codec.Confirm("t", 200, ""), E300),
    (codec.StreamSend("subj", (b"x",)), E300), (codec.ConnectionPong(), E500),
    (codec.MailboxDeliver("a", "b", "c"), E500), (codec.ConnectionClose(), OK)])
def test_commands_that_end_a_session(door, command, reply):
    opened(door, b"A", "alice")
    send(door, b"A", command)
    assert door.transport.take(b"A") == [reply]
    assert door.peers == {} and "alice" not in door.owners
    send(door, b"A", codec.ConnectionPing())
    assert door.transport.take(b"A") == [E500]


def test_malformed_frames_are_counted_and_ignored(door):
    opened(door, b"A", "alice")
    for frames in ([b""], [b"\xaa"], [b"\xaa\xa9\x02"], [b"\xaa\xa8\x0b\x03svc", b"x"],
                   [b"\xaa\xa8\x05\x09abc"], [b"\xaa\xa8\x63"], []):
        door.received(b"A", frames)
    assert door.transport.take(b"A") == []
    assert door.counters["malformed"] == 7 and b"A" in door.peers


def test_trailing_bytes_and_extra_frames_are_ignored(door):
    """As malamute 1.2 does: answered as if they were absent, and never relayed."""
    opened(door, b"W", "writer")
    opened(door, b"R", "reader")
    door.received(b"W", [b"\xaa\xa8\x02\x00\x01"])                       # PING + 2 bytes
    door.received(b"W", [b"\xaa\xa8\x02", b"extra"])
    door.received(b"R", [encode(codec.ServiceOffer("svc", ""))[0] + b"\x00", b"more"])
    door.received(b"R", [encode(codec.StreamRead("news", ""))[0], b""])
    door.received(b"W", [encode(codec.StreamWrite("news"))[0] + b"?"])
    assert door.transport.take(b"W") == [PONG, PONG, OK]
    assert door.transport.take(b"R") == [OK, OK]
    door.received_all(b"W", [
        [encode(codec.ServiceSend("svc", "req", "t", 0))[0] + b"\x01\x02", b"a"],
        [encode(codec.StreamSend("s"))[0] + b"\xff", b"b"],
        [encode(codec.MailboxSend("reader", "m", "", 0))[0] + b"new field", b"c"]])
    assert door.transport.take(b"R") == [
        encode(codec.ServiceDeliver("writer", "svc", "req", "t", (b"a",))),
        encode(codec.StreamDeliver("news", "writer", "s", (b"b",))),
        encode(codec.MailboxDeliver("writer", "reader", "m", "", (b"c",)))]


def test_a_bug_in_a_run_of_sends_costs_that_session_only(door):
    opened(door, b"A", "alice")
    opened(door, b"B", "bob")
    queue, taken = door.broker.queue("svc"), []

    def put(message, observer=None, publisher=None):
        taken.append(message.frames)
        if len(taken) == 2:
            raise RuntimeError("a bug")
        return True
    queue.put_message = put
    header = encode(codec.ServiceSend("svc", "s", "", 0))[0]
    door.received_all(b"A", [[header, b"1"], [header, b"2"], [header, b"3"]])
    assert taken == [(b"1",), (b"2",)]
    assert door.transport.take(b"A") == [E500, E500]      # the failure; then no session
    assert b"A" not in door.peers and b"B" in door.peers
    door.broker.mailbox = None                            # a bug before a run's first message
    door.received_all(b"B", [encode(codec.MailboxSend("x", "s", "", 0, (b"m",))),
                             encode(codec.ConnectionPing())])
    assert door.transport.take(b"B") == [E500, E500] and door.peers == {}


def test_stream_relay_is_byte_exact_and_skips_the_writer(door):
    opened(door, b"W", "writer")
    opened(door, b"R", "reader")
    send(door, b"R", codec.StreamRead("weather", "temp."))
    send(door, b"W", codec.StreamWrite("weather"))
    send(door, b"W", codec.StreamRead("weather", ""))
    door.transport.take(b"R"), door.transport.take(b"W")
    door.received(b"W", [bytes.fromhex("aaa8070b74656d702e6d6f73636f77"), b"10"])
    door.received(b"W", [bytes.fromhex("aaa8070b7261696e2e6d6f73636f77"), b"0"])
    assert door.transport.take(b"R") == [[bytes.fromhex(
        "aaa808077765617468657206777269746572""0b74656d702e6d6f73636f77"), b"10"]]
    assert door.transport.take(b"W") == []


def test_two_patterns_deliver_twice_and_cancel_removes_both(door):
    opened(door, b"W", "")
    opened(door, b"R", "")
    send(door, b"R", codec.StreamRead("s", "a"))
    send(door, b"R", codec.StreamRead("s", "b"))
    send(door, b"R", codec.StreamRead("s", "a"))
    send(door, b"W", codec.StreamWrite("s"))
    door.transport.take(b"R")
    send(door, b"W", codec.StreamSend("ab", (b"1",)))
    assert len(door.transport.take(b"R")) == 2
    send(door, b"R", codec.StreamCancel("s"))
    send(door, b"W", codec.StreamSend("ab", (b"2",)))
    assert door.transport.take(b"R") == [OK]


def test_mailbox_stored_then_delivered_after_ok_with_tracker(door):
    opened(door, b"A", "alice")
    for i in range(3):
        send(door, b"A", codec.MailboxSend("bob", "s%d" % i, "t%d" % i, 0, (b"m%d" % i,)))
    send(door, b"B", codec.ConnectionOpen("bob"))
    got = [decode(f) for f in door.transport.take(b"B")]
    assert got[0] == codec.Ok(200, "")
    assert got[1:] == [codec.MailboxDeliver("alice", "bob", "s%d" % i, "t%d" % i, (b"m%d" % i,))
                       for i in range(3)]


def test_mailbox_limit_and_expiry(door):
    door.broker.mailbox_size_limit = SizeLimit(20)
    opened(door, b"A", "alice")
    for i in range(5):
        send(door, b"A", codec.MailboxSend("bob", "s", "", 0, (b"x" * 10,)))
    send(door, b"A", codec.MailboxSend("carol", "s", "", 500, (b"late",)))
    door.broker.clock.advance(1)
    door.broker.tick()
    assert door.counters["mailbox_dropped"] == 3
    assert door.broker.mailboxes["carol"].expired == 1
    send(door, b"B", codec.ConnectionOpen("bob"))
    assert len(door.transport.take(b"B")) == 3


def test_takeover_ends_the_old_session(door):
    opened(door, b"A", "bob")
    send(door, b"A", codec.StreamRead("s", ""))
    opened(door, b"B", "bob")
    assert door.owners["bob"].rid == b"B" and b"A" not in door.peers
    assert door.broker.streams["s"].readers == []
    send(door, b"C", codec.ConnectionOpen("carol"))
    send(door, b"C", codec.MailboxSend("bob", "hi", "", 0, (b"x",)))
    assert decode(door.transport.take(b"B")[-1]).subject == "hi"


def test_expiry_sweep(door):
    opened(door, b"A", "alice")
    opened(door, b"B", "bob")
    for _ in range(10):          # timeout 10 s, one sweep a second: silent for <= 10 s
        door.sweep()
        send(door, b"B", codec.ConnectionPing())
    assert b"A" in door.peers
    door.sweep()
    assert b"A" not in door.peers and b"B" in door.peers
    assert door.counters["expired"] == 1


def test_service_round_robin_wait_and_redispatch(door):
    opened(door, b"C", "client")
    opened(door, b"W1", "w1")
    opened(door, b"W2", "w2")
    send(door, b"W1", codec.ServiceOffer("svc", "req"))
    send(door, b"W2", codec.ServiceOffer("svc", "req"))
    door.transport.take(b"W1"), door.transport.take(b"W2")
    for i in range(4):
        send(door, b"C", codec.ServiceSend("svc", "req.%d" % i, "t", 0, (b"x",)))
    send(door, b"C", codec.ServiceSend("svc", "other", "t", 0, (b"x",)))
    assert [decode(f).subject for f in door.transport.take(b"W1")] == ["req.0", "req.2"]
    assert [decode(f).subject for f in door.transport.take(b"W2")] == ["req.1", "req.3"]
    send(door, b"W2", codec.ServiceOffer("svc", "oth"))
    assert [decode(f) for f in door.transport.take(b"W2")] == [
        codec.Ok(), codec.ServiceDeliver("client", "svc", "other", "t", (b"x",))]


def test_vanished_worker_loses_no_request(door):
    opened(door, b"C", "client")
    opened(door, b"W1", "w1")
    opened(door, b"W2", "w2")
    send(door, b"W1", codec.ServiceOffer("svc", ""))
    send(door, b"W2", codec.ServiceOffer("svc", ""))
    door.transport.gone.add(b"W1")
    for i in range(4):
        send(door, b"C", codec.ServiceSend("svc", "r%d" % i, "", 0, (b"x",)))
    subjects = [decode(f).subject for f in door.transport.take(b"W2")[1:]]
    assert sorted(subjects) == ["r0", "r1", "r2", "r3"]
    assert b"W1" not in door.peers and door.counters["vanished"] == 1


def test_vanished_owner_keeps_its_mail(door):
    opened(door, b"C", "client")
    opened(door, b"B", "bob")
    door.transport.gone.add(b"B")
    send(door, b"C", codec.MailboxSend("bob", "s", "", 0, (b"x",)))
    assert len(door.broker.mailboxes["bob"].stored) == 1
    door.transport.gone.clear()
    send(door, b"B2", codec.ConnectionOpen("bob"))
    assert [decode(f).__class__ for f in door.transport.take(b"B2")] == [
        codec.Ok, codec.MailboxDeliver]


def test_backpressure_drops_stream_and_holds_mail(door):
    opened(door, b"W", "w")
    opened(door, b"R", "r")
    send(door, b"R", codec.StreamRead("s", ""))
    send(door, b"W", codec.StreamWrite("s"))
    door.transport.take(b"R")
    door.transport.fill(b"R")
    send(door, b"W", codec.StreamSend("x", (b"1",)))
    send(door, b"W", codec.MailboxSend("r", "m1", "", 0, (b"1",)))
    send(door, b"W", codec.MailboxSend("r", "m2", "", 0, (b"2",)))
    assert door.counters["stream_dropped"] == 1
    assert door.transport.take(b"R") == []
    door.transport.drain(b"R")
    assert [decode(f).subject for f in door.transport.take(b"R")] == ["m1", "m2"]


def test_credit_opt_in_limits_service_deliveries(door):
    opened(door, b"C", "client")
    opened(door, b"W", "w")
    send(door, b"W", codec.ServiceOffer("svc", ""))
    send(door, b"W", codec.Credit(2))
    door.transport.take(b"W")
    for i in range(4):
        send(door, b"C", codec.ServiceSend("svc", "r%d" % i, "", 0, ()))
    assert len(door.transport.take(b"W")) == 2
    send(door, b"W", codec.Credit(1))
    assert len(door.transport.take(b"W")) == 1


def test_foreign_messages_get_every_deliver_field(door):
    opened(door, b"R", "alice")
    send(door, b"R", codec.StreamRead("mqks", "ev"))
    send(door, b"R", codec.ServiceOffer("jobs", ""))
    door.transport.take(b"R")
    foreign = Message("1", "ev.1", (b"a", b"b"), {"h": "v"}, "127.0.0.1:5.x", "mqks")
    door.broker.stream("mqks").publish(foreign)
    door.broker.queue("jobs").put_message(foreign)
    door.broker.mailbox("alice").send(foreign)
    assert [decode(f) for f in door.transport.take(b"R")] == [
        codec.StreamDeliver("mqks", "127.0.0.1:5.x", "ev.1", (b"a", b"b")),
        codec.ServiceDeliver("127.0.0.1:5.x", "jobs", "ev.1", "", (b"a", b"b")),
        codec.MailboxDeliver("127.0.0.1:5.x", "alice", "ev.1", "", (b"a", b"b"))]


def test_service_queue_is_shared_with_other_doors(door):
    other = Client("mqks-client", "mqks")
    got = []
    door.broker.add_consumer(door.broker.queue("jobs"), Consumer(
        "c1", other, lambda c, e: got.append(e.message)))
    opened(door, b"C", "client")
    send(door, b"C", codec.ServiceSend("jobs", "do", "trk", 0, (b"work",)))
    assert [(m.subject, m.frames, m.sender, m.origin, m.tracker) for m in got] == [
        ("do", (b"work",), "client", "malamute", "trk")]


def test_losses_are_logged_once_per_sweep_and_warnings_rearm(door):
    seen = []
    observer = lambda event: seen.append(formatEvent(event))
    globalLogPublisher.addObserver(observer)
    try:
        door.broker.mailbox_size_limit, door.mailbox_warn = SizeLimit(30), 10
        opened(door, b"A", "alice")
        for _ in range(4):
            send(door, b"A", codec.MailboxSend("bob", "s", "", 0, (b"x" * 8,)))
        door.received(b"A", [b"junk"])
        door.sweep()
        door.sweep()
    finally:
        globalLogPublisher.removeObserver(observer)
    mine = [line for line in seen if "malamute" in line]
    assert mine == ["malamute mailbox 'bob' holds 16 bytes",
                    "malamute: 1 x mail over the limit of mailbox 'bob'",
                    "malamute: 1 x malformed frame 'bad signature'"]
    send(door, b"B", codec.ConnectionOpen("bob"))           # drains: the warning re-arms
    door.sweep()
    assert door._warned == set()
