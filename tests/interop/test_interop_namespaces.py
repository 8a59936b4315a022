"""One namespace per kind, shared by every door (docs/mapping.md "Shared names"): a queue
named by several doors is one queue, the channel of its name sees it whoever made it, and
the MQKS stream is every door's stream."""
import json

from tests.interop.sides import STREAM, unique


def test_plain_queue_is_twino_queue_id_0_with_competing_consumers(net):
    jobs = unique("jobs")
    mqks = net.side("mqks").client()
    cid = mqks.consume(jobs)
    worker = net.side("twino").client()
    assert worker.join(jobs) == 0
    producer = net.side("twino").client()
    for i in range(4):
        producer.push(jobs, 0, b"job %d" % i)
    assert [mqks.recv().data for _ in range(2)] == [b"job 0", b"job 2"]
    got = [worker.recv(5) for _ in range(2)]
    assert [f.content for f in got] == [b"job 1", b"job 3"]
    assert {f.target for f in got} == {jobs} and {f.content_type for f in got} == {0}
    for frame in got:
        worker.ack(frame)
    mqks.delete_consumer(cid)


def test_twino_queue_is_mqks_queue_of_the_same_name(net):
    channel = unique("ch")
    twino_side = net.side("twino")
    twino_side.make_queue(f"{channel}/7", "round-robin")
    mqks = net.side("mqks").client()
    mqks.consume(f"{channel}/7")
    producer = twino_side.client()
    assert producer.push(channel, 7, b"hello", headers=[("Subject", "greeting")],
                         wait_ack=True).ok
    got = mqks.recv()
    assert (got.event, got.data, got.props["origin"]) == ("greeting", b"hello", "twino")
    assert producer.push(channel, 7, b"no subject", wait_ack=True).ok
    assert mqks.recv().event == f"{channel}/7"       # a push without `Subject`: the queue


def test_twino_routers_bind_the_mqks_stream_without_touching_mqks_bindings(net):
    event = unique("ev")
    mqks = net.side("mqks").client()
    mqks.consume(unique("q"), [event])
    twino_side = net.side("twino")
    (reader,) = twino_side.stream_readers(1, event)
    admin = twino_side.client()
    assert admin.operation(652, STREAM, [("Route-Method", "1")]).content_type == 481
    publisher = net.side("mqks").client()
    publisher.publish(event, "both")
    assert mqks.recv().data == b"both"
    assert reader.recv().frames == (b"both",)
    assert admin.operation(653, STREAM).content_type == 0         # the router goes...
    publisher.publish(event, "still")
    assert mqks.recv().data == b"still"                            # ...the stream stays
    reader.nothing()


def test_twino_router_publish_reaches_mqks_events(net):
    event = unique("ev")
    mqks = net.side("mqks").client()
    mqks.consume(unique("q"), [event])
    producer = net.side("twino").client()
    assert producer.publish_router(STREAM, b"routed", headers=[("Subject", event)],
                                   wait_ack=True).ok
    got = mqks.recv()
    assert (got.event, got.data, got.props["sender"]) == (event, b"routed", producer.client_id)


def test_direct_message_to_an_mqks_client_is_not_found(net):
    """MQKS clients own no mailbox: a Twino client that names one gets 404, as for anyone
    unknown."""
    mqks = net.side("mqks").client()
    target = mqks.eval("request['client']")
    asker = net.side("twino").client()
    assert asker.request(target, b"anyone?").content_type == 404
    listed = {c["Id"] for c in json.loads(asker.operation(631).content)}
    assert target in listed                              # the client list shows every door


def test_jobs_is_one_queue_for_an_mqks_consumer_a_malamute_worker_and_twino(net):
    """Consumers in join order MQKS, Malamute, Twino take strict turns on `jobs`, whichever
    door the requests come through."""
    jobs = unique("jobs")
    mqks = net.side("mqks").client()
    mqks.consume(jobs)
    worker = net.side("malamute").client()
    worker.set_worker(jobs)
    member = net.side("twino").client()
    assert member.join(jobs) == 0
    twino_producer = net.side("twino").client()
    malamute_producer = net.side("malamute").client()
    for i in range(3):
        twino_producer.push(jobs, 0, b"t%d" % i)
    twino_producer.ping()
    for i in range(3):
        malamute_producer.sendfor(jobs, "job", b"m%d" % i)
    malamute_producer.ping()
    assert [mqks.recv().data for _ in range(2)] == [b"t0", b"m0"]
    assert [worker.recv(10).frames for _ in range(2)] == [(b"t1",), (b"m1",)]
    got = [member.recv(10) for _ in range(2)]
    assert [f.content for f in got] == [b"t2", b"m2"]
    for frame in got:
        member.ack(frame)


def test_mailbox_addressed_by_malamute_address_name_or_type(net):
    owner = net.side("malamute").client()
    sender = net.side("twino").client()
    for target in (owner.address, f"@name:{owner.address}", "@type:malamute"):
        assert sender.send_direct(target, b"hi " + target.encode(), first_acquirer=True,
                                  wait_ack=True).ok
        got = owner.recv(10)
        assert (got.command, got.address, got.sender, got.frames) == (
            "MAILBOX DELIVER", owner.address, sender.client_id, (b"hi " + target.encode(),))


def test_mail_for_an_absent_malamute_address_waits_for_it(net):
    address = unique("away")
    mailer = net.side("malamute").client()
    mailer.sendto(address, "note", b"from malamute")
    mailer.ping()
    sender = net.side("twino").client()
    assert sender.send_direct(address, b"from twino", wait_ack=True).ok   # kept, as Malamute
    owner = net.side("malamute").client(address)
    assert [owner.recv(10).frames for _ in range(2)] == [(b"from malamute",), (b"from twino",)]


def test_malamute_mail_for_a_twino_client_id(net):
    member = net.side("twino").client()
    mailer = net.side("malamute").client()
    mailer.sendto(member.client_id, "note", b"hello", tracker="t-9")
    frame = member.recv(10)
    assert (frame.type, frame.message_id, frame.source, frame.content) == (
        0x12, "t-9", mailer.address, b"hello")
    assert frame.header("Subject") == "note" and frame.header("X-Origin") == "malamute"
