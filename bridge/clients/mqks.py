"""A small blocking MQKS client for scripts, tests and benchmarks.

It speaks the line protocol directly (one socket, ids from a counter) and decodes the
props that messages from other doors carry (docs/mapping.md, "to MQKS"): base64 bodies
(`enc=base64`), several frames (`frames=N`), headers (`h.KEY`) and percent-encoding.
"""
import base64
import itertools
import os
import socket
import urllib.parse
from dataclasses import dataclass, field

from mqksbridge.bridge.clients.failover import ROUNDS, Failover


class MqksError(Exception):
    """The server answered `{id} error {error_id}`."""


@dataclass
class Delivery:
    consumer: str
    id: str
    event: str
    props: dict
    frames: list = field(default_factory=list)
    headers: dict = field(default_factory=dict)

    @property
    def data(self) -> bytes:
        return b"".join(self.frames)

    @property
    def retry(self) -> int:
        return int(self.props.get("retry", 0))


def _unpct(value: str) -> str:
    return urllib.parse.unquote(value, errors="surrogateescape")


def parse_delivery(line: bytes) -> Delivery:
    """Split `{cid} ok {mid} {props} {data}` and undo the cross-door encodings."""
    cid, _, mid, props_raw, data = (line.split(b" ", 4) + [b""])[:5]
    props = {}
    for item in props_raw.decode("utf-8", "surrogateescape").split(","):
        key, _, value = item.partition("=")
        props[key] = _unpct(value)
    headers = {_unpct(k[2:]): v for k, v in props.items() if k.startswith("h.")}
    if props.get("enc") == "base64":
        frames = [base64.b64decode(part) for part in data.split(b" ")]
        if props.get("frames") == "0":
            frames = []
    else:
        frames = [data]
    return Delivery(cid.decode(), _unpct(mid.decode("utf-8", "surrogateescape")),
                    props.get("event", ""), props, frames, headers)


