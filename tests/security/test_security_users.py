"""Users and permissions over real sockets: the users file, `mqksbridge user add`, and
each door's refusals (no credentials, no permission to publish, consume or manage), with a
listener identity and a TLS client certificate on the MQKS door."""
import os
import re
import subprocess
import sys

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.internet.threads import deferToThread

from mqksbridge.bridge.clients.twino import TwinoRefused
from mqksbridge.bridge.security.users import (UsersError, hash_password, load, parse,
                                              verify_password)
from mqksbridge.protocols.malamute import codec
from mqksbridge.protocols.twino.codec import ContentType
from tests.conftest import RunningBroker
from tests.support.certs import Certificates
from tests.support.lines import LineClient
from tests.support.waits import until
from tests.security.test_security_tls import TlsLines

ERROR = re.compile(r"^(\S*) error (\d{20}[0-9a-zA-Z]{4})$")
FAST = {"n": 1 << 10}                       # cheap hashes for tests (the file says N)
LOOPBACK = "tcp:0:interface=127.0.0.1"
OPS_LISTENER = "tcp:0:interface=127.0.0.1:backlog=51"
SCRIPT = os.path.join(os.path.dirname(sys.executable), "mqksbridge")


def users_file(path, anonymous=True):
    text = f'''
[users.app]
password = "{hash_password("app-secret", **FAST)}"
publish = ["stream:mqks:jobs.*"]
consume = ["queue:jobs", "stream:mqks:jobs.*"]
certificates = ["CN=app"]

[users.ops]
password = "{hash_password("ops-secret", **FAST)}"
publish = ["*"]
consume = ["*"]
manage = ["*"]
'''
    if anonymous:
        text += '''
[anonymous]
publish = ["stream:mqks:public.*", "mailbox:*"]
consume = ["queue:public.*", "stream:mqks:public.*", "mailbox:*"]
'''
    path.write_text(text)
    return str(path)


@pytest.fixture
def certs(tmp_path):
    return Certificates(tmp_path)


@pytest.fixture
def secured(tmp_path, certs):
    """`await secured(anonymous=True)`: a broker with the users file; MQKS listens
    anonymously, as `ops` (listen_users) and with client certificates (mtls)."""
    made = []

    async def start(anonymous=True):
        mtls = certs.endpoint(ca=True, client_cert="optional")
        broker = RunningBroker({
            "security": {"users": users_file(tmp_path / "users.toml", anonymous)},
            "mqks": {"listen": [LOOPBACK, OPS_LISTENER, mtls],
                     "listen_users": {OPS_LISTENER: "ops"}}})
        made.append(broker)
        await broker.start()
        broker.ops_port = broker.listeners["mqks"][1].port.getHost().port
        broker.mtls_port = broker.listeners["mqks"][2].port.getHost().port
        return broker
    yield start
    for broker in made:
        pytest_twisted.blockon(defer.ensureDeferred(broker.stop()))


def is_error(line, req_id):
    match = ERROR.match(line)
    return match is not None and match.group(1) == req_id


def test_passwords_are_salted_hashes():
    one, two = hash_password("pw", **FAST), hash_password("pw", **FAST)
    assert one != two and "pw" not in one
    assert verify_password(one, "pw") and not verify_password(one, "pW")
    assert not verify_password("garbage", "pw")


@pytest.mark.parametrize("table, message", [
    ({"users": {"a": {"publish": ["topic:x"]}}}, "rule"),
    ({"users": {"a": {"password": "plain"}}}, "scrypt"),
    ({"users": {"a": {"colour": 1}}}, "unknown key"),
    ({"users": {"a:b": {}}}, "not a usable user name"),
    ({"guests": {}}, "unknown table"),
])
def test_bad_users_files_are_refused_naming_the_entry(table, message):
    with pytest.raises(UsersError, match=message):
        parse(table)


