"""The per-session state machine of a Malamute broker, sans IO.

Feed it each decoded command from one peer; it answers with the one reply to
send (or none) and the events the broker layer must act on.  The rules are
malamute 1.2's as observed, minus its crashes, and shaped by what the real
``mlm_client`` tolerates: it halts for good on any frame it does not expect,
so a session only ever replies OK(200), ERROR(300/500) or PONG; ERROR 500
("who are you?") makes it re-open and replay, ERROR 300 ends it.

A session starts in ``start``, becomes ``connected`` on CONNECTION-OPEN and
returns to ``start`` whenever it ends (CLOSE, a drop, or ``expire``), which
is what "a fresh session for the next frame" means on the real broker.
Send the reply before applying the events (the OK to an OPEN must precede
the stored mail the Open event releases).
"""

from typing import NamedTuple, Optional

from . import codec as c

START = "start"
CONNECTED = "connected"


# -- events for the broker layer -------------------------------------------

class Open(NamedTuple):
    """The peer registered ``address`` ("" = anonymous, no mailbox)."""
    address: str


class Close(NamedTuple):
    """The peer closed politely; forget its client (its mailbox stays)."""


class Drop(NamedTuple):
    """The session was destroyed (protocol error or expiry); forget its client."""
    reason: str


class StreamWrite(NamedTuple):
    stream: str


class StreamSend(NamedTuple):
    """Publish to ``stream``, the session's current STREAM-WRITE stream."""
    stream: str
    subject: str
    content: tuple


class StreamRead(NamedTuple):
    stream: str
    pattern: str


class StreamCancel(NamedTuple):
    stream: str


class MailboxSend(NamedTuple):
    address: str
    subject: str
    tracker: str
    timeout: int
    content: tuple


class ServiceSend(NamedTuple):
    service: str
    subject: str
    tracker: str
    timeout: int
    content: tuple


class ServiceOffer(NamedTuple):
    service: str
    pattern: str


class Credit(NamedTuple):
    amount: int


class Outcome(NamedTuple):
    """What to do: send ``reply`` (a command, or None), then apply ``events``.

    ``error`` is set (and nothing else) when the frames did not decode; the
    caller counts/logs it and still treats the frame as traffic for expiry.
    """
    reply: Optional[tuple] = None
    events: tuple = ()
    error: Optional[c.MalamuteDecodeError] = None


OK = c.Ok()
PONG = c.ConnectionPong()
ERROR_FAILED = c.Error(c.FAILED)
ERROR_INVALID = c.Error(c.COMMAND_INVALID)

_NOTHING = Outcome()
_OK = Outcome(OK)
_PONG = Outcome(PONG)
_UNKNOWN = Outcome(ERROR_INVALID)
_ALL = frozenset(c.COMMANDS)
_SERVER_ONLY = (c.ConnectionPong, c.Ok, c.Error, c.StreamDeliver, c.MailboxDeliver,
                c.ServiceDeliver)


class Session:
    """State of one peer (one ROUTER routing id)."""

    __slots__ = ("state", "address", "stream")

    def __init__(self):
        self.state = START
        self.address = None
        self.stream = None

    def __repr__(self):
        return "<malamute.Session %s address=%r stream=%r>" % (self.state, self.address, self.stream)

    def receive_frames(self, frames):
        """Decode and handle; an undecodable frame gets no reply."""
        try:
            command = c.decode(frames)
        except c.MalamuteDecodeError as exc:
            return Outcome(error=exc)
        return self.receive(command)

    def receive(self, command):
        """Handle one decoded command and return its Outcome."""
        if self.state == START:
            return self._start(command)
        return self._connected(command)

    def expire(self, reason="expired"):
        """End the session silently (server-side expiry or address takeover)."""
        if self.state == START:
            return _NOTHING
        self._reset()
        return Outcome(events=(Drop(reason),))

    def _reset(self):
        self.state, self.address, self.stream = START, None, None

    def _drop(self, reply, reason):
        self._reset()
        return Outcome(reply, (Drop(reason),))

    def _start(self, command):
        cls = command.__class__
        if cls is c.ConnectionOpen:
            self.state, self.address = CONNECTED, command.address
            return Outcome(OK, (Open(command.address),))
        if cls is c.ConnectionClose:
            return _OK          # malamute 1.2 segfaults here; we answer and carry on
        if cls in _ALL:
            return _UNKNOWN
        raise TypeError("not a Malamute command: %r" % (command,))

    def _connected(self, command):
        cls = command.__class__
        if cls is c.StreamSend:
            if self.stream is None:
                return self._drop(ERROR_FAILED, "STREAM-SEND before STREAM-WRITE")
            return Outcome(events=(StreamSend(self.stream, command.subject, command.content),))
        if cls is c.MailboxSend:
            return Outcome(events=(MailboxSend(*command),))
        if cls is c.ServiceSend:
            return Outcome(events=(ServiceSend(*command),))
        if cls is c.ConnectionPing:
            return _PONG
        if cls is c.StreamRead:
            return Outcome(OK, (StreamRead(command.stream, command.pattern),))
        if cls is c.StreamWrite:
            self.stream = command.stream
            return Outcome(OK, (StreamWrite(command.stream),))
        if cls is c.StreamCancel:
            return Outcome(OK, (StreamCancel(command.stream),))
        if cls is c.ServiceOffer:
            return Outcome(OK, (ServiceOffer(command.address, command.pattern),))
        if cls is c.Credit:
            return Outcome(events=(Credit(command.amount),))
        if cls is c.ConnectionClose:
            self._reset()
            return Outcome(OK, (Close(),))
        if cls is c.ConnectionOpen:
            return self._drop(ERROR_INVALID, "CONNECTION-OPEN while connected")
        if cls is c.Confirm:
            return self._drop(ERROR_FAILED, "CONFIRM is not implemented")
        if cls in _SERVER_ONLY:
            return self._drop(ERROR_INVALID, "%s is a server command" % cls.__name__)
        raise TypeError("not a Malamute command: %r" % (command,))
