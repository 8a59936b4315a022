"""A blocking DEALER speaking ZMTP over a plain socket, for the load roles.

Through pyzmq every frame costs the generator a C call and an I/O-thread hop; here a
batch of pre-encoded messages is one `sendall` and received messages are counted by
parsing chunks, so the generator stays cheaper than the broker it measures (as the MQKS
and Twino load roles do). The bytes on the wire are the ones libzmq would send.
"""
import socket

from mqksbridge.protocols.malamute import codec as malamute
from mqksbridge.protocols.zmtp import codec as zmtp


class ZmtpDealer:
    def __init__(self, endpoint):
        host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.zmtp = zmtp.Connection("DEALER")
        self.sock.sendall(self.zmtp.preamble())
        self.pending = []
        while self.zmtp.state != "traffic":
            self._read()
        self.zmtp.events.clear()

    def _read(self, size=1 << 20):
        data = self.sock.recv(size)
        if not data:
            raise ConnectionError("broker closed the connection")
        self.pending.extend(self.zmtp.receive_data(data))

    def send(self, wire):
        """Pre-encoded messages (`zmtp.message(frames)` joined)."""
        self.sock.sendall(wire)

    def recv(self):
        """The next message's frames."""
        while not self.pending:
            self._read()
        return self.pending.pop(0)

    def count(self, timeout=None):
        """How many messages arrived with the next chunk (0 at a timeout)."""
        self.sock.settimeout(timeout)
        try:
            self._read()
        except TimeoutError:
            return 0
        n, self.pending = len(self.pending), []
        return n

    def call(self, command):
        """Send one Malamute command and insist on OK."""
        self.send(zmtp.message(malamute.encode(command)))
        reply = malamute.decode(self.recv())
        if not isinstance(reply, malamute.Ok):
            raise SystemExit(f"{command!r} answered {reply!r}")

    def close(self):
        self.sock.close()
