"""Malamute meets MQKS on the shared core: queue `jobs` is service `jobs`, and stream
`mqks` carries MQKS events to Malamute readers."""
import re

import pytest_twisted


@pytest_twisted.ensureDeferred
async def test_mqks_consumer_competes_for_a_malamute_service(server):
    mqks = await server.mqks()
    assert await mqks.request("c1 consume --confirm jobs") == "c1 ok "
    worker = await server.malamute("worker")
    await worker.set_worker("jobs", "")
    client = await server.malamute("client")
    await client.sendfor("jobs", "resize", b"img-1", tracker="t1")
    await client.sendfor("jobs", "resize", b"img-2", tracker="t2")
    line = await mqks.line()
    assert re.fullmatch(r"c1 ok \S+ event=resize,origin=malamute,sender=client img-1", line), line
    got = await worker.recv(2)
    assert (got.command, got.address, got.sender, got.subject, got.tracker, got.frames) == (
        "SERVICE DELIVER", "jobs", "client", "resize", "t2", (b"img-2",))


@pytest_twisted.ensureDeferred
async def test_malamute_reader_of_stream_mqks_gets_mqks_publishes(server):
    reader = await server.malamute("reader")
    await reader.set_consumer("mqks", "^order\\.")
    publisher = await server.mqks()
    publisher.send("m1 publish order.created some data", "m2 publish user.created x")
    got = await reader.recv(2)
    assert (got.command, got.address, got.subject, got.frames) == (
        "STREAM DELIVER", "mqks", "order.created", (b"some data",))
    assert got.sender.startswith("127.0.0.1:")       # the MQKS client's id
    assert await reader.recv(0.2) is None


@pytest_twisted.ensureDeferred
async def test_malamute_stream_send_reaches_a_bound_mqks_queue(server):
    """A Malamute writer on stream `mqks` publishes MQKS events."""
    mqks = await server.mqks()
    assert await mqks.request("c2 consume --confirm q2 temp.moscow") == "c2 ok "
    writer = await server.malamute("writer")
    await writer.set_producer("mqks")
    await writer.send("temp.moscow", b"\xff\x00")
    line = await mqks.line()
    assert re.fullmatch(r"c2 ok mlm-\d+ event=temp.moscow,origin=malamute,sender=writer,"
                        r"enc=base64 /wA=", line), line
