"""Door URLs for the command-line client, over the project's own blocking clients.

    mqks://HOST[:PORT]              MQKS (port 25000 by default)
    malamute://ENDPOINT             Malamute: any ZeroMQ endpoint, e.g. malamute://tcp://h:9999
    twino://HOST[:PORT]             Twino TMQP/2.0 (port 22200 by default)

Several gateways of one fleet: their addresses separated by commas
(`mqks://h1:25000,h2:25000`, `malamute://tcp://h1:9999,tcp://h2:9999`); the command
uses the first that answers and fails over to the next (docs/clients.md, "Failover").

Each door offers the same three verbs in its own protocol: `publish` (to an event of a
stream, a queue or a mailbox), `consume` (a queue) and `tail` (a stream). docs/cli.md says
what each door does for each.
"""
import base64
import json
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from mqksbridge.bridge.clients import twino
from mqksbridge.bridge.clients.failover import ROUNDS, describe
from mqksbridge.bridge.clients.malamute import MalamuteClient
from mqksbridge.bridge.clients.mqks import MqksClient, MqksError
from mqksbridge.protocols.malamute import zrex
from mqksbridge.protocols.twino.codec import ContentType, MessageType, new_id

DEFAULT_PORTS = {"mqks": 25000, "twino": 22200}
DEFAULT_STREAM = "mqks"


class Refused(Exception):
    """The broker answered no (exit 1)."""


class Usage(Exception):
    """The request makes no sense for this door (exit 2)."""


@dataclass
class Received:
    """One message as the command prints it."""
    body: bytes
    subject: str = ""
    id: str = ""
    sender: str = ""
    origin: str = ""
    headers: dict = field(default_factory=dict)

    def as_json(self, door):
        record = {"door": door, "id": self.id, "subject": self.subject, "sender": self.sender,
                  "origin": self.origin, "headers": self.headers}
        try:
            record["body"] = self.body.decode("utf-8")
        except UnicodeDecodeError:
            record["body"] = None
            record["body_base64"] = base64.b64encode(self.body).decode()
        return json.dumps(record, ensure_ascii=False)


def open_door(url, timeout, credentials=None, on_failover=None):
    """The door adapter for a URL (checked, not connected yet: a bad URL is a usage error
    whether or not a broker runs). `credentials` is (user, password) or None;
    `on_failover(old, new)` is called when the command moves to another address."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise Usage(f"not a door URL: {url!r}: write mqks://HOST:PORT, "
                    "malamute://tcp://HOST:PORT or twino://HOST:PORT")
    if scheme == "malamute":
        endpoints = [zmq_endpoint(url, endpoint) for endpoint in rest.split(",")]
        return MalamuteDoor(endpoints, timeout, credentials, on_failover)
    if scheme not in DEFAULT_PORTS:
        raise Usage(f"unknown door {scheme!r} in {url!r}: write mqks://, malamute:// or "
                    "twino://")
    parts = urlsplit(url)
    if parts.path not in ("", "/") or parts.query or parts.username:
        raise Usage(f"{url!r}: a {scheme} URL is {scheme}://HOST[:PORT][,HOST[:PORT]...], "
                    "nothing after it (credentials: --user)")
    addresses = [host_port(url, scheme, item) for item in parts.netloc.split(",")]
    door = MqksDoor if scheme == "mqks" else TwinoDoor
    return door(addresses, timeout, credentials, on_failover)


def host_port(url, scheme, item):
    """(HOST, PORT) of one address of a URL's comma-separated list."""
    parts = urlsplit(f"{scheme}://{item}")
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError:
        raise Usage(f"bad port in {url!r}: write {scheme}://HOST:PORT, PORT 1-65535") from None
    return parts.hostname or "127.0.0.1", port


def at_least_once(client, batch):
    """Run `batch` (sends without replies, then a round trip that says the broker took
    them) until it completes on one connection: after a failover the sends of the lost
    one may be lost, so they all go again (a consumer may see some twice)."""
    for _ in range(ROUNDS):
        moves = client.failovers
        batch()
        if client.failovers == moves:
            return
    raise ConnectionError("the connection kept failing over while publishing")


