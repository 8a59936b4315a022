"""Mailboxes, their one live owner and lifecycle events across two gateways: real
`twistd -n mqksbridge` processes with `[cluster] engine = "rabbitmq"` on the session's
RabbitMQ node (docs/cluster.md, the mailbox and lifecycle rows).

Mail crosses gateways through RabbitMQ at once (a mailbox is a quorum queue); who owns an
address is told on the control bus, so a test that needs gateway 1 to know an owner on
gateway 2 waits for gateway 1's admin view to show it, where one process needs no wait.
"""
import json
import urllib.request

import pytest

from mqksbridge.bridge.clients import twino
from mqksbridge.bridge.clients.malamute import MalamuteClient
from mqksbridge.protocols.twino.codec import Frame, MessageType, new_id
from tests.cluster.gateways import MAILBOX, start
from tests.interop.sides import WAIT, unique
from tests.support.waits import wait_until


@pytest.fixture(scope="module")
def gateways(_rabbitmq_node_session, tmp_path_factory):
    yield from start(_rabbitmq_node_session, tmp_path_factory,
                     doors=("malamute", "twino", "admin"))


class Gateway:
    """One gateway's doors for a test: clients closed at the end."""

    def __init__(self, process):
        self.process = process
        self.clients = []

    def malamute(self, address):
        client = MalamuteClient(f"tcp://127.0.0.1:{self.process.ports['malamute']}", address,
                                timeout=WAIT)
        client.connect()
        self.clients.append(client)
        return client

    def twino(self, **kwargs):
        client = twino.connect(port=self.process.ports["twino"], timeout=WAIT, **kwargs)
        self.clients.append(client)
        return client

    def owner(self, address):
        """(owner id, owner door) of `address` as this gateway's admin view shows it."""
        url = f"http://127.0.0.1:{self.process.ports['admin']}/api/mailboxes?limit=100000"
        with urllib.request.urlopen(url, timeout=WAIT) as answer:
            listing = json.load(answer)
        for row in listing["items"]:
            if row["name"] == address:
                return row["owner"], row["owner_door"]
        return None, None

    def wait_owner(self, address, door):
        wait_until(lambda: self.owner(address)[1] == door, 30,
                   f"{door} owner of {address} known", step=0.05)

    def close(self):
        for client in self.clients:
            try:
                client.close()
            except OSError:
                pass


@pytest.fixture
def gw(gateways):
    made = [Gateway(process) for process in gateways]
    yield made
    for gateway in made:
        gateway.close()


def received(client):
    got = client.recv(WAIT)
    assert got is not None, "nothing arrived"
    return got


def test_malamute_mail_reaches_an_address_on_the_other_gateway(gw, rabbit):
    """The owner's gateway consumes its mailbox once RabbitMQ has the consumer (a fresh
    gateway's first one once took longer than a receive's wait: waited for here)."""
    address = unique("mlm")
    owner = gw[1].malamute(address)
    rabbit.wait_consumers(address, prefix=MAILBOX)
    sender = gw[0].malamute(unique("mlm"))
    sender.sendto(address, "hello", b"one", b"two", tracker="t1")
    got = received(owner)
    assert (got.subject, tuple(got.frames), got.sender, got.tracker) == \
        ("hello", (b"one", b"two"), sender.address, "t1")


def test_mail_waits_for_an_address_that_is_away_and_reaches_it_on_any_gateway(gw):
    address = unique("away")
    sender = gw[0].malamute(unique("mlm"))
    for n in range(3):
        sender.sendto(address, f"m{n}", b"x")
    sender.ping()
    owner = gw[1].malamute(address)
    assert [received(owner).subject for _ in range(3)] == ["m0", "m1", "m2"]
    owner.close()
    gw[0].wait_owner(address, None)
    sender.sendto(address, "later", b"y")
    sender.ping()
    again = gw[0].malamute(address)        # back, on the sender's gateway this time
    assert received(again).subject == "later"


def test_a_twino_direct_message_and_its_ack_cross_gateways(gw):
    """The frame arrives as sent (the bytes the door made ride with the mail), and the
    receiver's ack goes back through the sender's mailbox."""
    receiver, sender = gw[1].twino(), gw[0].twino()
    gw[0].wait_owner(receiver.client_id, "twino")
    gw[1].wait_owner(sender.client_id, "twino")
    sent = Frame(MessageType.DIRECT_MESSAGE, pending_ack=True, message_id=new_id(),
                 source=sender.client_id, target=receiver.client_id, content_type=7,
                 headers=[("Subject", "greet")], content=b"hi")
    sender.send_frame(sent)
    frame = receiver.recv(WAIT)
    assert (frame.type, frame.message_id, frame.source, frame.content_type, frame.content,
            frame.pending_ack) == (MessageType.DIRECT_MESSAGE, sent.message_id,
                                   sender.client_id, 7, b"hi", True)
    receiver.ack(frame)
    ack = sender.recv(WAIT)
    assert (ack.type, ack.message_id, ack.source) == \
        (MessageType.ACKNOWLEDGE, sent.message_id, receiver.client_id)


def test_a_newer_session_on_another_gateway_takes_the_address_over(gw):
    address = unique("take")
    gw[1].malamute(address)
    gw[0].wait_owner(address, "malamute")
    older_id = gw[1].owner(address)[0]
    newer = gw[0].malamute(address)
    wait_until(lambda: gw[1].owner(address)[0] not in (None, older_id), 30,
               "gateway 2 to hear of the takeover", step=0.05)
    mailer = gw[1].malamute(unique("mlm"))
    mailer.sendto(address, "after", b"z")
    assert received(newer).subject == "after"


def test_a_twino_client_id_of_a_live_malamute_address_elsewhere_is_refused(gw):
    address = unique("mine")
    gw[1].malamute(address)
    gw[0].wait_owner(address, "malamute")
    with pytest.raises(twino.TwinoError):
        gw[0].twino(client_id=address)


def test_a_twino_event_subscriber_hears_a_client_join_on_the_other_gateway(gw):
    """And the channel's members, as a door shows them, are the fleet's."""
    channel = unique("ch")
    watcher = gw[0].twino()
    answer = watcher.operation(603, channel, [("Channel-Name", channel)])
    assert answer.content_type == 0
    assert watcher.subscribe("ClientJoined", channel) == 0
    assert watcher.subscribe("ClientConnected") == 0
    joiner = gw[1].twino()
    assert joiner.join(channel) == 0
    seen = {}
    while "ClientJoined" not in seen:
        frame = watcher.recv(WAIT)
        assert frame is not None, f"only {sorted(seen)} arrived"
        seen[frame.source] = json.loads(frame.content)
    assert seen["ClientConnected"]["Id"] == joiner.client_id
    assert seen["ClientJoined"]["ClientId"] == joiner.client_id
    consumers = watcher.operation(607, channel)               # channel consumers
    assert [c["Id"] for c in json.loads(consumers.content)] == [joiner.client_id]
    info = json.loads(watcher.operation(605, channel).content)
    assert info["ActiveClients"] == 1
