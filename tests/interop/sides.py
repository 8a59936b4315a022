"""One adapter per door over our blocking clients, so a test can say "publish through A,
receive through B" for every ordered pair without caring which protocol is which.

Names: queues are written `C/N` (a Twino channel C, queue N) so every door can reach them;
streams are the MQKS stream `mqks`, which every door can read and write. A Malamute
publish is followed by a PING round trip, and a TextQueue publish (a record appended to
an inbox file) waits for the broker's `=`, so the broker has taken it before the test goes
on; a TextQueue consumer is an outbox file in the broker's outbox directory. A received
message is normalised to `Got`, read the way docs/mapping.md says each door shows foreign
metadata. That nothing arrives is checked with a ping barrier (`nothing`), never a quiet
period.
"""
import json
import os
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from queue import Empty, Queue

from mqksbridge.bridge.clients import twino
from mqksbridge.bridge.clients.malamute import MalamuteClient
from mqksbridge.bridge.clients.mqks import MqksClient
from mqksbridge.protocols.textqueue import flip, journal, scan
from mqksbridge.protocols.twino.codec import Frame, MessageType, new_id
from tests.support.waits import wait_until

STREAM = "mqks"
WAIT = 10.0          # generous: an expected message that is late is a failure, not a flake


def unique(prefix="t"):
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def nothing(client):
    """Assert that nothing came for `client` (any door's) before a ping round trip: the
    broker answers the ping after whatever it had for this client, so anything due is
    waiting in front of the answer. Whatever other clients did must be known handled."""
    client.ping()
    if isinstance(client, MqksClient):
        try:                                 # only what came before the answer, or with it
            got = client.recv(0.001)
        except (TimeoutError, OSError):
            return
    else:
        got = client.recv(0)
    if got is not None:
        raise AssertionError(f"unexpected delivery {got!r}")


@dataclass
class Got:
    subject: str
    frames: tuple
    sender: str = None
    origin: str = None
    id: str = None
    headers: dict = field(default_factory=dict)
    retry: int = 0
    tracker: str = None
    raw: object = None


class Side:
    """What every door adapter offers; `net` owns ports and closes clients at teardown."""

    door = None
    headers = False          # can its publishers attach application headers?
    multi_frame = False      # can its publishers send several frames?
    mailboxes = False        # do its clients own a mailbox (direct messages)?
    shows_origin = shows_id = True   # do its deliveries show the origin door / message id?
    subject_header = False   # is its subject an application header (Twino `Subject`)?
    rejects = False          # can its consumers reject (back to the queue, retry + 1)?

    def __init__(self, net):
        self.net = net

    @property
    def sends_direct(self):
        """Can its publishers send to a client's mailbox?"""
        return self.mailboxes


# -- MQKS ------------------------------------------------------------------------------------

class MqksReader:
    def __init__(self, client, cid):
        self.client, self.cid = client, cid

    def recv(self, timeout=WAIT):
        d = self.client.recv(timeout)
        return Got(d.event, tuple(d.frames), d.props.get("sender"), d.props.get("origin"), d.id,
                   d.headers, d.retry, raw=d)

    def ack(self, got):
        self.client.ack(self.cid, got.id)

    def reject(self, got):
        self.client.reject(self.cid, got.id)

    def nothing(self):
        nothing(self.client)

    def close(self):
        self.client.close()


class Mqks(Side):
    door = "mqks"
    rejects = True

    def client(self):
        return self.net.track(MqksClient(port=self.net.ports["mqks"], timeout=WAIT))

    def identity(self, client):
        return client.eval("request['client']")

    # publishing
    def publisher(self):
        client = self.client()
        client.sender = self.identity(client)
        return client

    def publish_stream(self, pub, subject, frames, headers=None):
        (body,) = frames          # an MQKS body is one frame, without headers
        assert not headers
        return pub.publish(subject.encode(), body)

    def publish_queue(self, pub, queue, subject, frames, headers=None):
        """MQKS reaches a queue through the stream: bind the event to it, publish (routed
        once confirmed), unbind, so a later publish of that event goes nowhere old."""
        pub.rebind(queue, f"--add {subject}")
        try:
            return self.publish_stream(pub, subject, frames, headers)
        finally:
            pub.rebind(queue, f"--remove {subject}")

    # consuming
    def stream_readers(self, n, subject):
        readers = []
        for _ in range(n):
            client = self.client()
            readers.append(MqksReader(client, client.consume(unique("q"), [subject])))
        return readers

    def queue_consumers(self, queue, n, manual_ack=False):
        readers = []
        for _ in range(n):
            client = self.client()
            readers.append(MqksReader(client, client.consume(queue, manual_ack=manual_ack)))
        return readers


