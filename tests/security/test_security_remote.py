"""Secure by default: without a users file only loopback peers are served, unless
`security.allow_remote_anonymous = true`. Each door refuses another host in its own terms
(MQKS an error line, Twino 401 at the hello, Malamute a ZMTP ERROR) and the log says which
key to set. The decision per peer address is tested on every door's listener factory; a
real peer on another host comes from a network namespace joined by a veth pair (as root:
CI runs as root; TEST-NET-1 addresses, 192.0.2.0/24, inside the test's own namespace)."""
import os
import random
import subprocess
import sys
import textwrap

import pytest
import pytest_twisted
from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.threads import deferToThread
from twisted.internet.testing import StringTransport

from mqksbridge.bridge.listeners import Refused
from mqksbridge.bridge.security import Security, is_local
from mqksbridge.bridge.security.users import hash_password
from mqksbridge.protocols.twino.codec import PROTOCOL, decode
from mqksbridge.protocols.zmtp import codec as zmtp
from tests.support.waits import until

REMOTE = [IPv4Address("TCP", "192.0.2.7", 40000), IPv6Address("TCP", "2001:db8::7", 40000),
          IPv4Address("TCP", "10.1.2.3", 1)]
LOCAL = [IPv4Address("TCP", "127.0.0.1", 40000), IPv4Address("TCP", "127.8.9.10", 1),
         IPv6Address("TCP", "::1", 40000), IPv6Address("TCP", "::ffff:127.0.0.1", 2),
         UNIXAddress(b"/tmp/mqks.sock"), UNIXAddress(None)]


def test_loopback_and_unix_peers_are_local_others_are_not():
    assert all(is_local(address) for address in LOCAL)
    assert not any(is_local(address) for address in REMOTE)


def test_the_filter_is_off_with_users_or_when_remote_peers_are_allowed():
    assert Security(None).peer_filter("mqks") is not None
    assert Security(None, allow_remote=True).peer_filter("mqks") is None
    assert Security(object()).peer_filter("mqks") is None      # a users file


def factories(broker):
    return {"mqks": broker.listeners["mqks"][0].factory,
            "twino": broker.listeners["twino"][0].factory,
            "malamute": broker.doors["malamute"].transport}


def refusal_bytes(factory, address):
    """What a connection from `address` is sent at once, and whether it is closed; None
    when it gets a real connection."""
    built = factory.buildProtocol(address)
    if not isinstance(built, Refused):
        return None
    transport = StringTransport(peerAddress=address)
    built.makeConnection(transport)
    assert transport.disconnecting
    return transport.value()


@pytest_twisted.ensureDeferred
async def test_each_door_refuses_other_hosts_in_its_own_terms(running, logged):
    broker = await running({})
    built = factories(broker)
    for address in REMOTE:
        mqks = refusal_bytes(built["mqks"], address)
        assert mqks is not None and mqks.startswith(b"None error ") and mqks.endswith(b"\n")
        twino = refusal_bytes(built["twino"], address)
        assert twino is not None and twino.startswith(PROTOCOL)
        malamute = refusal_bytes(built["malamute"], address)
        assert malamute is not None and malamute.startswith(zmtp.GREETING)
        assert b"ERROR" in malamute
    for address in LOCAL:
        for door, factory in built.items():
            assert refusal_bytes(factory, address) is None, (door, address)
    counters = broker.broker.counters
    assert [counters[f"security.{door}.remote"] for door in built] == [3, 3, 3]
    lines = [text for text in logged if "so far" in text and
             "set security.allow_remote_anonymous = true" in text]
    assert len(lines) == 3 and all("refused 192.0.2.7 (1 so far)" in text for text in lines)


@pytest_twisted.ensureDeferred
async def test_twino_refusal_of_another_host_is_401(running):
    broker = await running({})
    data = refusal_bytes(factories(broker)["twino"], REMOTE[0])
    assert decode(data[len(PROTOCOL):]).content_type == 401


@pytest_twisted.ensureDeferred
async def test_allowed_remote_peers_and_users_files_turn_the_filter_off(running, tmp_path):
    allowed = await running({"security": {"allow_remote_anonymous": True}})
    users = tmp_path / "users.toml"
    users.write_text(f'[users.a]\npassword = "{hash_password("x", n=1 << 10)}"\n')
    with_users = await running({"security": {"users": str(users)}})
    for broker in (allowed, with_users):
        for door, factory in factories(broker).items():
            assert refusal_bytes(factory, REMOTE[0]) is None, door


