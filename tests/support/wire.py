"""The fast test layer: the real service tree of bridge.service.build (broker, every door,
their sweeps) on a task.Clock, with each client connection on a StringTransport instead of
a socket. Bytes go in through the door's own Protocol, a reactor turn is `clock.advance(0)`
(the door's batched output is flushed then), and what the door wrote is read back.

For protocol logic and timers (keep-alive, handshake and session expiry, ack timeouts,
delete-when-unused, flow holds): nothing waits for wall time, a test takes milliseconds.
The real-socket tests beside them prove the real wire.
"""
from twisted.internet import error, task
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from mqksbridge.bridge import config as configuration
from mqksbridge.bridge.listeners import DoorFactory
from mqksbridge.bridge.mqks.door import MqksConnection
from mqksbridge.bridge.service import build
from mqksbridge.bridge.twino.door import TwinoConnection
from mqksbridge.protocols.malamute import codec as malamute
from mqksbridge.protocols.twino.codec import (PROTOCOL, ContentType, Frame, FrameDecoder,
                                              MessageType, encode, new_id)
from mqksbridge.protocols.zmtp import codec as zmtp

START = 1_700_000_000.0          # the clock's time at start: a plausible now


class Harness:
    """Every door, no listener; `mqks()`, `twino()`, `malamute()` connect a client."""

    def __init__(self, overrides=None):
        cfg = {door: {"listen": []} for door in ("mqks", "malamute", "twino", "admin")}
        for door, values in (overrides or {}).items():
            cfg.setdefault(door, {}).update(values)
        self.config = configuration.load(overrides=cfg)
        self.clock = task.Clock()
        self.clock.advance(START)
        self.top, self.broker, self.doors, _ = build(self.config, self.clock, self.clock)
        self.top.startService()
        self._ports = iter(range(40000, 60000))
        self.wires = []

    def stop(self):
        for wire in self.wires:          # the door hung up: the socket would be gone now
            if wire.transport.disconnecting and not wire.lost:
                wire.close()
        stopping = self.top.stopService()
        self.clock.advance(0)
        self.clock.advance(self.top.timeout)     # the ordered shutdown's bound, on our clock
        outcome = []
        stopping.addBoth(outcome.append)
        assert outcome, "the service tree did not stop within its shutdown timeout"
        if isinstance(outcome[0], Failure):
            outcome[0].raiseException()

    def turn(self):
        """Reactor turns until nothing is due now: whatever the doors batched is written
        (an Outbox that resumes its client may batch more for the next turn)."""
        now = self.clock.seconds()
        for _ in range(10_000):
            if not any(call.getTime() <= now for call in self.clock.getDelayedCalls()):
                return
            self.clock.advance(0)
        raise AssertionError("the doors keep scheduling work for now")

    def advance(self, seconds):
        """Move time on by `seconds`, in steps no longer than the shortest sweep
        interval, so every periodic sweep runs as often as it would have."""
        step = min(self.config["broker"]["sweep_interval"],
                   self.config["twino"]["check_interval"],
                   self.config["malamute"]["check_interval"])
        while seconds > 1e-9:
            self.clock.advance(min(step, seconds))
            seconds -= step

    def _connect(self, factory, wire_class):
        transport = StringTransport(
            peerAddress=IPv4Address("TCP", "127.0.0.1", next(self._ports)))
        protocol = factory.buildProtocol(transport.getPeer())
        protocol.makeConnection(transport)
        wire = wire_class(self, protocol, transport)
        self.wires.append(wire)
        self.turn()
        return wire

    def mqks(self):
        return self._connect(DoorFactory(MqksConnection, self.doors["mqks"]), MqksWire)

    def twino(self, hello=True, **fields):
        """A Twino connection; with `hello` the protocol bytes and a hello are sent (and
        the answer taken: `wire.accepted`)."""
        wire = self._connect(DoorFactory(TwinoConnection, self.doors["twino"]), TwinoWire)
        if hello:
            wire.hello(**fields)
        return wire

    def malamute(self, address=None):
        """A ZMTP DEALER on the Malamute door's ROUTER; OPENed with `address` unless None."""
        wire = self._connect(self.doors["malamute"].transport, MalamuteWire)
        if address is not None:
            assert wire.call(malamute.ConnectionOpen(address)) == [malamute.Ok(200, "")]
        return wire


class Wire:
    """One client connection: `send` bytes (a reactor turn follows), `take` the output."""

    def __init__(self, harness, protocol, transport):
        self.harness, self.protocol, self.transport = harness, protocol, transport
        self.lost = False

    def send(self, data):
        self.protocol.dataReceived(data)
        self.harness.turn()

    def take(self):
        data = self.transport.value()
        self.transport.clear()
        return data

    @property
    def closed(self):
        """The door hung up (loseConnection) or the connection was lost."""
        return self.transport.disconnecting or self.lost

    def close(self):
        """The client goes away (the door sees connectionLost)."""
        if not self.lost:
            self.lost = True
            self.protocol.connectionLost(Failure(error.ConnectionDone()))
            self.harness.turn()


class MqksWire(Wire):
    def send_lines(self, *lines):
        self.send(b"".join((line.encode() if isinstance(line, str) else line) + b"\n"
                           for line in lines))

    def lines(self):
        """Every line written so far and not taken yet, as str."""
        data = self.take()
        return [line.decode("utf-8", "surrogateescape") for line in data.split(b"\n")[:-1]]

    def request(self, *lines):
        self.send_lines(*lines)
        return self.lines()


class TwinoWire(Wire):
    def __init__(self, harness, protocol, transport):
        super().__init__(harness, protocol, transport)
        self.decoder = FrameDecoder(apply_ttl=False)
        self.accepted = None

    def hello(self, client_id=None, extra=""):
        lines = "CONNECT /\r\n" + extra + (f"Client-Id: {client_id}\r\n" if client_id else "")
        self.send(PROTOCOL + encode(Frame(MessageType.SERVER, first_acquirer=True,
                                          message_id=new_id(), content_type=ContentType.HELLO,
                                          content=lines.encode())))
        data = self.take()
        assert data[:8] == PROTOCOL, data
        [self.accepted] = self.decoder.feed(data[8:])
        return self.accepted

    def send_frame(self, frame):
        self.send(frame if isinstance(frame, bytes) else encode(frame))

    def frames(self):
        """Every frame written so far and not taken yet."""
        return self.decoder.feed(self.take())


class MalamuteWire(Wire):
    def __init__(self, harness, protocol, transport):
        super().__init__(harness, protocol, transport)
        self.zmtp = zmtp.Connection("DEALER")
        self.send(self.zmtp.preamble())

    def send_commands(self, *commands):
        self.send(b"".join(zmtp.message(malamute.encode(c)) for c in commands))

    def commands(self):
        """Every Malamute command the door sent and not taken yet."""
        messages = self.zmtp.receive_data(self.take())
        self.zmtp.events.clear()
        return [malamute.decode(frames) for frames in messages]

    def call(self, *commands):
        self.send_commands(*commands)
        return self.commands()
