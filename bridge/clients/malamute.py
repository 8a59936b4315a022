"""A blocking Malamute client on a pyzmq DEALER socket.

Enough of ``mlm_client`` for tests, benchmarks and scripts, without libmlm:
the calls that the real broker answers with OK (open, producer, consumer,
worker, close) wait for it; the three sends never wait, so a script can
pipeline as many as it likes.  Deliveries that arrive while a call waits
for its OK or PONG are kept, in order, for ``recv``.
"""

import time
from collections import deque
from typing import NamedTuple

import zmq
from zmq.utils.monitor import recv_monitor_message

from mqksbridge.bridge.clients.failover import ROUNDS, Failover
from mqksbridge.protocols.malamute import codec as c
from mqksbridge.protocols.malamute import zrex

_DELIVERIES = {
    c.StreamDeliver: "STREAM DELIVER",
    c.MailboxDeliver: "MAILBOX DELIVER",
    c.ServiceDeliver: "SERVICE DELIVER",
}


class MalamuteError(Exception):
    """The broker answered ERROR (``code`` 300 or 500) or broke the protocol."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class MalamuteTimeout(MalamuteError, TimeoutError):
    """No answer from the broker in time."""


class MalamuteConnectionLost(MalamuteError, ConnectionError):
    """The broker's connection dropped or was refused (seen with failover only: a single
    endpoint leaves ZeroMQ to reconnect on its own)."""


class MalamuteLoginRefused(MalamuteError):
    """The broker refused the PLAIN login (ZAP status in ``code``: 400 a wrong user or
    password, 300 a temporary refusal such as the user's connection limit)."""


class Delivery(NamedTuple):
    """A delivered message; ``command`` is spelled as ``mlm_client_command``."""
    command: str
    address: str        # stream, mailbox or service name
    sender: str
    subject: str
    tracker: str
    frames: tuple


def _frames(frames):
    return tuple(f.encode() if isinstance(f, str) else f for f in frames)


class MalamuteClient:
    """One session with a Malamute broker at ``endpoint`` (any libzmq endpoint), or with
    failover at the first live one of a list of endpoints (docs/clients.md, "Failover").

    ``address`` "" is anonymous (no mailbox).  ``timeout`` (seconds) bounds each
    wait for an OK or PONG.  ``hwm`` sets both high-water marks (0 = unlimited).
    ``username`` and ``password`` log in with ZMTP PLAIN; a refused login raises
    ``MalamuteLoginRefused`` (libzmq only reports it on a socket monitor, so the client
    watches one while it waits: otherwise a refusal would look like silence).
    """

    def __init__(self, endpoint, address="", timeout=5.0, *, context=None, hwm=1000,
                 username=None, password=None, on_failover=None, rounds=ROUNDS):
        self.address, self.timeout = address, timeout
        self.username, self._password = username, password
        self._context, self._hwm = context or zmq.Context.instance(), hwm
        self._inbox = deque()
        self._failover = None
        if isinstance(endpoint, (list, tuple)):
            self._failover = Failover(endpoint, on_failover=on_failover, rounds=rounds)
            self._producer = None           # what a failover replays: STREAM-WRITE,
            self._registrations = []        # then every STREAM-READ and SERVICE-OFFER
            endpoint = self._failover.addresses[0]
        self._socket = self._monitor = None
        self._dial(endpoint)
        self.connected = False

    @property
    def failovers(self):
        """How many times the client moved to another address."""
        return 0 if self._failover is None else self._failover.moves

    def _dial(self, endpoint):
        """A DEALER socket connecting to ``endpoint``, with the monitor it needs: for a
        PLAIN login, and with failover for a dropped or refused connection."""
        self.endpoint = endpoint
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.SNDHWM, self._hwm)
        self._socket.setsockopt(zmq.RCVHWM, self._hwm)
        self._socket.setsockopt(zmq.LINGER, 1000)
        events = 0
        if self.username is not None:
            self._socket.plain_username = self.username.encode()
            self._socket.plain_password = (self._password or "").encode()
            events |= zmq.EVENT_HANDSHAKE_FAILED_AUTH
        if self._failover is not None:
            events |= zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED
        if events:
            self._monitor = self._socket.get_monitor_socket(events)
        self._socket.connect(endpoint)

    def __enter__(self):
        if not self.connected:
            self.connect()
        return self

    def __exit__(self, *exc):
        self.close()

    # -- raw commands -------------------------------------------------------

    def send_command(self, command):
        """Send any command (or a list of raw frames) without waiting."""
        frames = command if isinstance(command, list) else c.encode(command)
        self._socket.send_multipart(frames)

    def recv_command(self, timeout=None):
        """Next command from the broker, or None after ``timeout`` seconds
        (default: the client's timeout).  Raises ``MalamuteDecodeError`` for a
        frame that is not a command.
        """
        timeout = self.timeout if timeout is None else timeout
        if not self._poll(int(timeout * 1000)):
            return None
        return c.decode(self._socket.recv_multipart())

    # -- session ------------------------------------------------------------

    def connect(self):
        """CONNECTION-OPEN and wait for the OK; with failover, on the first endpoint that
        answers in time."""
        if self._failover is None:
            self._call(c.ConnectionOpen(self.address))
        else:
            self._failover.connect(self._open)
        self.connected = True

    def _open(self, endpoint):
        """A new socket to ``endpoint`` (the old one may hold sends for a dead broker),
        CONNECTION-OPEN with the same mailbox address, then the producer stream and every
        consumer and worker registration again."""
        self._close_socket()
        self._dial(endpoint)
        try:
            self._call(c.ConnectionOpen(self.address))
            if self._producer is not None:
                self._call(c.StreamWrite(self._producer))
            for command in self._registrations:
                self._call(command)
        except BaseException:
            self._close_socket()
            raise

    def _reconnect(self):
        self.connected = False
        self._failover.connect(self._open)
        self.connected = True

    def _retrying(self, operation, *args):
        """``operation(*args)``; with failover, again on the next endpoint after a lost
        connection."""
        if self._failover is None:
            return operation(*args)
        return self._failover.retrying(self._reconnect, operation, *args)

    def ping(self):
        """PING and wait for the PONG; returns the round trip in seconds."""
        started = time.monotonic()

        def attempt():
            self.send_command(c.ConnectionPing())
            self._wait(c.ConnectionPong)
        self._retrying(attempt)
        return time.monotonic() - started

    def close(self):
        """CONNECTION-CLOSE (waiting for its OK if connected), then close the socket; a
        connection found lost meanwhile (failover) is simply closed."""
        if self._socket is None:
            return
        try:
            if self.connected:
                self._call(c.ConnectionClose())
        except MalamuteConnectionLost:
            pass
        finally:
            self.connected = False
            self._close_socket()

    def _close_socket(self):
        if self._monitor is not None:
            self._socket.disable_monitor()
            self._monitor.close(0)
            self._monitor = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    # -- streams, mailboxes, services ---------------------------------------

    def set_producer(self, stream):
        """STREAM-WRITE: later ``send`` calls publish to ``stream``."""
        self._session_call(c.StreamWrite(stream))
        if self._failover is not None:
            self._producer = stream

    def set_consumer(self, stream, pattern=""):
        """STREAM-READ; refuses an invalid zrex pattern locally, as libmlm does."""
        self._check_pattern(pattern)
        self._register(c.StreamRead(stream, pattern))

    def remove_consumer(self, stream):
        """STREAM-CANCEL: drop every pattern this client reads on ``stream``."""
        self._session_call(c.StreamCancel(stream))
        if self._failover is not None:
            self._registrations = [r for r in self._registrations
                                   if not (isinstance(r, c.StreamRead) and r.stream == stream)]

    def set_worker(self, service, pattern=""):
        """SERVICE-OFFER; refuses an invalid zrex pattern locally, as libmlm does."""
        self._check_pattern(pattern)
        self._register(c.ServiceOffer(service, pattern))

    def _register(self, command):
        self._session_call(command)
        if self._failover is not None:
            self._registrations.append(command)

    def _session_call(self, command):
        self._retrying(self._call, command)

    def send(self, subject, *frames):
        """STREAM-SEND to the producer stream (no reply).  The three sends are fire and
        forget: after a failover, those not followed by a completed round trip (an OK or a
        PONG) may be lost; send them again (at least once)."""
        self.send_command(c.StreamSend(subject, _frames(frames)))

    def sendto(self, address, subject, *frames, tracker="", timeout=0):
        """MAILBOX-SEND (no reply); ``timeout`` in milliseconds, 0 = none."""
        self.send_command(c.MailboxSend(address, subject, tracker, timeout, _frames(frames)))

    def sendfor(self, service, subject, *frames, tracker="", timeout=0):
        """SERVICE-SEND (no reply); ``timeout`` in milliseconds, 0 = none."""
        self.send_command(c.ServiceSend(service, subject, tracker, timeout, _frames(frames)))

    def recv(self, timeout=None):
        """Next Delivery, or None after ``timeout`` seconds (None = forever); with
        failover, a lost connection moves to the next endpoint and waits there."""
        if self._inbox:
            return self._inbox.popleft()
        return self._retrying(self._recv, timeout)

    def _recv(self, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            if not self._poll(left):
                return None
            command = c.decode(self._socket.recv_multipart())
            if command.__class__ in _DELIVERIES:
                return self._delivery(command)
            if command.__class__ is c.Error:
                self.connected = False
                raise MalamuteError("broker answered ERROR %d" % command.code, command.code)
            if command.__class__ is not c.ConnectionPong:
                raise MalamuteError("unexpected %r" % (command,))

    # -- internals ----------------------------------------------------------

    @staticmethod
    def _check_pattern(pattern):
        if not zrex.valid(pattern):
            raise ValueError("invalid zrex pattern %r" % (pattern,))

    def _call(self, command):
        self.send_command(command)
        self._wait(c.Ok)

    def _wait(self, expected):
        """Wait for ``expected`` (OK or PONG), keeping deliveries for ``recv``."""
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._poll(int(left * 1000) + 1):
                raise MalamuteTimeout("no %s from %s" % (expected.__name__, self.endpoint))
            command = c.decode(self._socket.recv_multipart())
            cls = command.__class__
            if cls is expected:
                return command
            if cls in _DELIVERIES:
                self._inbox.append(self._delivery(command))
            elif cls is c.Error:
                self.connected = False      # 300 and 500 both mean: no session any more
                raise MalamuteError("broker answered ERROR %d" % command.code, command.code)
            elif cls is not c.ConnectionPong:
                raise MalamuteError("unexpected %r" % (command,))

    def _poll(self, milliseconds):
        """Wait for a command; with a PLAIN login, a refusal on the monitor raises."""
        if self._monitor is None:
            return self._socket.poll(milliseconds)
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        ready = dict(poller.poll(milliseconds))
        if self._monitor in ready:
            event = recv_monitor_message(self._monitor)
            self.connected = False
            if event["event"] != zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                raise MalamuteConnectionLost("the connection to %s %s" % (
                    self.endpoint, "dropped" if event["event"] == zmq.EVENT_DISCONNECTED
                    else "was refused"))
            raise MalamuteLoginRefused(
                "%s refused the PLAIN login of user %r (ZAP status %d): %s" % (
                    self.endpoint, self.username, event["value"],
                    "check the user name and password" if event["value"] == 400 else
                    "a temporary refusal, e.g. the user's connection limit"), event["value"])
        return self._socket in ready

    @staticmethod
    def _delivery(command):
        kind = _DELIVERIES[command.__class__]
        if command.__class__ is c.StreamDeliver:
            return Delivery(kind, command.address, command.sender, command.subject, "",
                            command.content)
        return Delivery(kind, command.address, command.sender, command.subject,
                        command.tracker, command.content)
