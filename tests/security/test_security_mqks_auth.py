"""MQKS's opt-in first-line login (`mqks.auth`, our extension: specs/mqks.md) over real
sockets: a good `auth` line, a wrong password, a first line that is not `auth`, the
user's permissions applied after it, the lines sent behind it, and an `auth` line on a
listener without the option (answered as the original answers any unknown action)."""
import pytest
import pytest_twisted
from twisted.internet import defer

from tests.conftest import RunningBroker
from tests.security.test_security_users import LOOPBACK, is_error, users_file
from tests.support.lines import LineClient

AUTH_LISTENER = "tcp:0:interface=127.0.0.1:backlog=52"


@pytest.fixture
def auth_broker(tmp_path):
    made = []

    async def start(users=True, auth=True, **mqks):
        config = {"mqks": {"listen": [LOOPBACK, AUTH_LISTENER], **mqks}}
        if users:
            config["security"] = {"users": users_file(tmp_path / "users.toml", False)}
        if auth:
            config["mqks"]["auth"] = [AUTH_LISTENER]
        broker = RunningBroker(config)
        made.append(broker)
        await broker.start()
        broker.auth_port = broker.listeners["mqks"][1].port.getHost().port
        return broker
    yield start
    for broker in made:
        pytest_twisted.blockon(defer.ensureDeferred(broker.stop()))


async def closed(client):
    await client.closed
    return client.lost


@pytest_twisted.ensureDeferred
async def test_auth_line_logs_in_and_the_users_rules_apply(auth_broker):
    broker = await auth_broker()
    app = await LineClient.connect(broker.auth_port)
    app.send("a1 auth app app-secret", "c1 consume --confirm jobs jobs.one")   # pipelined
    assert await app.line() == "a1 ok "
    assert await app.line() == "c1 ok "
    assert is_error(await app.request("c2 consume --confirm vault secret.e"), "c2")
    assert is_error(await app.request("e1 _eval len(state.consumers)"), "e1")
    assert is_error(await app.request("a2 auth ops ops-secret"), "a2")    # once only
    app.send("m1 publish jobs.one hello")
    assert (await app.line()).endswith(" event=jobs.one hello")
    assert broker.broker.counters["security.mqks.denied"] >= 2
    assert not app.lost
    ops = await LineClient.connect(broker.auth_port)
    ops.send("a1 auth ops ops-secret")
    assert await ops.line() == "a1 ok "
    assert (await ops.request("e1 _eval 1+1")) == "e1 ok 2"
    app.transport.loseConnection()
    ops.transport.loseConnection()


@pytest.mark.parametrize("first", ["a1 auth app wrong", "a1 auth nobody app-secret",
                                   "a1 auth app", "a1 ping x", "c1 consume jobs jobs.one",
                                   "m1 publish jobs.one hello"])
@pytest_twisted.ensureDeferred
async def test_no_good_auth_line_is_an_error_line_and_the_close(auth_broker, first):
    broker = await auth_broker()
    client = await LineClient.connect(broker.auth_port)
    client.send(first, "p1 ping after")
    assert is_error(await client.line(), first.split()[0])
    assert await closed(client)
    assert not client.lines                    # the line after it was never served
    assert broker.broker.counters["security.mqks.login"] == 1
    assert "jobs" not in broker.broker.queues or not broker.broker.queues["jobs"].consumers


@pytest_twisted.ensureDeferred
async def test_short_first_line_is_none_error_and_the_close(auth_broker):
    broker = await auth_broker()
    client = await LineClient.connect(broker.auth_port)
    client.send("auth")
    assert is_error(await client.line(), "None")
    assert await closed(client)


@pytest_twisted.ensureDeferred
async def test_the_other_listeners_know_no_auth_line(auth_broker):
    broker = await auth_broker()
    plain = await LineClient.connect(broker.listeners["mqks"][0].port.getHost().port)
    plain.send("a1 auth ops ops-secret")       # users without [anonymous]: refused as before
    assert is_error(await plain.line(), "None")
    assert await closed(plain)


@pytest_twisted.ensureDeferred
async def test_without_the_option_auth_is_an_unknown_action(auth_broker):
    """As the original server: `{id} error {eid}` for the unknown action, the connection
    stays and serves what follows."""
    broker = await auth_broker(users=False, auth=False)
    for port in (broker.mqks_port, broker.auth_port):
        client = await LineClient.connect(port)
        client.send("a1 auth app app-secret")
        assert is_error(await client.line(), "a1")
        assert await client.request("p1 ping x") == "p1 ok x"
        client.transport.loseConnection()


def test_auth_listeners_need_a_users_file(tmp_path):
    from mqksbridge.bridge.config import ConfigError, load
    with pytest.raises(ConfigError, match="mqks.auth"):
        load(overrides={"mqks": {"listen": [AUTH_LISTENER], "auth": [AUTH_LISTENER]}})
    with pytest.raises(ConfigError, match="mqks.auth"):
        load(overrides={"mqks": {"auth": [AUTH_LISTENER]},
                        "security": {"users": users_file(tmp_path / "u.toml")}})