# -- Twino -----------------------------------------------------------------------------------

class TwinoReader:
    def __init__(self, client):
        self.client = client

    def recv(self, timeout=WAIT):
        frame = self.client.recv(timeout)
        if frame is None:
            raise TimeoutError("nothing arrived")
        crossed = twino.crossed(frame)
        return Got(crossed.subject, crossed.frames, crossed.sender, crossed.origin,
                   frame.message_id, dict(crossed.headers), raw=frame)

    def ack(self, got):
        self.client.ack(got.raw)

    def nack(self, got, reason="none"):
        self.client.nack(got.raw, reason)

    def nothing(self):
        nothing(self.client)

    def close(self):
        self.client.close()


def split_queue(queue):
    channel, _, queue_id = queue.rpartition("/")
    return (channel, int(queue_id)) if channel else (queue, 0)


class Twino(Side):
    door = "twino"
    headers = True
    multi_frame = True       # opt-in: one body plus `Frame-Lengths`
    mailboxes = True
    subject_header = True

    def client(self, **kwargs):
        return self.net.track(twino.connect(port=self.net.ports["twino"], timeout=WAIT,
                                            **kwargs))

    def publisher(self):
        client = self.client()
        client.sender = client.client_id
        return client

    @staticmethod
    def _headers(subject, frames, headers):
        out = [("Subject", subject)] if subject is not None else []
        if len(frames) != 1:
            out.append(("Frame-Lengths", ",".join(str(len(f)) for f in frames)))
        return out + list((headers or {}).items())

    def publish_stream(self, pub, subject, frames, headers=None):
        """A Router frame to the router over the stream (routers adopt other doors' streams)."""
        frame_headers = self._headers(subject, frames, headers)
        result = pub.publish_router(STREAM, b"".join(frames), headers=frame_headers,
                                    wait_ack=True)
        assert result.ok, result
        return result.frame.message_id

    def publish_queue(self, pub, queue, subject, frames, headers=None, wait_ack=True):
        channel, queue_id = split_queue(queue)
        frame_headers = self._headers(subject, frames, headers)
        if not wait_ack:
            frame = Frame(MessageType.QUEUE_MESSAGE, message_id=new_id(), target=channel,
                          content_type=queue_id, headers=frame_headers, content=b"".join(frames))
            pub.send_frame(frame)
            return frame.message_id
        result = pub.push(channel, queue_id, b"".join(frames), headers=frame_headers,
                          wait_ack=True)
        assert result.ok, result
        return result.frame.message_id

    def make_queue(self, queue, status="round-robin", ack=False, **options):
        channel, queue_id = split_queue(queue)
        admin = self.client()
        answer = admin.operation(610, channel, [("Channel-Name", channel),
                                                ("Queue-Id", str(queue_id)),
                                                ("Queue-Status", status)],
                                 json.dumps({"RequestAcknowledge": ack, **options}).encode())
        assert answer.content_type in (0, 481), answer
        return admin

    def stream_readers(self, n, subject):
        """Each reader joins its own Push queue, bound to the `mqks` router."""
        readers = []
        admin = self.client()
        for _ in range(n):
            channel = unique("ch")
            self.make_queue(f"{channel}/1", "push")
            client = self.client()
            assert client.join(channel) == 0
            binding = {"Name": channel, "Target": channel, "ContentType": 1, "Priority": 0,
                       "Interaction": 0, "BindingType": 1}
            answer = admin.operation(662, STREAM, (), json.dumps(binding).encode())
            assert answer.content_type == 0, answer
            self.net.on_close(lambda name=channel: self._unbind(name))
            readers.append(TwinoReader(client))
        return readers

    def mailbox_owner(self):
        """A client that owns a mailbox, and the address other doors reach it by."""
        client = self.client()
        return TwinoReader(client), client.client_id

    def send_direct(self, pub, address, subject, frames):
        result = pub.send_direct(address, b"".join(frames),
                                 headers=self._headers(subject, frames, None), wait_ack=True)
        assert result.ok, result
        return result.frame.message_id

    def _unbind(self, name):
        with twino.connect(port=self.net.ports["twino"]) as admin:
            admin.operation(663, STREAM, [("Binding-Name", name)])

    def queue_consumers(self, queue, n, manual_ack=False):
        channel, _ = split_queue(queue)
        self.make_queue(queue, "round-robin", ack=manual_ack)
        readers = []
        for _ in range(n):
            client = self.client()
            assert client.join(channel) == 0
            readers.append(TwinoReader(client))
        return readers


