"""Malamute meets MQKS on the shared core: queue `jobs` is service `jobs`, and stream
`mqks` carries MQKS events to Malamute readers."""
import re
import socket

import pytest_twisted
import zmq
from twisted.internet import task, threads

from mqksbridge.protocols.malamute import codec
from tests.support.waits import until


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
    got = await worker.recv(10)
    assert (got.command, got.address, got.sender, got.subject, got.tracker, got.frames) == (
        "SERVICE DELIVER", "jobs", "client", "resize", "t2", (b"img-2",))


@pytest_twisted.ensureDeferred
async def test_malamute_reader_of_stream_mqks_gets_mqks_publishes(server):
    reader = await server.malamute("reader")
    await reader.set_consumer("mqks", "^order\\.")
    publisher = await server.mqks()
    publisher.send("m1 publish order.created some data", "m2 publish user.created x")
    got = await reader.recv(10)
    assert (got.command, got.address, got.subject, got.frames) == (
        "STREAM DELIVER", "mqks", "order.created", (b"some data",))
    assert got.sender.startswith("127.0.0.1:")       # the MQKS client's id
    assert await publisher.request("s ping s") == "s ok s"   # m2 handled too
    await reader.nothing()


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


@pytest_twisted.ensureDeferred
async def test_a_malamute_requester_is_paced_to_a_slow_mqks_worker(running):
    """Flow control across doors over real sockets: the broker stops reading a Malamute
    client whose requests fill a queue faster than its MQKS consumer drains it. The flow
    limit is a tenth of the flood, so the backlog passes it whatever the machine's pace
    (at the default 10,000 a full suite run once peaked at 9,683 and never held)."""
    total, body = 30_000, b"r" * 100
    server = await running({"broker": {"flow_limit": total // 10}})
    mqks = await server.mqks()
    assert await mqks.request("w consume --confirm paced") == "w ok "
    port = mqks.transport.getHost().port
    conn = next(c for c in server.doors["mqks"].connections
                if c.transport.getPeer().port == port)
    conn.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    mqks.transport.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    queue, flow = server.broker.queues["paced"], server.broker.flow
    peak, tick = [0], [0]

    def pace():                               # the worker reads 2 ms in every 100
        tick[0] += 1
        transport = mqks.transport
        (transport.resumeProducing if tick[0] % 50 == 0 else transport.pauseProducing)()
    probe = task.LoopingCall(lambda: peak.__setitem__(0, max(peak[0], len(queue))))
    pacer = task.LoopingCall(pace)
    probe.start(0.002)
    pacer.start(0.002)
    requests = [codec.encode(codec.ServiceSend("paced", "job", "", 0, (b"%d-" % i + body,)))
                for i in range(total)]

    def flood():                              # a real DEALER, as fast as pyzmq sends
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 5000)
        sock.connect(server.endpoint())
        sock.send_multipart(codec.encode(codec.ConnectionOpen("requester")))
        assert codec.decode(sock.recv_multipart()) == codec.Ok()
        for frames in requests:
            sock.send_multipart(frames)
        sock.close()
    try:
        sending = threads.deferToThread(flood)
        await until(lambda: len(mqks.lines) >= total, 120, "every request")
        await sending
    finally:
        probe.stop()
        pacer.stop()
        mqks.transport.resumeProducing()
    assert flow.holds > 0 and not flow.held, peak
    assert peak[0] <= flow.limit + 64 * 1024 // len(body), peak
    got = [line.rsplit(b" ", 1)[1] for line in mqks.lines]
    assert got == [b"%d-" % i + body for i in range(total)]
