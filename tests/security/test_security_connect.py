"""Refusals at connect time over real sockets: an MQKS client that is nobody is told so
and closed before it sends anything; an MQKS client that never finishes TLS or its `auth`
login is closed after mqks.handshake_timeout; an `mtls:` user over its max_connections
is refused at connect, closed, and named in the log; every error line's eid is logged."""
import re
import socket

import pytest
import pytest_twisted
from twisted.internet.threads import deferToThread

from mqksbridge.bridge.security.users import hash_password
from tests.security.test_security_tls import TlsLines
from tests.support.certs import Certificates
from tests.support.waits import until

FAST = {"n": 1 << 10}
REFUSAL = re.compile(r"^(\S+) error (\d{20}[0-9a-zA-Z]{4})$")
PLAIN = "tcp:0:interface=127.0.0.1"
AUTH = "tcp:0:interface=127.0.0.1:backlog=53"


@pytest.fixture
def certs(tmp_path):
    return Certificates(tmp_path)


def users(path, anonymous=False):
    path.write_text(f'''
[users.app]
password = "{hash_password("app-secret", **FAST)}"
publish = ["stream:mqks:jobs.*"]
consume = ["queue:jobs", "stream:mqks:jobs.*"]
certificates = ["CN=app"]
max_connections = 1
''' + ('[anonymous]\nconsume = ["queue:public"]\n' if anonymous else ""))
    return str(path)


def refusal(line, req_id="None"):
    match = REFUSAL.match(line)
    assert match is not None and match.group(1) == req_id, line
    return match.group(2)


async def logged_with(logged, *words):
    await until(lambda: any(all(w in text for w in words) for text in logged),
                what=f"a log line with {words}")


@pytest_twisted.ensureDeferred
async def test_mqks_client_that_is_nobody_is_refused_before_it_sends_anything(
        running, tmp_path, logged):
    broker = await running({"security": {"users": users(tmp_path / "u.toml")},
                            "mqks": {"listen": [PLAIN]}})
    client = await broker.mqks()
    eid = refusal(await client.line())         # nothing sent: the error line comes anyway
    await client.closed
    await logged_with(logged, eid, "anonymous")
    assert broker.broker.counters["security.mqks.anonymous"] == 1


@pytest_twisted.ensureDeferred
async def test_mqks_auth_listener_closes_a_client_that_never_logs_in(running, tmp_path,
                                                                     logged):
    broker = await running({"security": {"users": users(tmp_path / "u.toml")},
                            "mqks": {"listen": [AUTH], "auth": [AUTH],
                                     "handshake_timeout": 5.0}})
    idle = await broker.mqks()
    await until(lambda: len(broker.doors["mqks"].connections) == 1)
    broker.advance(4.9)
    (conn,) = broker.doors["mqks"].connections
    assert conn.identified is False and not conn.outbox.closed     # still waiting
    broker.advance(1.2)                          # the door's sweep runs once a second
    eid = refusal(await idle.line())
    await idle.closed
    await logged_with(logged, eid, "no login within 5.0 s")
    again = await broker.mqks()                  # a login in time is served
    assert await again.request("l auth app app-secret") == "l ok "
    broker.advance(6)
    assert await again.request("p ping x") == "p ok x"
    await again.close()


@pytest_twisted.ensureDeferred
async def test_mqks_wrong_password_logs_the_eid_it_sends(running, tmp_path, logged):
    broker = await running({"security": {"users": users(tmp_path / "u.toml")},
                            "mqks": {"listen": [AUTH], "auth": [AUTH]}})
    client = await broker.mqks()
    client.send("l auth app wrong")
    eid = refusal(await client.line(), "l")
    await client.closed
    await logged_with(logged, eid, "wrong password")


@pytest_twisted.ensureDeferred
async def test_mqks_tls_client_that_never_finishes_its_handshake_is_closed(running, certs):
    broker = await running({"mqks": {"listen": [certs.endpoint("ssl")],
                                     "handshake_timeout": 5.0}})
    raw = socket.create_connection(("127.0.0.1", broker.port("mqks")), timeout=10)
    try:
        door = broker.doors["mqks"]
        await until(lambda: len(door.connections) == 1, what="the connection")
        broker.advance(6)                        # aborted: nothing can be said before TLS
        await until(lambda: not door.connections, what="the connection closed")
        try:
            assert await deferToThread(raw.recv, 100) == b""
        except ConnectionResetError:             # aborted: as good a close
            pass
    finally:
        raw.close()


@pytest_twisted.ensureDeferred
async def test_mtls_user_over_max_connections_is_refused_at_connect_and_named(
        running, tmp_path, certs, logged):
    mtls = certs.endpoint(ca=True, client_cert="optional")
    broker = await running({"security": {"users": users(tmp_path / "u.toml")},
                            "mqks": {"listen": [mtls]}})
    context = certs.context(certs.client("app"))
    first = await deferToThread(TlsLines, broker.port("mqks"), context)
    try:
        first.send(b"p ping one")
        assert await deferToThread(first.line) == b"p ok one"
        second = await deferToThread(TlsLines, broker.port("mqks"), context)
        try:
            eid = refusal((await deferToThread(second.line)).decode())   # nothing sent
            with pytest.raises(ConnectionError):
                await deferToThread(second.line)                          # and closed
        finally:
            second.close()
        await logged_with(logged, eid, "'app'", "limit")
        door = broker.doors["mqks"]
        await until(lambda: len(door.connections) == 1, what="the refused one gone")
    finally:
        first.close()
    await until(lambda: not broker.doors["mqks"].connections, what="the first one gone")