def zmq_endpoint(url, endpoint):
    """A ZeroMQ endpoint the client can connect to: tcp://HOST:PORT, ipc://PATH."""
    transport, sep, address = endpoint.partition("://")
    if transport == "tcp" and sep:
        host, colon, port = address.rpartition(":")
        if colon and host and port.isdigit() and 0 < int(port) < 65536:
            return endpoint
        raise Usage(f"{url!r}: a tcp endpoint is tcp://HOST:PORT, e.g. "
                    "malamute://tcp://127.0.0.1:9999")
    if transport == "ipc" and sep and address:
        return endpoint
    raise Usage(f"{url!r}: malamute:// wants a ZeroMQ endpoint, tcp://HOST:PORT or "
                "ipc://PATH, e.g. malamute://tcp://127.0.0.1:9999")


# -- MQKS ------------------------------------------------------------------------------------

class MqksDoor:
    name = "mqks"

    def __init__(self, addresses, timeout, credentials=None, on_failover=None):
        self.addresses, self.timeout = addresses, timeout
        self.credentials, self.on_failover = credentials, on_failover
        self.address = ",".join(map(describe, addresses))
        self.client = None

    def connect(self):
        """With credentials, the first line is `auth USER PASSWORD` (a listener in
        `mqks.auth`). Several addresses: a client that fails over."""
        if len(self.addresses) == 1:
            self.client = MqksClient(*self.addresses[0], timeout=self.timeout)
        else:
            self.client = MqksClient(addresses=self.addresses, timeout=self.timeout,
                                     on_failover=self.on_failover)
        if self.credentials:
            user, password = self.credentials
            one_word("user", user)
            try:
                self.client.auth(user, password)
            except MqksError as exc:
                raise Refused(f"login refused: the MQKS door at {self.address} refused user "
                              f"{user!r} (error id {exc}): a wrong password, or a listener "
                              "without logins (mqks.auth)") from None

    def close(self):
        if self.client is not None:
            self.client.close()

    def check_publish(self, target):
        kind, name, _ = target
        if kind != "event":
            raise Usage(f"MQKS publishes events: use --event instead of --{kind} (queues "
                        "take events by their bindings: consume QUEUE --event EVENT)")
        one_word("event", name)

    def publish(self, target, bodies, subject=None):
        for body in bodies:
            self.client.publish(target[1], body, confirm=True)

    def check_consume(self, queue, events):
        for what, name in (("queue", queue), *(("event", e) for e in events)):
            one_word(what, name)

    def consume(self, queue, events, ack):
        cid = self.client.consume(queue, events, manual_ack=ack)
        return self._deliveries(cid, ack)

    def _deliveries(self, cid, ack):
        while True:
            d = self.client.recv(timeout=3600 * 24)
            received = Received(d.data, d.event, d.id, d.props.get("sender", ""),
                                d.props.get("origin", "mqks"), d.headers)
            settle = (lambda mid=d.id: self.client.ack(cid, mid, wait=False)) if ack else None
            yield received, settle

    def check_tail(self, stream, pattern):
        if not pattern:
            raise Usage("MQKS binds exact events: tail mqks://... STREAM EVENT")
        one_word("event", pattern)

    def tail(self, stream, pattern):
        queue = f"tail.{uuid.uuid4().hex[:12]}"
        cid = self.client.consume(queue, [pattern], when_unused=True)
        return self._deliveries(cid, False)


def one_word(what, name):
    """MQKS requests are space-separated words: `--event 'a b'` would publish event `a`
    with `b` at the front of the body, so a name with white space (or none) is refused."""
    if name.split() != [name]:
        raise Usage(f"an MQKS {what} is one word without white space: {name!r}")


# -- Malamute --------------------------------------------------------------------------------

