"""`tcp_nodelay = false` on a door leaves Nagle on for its connections (the default, on,
is checked by each door's own tests: test_connections_do_not_wait_for_delayed_acks)."""
import socket

import pytest_twisted

from tests.support.waits import until

OFF = {"tcp_nodelay": False}


def nodelay(conn):
    return conn.transport.getHandle().getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


@pytest_twisted.ensureDeferred
async def test_each_network_door_can_leave_nagle_on(running):
    server = await running({"mqks": OFF, "malamute": OFF, "twino": OFF})
    line = await server.mqks()
    assert await line.request("p1 ping x") == "p1 ok x"
    [mqks] = server.doors["mqks"].connections
    await server.twino(name="n", type="t")
    [twino] = server.doors["twino"].connections
    await server.malamute_raw("addr")
    router = server.doors["malamute"].transport
    await until(lambda: router.peers, what="the Malamute peer")
    [malamute] = router.peers.values()
    assert [nodelay(c) for c in (mqks, twino, malamute)] == [0, 0, 0]
    await line.close()
