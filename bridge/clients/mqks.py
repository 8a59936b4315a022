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
    def __init__(self, host="127.0.0.1", port=25000, timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        # Consumer and message ids are global in a broker: unique per client, as the
        # original client's 24-char dtids are.
        self._tag = os.urandom(4).hex()
        self._ids = itertools.count(1)
        self._buffer = b""
        self._pending = []          # lines read while waiting for something else

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

    def request(self, action, data, confirm=False, wait=True):
        req_id = f"r{next(self._ids)}.{self._tag}"
        self.send_line(f"{req_id} {action} {'--confirm ' if confirm else ''}{data}")
        return self._reply(req_id) if wait else req_id

    # -- actions ----------------------------------------------------------------------
    def publish(self, event, data, confirm=True):
        """Publish `data` (str or any bytes the line can carry) under `event`; returns its id."""
        event = event.encode() if isinstance(event, str) else event
        data = data.encode() if isinstance(data, str) else data
        if b"\n" in data or b"\n" in event:
            raise ValueError("an MQKS publish is one line: no LF in the event or data")
        req_id = f"m{next(self._ids)}.{self._tag}"
        flag = b"--confirm " if confirm else b""
        self.send_line(b"%s publish %s%s %s" % (req_id.encode(), flag, event, data))
        if confirm:
            self._reply(req_id)
        return req_id

    def consume(self, queue, events=(), manual_ack=False, add=(), when_unused=None):
        """Start a consumer (confirmed); returns its consumer id."""
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
        self.send_line(f"{cid} consume --confirm {' '.join(parts)}")
        self._reply(cid)
        return cid

    def rebind(self, queue, args):
        return self.request("rebind", f"{queue} {args}", confirm=True)

    def ack(self, cid, mid="--all"):
        return self.request("ack", f"{cid} {mid}", confirm=True)

    def reject(self, cid, mid="--all"):
        return self.request("reject", f"{cid} {mid}", confirm=True)

    def delete_consumer(self, cid):
        return self.request("delete_consumer", cid, confirm=True)

    def delete_queue(self, queue):
        return self.request("delete_queue", queue, confirm=True)

    def ping(self, data="mqks.client"):
        return self.request("ping", data).decode()

    def eval(self, expression):
        return self.request("_eval", expression).decode()

    def recv(self, timeout=None) -> Delivery:
        """The next delivery (skipping `--update` lines); socket.timeout if none."""
        while True:
            line = self._pending.pop(0) if self._pending else self._read_line(timeout or self.timeout)
            if b" ok --update " not in line:
                return parse_delivery(line)

    def close(self):
        self.sock.close()