class ZrexChecks:
    """The checks Malamute and Twino share: every publish target, no --event on consume
    (only MQKS binds events), tail patterns in zrex."""
    no_events = ""

    def check_publish(self, target):
        pass

    def check_consume(self, queue, events):
        if events:
            raise Usage(self.no_events)

    def check_tail(self, stream, pattern):
        if not zrex.valid(pattern or ""):
            raise Usage(f"not a zrex pattern: {pattern!r} (Malamute's regular expressions, "
                        "e.g. '^greet')")


class MalamuteDoor(ZrexChecks):
    name = "malamute"
    no_events = "a Malamute worker offers a service; --event is for MQKS"

    def __init__(self, endpoints, timeout, credentials=None, on_failover=None):
        self.endpoints, self.timeout = endpoints, timeout
        self.credentials, self.on_failover = credentials, on_failover
        self.address = ",".join(endpoints)
        self.client = None

    def connect(self):
        """An anonymous session (address ""): an address would leave a mailbox of that
        name in the broker after every run, as Malamute keeps a mailbox for its owner's
        return. Credentials log in with ZMTP PLAIN."""
        user, password = self.credentials or (None, None)
        several = len(self.endpoints) > 1
        self.client = MalamuteClient(self.endpoints if several else self.endpoints[0], "",
                                     timeout=self.timeout, username=user, password=password,
                                     on_failover=self.on_failover)
        self.client.connect()

    def close(self):
        if self.client is not None:
            self.client.close()

    def publish(self, target, bodies, subject=None):
        kind, name, stream = target
        client = self.client
        if kind == "event":
            client.set_producer(stream or DEFAULT_STREAM)
            send = lambda body: client.send(name, body)          # noqa: E731
        elif kind == "queue":            # no worker takes an empty subject (zrex, as libmlm)
            send = lambda body: client.sendfor(name, subject or name, body)  # noqa: E731
        else:
            send = lambda body: client.sendto(name, subject or "", body)   # noqa: E731

        def batch():
            for body in bodies:
                send(body)
            client.ping()                # a round trip: the broker has taken every send
        at_least_once(client, batch)

    def consume(self, queue, events, ack):
        self.client.set_worker(queue)
        return self._deliveries()

    def _deliveries(self):
        while True:
            d = self.client.recv(timeout=None)
            yield Received(b"".join(d.frames), d.subject, d.tracker, d.sender, ""), None

    def tail(self, stream, pattern):
        self.client.set_consumer(stream, pattern or "")
        return self._deliveries()


# -- Twino -----------------------------------------------------------------------------------

def why(result):
    """A Twino refusal in words: the nack's reason, or a Response's result code."""
    return result.reason or f"code {result.frame.content_type}"


def split_queue(name):
    """Twino addresses a queue as (channel, id): `C/N`, or `C` for id 0."""
    channel, _, queue_id = name.rpartition("/")
    if channel and queue_id.isdigit():
        return channel, int(queue_id)
    return name, 0