# -- a real peer on another host ----------------------------------------------------------

class Namespace:
    """A network namespace joined to this host by a veth pair: the host side has
    192.0.2.(4k+1), the namespace 192.0.2.(4k+2) (a /30 of TEST-NET-1 picked at random,
    so parallel runs do not collide)."""

    def __init__(self):
        tag = f"{os.getpid() % 100000}{random.randrange(1000)}"
        self.name, self.host_link, self.peer_link = f"mqs{tag}", f"mqh{tag}", f"mqp{tag}"
        self.made = []

    def run(self, *args):
        subprocess.run(args, check=True, capture_output=True, timeout=30)

    def create(self):
        self.run("ip", "netns", "add", self.name)
        self.made.append(("ip", "netns", "del", self.name))
        self.run("ip", "link", "add", self.host_link, "type", "veth", "peer", "name",
                 self.peer_link)
        self.made.append(("ip", "link", "del", self.host_link))
        self.run("ip", "link", "set", self.peer_link, "netns", self.name)
        for _ in range(20):
            k = random.randrange(64)
            host, peer = f"192.0.2.{4 * k + 1}", f"192.0.2.{4 * k + 2}"
            if subprocess.run(["ip", "addr", "add", f"{host}/30", "dev", self.host_link],
                              capture_output=True, timeout=30).returncode == 0:
                break
        else:
            raise AssertionError("no free /30 in 192.0.2.0/24")
        self.host, self.peer = host, peer
        self.run("ip", "link", "set", self.host_link, "up")
        inside = ("ip", "netns", "exec", self.name)
        self.run(*inside, "ip", "addr", "add", f"{peer}/30", "dev", self.peer_link)
        self.run(*inside, "ip", "link", "set", self.peer_link, "up")
        self.run(*inside, "ip", "link", "set", "lo", "up")
        return self

    def remove(self):
        for command in reversed(self.made):
            subprocess.run(command, capture_output=True, timeout=30)

    def python(self, script):
        """Run a Python script inside the namespace (the venv's Python); its stdout."""
        done = subprocess.run(["ip", "netns", "exec", self.name, sys.executable, "-c",
                               textwrap.dedent(script)], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()


@pytest.fixture
def namespace():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (CI runs as root)")
    made = Namespace()
    try:
        yield made.create()
    finally:
        made.remove()


CLIENT = """
import socket
def first(port, send, stop):
    s = socket.create_connection(("{host}", port), timeout=10)
    s.sendall(send)
    data = b""
    while not (stop and data.endswith(b"\\n")):
        try:
            chunk = s.recv(4096)
        except (socket.timeout, ConnectionResetError):
            break
        if not chunk:
            break
        data += chunk
    s.close()
    return data
for port, send, stop in {tries!r}:
    print(repr(first(port, send, stop)))
"""


def remote_client(namespace, tries):
    """What a client inside the namespace receives from each (port, bytes it sends, stop
    at the first line?) until the broker closes the connection."""
    script = CLIENT.format(host=namespace.host, tries=tries)
    return [eval(line) for line in namespace.python(script).splitlines()]   # noqa: S307


@pytest_twisted.ensureDeferred
async def test_a_real_peer_on_another_host_is_refused_by_every_door(namespace, running,
                                                                     logged):
    host = namespace.host
    listen = {"mqks": {"listen": [f"tcp:0:interface={host}"]},
              "twino": {"listen": [f"tcp:0:interface={host}"]},
              "malamute": {"listen": [f"tcp://{host}:*"]}}
    broker = await running(listen)
    mqks, twino, malamute = await deferToThread(remote_client, namespace, [
        (broker.port("mqks"), b"p ping remote\n", False), (broker.port("twino"), b"", False),
        (broker.port("malamute"), b"", False)])
    assert mqks.startswith(b"None error ") and b" ok " not in mqks          # then closed
    assert twino.startswith(PROTOCOL)
    assert malamute.startswith(zmtp.GREETING) and b"ERROR" in malamute
    await until(lambda: sum(broker.broker.counters[f"security.{door}.remote"]
                            for door in ("mqks", "twino", "malamute")) == 3)
    assert any(namespace.peer in text and "security.allow_remote_anonymous" in text
               for text in logged)
    served = await running({**listen, "security": {"allow_remote_anonymous": True}})
    (mqks,) = await deferToThread(remote_client, namespace,
                                  [(served.port("mqks"), b"p ping remote\n", True)])
    assert mqks == b"p ok remote\n"