class MqksClient:
    """One connection to an MQKS door: `MqksClient(host, port)`, or with failover
    `MqksClient(addresses=[(host, port), ...])` (docs/clients.md, "Failover")."""

    def __init__(self, host="127.0.0.1", port=25000, timeout=5.0, *, addresses=None,
                 on_failover=None, rounds=ROUNDS):
        self.timeout = timeout
        # Consumer and message ids are global in a broker: unique per client, as the
        # original client's 24-char dtids are.
        self._tag = os.urandom(4).hex()
        self._ids = itertools.count(1)
        self._buffer = b""
        self._pending = []          # lines read while waiting for something else
        self._failover = None
        if addresses is None:
            self.sock = self._dial((host, port))
            return
        # What a failover replays on the next gateway, and which deliveries it leaves.
        self._login = None                  # the `auth` line's data
        self._consumers = {}                # cid -> (its consume line, manual ack)
        self._unacked = set()               # (cid, mid) delivered here, manual, not acked
        self._stale = set()                 # (cid, mid) delivered on a lost connection
        self._failover = Failover(addresses, on_failover=on_failover, rounds=rounds)
        self.sock = None
        self._failover.connect(self._open)

    @property
    def address(self):
        """The (host, port) in use."""
        if self._failover is None:
            return self.sock.getpeername()[:2]
        return self._failover.current

    @property
    def failovers(self):
        """How many times the client moved to another address."""
        return 0 if self._failover is None else self._failover.moves

    def _dial(self, address):
        sock = socket.create_connection(address, timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _open(self, address):
        """Connect to `address` and re-establish the session: the login, then every
        consumer with its own id, queue, events and ack mode."""
        self.sock, self._buffer = self._dial(address), b""
        try:
            if self._login is not None:
                self._request("auth", self._login)
            for cid, (line, _) in self._consumers.items():
                self.send_line(line)
                self._reply(cid)
        except BaseException:
            self.sock.close()
            raise

    def _reconnect(self):
        """After a lost connection: deliveries that want an ack and were not acked are
        the broker's to redeliver (with retry + 1), so acks for them are not sent on the
        next connection, and those not yet handed out are dropped."""
        self.sock.close()
        manual = tuple(cid.encode() + b" " for cid, (_, m) in self._consumers.items() if m)
        whole = self._buffer.split(b"\n")[:-1]         # complete lines read but not split
        self._pending = [line for line in self._pending + whole
                         if not line.startswith(manual)]
        self._stale |= self._unacked
        self._unacked = set()
        self._failover.connect(self._open)

    def _retrying(self, operation, *args):
        """`operation(*args)`; with failover, again on the next gateway after a lost
        connection."""
        if self._failover is None:
            return operation(*args)
        return self._failover.retrying(self._reconnect, operation, *args)

    # -- wire -------------------------------------------------------------------------
    def send_line(self, line):
        if isinstance(line, str):
            line = line.encode("utf-8", "surrogateescape")
        self.sock.sendall(line + b"\n")

    def _read_line(self, timeout):
        self.sock.settimeout(timeout)
        while b"\n" not in self._buffer:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _reply(self, req_id, timeout=None):
        """Wait for the reply to `req_id`, keeping other lines for recv()."""
        prefix = req_id.encode() + b" "
        while True:
            line = self._read_line(timeout or self.timeout)
            if line.startswith(prefix) and not line.startswith(prefix + b"ok --update"):
                status, _, payload = line[len(prefix):].partition(b" ")
                if status == b"error":
                    raise MqksError(payload.decode())
                if not line[len(prefix):].startswith(b"ok ") or not self._is_delivery(payload):
                    return payload
            self._pending.append(line)

    @staticmethod
    def _is_delivery(payload):
        parts = payload.split(b" ", 2)
        return len(parts) >= 2 and parts[1].startswith(b"event=")

    def _request(self, action, data, confirm=False, wait=True):
        req_id = f"r{next(self._ids)}.{self._tag}"
        self.send_line(f"{req_id} {action} {'--confirm ' if confirm else ''}{data}")
        return self._reply(req_id) if wait else req_id

    def request(self, action, data, confirm=False, wait=True):
        return self._retrying(self._request, action, data, confirm, wait)

    # -- actions ----------------------------------------------------------------------
    def auth(self, user, password):
        """Log in (`auth USER PASSWORD`, a listener in `mqks.auth`); a failover logs in
        again on the next gateway."""
        data = f"{user} {password}"
        answer = self.request("auth", data)
        if self._failover is not None:
            self._login = data
        return answer

    def publish(self, event, data, confirm=True):
        """Publish `data` (str or any bytes the line can carry) under `event`; returns its id.

        With failover, a confirmed publish whose connection is lost before the
        confirmation is sent again, with the same id, on the next gateway: at least once
        (a consumer may see it twice, and the id tells the copies apart)."""
        event = event.encode() if isinstance(event, str) else event
        data = data.encode() if isinstance(data, str) else data
        if b"\n" in data or b"\n" in event:
            raise ValueError("an MQKS publish is one line: no LF in the event or data")
        req_id = f"m{next(self._ids)}.{self._tag}"
        flag = b"--confirm " if confirm else b""
        line = b"%s publish %s%s %s" % (req_id.encode(), flag, event, data)
        self._retrying(self._publish, line, req_id, confirm)
        return req_id

    def _publish(self, line, req_id, confirm):
        self.send_line(line)
        if confirm:
            self._reply(req_id)

    def consume(self, queue, events=(), manual_ack=False, add=(), when_unused=None):
        """Start a consumer (confirmed); returns its consumer id. With failover, the
        consumer is started again, same id, on the next gateway."""
        cid = f"c{next(self._ids)}.{self._tag}"
        parts = [queue, *events]
        if add:
            parts += ["--add", *add]
        if when_unused is True:
            parts.append("--delete-queue-when-unused")
        elif when_unused is not None:
            parts.append(f"--delete-queue-when-unused={when_unused}")
        if manual_ack:
            parts.append("--manual-ack")
        line = f"{cid} consume --confirm {' '.join(parts)}"

        def attempt():
            self.send_line(line)
            self._reply(cid)
        self._retrying(attempt)
        if self._failover is not None:
            self._consumers[cid] = (line, manual_ack)
        return cid

    def rebind(self, queue, args):
        return self.request("rebind", f"{queue} {args}", confirm=True)

    def ack(self, cid, mid="--all", wait=True):
        """Acknowledge one delivery (or all of the consumer's). A delivery of a lost
        connection is not acked on the next one (the broker redelivers it): None."""
        return self._settle("ack", cid, mid, wait)

    def reject(self, cid, mid="--all", wait=True):
        return self._settle("reject", cid, mid, wait)

    def _settle(self, action, cid, mid, wait):
        if self._failover is None:
            return self.request(action, f"{cid} {mid}", confirm=wait, wait=wait)
        key = (cid, mid)

        def attempt():
            if key in self._stale:      # its connection was lost, perhaps just now
                self._stale.discard(key)
                return None
            return self._request(action, f"{cid} {mid}", confirm=wait, wait=wait)
        answer = self._retrying(attempt)
        if mid == "--all":
            self._stale = {item for item in self._stale if item[0] != cid}
            self._unacked = {item for item in self._unacked if item[0] != cid}
        else:
            self._unacked.discard(key)
        return answer

    def delete_consumer(self, cid):
        answer = self.request("delete_consumer", cid, confirm=True)
        if self._failover is not None:
            self._consumers.pop(cid, None)
        return answer

    def delete_queue(self, queue):
        return self.request("delete_queue", queue, confirm=True)

    def ping(self, data="mqks.client"):
        return self.request("ping", data).decode()

    def eval(self, expression):
        return self.request("_eval", expression).decode()

    def recv(self, timeout=None) -> Delivery:
        """The next delivery (skipping `--update` lines); socket.timeout if none. With
        failover, a lost connection moves to the next gateway and waits there."""
        delivery = self._retrying(self._recv, timeout)
        if self._failover is not None and self._consumers.get(delivery.consumer,
                                                               (None, False))[1]:
            key = (delivery.consumer, delivery.id)
            self._stale.discard(key)        # a redelivery on this connection
            self._unacked.add(key)
        return delivery

    def _recv(self, timeout):
        while True:
            line = self._pending.pop(0) if self._pending else self._read_line(timeout or self.timeout)
            if b" ok --update " not in line:
                return parse_delivery(line)

    def close(self):
        self.sock.close()