class TwinoDoor(ZrexChecks):
    name = "twino"
    no_events = "--event is for MQKS; a Twino client consumes a queue"

    def __init__(self, addresses, timeout, credentials=None, on_failover=None):
        self.addresses, self.timeout = addresses, timeout
        self.credentials, self.on_failover = credentials, on_failover
        self.address = ",".join(map(describe, addresses))
        self.client = None
        self.cleanup = []

    def connect(self):
        """Credentials go where Twino clients carry them: `Client-Token: USER:PASSWORD`.
        Several addresses: a client that fails over."""
        token = ":".join(self.credentials) if self.credentials else None
        several = {"addresses": self.addresses, "on_failover": self.on_failover} \
            if len(self.addresses) > 1 else {}
        host, port = self.addresses[0]
        self.client = twino.connect(host, port, name="mqksbridge-cli", type="cli",
                                    token=token, timeout=self.timeout, **several)

    def close(self):
        for undo in reversed(self.cleanup):
            try:
                undo()
            except (OSError, TimeoutError, twino.TwinoError):
                pass
        if self.client is not None:
            self.client.close()

    def publish(self, target, bodies, subject=None):
        kind, name, stream = target
        client = self.client
        headers = [("Subject", subject)] if subject else []
        if kind == "event":
            for body in bodies:
                result = client.publish_router(stream or DEFAULT_STREAM, body,
                                               headers=[("Subject", name)], wait_ack=True)
                if not result.ok:
                    raise Refused(f"router {stream or DEFAULT_STREAM!r} refused: "
                                  f"{why(result)}")
            return
        if kind == "mailbox":
            for body in bodies:
                result = client.send_direct(name, body, headers=headers, wait_ack=True)
                if not result.ok:
                    raise Refused(f"direct message to {name!r} refused: {why(result)}")
            return
        channel, queue_id = split_queue(name)
        sent = [new_id() for _ in bodies]        # the same ids if a failover sends again

        def batch():
            for frame_id, body in zip(sent, bodies):
                client.push(channel, queue_id, body, headers, message_id=frame_id)
            client.ping()                # answered after every push: all were handled
        at_least_once(client, batch)
        ids = set(sent)
        while True:                      # a refused push is answered with a Response
            frame = client.recv(0)
            if frame is None:
                return
            if frame.type == MessageType.RESPONSE and frame.message_id in ids:
                raise Refused(f"queue {name!r} refused a message (code {frame.content_type})")

    def _queue(self, name, status, ack):
        channel, queue_id = split_queue(name)
        answer = self.client.operation(
            ContentType.CREATE_QUEUE, channel,
            [("Channel-Name", channel), ("Queue-Id", str(queue_id)), ("Queue-Status", status)],
            json.dumps({"RequestAcknowledge": ack}).encode())
        if answer.content_type not in (0, 481):          # 481: it exists already
            raise Refused(f"cannot create queue {name!r}: code {answer.content_type}")
        if self.client.join(channel) != 0:
            raise Refused(f"cannot join channel {channel!r}")
        return channel

    def consume(self, queue, events, ack):
        self._queue(queue, "round-robin", ack)
        return self._deliveries(ack, None)

    def _deliveries(self, ack, matcher):
        client = self.client
        while True:
            frame = client.recv(timeout=3600 * 24)
            if frame is None or frame.type != MessageType.QUEUE_MESSAGE:
                continue
            crossed = twino.crossed(frame)
            if matcher is not None and not matcher.search(crossed.subject or ""):
                if frame.pending_ack:
                    client.ack(frame)
                continue
            received = Received(b"".join(crossed.frames), crossed.subject or "",
                                frame.message_id or "", crossed.sender or "",
                                crossed.origin or "twino", dict(crossed.headers))
            if not frame.pending_ack:
                yield received, None
            elif ack:
                yield received, (lambda f=frame: client.ack(f))
            else:
                client.ack(frame)
                yield received, None

    def tail(self, stream, pattern):
        """A private push queue bound to the router over `stream`; PATTERN (zrex, as
        Malamute's) is matched here, since router bindings take every subject."""
        matcher = zrex.compile(pattern) if pattern else None
        channel = f"tail-{uuid.uuid4().hex[:12]}"
        binding = f"{channel}-binding"
        self._queue(f"{channel}/1", "push", False)
        self.cleanup.append(lambda: self.client.operation(ContentType.REMOVE_CHANNEL, channel))
        answer = self.client.operation(ContentType.ADD_BINDING, stream, (), json.dumps(
            {"Name": binding, "Target": channel, "ContentType": 1, "Priority": 0,
             "Interaction": 0, "BindingType": 1}).encode())
        if answer.content_type != 0:
            raise Refused(f"cannot bind to router {stream!r}: code {answer.content_type}")
        self.cleanup.append(lambda: self.client.operation(
            ContentType.REMOVE_BINDING, stream, [("Binding-Name", binding)]))
        return self._deliveries(False, matcher)