# -- Malamute --------------------------------------------------------------------------------

def zrex_literal(text):
    """A zrex pattern matching exactly `text` (escape what SLRE treats as special)."""
    return "^" + "".join("\\" + c if c in "^$.[]*+?()|\\" else c for c in text) + "$"


class MalamuteReader:
    def __init__(self, client):
        self.client = client

    def recv(self, timeout=WAIT):
        d = self.client.recv(timeout)
        if d is None:
            raise TimeoutError("nothing arrived")
        return Got(d.subject, tuple(d.frames), d.sender, tracker=d.tracker, raw=d)

    def ack(self, got):
        """Taking a request is the ack: nothing to send (Malamute has no acks)."""

    def nothing(self):
        nothing(self.client)

    def close(self):
        self.client.close()


class Malamute(Side):
    door = "malamute"
    multi_frame = True
    mailboxes = True
    shows_origin = shows_id = False     # a DELIVER has no field for either

    def client(self, address=None):
        client = MalamuteClient(self.net.endpoint, unique("mlm") if address is None else address,
                                timeout=WAIT)
        client.connect()
        return self.net.track(client)

    def identity(self, client):
        return client.address

    def publisher(self):
        client = self.client()
        client.set_producer(STREAM)
        client.sender = client.address
        return client

    def publish_stream(self, pub, subject, frames, headers=None):
        assert not headers
        pub.send(subject, *frames)
        pub.ping()                       # a round trip: the broker has taken the send

    def publish_queue(self, pub, queue, subject, frames, headers=None):
        assert not headers
        pub.sendfor(queue, subject, *frames, tracker=unique("trk"))
        pub.ping()

    def send_direct(self, pub, address, subject, frames):
        tracker = unique("trk")
        pub.sendto(address, subject, *frames, tracker=tracker)
        pub.ping()
        return tracker

    def stream_readers(self, n, subject):
        readers = []
        for _ in range(n):
            client = self.client()
            client.set_consumer(STREAM, zrex_literal(subject))
            readers.append(MalamuteReader(client))
        return readers

    def queue_consumers(self, queue, n, manual_ack=False):
        """Workers offering the service: taking a request is its ack (manual_ack has no
        meaning here)."""
        readers = []
        for _ in range(n):
            client = self.client()
            client.set_worker(queue)
            readers.append(MalamuteReader(client))
        return readers

    def mailbox_owner(self):
        client = self.client()
        return MalamuteReader(client), client.address


# -- TextQueue -------------------------------------------------------------------------------

def _name(name):
    """A core name as it sits in a TextQueue file name (percent-encoded)."""
    return urllib.parse.quote(name, safe="", errors="surrogateescape")


def whole_records(path, pos):
    """The records of a file from `pos`: those a later record follows, and the last one once
    its `\\error=` line (what the broker writes last) is there. Returns (records, new pos)."""
    with open(path, "rb") as f:
        f.seek(pos)
        data = f.read()
    found = scan(data, pos)
    records = list(found.records())
    tail = found.incomplete
    if tail is not None and tail.terminated and tail.data.rsplit(b"\n", 2)[-2].startswith(
            b"\\error="):
        records.append(tail.record())
        tail = None
    return records, (tail.offset if tail is not None else pos + len(data))


class Refused(Exception):
    """The broker flipped a TextQueue publisher's record to `!`."""


class TextQueuePublisher:
    """A program that writes records to inbox files, one file per target (`NAME@pub.tq`)."""

    def __init__(self, inbox):
        self.inbox = inbox
        self.sender = unique("tqpub")

    def write(self, stem, subject, frames, headers=None, tracker=""):
        """Append one record in the journal's layout and wait for the broker's mark."""
        mid = unique("tq-id-")
        path = os.path.join(self.inbox, f"{stem}@{self.sender}.tq")
        envelope = journal.Envelope(mid, subject, tuple(frames), headers, self.sender,
                                    "textqueue", tracker, created_at=time.time())
        with open(path, "ab") as f:
            offset = f.tell()
            f.write(b"-" + journal.encode_fields(envelope))
        fd = os.open(path, os.O_RDONLY)

        def marked():
            mark = os.pread(fd, 1, offset)
            return mark if mark in (b"=", b"!") else None
        try:
            mark = wait_until(marked, WAIT, f"the broker to take {mid}")
        finally:
            os.close(fd)
        if mark == b"!":
            raise Refused(mid)
        return mid

    def close(self):
        pass


