"""Door URLs for the command-line client, over the project's own blocking clients.

    mqks://HOST[:PORT]              MQKS (port 25000 by default)
    malamute://ENDPOINT             Malamute: any ZeroMQ endpoint, e.g. malamute://tcp://h:9999
    twino://HOST[:PORT]             Twino TMQP/2.0 (port 22200 by default)

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
from mqksbridge.bridge.clients.malamute import MalamuteClient
from mqksbridge.bridge.clients.mqks import MqksClient, MqksError
from mqksbridge.protocols.malamute import zrex
from mqksbridge.protocols.twino.codec import ContentType, Frame, MessageType, new_id

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


def open_door(url, timeout, credentials=None):
    """The door adapter for a URL (checked, not connected yet: a bad URL is a usage error
    whether or not a broker runs). `credentials` is (user, password) or None."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise Usage(f"not a door URL: {url!r}: write mqks://HOST:PORT, "
                    "malamute://tcp://HOST:PORT or twino://HOST:PORT")
    if scheme == "malamute":
        return MalamuteDoor(zmq_endpoint(url, rest), timeout, credentials)
    if scheme not in DEFAULT_PORTS:
        raise Usage(f"unknown door {scheme!r} in {url!r}: write mqks://, malamute:// or "
                    "twino://")
    parts = urlsplit(url)
    try:
        port = parts.port or DEFAULT_PORTS[scheme]
    except ValueError:
        raise Usage(f"bad port in {url!r}: write {scheme}://HOST:PORT, PORT 1-65535") from None
    if parts.path not in ("", "/") or parts.query or parts.username:
        raise Usage(f"{url!r}: a {scheme} URL is {scheme}://HOST[:PORT], nothing after it "
                    "(credentials: --user)")
    host = parts.hostname or "127.0.0.1"
    return (MqksDoor if scheme == "mqks" else TwinoDoor)(host, port, timeout, credentials)


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

    def __init__(self, host, port, timeout, credentials=None):
        self.host, self.port, self.timeout = host, port, timeout
        self.credentials = credentials
        self.address = f"{host}:{port}"
        self.client = None

    def connect(self):
        """With credentials, the first line is `auth USER PASSWORD` (a listener in
        `mqks.auth`)."""
        self.client = MqksClient(self.host, self.port, timeout=self.timeout)
        if self.credentials:
            user, password = self.credentials
            one_word("user", user)
            try:
                self.client.request("auth", f"{user} {password}")
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
            settle = (lambda mid=d.id: self.client.request(
                "ack", f"{cid} {mid}", wait=False)) if ack else None
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

    def __init__(self, endpoint, timeout, credentials=None):
        self.endpoint, self.timeout = endpoint, timeout
        self.credentials = credentials
        self.address = endpoint
        self.client = None

    def connect(self):
        """An anonymous session (address ""): an address would leave a mailbox of that
        name in the broker after every run, as Malamute keeps a mailbox for its owner's
        return. Credentials log in with ZMTP PLAIN."""
        user, password = self.credentials or (None, None)
        self.client = MalamuteClient(self.endpoint, "", timeout=self.timeout,
                                     username=user, password=password)
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
        for body in bodies:
            send(body)
        client.ping()                    # a round trip: the broker has taken every send

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

    def __init__(self, host, port, timeout, credentials=None):
        self.host, self.port, self.timeout = host, port, timeout
        self.credentials = credentials
        self.address = f"{host}:{port}"
        self.client = None
        self.cleanup = []

    def connect(self):
        """Credentials go where Twino clients carry them: `Client-Token: USER:PASSWORD`."""
        token = ":".join(self.credentials) if self.credentials else None
        self.client = twino.connect(self.host, self.port, name="mqksbridge-cli",
                                    type="cli", token=token, timeout=self.timeout)

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
        sent = set()
        for body in bodies:
            frame_id = new_id()
            sent.add(frame_id)
            client.send_frame(Frame(MessageType.QUEUE_MESSAGE, message_id=frame_id,
                                    source=client.client_id, target=channel,
                                    content_type=queue_id, headers=headers or None,
                                    content=body))
        client.ping()                    # answered after every push: all were handled
        while True:                      # a refused push is answered with a Response
            frame = client.recv(0)
            if frame is None:
                return
            if frame.type == MessageType.RESPONSE and frame.message_id in sent:
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
