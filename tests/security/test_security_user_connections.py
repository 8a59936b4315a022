"""Per-user limits on the doors that learn the user after a login, over real sockets
(the MQKS door's are in test_security_users): max_connections on Malamute after PLAIN
(ZAP status 300, which a libzmq client reports as EVENT_HANDSHAKE_FAILED_AUTH 300) and
on Twino after its Client-Token (482), each refusal counted and the slot free again once
the user's connection closes; max_message_size on both (Malamute ERROR 300, a Twino nack),
nothing stored. (Per-door max_connections: tests/hostile/test_hostile_descriptors.py.)"""
import pytest_twisted
import zmq

from mqksbridge.bridge.clients.twino import TwinoRefused
from mqksbridge.bridge.security.users import hash_password
from mqksbridge.protocols.malamute import codec
from tests.conftest import RunningBroker
from tests.security.test_security_plain import PlainPeer
from tests.security.test_security_users import FAST
from tests.support.waits import until


def one_connection_users(path):
    path.write_text(f'''
[users.ops]
password = "{hash_password("ops-secret", **FAST)}"
publish = ["*"]
consume = ["*"]
manage = ["*"]
max_connections = 1
max_message_size = 16
''')
    return str(path)


@pytest_twisted.ensureDeferred
async def test_malamute_plain_user_past_max_connections_gets_zap_300(tmp_path):
    broker = RunningBroker({"security": {"users": one_connection_users(tmp_path / "u.toml")},
                            "malamute": {"mechanism": "plain"}})
    await broker.start()
    try:
        first = PlainPeer(broker.endpoint(), "ops", "ops-secret")
        broker.malamute_peers.append(first)
        assert await first.handshake() == (zmq.EVENT_HANDSHAKE_SUCCEEDED, 0)
        assert await first.call(codec.ConnectionOpen("box1")) == codec.Ok(200, "")
        second = PlainPeer(broker.endpoint(), "ops", "ops-secret")
        broker.malamute_peers.append(second)
        assert await second.handshake() == (zmq.EVENT_HANDSHAKE_FAILED_AUTH, 300)
        assert broker.broker.counters["security.malamute.limit"] >= 1
        assert broker.top.security.connections["ops"] == 1
        broker.malamute_peers.remove(first)
        first.close()
        await until(lambda: not broker.top.security.connections, what="ops's slot freed")
        third = PlainPeer(broker.endpoint(), "ops", "ops-secret")
        broker.malamute_peers.append(third)
        assert await third.handshake() == (zmq.EVENT_HANDSHAKE_SUCCEEDED, 0)
        assert await third.call(codec.ConnectionOpen("box3")) == codec.Ok(200, "")
    finally:
        for peer in broker.malamute_peers:
            peer.close()
        broker.malamute_peers.clear()
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_twino_user_past_max_connections_gets_482(tmp_path):
    broker = RunningBroker({"security": {"users": one_connection_users(tmp_path / "u.toml")}})
    await broker.start()
    try:
        first = await broker.twino(token="ops:ops-secret")
        try:
            await broker.twino(token="ops:ops-secret")
            raise AssertionError("a second connection of ops was accepted")
        except TwinoRefused as refused:
            assert refused.code == 482
        assert broker.broker.counters["security.twino.limit"] == 1
        await first.close()
        await until(lambda: not broker.top.security.connections, what="ops's slot freed")
        await broker.twino(token="ops:ops-secret")
    finally:
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_malamute_plain_user_past_max_message_size_gets_error_300(tmp_path):
    broker = RunningBroker({"security": {"users": one_connection_users(tmp_path / "u.toml")},
                            "malamute": {"mechanism": "plain"}})
    await broker.start()
    ops = PlainPeer(broker.endpoint(), "ops", "ops-secret")
    broker.malamute_peers.append(ops)
    try:
        assert await ops.call(codec.ConnectionOpen("ops")) == codec.Ok(200, "")
        ops.send(codec.MailboxSend("ops", "fits", content=(b"x" * 16,)))
        delivered = await ops.recv()
        assert isinstance(delivered, codec.MailboxDeliver) and delivered.content == (b"x" * 16,)
        ops.send(codec.MailboxSend("other", "big", content=(b"x" * 17,)))
        reply = await ops.recv()
        assert isinstance(reply, codec.Error) and reply.code == 300, reply
        assert "other" not in broker.broker.mailboxes or not broker.broker.mailboxes["other"].stored
        assert broker.broker.counters["security.malamute.denied"] == 1
    finally:
        ops.close()
        broker.malamute_peers.clear()
        await broker.stop()


@pytest_twisted.ensureDeferred
async def test_twino_user_past_max_message_size_is_nacked(tmp_path):
    broker = RunningBroker({"security": {"users": one_connection_users(tmp_path / "u.toml")}})
    await broker.start()
    try:
        ops = await broker.twino(token="ops:ops-secret")
        pushed = await ops.push("jobs", 0, b"x" * 17, wait_ack=True)
        assert not pushed.ok
        assert not broker.broker.queues.get("jobs")
        await ops.push("jobs", 0, b"x" * 16)
        await until(lambda: broker.broker.queues.get("jobs"), what="the fitting push stored")
        assert broker.broker.counters["security.twino.denied"] == 1
    finally:
        await broker.stop()