class TextQueueReader:
    """A worker reading an outbox file; acking and rejecting by flipping records. With
    `auto`, a thread marks each record `=` as it arrives (a worker that is done when it
    has read a record: what an auto-ack consumer is to other doors), so a producer that
    waits for its ack gets it before the test reads the record."""

    def __init__(self, path, pinger, auto=False):
        self.path = path
        self.pinger = pinger
        self.pos = 0
        self.waiting = Queue()
        self.lock = threading.Lock()
        self.stopped = False
        wait_until(lambda: os.path.exists(path) and os.path.getsize(path), WAIT,   # its header
                   f"the broker to take {path}")
        self.thread = None
        if auto:
            self.thread = threading.Thread(target=self._auto, daemon=True)
            self.thread.start()

    def _read(self):
        with self.lock:
            records, self.pos = whole_records(self.path, self.pos)
        return [r for r in records if r.control == "-"]

    def _auto(self):
        while not self.stopped:
            try:
                records = self._read()
            except FileNotFoundError:
                return
            for record in records:
                self._flip(record, "=")
                self.waiting.put(record)
            time.sleep(0.002)

    def _next(self, timeout):
        deadline = time.monotonic() + timeout
        if self.thread is None:              # no thread reads for us: read until a record
            def arrived():
                for record in self._read():
                    self.waiting.put(record)
                return not self.waiting.empty()
            wait_until(arrived, timeout, "a record")
        try:
            return self.waiting.get(timeout=max(deadline - time.monotonic(), 0.001))
        except Empty:
            raise TimeoutError("nothing arrived") from None

    def recv(self, timeout=WAIT):
        record = self._next(timeout)
        env = journal.decode(record)
        return Got(env.subject, env.frames, env.sender, env.origin, env.id,
                   dict(env.headers or {}), env.retry, env.tracker or None, raw=record)

    def _flip(self, record, control):
        fd = os.open(self.path, os.O_WRONLY)
        try:
            edit = flip(record, control)
            os.pwrite(fd, edit.data, edit.offset)
        finally:
            os.close(fd)

    def ack(self, got):
        self._flip(got.raw, "=")

    def reject(self, got):
        self._flip(got.raw, "!")

    def nothing(self):
        """A ping barrier through the MQKS door: the broker appends a turn's deliveries to
        the file before it writes that turn's replies, so anything due for this file is in
        it once the ping is answered."""
        self.pinger.ping()
        late = self._read()
        if late or not self.waiting.empty():
            raise AssertionError(f"unexpected delivery {(late or self.waiting.get())!r}")

    def close(self):
        """Removing the file unsubscribes (unsettled records go back to the queue)."""
        self.stopped = True
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class TextQueue(Side):
    """Inbox files to publish, outbox files (in the broker's outbox directory) to consume.
    Files own no mailbox, but their records can be sent to one (`mailbox.NAME.tq`)."""

    door = "textqueue"
    headers = True
    multi_frame = True
    rejects = True

    @property
    def sends_direct(self):
        return True

    def publisher(self):
        return self.net.track(TextQueuePublisher(self.net.inbox))

    def publish_stream(self, pub, subject, frames, headers=None):
        return pub.write(f"stream.{_name(STREAM)}", subject, frames, headers)

    def publish_queue(self, pub, queue, subject, frames, headers=None):
        return pub.write(f"queue.{_name(queue)}", subject, frames, headers)

    def send_direct(self, pub, address, subject, frames):
        return pub.write(f"mailbox.{_name(address)}", subject, frames)

    def queue_consumers(self, queue, n, manual_ack=False):
        """One outbox file per consumer (`QUEUE@k.tq`), its worker marking each record as
        it reads it (or, with manual_ack, when the test acks or rejects)."""
        readers = []
        for _ in range(n):
            path = os.path.join(self.net.outbox, f"queue.{_name(queue)}@{unique('w')}.tq")
            open(path, "ab").close()
            readers.append(self.net.track(TextQueueReader(path, Mqks(self.net).client(),
                                                          auto=not manual_ack)))
        return readers

    def stream_readers(self, n, subject):
        """An outbox file of a queue of its own, bound to the subject through MQKS."""
        readers = []
        for _ in range(n):
            queue = unique("tqs")
            binder = Mqks(self.net).client()
            binder.rebind(queue, "--add " + subject)
            readers += self.queue_consumers(queue, 1)
        return readers
