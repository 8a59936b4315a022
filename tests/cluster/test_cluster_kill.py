"""Nothing confirmed is lost when a machine dies: a 3-node RabbitMQ cluster, two real
`twistd -n mqksbridge` gateways (gw1 tries node 1 first, gw2 node 2), clients of the four
doors publishing with confirmation and consuming with manual acks (docs/cluster.md,
"When a machine dies").

- A gateway is killed (`kill -9`): the MQKS, Twino and Malamute clients, given both
  gateways' addresses, move to the other one; every message that was confirmed is
  delivered, and what the dead gateway's consumers held unacked comes again with
  retry + 1. A TextQueue door's files are on its gateway's disk: the gateway restarted on
  the same directory takes the inbox records written meanwhile, and its outbox file gets
  back what it held, matched to the records already there by id (a record the worker
  marked done while the gateway was down is acked then).
- A RabbitMQ node is killed (SIGKILL), first the one a gateway is connected to (the
  gateway fails over to its next node and its clients keep working, publishing through the
  kill), then one no gateway is connected to (the gateways do not even notice); quorum
  queues keep serving and no confirmed message is lost. The node restarts and catches up:
  every replica of the test's queues is online again with the leader's log (quorum_status).
- A stream publish routed to several queues: RabbitMQ acks it once every queue took it and
  nacks it when one cannot; the MQKS client is then told an error, as on the embedded
  engine (tests/cluster/test_cluster_refused.py: every door that confirms).

Known RabbitMQ 3.10.8 behaviour, asserted as documented: deliveries held under a
*cancelled* basic.consume (the gateway cancels a credited consumer's, e.g. a TextQueue
file's, before each settle) whose channel was on the killed node stay checked out by that
ghost consumer while the node is down; they come again with retry + 1 once it is back when
it led the queue, else at the latest when the queue's leader changes (here:
`ra:transfer_leadership`).
"""
import json
import os
import subprocess
import threading
import time
import uuid

import pika
import pytest

from mqksbridge.bridge.clients import twino
from mqksbridge.bridge.clients.malamute import MalamuteClient
from mqksbridge.bridge.clients.mqks import MqksClient, MqksError
from mqksbridge.bridge.cluster.local import CTL
from mqksbridge.protocols.textqueue import journal
from tests.interop.conftest import spool_broker
from tests.interop.sides import TextQueueReader, whole_records
from tests.support.waits import wait_until

WAIT = 60.0          # bounds a failure only: node boots and elections on a busy machine
QUEUE_PREFIX = "mqksbridge.q."


def unique(prefix):
    return f"{prefix}{uuid.uuid4().hex[:8]}"


# -- the gateways ------------------------------------------------------------------------

class Gateway:
    """A gateway process with its TextQueue directories under `workdir`; `start()` again
    after `kill()` runs it on the same directory and configuration (new door ports)."""

    def __init__(self, workdir, name, urls):
        self.workdir, self.name = workdir, name
        self.settings = ("[broker]\nsweep_interval = 0.1\n"
                         f'[cluster]\nengine = "rabbitmq"\nurls = {json.dumps(urls)}\n'
                         f'node = "{name}"\n'
                         '[twino]\nproducer_ack_default = "received"\n')
        self.process = None

    def start(self):
        self.process = spool_broker(self.workdir, self.settings)
        self.inbox, self.outbox = self.process.inbox, self.process.outbox
        return self

    @property
    def ports(self):
        return self.process.ports

    def kill(self):
        """SIGKILL, as when its machine dies."""
        self.process.process.kill()
        self.process.process.wait(10)

    def stop(self):
        if self.process is not None:
            self.process.stop()

    def connections(self):
        """How many times it connected to RabbitMQ, by AMQP port, from its log."""
        log = self.process.log()
        return [int(line.split("@127.0.0.1:")[1].split("/")[0])
                for line in log.splitlines() if "connected to amqp://" in line]

    def mqks(self):
        return ("127.0.0.1", self.ports["mqks"])

    def twino(self):
        return ("127.0.0.1", self.ports["twino"])

    def malamute(self):
        return f"tcp://127.0.0.1:{self.ports['malamute']}"


