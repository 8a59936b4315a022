"""Traffic for the crash tests: pipelined confirmed publishers, acking consumers and a
Malamute worker (no ack) on plain blocking sockets, each in its own thread, that end
quietly when the broker dies; and the journal's record of what a door settled."""
import os
import socket
import threading


class Line:
    """A line socket: `send(lines)` and `lines()` (what one recv brought, split)."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buffer = b""

    def send(self, lines):
        self.sock.sendall(b"".join(line + b"\n" for line in lines))

    def lines(self):
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("closed")
        parts = (self.buffer + data).split(b"\n")
        self.buffer = parts.pop()
        return parts

    def close(self):
        self.sock.close()


class Worker(threading.Thread):
    """Runs `work()` until the broker goes (a socket error) or `stop` is set."""

    def __init__(self, stop):
        super().__init__(daemon=True)
        self.stop = stop
        self.error = None

    def run(self):
        try:
            self.work()
        except (OSError, ConnectionError):
            pass                    # the broker was killed: what was confirmed is counted
        except Exception as exc:    # a bug in the test itself must show
            self.error = exc


class MqksPublisher(Worker):
    """Publishes `--confirm` in windows of `window` lines; `confirmed` gets each id once
    its `ok` arrived."""

    def __init__(self, stop, port, prefix, confirmed, window=300, event=b"ev"):
        super().__init__(stop)
        self.port, self.prefix, self.confirmed = port, prefix, confirmed
        self.window, self.event = window, event
        self.sent = 0

    def work(self):
        conn = Line(self.port)
        n = 0
        while not self.stop.is_set():
            ids = [b"%s.%d" % (self.prefix, n + i) for i in range(self.window)]
            n += self.window
            conn.send([b"%s publish --confirm %s %s" % (i, self.event, i) for i in ids])
            self.sent = n
            waiting = len(ids)
            while waiting:
                for line in conn.lines():
                    mid, _, rest = line.partition(b" ")
                    if rest == b"ok ":
                        self.confirmed.append(mid)
                        waiting -= 1
                    else:
                        raise AssertionError(f"unexpected reply {line!r}")


class TwinoPublisher(Worker):
    """Pushes to a Twino queue with PendingAcknowledge, `window` frames in flight (the
    producer-ack policy `saved`: acked once stored); `confirmed` gets each acked id."""

    def __init__(self, stop, port, channel, prefix, confirmed, window=200):
        super().__init__(stop)
        self.port, self.channel, self.prefix, self.confirmed = port, channel, prefix, confirmed
        self.window = window

    def work(self):
        from mqksbridge.bridge.clients import twino
        from mqksbridge.protocols.twino.codec import Frame, MessageType, encode
        client = twino.connect("127.0.0.1", self.port)
        n = 0
        while not self.stop.is_set():
            ids = ["%s.%d" % (self.prefix, n + i) for i in range(self.window)]
            n += self.window
            client.sock.sendall(b"".join(encode(Frame(
                MessageType.QUEUE_MESSAGE, pending_ack=True, message_id=mid,
                source=client.client_id, target=self.channel, content_type=0,
                content=mid.encode())) for mid in ids))
            waiting = set(ids)
            while waiting:
                frame = client.recv(10)
                if frame is None:
                    raise ConnectionError("no ack")
                if frame.type == MessageType.ACKNOWLEDGE and frame.message_id in waiting:
                    if frame.header("Nack-Reason") is not None:
                        raise AssertionError(f"nack {frame!r}")
                    waiting.discard(frame.message_id)
                    self.confirmed.append(frame.message_id.encode())


class TwinoConsumer(Worker):
    """A Twino member of channel `channel`: every queue message it gets is recorded in
    `delivered` as (id, run) and acked."""

    def __init__(self, stop, port, channel, delivered, run):
        super().__init__(stop)
        self.port, self.channel, self.delivered, self.run_no = port, channel, delivered, run
        self.count = 0

    def work(self):
        from mqksbridge.bridge.clients import twino
        from mqksbridge.protocols.twino.codec import MessageType
        client = twino.connect("127.0.0.1", self.port)
        assert client.join(self.channel) == 0
        while not self.stop.is_set():
            frame = client.recv(0.5)
            if frame is not None and frame.type == MessageType.QUEUE_MESSAGE:
                self.delivered.append((frame.message_id.encode(), self.run_no))
                self.count += 1
                client.ack(frame)


class MqksConsumer(Worker):
    """Consumes a queue with manual acks; `delivered` gets (id, run) per delivery; every
    delivery is acked right away."""

    def __init__(self, stop, port, queue, delivered, run, event=b"ev", cid=b"c1"):
        super().__init__(stop)
        self.port, self.queue, self.delivered, self.run_no = port, queue, delivered, run
        self.event, self.cid = event, cid
        self.ready = threading.Event()

    def work(self):
        conn = Line(self.port)
        cid = self.cid
        conn.send([b"%s consume --confirm %s %s --manual-ack" % (cid, self.queue, self.event)])
        prefix = cid + b" ok "
        while not self.stop.is_set():
            acks = []
            for line in conn.lines():
                if not line.startswith(prefix):
                    raise AssertionError(f"unexpected line {line!r}")
                rest = line[len(prefix):]
                if not rest:
                    self.ready.set()        # the consume's confirmation
                    continue
                mid = rest.split(b" ", 1)[0]
                self.delivered.append((mid, self.run_no))
                acks.append(b"a ack %s %s" % (cid, mid))
            if acks:
                conn.send(acks)


class MalamuteWorker(Worker):
    """A Malamute worker offering service `service` on a raw DEALER, with CREDIT flow: at
    most `credit` requests are handed to it and not yet read (Malamute has no ack: each
    is settled when the broker hands it over). `delivered` gets (first frame, run), and
    `read` the first frames (ids) it read."""

    def __init__(self, stop, endpoint, service, delivered, run, read, credit=100):
        super().__init__(stop)
        self.endpoint, self.service, self.delivered, self.run_no = endpoint, service, delivered, run
        self.read, self.credit = read, credit

    def work(self):
        import zmq

        from mqksbridge.protocols.malamute import codec as c
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.endpoint)
        try:
            # CREDIT before the offer opts in, so the offer starts with none granted.
            for command in (c.ConnectionOpen(""), c.Credit(0), c.ServiceOffer(self.service),
                            c.Credit(self.credit)):
                sock.send_multipart(c.encode(command))
            read = 0
            while not self.stop.is_set():
                if not sock.poll(500):
                    sock.send_multipart(c.encode(c.ConnectionPing()))   # keeps the session
                    continue
                read += self._take(c, sock)
                if read >= self.credit // 2:
                    sock.send_multipart(c.encode(c.Credit(read)))
                    read = 0
            while sock.poll(0):             # what reached this socket before the kill
                self._take(c, sock)
        finally:
            sock.close(0)

    def _take(self, c, sock):
        command = c.decode(sock.recv_multipart())
        if command.__class__ is c.ServiceDeliver:
            self.delivered.append((command.content[0], self.run_no))
            self.read.add(command.content[0])
            return 1
        if command.__class__ not in (c.Ok, c.ConnectionPong):
            raise AssertionError(f"unexpected {command!r}")
        return 0


def settled_by(data_dir, queue, door):
    """Ids of the journal records of `queue` (live segments and archive/) that a consumer
    of `door` settled with an ack (`=`), read with the data pipeline's reader."""
    from mqksbridge.pipeline.files import expand, plan, read_header, read_range
    from mqksbridge.protocols.textqueue.columns import decode_columns
    names = ("id", "settle_reason", "settle_door")
    ids = set()
    for path in expand([os.path.join(data_dir, "journal", queue)]):
        header = read_header(path)
        for part in plan([path], 1 << 30):
            for block in read_range(part, header):
                columns = decode_columns(block.raws, names, header.base_ms)
                ids.update(mid.encode() for mid, reason, by in zip(*map(columns.get, names))
                           if reason == "acked" and by == door)
    return ids


class Tally:
    """A list threads append to, and others wait on: `wait(predicate, timeout)` returns
    once predicate(items) holds (True) or the timeout passed (False)."""

    def __init__(self):
        self.items = []
        self.changed = threading.Condition()

    def append(self, item):
        with self.changed:
            self.items.append(item)
            self.changed.notify_all()

    def __len__(self):
        return len(self.items)

    def wait(self, predicate, timeout):
        with self.changed:
            return self.changed.wait_for(lambda: predicate(self.items), timeout)