def test_user_add_writes_a_hash_the_broker_accepts(tmp_path):
    path = tmp_path / "users.toml"
    command = [SCRIPT, "user", "add", "app",
               "--file", str(path), "--password-stdin", "--consume", "queue:jobs",
               "--manage", "broker"]
    done = subprocess.run(command, input=b"s3cret\n", capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert b"s3cret" not in path.read_bytes()
    users = load(str(path))
    assert users.check("app", "s3cret") and not users.check("app", "wrong")
    assert users.principal("app").allows("consume", "queue", "jobs")
    again = subprocess.run(command, input=b"x\n", capture_output=True, timeout=60)
    assert again.returncode == 2 and b"already" in again.stderr
    bad = subprocess.run(command[:3] + ["other", "--file", str(path), "--password-stdin",
                                        "--publish", "topic:x"],
                         input=b"x\n", capture_output=True, timeout=60)
    assert bad.returncode == 2


@pytest_twisted.ensureDeferred
async def test_mqks_anonymous_client_gets_only_what_anonymous_may(secured):
    broker = await secured()
    anon = await broker.mqks()
    assert is_error(await anon.request("c1 consume --confirm vault e1"), "c1")
    assert is_error(await anon.request("c2 consume --confirm public.q secret.e"), "c2")
    assert "vault" not in broker.broker.queues or not broker.broker.queues["vault"].consumers
    assert await anon.request("c3 consume --confirm public.q public.e") == "c3 ok "
    assert is_error(await anon.request("e1 _eval len(state.consumers)"), "e1")
    assert is_error(await anon.request("d1 delete_queue public.q --confirm"), "d1")
    anon.send("m1 publish secret.e leak")
    assert is_error(await anon.line(), "m1")
    anon.send("m2 publish public.e hello")
    assert (await anon.line()).endswith(" event=public.e hello")
    assert broker.broker.counters["security.mqks.denied"] >= 5
    await anon.close()


@pytest_twisted.ensureDeferred
async def test_mqks_listener_identity_may_manage_and_keeps_its_consumers(secured):
    broker = await secured()
    ops = await LineClient.connect(broker.ops_port)
    assert (await ops.request("e1 _eval 1+1")).startswith("e1 ok")
    assert await ops.request("c1 consume --confirm vault e1 --manual-ack") == "c1 ok "
    anon = await broker.mqks()
    assert await anon.request("p ping x") == "p ok x"
    anon.send("x1 delete_consumer c1 --confirm", "x2 reject c1 --confirm")
    await anon.nothing()                     # another client's consumer is unknown to it
    ops.send("m1 publish e1 vaulted")
    assert (await ops.line()).endswith(" event=e1 vaulted")
    assert "c1" in {c.id for c in broker.broker.queues["vault"].consumers}
    await ops.close()
    await anon.close()


@pytest_twisted.ensureDeferred
async def test_mqks_client_certificate_is_its_user(secured, certs):
    broker = await secured()
    app = await deferToThread(TlsLines, broker.mtls_port, certs.context(certs.client("app")))
    try:
        app.send(b"c1 consume --confirm jobs jobs.new")
        assert await deferToThread(app.line) == b"c1 ok "
        app.send(b"c2 consume --confirm vault e1")
        assert is_error((await deferToThread(app.line)).decode(), "c2")
        app.send(b"m1 publish jobs.new work")
        assert (await deferToThread(app.line)).endswith(b" event=jobs.new work")
    finally:
        app.close()


@pytest_twisted.ensureDeferred
async def test_without_anonymous_every_door_refuses_a_client_without_credentials(secured):
    broker = await secured(anonymous=False)
    anon = await broker.mqks()
    anon.send("p1 ping x")
    assert is_error(await anon.line(), "None")
    await anon.closed
    with pytest.raises(TwinoRefused) as refused:
        await broker.twino()
    assert refused.value.code == 401
    peer = await broker.malamute_raw()
    reply = await peer.call(codec.ConnectionOpen("someone"))
    assert isinstance(reply, codec.Error) and reply.code == 300, reply
    ops = await LineClient.connect(broker.ops_port)      # a listener identity still works
    assert await ops.request("p ping y") == "p ok y"
    await ops.close()
    counters = broker.broker.counters
    assert [counters[f"security.{door}.anonymous"] for door in ("mqks", "twino", "malamute")] \
        == [1, 1, 1]


@pytest_twisted.ensureDeferred
async def test_twino_anonymous_client_may_not_manage(secured):
    broker = await secured()
    client = await broker.twino()
    answer = await client.operation(ContentType.CLIENT_LIST, "", [], b"")
    assert answer.content_type == 401
    answer = await client.operation(ContentType.REMOVE_CHANNEL, "x", [("Channel-Name", "x")],
                                    b"")
    assert answer.content_type == 401


@pytest_twisted.ensureDeferred
async def test_twino_anonymous_push_and_pull_outside_its_rules_are_refused(secured):
    broker = await secured()
    client = await broker.twino()
    pushed = await client.push("vault", 0, b"x", wait_ack=True)
    assert not pushed.ok
    assert len(broker.broker.queues.get("vault") or ()) == 0
    with pytest.raises(Exception):
        await client.pull("vault", 0, 1)
    assert broker.broker.counters["security.twino.denied"] >= 1


@pytest_twisted.ensureDeferred
async def test_twino_client_token_logs_in_as_a_user(secured):
    broker = await secured(anonymous=False)
    ops = await broker.twino(token="ops:ops-secret")
    answer = await ops.operation(ContentType.CLIENT_LIST, "", [], b"")
    assert answer.content_type != 401 and ops.client_id in answer.content.decode()
    app = await broker.twino(token="app:app-secret")
    assert (await app.operation(ContentType.CLIENT_LIST, "", [], b"")).content_type == 401
    for token in ("app:wrong", "nobody:app-secret", "app", ""):
        with pytest.raises(TwinoRefused) as refused:
            await broker.twino(token=token or None)
        assert refused.value.code == 401
    counters = broker.broker.counters
    assert counters["security.twino.login"] == 3 and counters["security.twino.anonymous"] == 1
    again = await broker.twino(token="ops:ops-secret")    # remembered: no second scrypt
    assert again.client_id != ops.client_id


@pytest_twisted.ensureDeferred
async def test_per_user_limits_on_the_mqks_door(tmp_path):
    path = tmp_path / "users.toml"
    path.write_text(f'''
[users.ops]
password = "{hash_password("x", **FAST)}"
publish = ["*"]
consume = ["*"]
max_connections = 1
max_consumers = 2
max_message_size = 16
max_unacked = 1
''')
    broker = RunningBroker({"security": {"users": str(path)},
                            "mqks": {"listen": [OPS_LISTENER],
                                     "listen_users": {OPS_LISTENER: "ops"}}})
    await broker.start()
    try:
        port = broker.port("mqks")
        ops = await LineClient.connect(port)
        assert await ops.request("p ping a") == "p ok a"
        second = await LineClient.connect(port)           # max_connections = 1
        second.send("p ping b")
        assert is_error(await second.line(), "None")
        await second.closed
        assert await ops.request("c1 consume --confirm q1 e1 --manual-ack") == "c1 ok "
        assert await ops.request("c2 consume --confirm q2 e2") == "c2 ok "
        assert is_error(await ops.request("c3 consume --confirm q3 e3"), "c3")
        ops.send("m1 publish e1 " + "x" * 17)              # max_message_size = 16
        assert is_error(await ops.line(), "m1")
        ops.send("m2 publish e1 one", "m3 publish e1 two")  # max_unacked = 1
        first = await ops.line()
        assert first.endswith(" event=e1 one")
        await ops.nothing()                                # the second waits for the ack
        ops.send(f"a1 ack c1 {first.split()[2]}")
        assert (await ops.line()).endswith(" event=e1 two")
        counters = broker.broker.counters
        assert counters["security.mqks.limit"] == 1 and counters["security.mqks.denied"] == 2
        await ops.close()
        await until(lambda: not broker.top.security.connections, what="ops's slot freed")
        third = await LineClient.connect(port)              # the slot is free again
        assert await third.request("p ping c") == "p ok c"
        await third.close()
    finally:
        await broker.stop()


def test_twistd_refuses_a_bad_users_file_naming_it(tmp_path):
    from tests.cli.test_startup import twistd
    bad = tmp_path / "users.toml"
    bad.write_text('[users.app]\npublish = ["topic:x"]\n')
    for args in (["--check-config"], []):
        done = twistd(tmp_path, "--set", f'security.users="{bad}"', "--mqks", "tcp:0",
                      "--twino", "none", "--malamute", "none", "--admin", "none", *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "user 'app'" in done.stderr and "topic:x" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr + done.stdout