@pytest.fixture(scope="module")
def gateways(_rabbitmq_cluster_session, tmp_path_factory):
    cluster = _rabbitmq_cluster_session
    cluster.heal()
    first, second, third = cluster.urls()
    made = [Gateway(tmp_path_factory.mktemp("gw1"), "gw1", [first, second, third]),
            Gateway(tmp_path_factory.mktemp("gw2"), "gw2", [second, third, first])]
    try:
        for gateway in made:
            gateway.start()
        yield made
    finally:
        for gateway in made:
            gateway.stop()


@pytest.fixture
def closing():
    """Clients to close after the test."""
    made = []
    yield made
    for client in made:
        try:
            client.close()
        except Exception:
            pass


# -- what RabbitMQ has --------------------------------------------------------------------

def queue_rows(cluster, names):
    """{name: row} of `rabbitmqctl list_queues` for the test's queues, asked of a live
    node: messages ready and unacked, consumers, leader, members and the online ones."""
    live = next(node for node in cluster.nodes if cluster.running(node))
    rows = json.loads(cluster.ctl(live, "list_queues", "-p", cluster.vhost, "name",
                                  "messages_ready", "messages_unacknowledged", "consumers",
                                  "leader", "members", "online", "--formatter", "json"))
    wanted = {QUEUE_PREFIX + name: name for name in names}
    return {wanted[row["name"]]: row for row in rows if row["name"] in wanted}


def counts(cluster, names):
    """{name: (ready, unacked)}."""
    return {name: (row["messages_ready"], row["messages_unacknowledged"])
            for name, row in queue_rows(cluster, names).items()}


def wait_counts(cluster, want, what):
    """Wait until RabbitMQ counts (ready, unacked) as `want` says for each queue."""
    wait_until(lambda: counts(cluster, want) == want, WAIT, what, step=0.3,
               detail=lambda: counts(cluster, want))


def wait_bound(cluster, subject, n=1):
    """Wait until RabbitMQ has `n` bindings of the MQKS stream for `subject`: a gateway
    binds after its door answered, and a publish through another gateway must find it."""
    def bound():
        rows = json.loads(cluster.ctl(1, "list_bindings", "-p", cluster.vhost,
                                      "source_name", "routing_key", "--formatter", "json"))
        return sum(row["routing_key"] == subject for row in rows) >= n
    wait_until(bound, WAIT, f"the binding of {subject}", step=0.2)


def rabbitmq_queues(cluster, node, *args):
    """`rabbitmq-queues ARGS` against a node (the cluster's cookie and epmd)."""
    tool = os.path.join(os.path.dirname(CTL), "rabbitmq-queues")
    done = subprocess.run([tool, "-q", "-n", cluster.node(node).name, *args],
                          env=cluster.environment(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def in_sync(cluster, name):
    """Whether every replica of a queue is online and has the leader's whole log:
    `rabbitmq-queues quorum_status` (per member: its Raft state, log and commit index)."""
    rows = json.loads(rabbitmq_queues(cluster, 1, "quorum_status", "-p", cluster.vhost,
                                      QUEUE_PREFIX + name, "--formatter", "json"))
    states = {row["Node Name"]: row for row in rows}
    if len(states) != 3 or any(row["Raft State"] not in ("leader", "follower")
                               for row in rows):
        return False
    return len({(row["Log Index"], row["Commit Index"]) for row in rows}) == 1


def transfer_leadership(cluster, name):
    """Move a quorum queue's leader to another running node (Ra's own call): what a
    leader election after a restart, or `rabbitmq-queues rebalance quorum`, does."""
    expression = (
        f'{{ok, Q}} = rabbit_amqqueue:lookup(rabbit_misc:r(<<"{cluster.vhost}">>, queue, '
        f'<<"{QUEUE_PREFIX}{name}">>)), {{N, L}} = amqqueue:get_pid(Q), '
        'T = hd([X || X <- rabbit_nodes:all_running(), X =/= L]), '
        'ra:transfer_leadership({N, L}, {N, T}).')
    return cluster.ctl(1, "eval", expression)


# -- the doors' clients ---------------------------------------------------------------------

def mqks_pair(gateways, closing):
    """An MQKS publisher and consumer client, each given every gateway's address."""
    addresses = [gw.mqks() for gw in gateways]
    pub = MqksClient(addresses=addresses, timeout=WAIT)
    sub = MqksClient(addresses=addresses, timeout=WAIT)
    closing += [pub, sub]
    return pub, sub


def twino_queue(gateway, channel):
    """Queue 1 of `channel`, round-robin with acks, made on `gateway` (each gateway keeps
    its own channels: a Twino client that fails over finds it made there too)."""
    with twino.connect(*gateway.twino(), timeout=WAIT) as admin:
        answer = admin.operation(610, channel, [("Channel-Name", channel), ("Queue-Id", "1"),
                                                ("Queue-Status", "round-robin")],
                                 json.dumps({"RequestAcknowledge": True}).encode())
        assert answer.content_type in (0, 481), answer


def record(sender, subject, body):
    mid = unique("tq-")
    return mid, b"-" + journal.encode_fields(journal.Envelope(
        mid, subject, (body,), None, sender, "textqueue", "", created_at=time.time()))


class Inbox:
    """A program writing records to an inbox file of a gateway."""

    def __init__(self, gateway, queue):
        self.path = os.path.join(gateway.inbox, f"queue.{queue}@{unique('w')}.tq")
        self.offsets = {}

    def write(self, subject, body):
        mid, data = record("tqpub", subject, body)
        with open(self.path, "ab") as f:
            self.offsets[mid] = f.tell()
            f.write(data)
        return mid

    def marks(self):
        with open(self.path, "rb") as f:
            data = f.read()
        return {mid: data[offset:offset + 1] for mid, offset in self.offsets.items()}

    def wait_taken(self):
        wait_until(lambda: set(self.marks().values()) == {b"="}, WAIT,
                   "the gateway to take every inbox record", step=0.05,
                   detail=self.marks)


def outbox_records(path):
    """(mark, envelope) of each message record of an outbox file (not its header)."""
    records, _ = whole_records(path, 0)
    found = [(r.control, journal.decode(r)) for r in records if r.control in "-=!#"]
    return [(mark, env) for mark, env in found if env.id]


# -- a gateway dies ----------------------------------------------------------------------------

def test_a_gateway_killed_with_kill_9(rabbitmq_cluster, gateways, closing):
    """gw1 dies holding unacked deliveries of an MQKS, a Twino and a TextQueue consumer,
    with a Malamute worker on it too; every client moves to gw2 (the TextQueue files stay
    with gw1, which restarts on its directory), and every confirmed message is delivered:
    the unacked ones again with retry + 1, none acked before comes back."""
    cluster = rabbitmq_cluster
    gw1, gw2 = gateways
    names = {door: unique(f"kill-{door}-") for door in ("mqks", "malamute", "textqueue")}
    channel = unique("killtw")
    names["twino"] = f"{channel}/1"

    # MQKS: a manual-ack consumer and a confirming publisher, both on gw1 first
    pub, sub = mqks_pair(gateways, closing)
    cid = sub.consume(names["mqks"], manual_ack=True)
    subject = unique("kill.")
    pub.rebind(names["mqks"], f"--add {subject}")
    mqks_sent = [pub.publish(subject, f"m{n}") for n in range(8)]
    mqks_got = [sub.recv() for _ in mqks_sent]
    assert [(d.id, d.retry) for d in mqks_got] == [(mid, 0) for mid in mqks_sent]
    for delivery in mqks_got[:3]:
        sub.ack(cid, delivery.id)

    # Twino: the queue on both gateways, a consumer and a publisher waiting for acks
    for gateway in gateways:
        twino_queue(gateway, channel)
    tw_addresses = [gw.twino() for gw in gateways]
    tw_sub = twino.connect(addresses=tw_addresses, timeout=WAIT)
    tw_pub = twino.connect(addresses=tw_addresses, timeout=WAIT)
    closing += [tw_sub, tw_pub]
    assert tw_sub.join(channel) == 0
    twino_sent = []
    for n in range(6):
        result = tw_pub.push(channel, 1, f"t{n}".encode(), wait_ack=True)
        assert result.ok, result
        twino_sent.append(result.frame.message_id)
    tw_got = [tw_sub.recv(WAIT) for _ in twino_sent]
    assert [f.message_id for f in tw_got] == twino_sent
    for frame in tw_got[:2]:
        tw_sub.ack(frame)

    # Malamute: a worker of its service (Malamute has no acks: taking it is the ack), fed
    # by the MQKS publisher (a Malamute send has no confirmation)
    worker = MalamuteClient([gw.malamute() for gw in gateways], unique("mlm"), timeout=WAIT)
    closing.append(worker)
    worker.connect()
    worker.set_worker(names["malamute"])
    mlm_subject = unique("mlm.")
    pub.rebind(names["malamute"], f"--add {mlm_subject}")
    mlm_sent = [pub.publish(mlm_subject, f"w{n}") for n in range(3)]
    assert [tuple(worker.recv(WAIT).frames) for _ in mlm_sent] == [
        (f"w{n}".encode(),) for n in range(3)]

    # TextQueue on gw1's disk: an inbox file feeding a queue, an outbox file consuming it
    outbox = os.path.join(gw1.outbox, f"queue.{names['textqueue']}@worker.tq")
    open(outbox, "ab").close()
    reader = TextQueueReader(outbox, None)
    closing.append(reader)
    inbox = Inbox(gw1, names["textqueue"])
    tq_sent = [inbox.write("job", f"q{n}".encode()) for n in range(5)]
    inbox.wait_taken()                       # `=`: RabbitMQ confirmed each
    tq_got = [reader.recv(WAIT) for _ in tq_sent]
    assert [(g.id, g.retry) for g in tq_got] == [(mid, 0) for mid in tq_sent]
    reader.ack(tq_got[0])

    # RabbitMQ has seen the acks: what is unacked now is what gw1 holds
    wait_counts(cluster, {names["mqks"]: (0, 5), names["twino"]: (0, 4),
                          names["malamute"]: (0, 0), names["textqueue"]: (0, 4)},
                "the acks at RabbitMQ")

    gw1.kill()

    # the TextQueue programs go on meanwhile: records written, one more marked done
    tq_late = [inbox.write("job", f"late{n}".encode()) for n in range(2)]
    reader.ack(tq_got[1])

    # MQKS: the publisher moves on its next publish, the consumer on its next read
    mqks_late = [pub.publish(subject, f"late{n}") for n in range(3)]
    assert pub.failovers == 1 and pub.address == gw2.mqks()
    again = [sub.recv() for _ in range(5 + 3)]
    assert sub.failovers == 1
    assert sorted((d.id, d.retry) for d in again) == sorted(
        [(mid, 1) for mid in mqks_sent[3:]] + [(mid, 0) for mid in mqks_late])
    for delivery in again:
        sub.ack(cid, delivery.id)

    # Twino: the same, without a retry count on the wire (Twino has none)
    result = tw_pub.push(channel, 1, b"t-late", wait_ack=True)
    assert result.ok and tw_pub.failovers == 1
    tw_again = [tw_sub.recv(WAIT) for _ in range(4 + 1)]
    assert sorted(f.message_id for f in tw_again) == sorted(
        twino_sent[2:] + [result.frame.message_id])
    for frame in tw_again:
        tw_sub.ack(frame)

    # Malamute: the worker reads again on gw2; a send there after a ping is taken
    pub.publish(mlm_subject, "w-late")
    got = worker.recv(WAIT)
    assert tuple(got.frames) == (b"w-late",) and worker.failovers == 1

    # TextQueue: gw1 restarted on the same directory
    gw1.start()
    inbox.wait_taken()                        # the records written while it was down
    late = [reader.recv(WAIT) for _ in tq_late]
    # (retry 1 when RabbitMQ sent it under the basic.consume the gateway was cancelling
    # to settle q1, a credited consumer's way: the channel hands such a one back unseen)
    assert [(g.id, g.retry in (0, 1)) for g in late] == [(mid, True) for mid in tq_late]
    # what gw1 held came back to the same file, matched to its records (none twice);
    # q1, marked while gw1 was down, is acked now; q2..q4 wait for the worker
    wait_counts(cluster, {names["textqueue"]: (0, 3 + 2)}, "q1 acked after the restart")
    records = outbox_records(outbox)
    assert [env.id for _, env in records] == tq_sent + tq_late
    for got in tq_got[2:] + late:
        reader.ack(got)

    wait_counts(cluster, {name: (0, 0) for name in names.values()},
                "every queue empty, nothing unacked")


# -- a RabbitMQ node dies --------------------------------------------------------------------

class Flow:
    """An MQKS client publishing confirmed messages in a thread until stopped: `confirmed`
    holds the id of every publish whose confirmation came back."""

    def __init__(self, gateways, subject):
        self.client = MqksClient(addresses=[gw.mqks() for gw in gateways], timeout=WAIT)
        self.subject = subject
        self.confirmed, self.errors = [], []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        n = 0
        while not self.stopping.is_set():
            try:
                self.confirmed.append(self.client.publish(self.subject, f"f{n}"))
            except Exception as exc:             # the test fails on it
                self.errors.append(exc)
                return
            n += 1

    def stop(self):
        self.stopping.set()
        self.thread.join(WAIT)
        self.client.close()
        assert not self.errors, self.errors
        return self.confirmed


def held_file(gateway, queue, closing):
    """An outbox file of `gateway` fed by an inbox file there: 4 records, the first marked
    done (which cancels the file's basic.consume, a credited consumer, before the ack), 3
    held. Returns (reader, ids sent, deliveries)."""
    outbox = os.path.join(gateway.outbox, f"queue.{queue}@worker.tq")
    open(outbox, "ab").close()
    reader = TextQueueReader(outbox, None)
    closing.append(reader)
    inbox = Inbox(gateway, queue)
    sent = [inbox.write("job", f"q{n}".encode()) for n in range(4)]
    inbox.wait_taken()
    got = [reader.recv(WAIT) for _ in sent]
    reader.ack(got[0])
    return reader, sent, got


def back_again(reader, held):
    """The held deliveries appended to the file again, retry 1; marked done."""
    back = [reader.recv(WAIT) for _ in held]
    assert sorted((g.id, g.retry) for g in back) == sorted((g.id, 1) for g in held)
    for delivery in back:
        reader.ack(delivery)


def drain(sub, ids):
    """Read until every id of `ids` came (duplicates are allowed: at least once)."""
    seen, wanted = [], set(ids)
    while not wanted <= set(seen):
        try:
            seen.append(sub.recv().id)
        except TimeoutError:
            missing = [i for i in ids if i not in set(seen)]
            raise AssertionError(f"{len(missing)} of {len(ids)} never came: {missing[:5]}"
                                 f" (first {ids[0]}, last {ids[-1]})") from None
    return seen


def on_node(gateway, node):
    """Whether the gateway's last connection is to `node`."""
    return gateway.connections()[-1] == node.amqp_port


def test_the_node_a_gateway_is_connected_to_dies_and_comes_back(rabbitmq_cluster, gateways,
                                                                   closing):
    """Node 2, gw2's, is killed while gw2's clients publish (confirmed) and hold
    unacked deliveries: gw2 moves to node 3 and its clients keep working without noticing
    (same gateway), every confirmed message is delivered, MQKS and Twino deliveries held
    come again with retry + 1. A TextQueue file's held records sit under a cancelled
    basic.consume (it settled one): RabbitMQ 3.10.8 keeps those checked out by the ghost
    consumer while the node is down; then the file gets them again, retry 1, once the node
    is back (it led the queue) or the queue's leader changes. The node comes back and every
    replica catches up."""
    cluster = rabbitmq_cluster
    gw1, gw2 = gateways
    node2, node3 = cluster.node(2), cluster.node(3)
    assert on_node(gw2, node2)
    mqks_queue, flow_queue, led_here, led_away = (
        unique(f"node-{k}-") for k in ("mqks", "flow", "tq-here", "tq-away"))
    channel = unique("nodetw")
    names = [mqks_queue, flow_queue, led_here, led_away, f"{channel}/1"]
    here = [gw2, gw1]                       # clients start on gw2

    pub, sub = mqks_pair(here, closing)
    cid = sub.consume(mqks_queue, manual_ack=True)
    subject = unique("node.")
    pub.rebind(mqks_queue, f"--add {subject}")
    sent = [pub.publish(subject, f"m{n}") for n in range(6)]
    got = [sub.recv() for _ in sent]
    for delivery in got[:2]:
        sub.ack(cid, delivery.id)

    twino_queue(gw2, channel)
    tw_sub = twino.connect(addresses=[gw.twino() for gw in here], timeout=WAIT)
    closing.append(tw_sub)
    assert tw_sub.join(channel) == 0
    tw_sent = []
    tw_pub = twino.connect(addresses=[gw.twino() for gw in here], timeout=WAIT)
    closing.append(tw_pub)
    for n in range(4):
        result = tw_pub.push(channel, 1, f"t{n}".encode(), wait_ack=True)
        assert result.ok, result
        tw_sent.append(result.frame.message_id)
    tw_got = [tw_sub.recv(WAIT) for _ in tw_sent]
    tw_sub.ack(tw_got[0])

    # two TextQueue files on gw2, each holding 3 records after marking one: the queue of
    # one is led by node 2 (gw2 declared it), the other's by node 1 (gw1 declared it)
    declarer = MqksClient(*gw1.mqks(), timeout=WAIT)
    closing.append(declarer)
    declarer.delete_consumer(declarer.consume(led_away))
    wait_until(lambda: queue_rows(cluster, [led_away]), WAIT, "gw1's declare", step=0.2)
    files = {name: held_file(gw2, name, closing) for name in (led_here, led_away)}
    assert {name: row["leader"] for name, row in
            queue_rows(cluster, files).items()} == {led_here: node2.name,
                                                    led_away: cluster.node(1).name}

    flow_sub = MqksClient(*gw1.mqks(), timeout=WAIT)
    closing.append(flow_sub)
    flow_sub.consume(flow_queue)
    flow_subject = unique("flow.")
    flow_sub.rebind(flow_queue, f"--add {flow_subject}")     # on gw1, which declared it
    wait_bound(cluster, flow_subject)
    wait_counts(cluster, {mqks_queue: (0, 4), f"{channel}/1": (0, 3), led_here: (0, 3),
                          led_away: (0, 3)}, "the acks at RabbitMQ")
    flow = Flow(here, flow_subject).start()
    wait_until(lambda: len(flow.confirmed) >= 20, WAIT, "publishes flowing")

    cluster.kill(2)
    wait_until(lambda: on_node(gw2, node3), WAIT, "gw2 on node 3",
               detail=gw2.connections)
    confirmed_at_kill = len(flow.confirmed)
    wait_until(lambda: len(flow.confirmed) >= confirmed_at_kill + 20, WAIT,
               "publishes flowing through node 3")
    confirmed = flow.stop()

    # gw2's clients never left it; what they held comes again, retry + 1
    assert sub.failovers == 0 and tw_sub.failovers == 0
    again = [sub.recv() for _ in range(4)]
    assert sorted((d.id, d.retry) for d in again) == sorted((d.id, 1) for d in got[2:])
    for delivery in again:
        sub.ack(cid, delivery.id)
    tw_again = [tw_sub.recv(WAIT) for _ in range(3)]
    assert sorted(f.message_id for f in tw_again) == sorted(tw_sent[1:])
    for frame in tw_again:
        tw_sub.ack(frame)
    # every confirmed publish of the flow is delivered (at least once)
    drain(flow_sub, confirmed)
    later = pub.publish(subject, "after")
    assert (sub.recv().id, sub.failovers) == (later, 0)
    sub.ack(cid, later)

    # the ghosts: each file's 3 held records (under a cancelled basic.consume) stay
    # checked out while node 2 is down
    wait_counts(cluster, {mqks_queue: (0, 0), f"{channel}/1": (0, 0), led_here: (0, 3),
                          led_away: (0, 3)},
                "MQKS and Twino settled, the TextQueue records held by ghosts")
    for name, (reader, sent, got) in files.items():
        assert [env.id for _, env in outbox_records(reader.path)] == sent   # nothing new
    cluster.restart(2)
    wait_until(lambda: all(in_sync(cluster, name) for name in names), WAIT,
               "every replica online with the leader's log")
    # node 2 led `led_here`: back, its records come again (retry 1)
    reader, sent, got = files[led_here]
    back_again(reader, got[1:])
    # `led_away`'s leader lived on: its ghost may keep them after node 2's return (seen
    # for 8 s and more), at the latest until that queue's leader changes
    reader, sent, got = files[led_away]
    transfer_leadership(cluster, led_away)
    back_again(reader, got[1:])
    wait_counts(cluster, {name: (0, 0) for name in names}, "every queue empty")


def test_a_node_no_gateway_is_connected_to_dies_and_comes_back(rabbitmq_cluster, gateways,
                                                                 closing):
    """Node 2 now serves no gateway (gw1 is on node 1, gw2 on node 3): killed, the
    gateways keep their connections, a publisher on one and a manual-ack consumer on the
    other go on, every confirmed message is delivered; node 2 comes back and catches up."""
    cluster = rabbitmq_cluster
    gw1, gw2 = gateways
    assert on_node(gw1, cluster.node(1)) and on_node(gw2, cluster.node(3))
    before = [len(gw.connections()) for gw in gateways]
    queue = unique("away-")
    pub = MqksClient(*gw1.mqks(), timeout=WAIT)
    sub = MqksClient(*gw2.mqks(), timeout=WAIT)
    closing += [pub, sub]
    cid = sub.consume(queue, manual_ack=True)
    subject = unique("away.")
    sub.rebind(queue, f"--add {subject}")
    wait_bound(cluster, subject)
    sent = [pub.publish(subject, f"a{n}") for n in range(5)]
    held = [sub.recv() for _ in sent]

    cluster.kill(2)
    sent += [pub.publish(subject, f"b{n}") for n in range(5)]
    got = [sub.recv() for _ in range(5)]
    for delivery in held + got:
        sub.ack(cid, delivery.id)
    assert [d.id for d in held + got] == sent
    wait_counts(cluster, {queue: (0, 0)}, "the queue empty with node 2 down")

    cluster.restart(2)
    wait_until(lambda: in_sync(cluster, queue), WAIT, "node 2's replica caught up")
    sent.append(pub.publish(subject, "c"))
    assert sub.recv().id == sent[-1]
    assert [len(gw.connections()) for gw in gateways] == before    # neither noticed


def test_a_stream_publish_a_bound_queue_refused_is_not_confirmed(rabbitmq_cluster, gateways,
                                                                 closing):
    """RabbitMQ acks a publish routed to several queues once every one took it, and nacks
    it when one cannot: a quorum queue without a live majority (seen with its only replica
    on a killed node: nacked at once) or full with `reject-publish` (here, no node need
    die; a quorum queue takes the publish that fills it, so it is filled first). The MQKS
    door answers an error, as it does on the embedded engine for a bound queue that
    refused its copy; the other bound queue has it either way."""
    cluster = rabbitmq_cluster
    gw1 = gateways[0]
    subject, taker, refuser = unique("both."), unique("taker-"), unique("full-")
    sub = MqksClient(*gw1.mqks(), timeout=WAIT)
    closing.append(sub)
    sub.consume(taker, [subject])
    connection = pika.BlockingConnection(pika.URLParameters(cluster.urls()[0]))
    closing.append(connection)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare(QUEUE_PREFIX + refuser, durable=True, arguments={
        "x-queue-type": "quorum", "x-max-length": 1, "x-overflow": "reject-publish"})
    with pytest.raises(pika.exceptions.NackError):    # a quorum queue takes the one that
        for _ in range(10):                           # fills it, then refuses
            channel.basic_publish("", QUEUE_PREFIX + refuser, b"filler")
    channel.queue_bind(QUEUE_PREFIX + refuser, "mqksbridge.b.mqks", routing_key=subject)
    wait_bound(cluster, subject, 2)
    try:
        pub = MqksClient(*gw1.mqks(), timeout=WAIT)
        closing.append(pub)
        with pytest.raises(MqksError):
            pub.publish(subject, "to both")
        assert sub.recv().data == b"to both"        # the taker has it either way
    finally:
        channel.queue_delete(QUEUE_PREFIX + refuser)
