"""Every messaging pattern for every ordered pair of doors, over the real broker process.

Each test publishes through one door with our client and asserts exactly what arrives
through the other (docs/mapping.md). Where a pattern has no meaning for a pair, the test
asserts the documented mapping instead (the nearest equivalent, or the refusal).
"""
import itertools
import os

import pytest

from mqksbridge.bridge.clients.mqks import MqksError
from tests.interop.conftest import SIDES
from mqksbridge.protocols.twino.codec import Frame, MessageType
from tests.interop.sides import WAIT, Refused, nothing, unique

PAIRS = [(a, b) for a, b in itertools.permutations(sorted(SIDES), 2)]
PAIR_IDS = [f"{a}-to-{b}" for a, b in PAIRS]


@pytest.fixture(params=PAIRS, ids=PAIR_IDS)
def pair(request, net):
    src, dst = request.param
    return net.side(src), net.side(dst)


def check_meta(got, src, dst, pub, mid):
    """Origin door, publisher and id arrive where the consumer's protocol shows them (a
    Malamute publish gets its id from the broker: `mlm-N`)."""
    assert got.sender == pub.sender
    if dst.shows_origin:
        assert got.origin == src.door
    if dst.shows_id:
        assert got.id == mid if mid is not None else got.id.startswith("mlm-")


def publish(src, pub, subject, frames, queue=None, **kwargs):
    if queue is None:
        return src.publish_stream(pub, subject, frames, **kwargs)
    return src.publish_queue(pub, queue, subject, frames, **kwargs)


def test_pubsub_reaches_every_reader(pair):
    src, dst = pair
    subject = unique("ev.")
    readers = dst.stream_readers(3, subject)
    pub = src.publisher()
    mid = publish(src, pub, subject, (b"hello world",))
    for reader in readers:
        got = reader.recv()
        assert (got.subject, got.frames) == (subject, (b"hello world",))
        check_meta(got, src, dst, pub, mid)
    for reader in readers:
        reader.nothing()


def test_competing_consumers_share_one_queue_strictly_in_turn(pair):
    src, dst = pair
    queue = unique("ch") + "/1"
    consumers = dst.queue_consumers(queue, 2)
    pub = src.publisher()
    ids = [publish(src, pub, "work", (b"job %d" % i,), queue) for i in range(4)]
    for k, consumer in enumerate(consumers):
        got = [consumer.recv() for _ in range(2)]
        assert [g.frames for g in got] == [(b"job %d" % i,) for i in (k, k + 2)]
        for g, i in zip(got, (k, k + 2)):
            check_meta(g, src, dst, pub, ids[i])
        consumer.nothing()


BODIES = {
    "binary": bytes(range(256)),
    "newlines-and-tabs": b"line 1\nline 2\r\n\tindented\tcell\n",
    "empty": b"",
    "1MiB": os.urandom(1 << 20),
}


def mqks_can_publish(body):
    """An MQKS publish is one line: no LF or TAB, not empty, no trailing whitespace."""
    return body and b"\n" not in body and b"\t" not in body and body[-1:] not in b" \r\x0b\x0c"


@pytest.mark.parametrize("kind", BODIES)
def test_body_arrives_byte_for_byte(pair, kind):
    src, dst = pair
    body = BODIES[kind]
    queue = unique("ch") + "/1"
    (consumer,) = dst.queue_consumers(queue, 1)
    pub = src.publisher()
    if src.door == "mqks" and not mqks_can_publish(body):
        if kind == "binary":                # everything but LF and TAB travels as is
            body = body.replace(b"\n", b"").replace(b"\t", b"")
        elif kind == "1MiB":
            body = body.replace(b"\n", b"x").replace(b"\t", b"x")[:-1] + b"!"
        else:                               # refused, nothing sent
            with pytest.raises(ValueError if b"\n" in body else MqksError):
                src.publish_queue(pub, queue, "ev", (body,))
            if b"\t" in body:                # the door refuses a TAB with its error
                with pytest.raises(MqksError):
                    src.publish_queue(pub, queue, "ev", (body.replace(b"\n", b" "),))
            consumer.nothing()
            return
    mid = publish(src, pub, "ev", (body,), queue)
    got = consumer.recv()
    assert got.frames == (body,)
    check_meta(got, src, dst, pub, mid)


def test_multi_frame_body_keeps_its_frames(pair):
    src, dst = pair
    queue = unique("ch") + "/1"
    (consumer,) = dst.queue_consumers(queue, 1)
    pub = src.publisher()
    frames = (b"head", b"", b"tail \x00\xff") if src.multi_frame else (b"one frame only",)
    mid = publish(src, pub, "parts", frames, queue)
    got = consumer.recv()
    assert got.frames == frames
    check_meta(got, src, dst, pub, mid)
    if dst.door == "mqks" and len(frames) > 1:
        assert (got.raw.props["enc"], got.raw.props["frames"]) == ("base64", "3")
    if dst.door == "twino":
        assert got.raw.header("Frame-Lengths") == (None if len(frames) == 1 else "4,0,7")


def test_non_ascii_subject(pair):
    src, dst = pair
    subject = "événement.☃." + unique()
    readers = dst.stream_readers(1, subject)
    pub = src.publisher()
    mid = publish(src, pub, subject, (b"x",))
    got = readers[0].recv()
    assert got.subject == subject
    check_meta(got, src, dst, pub, mid)


def test_headers_arrive_where_the_consumer_can_show_them(pair):
    src, dst = pair
    queue = unique("ch") + "/1"
    (consumer,) = dst.queue_consumers(queue, 1)
    pub = src.publisher()
    headers = {"X-Trace": "a b,c=d%e", "Reply-To": "me"} if src.headers else None
    publish(src, pub, "with.headers", (b"x",), queue, headers=headers)
    got = consumer.recv()
    sent = {"Subject": "with.headers", **headers} if src.subject_header else headers
    if not src.headers:
        assert got.headers == {}            # only the door's own metadata, nothing else
    elif dst.headers or dst.door == "mqks":
        assert got.headers == sent
    else:
        assert got.headers == {}            # the target has no place for headers
    if dst.door == "mqks":
        expected = {"event", "origin", "sender"} | {f"h.{k}" for k in got.headers}
        assert set(got.raw.props) == expected
    if dst.door == "twino":
        own = [] if src.subject_header or not headers else list(headers)
        assert [k for k, _ in got.raw.headers] == ["Subject", "X-Origin", *own]


def test_direct_message_to_one_client(pair):
    src, dst = pair
    subject = unique("direct.")
    if dst.door == "textqueue":             # files own no mailbox: nearest, a queue only
        queue = unique("ch") + "/1"         # this file consumes
        (owner,) = dst.queue_consumers(queue, 1)
        pub = src.publisher()
        mid = src.publish_queue(pub, queue, subject, (b"for you",))
        got = owner.recv()
        assert (got.subject, got.frames) == (subject, (b"for you",))
        check_meta(got, src, dst, pub, mid)
        return
    if not dst.mailboxes:                   # MQKS clients own no mailbox
        mqks = dst.client()
        target = dst.identity(mqks)
        if src.door == "twino":             # an unknown client id, as upstream: 404
            assert src.publisher().request(target, b"x").content_type == 404
        elif src.door == "textqueue":       # refused: the record is flipped to `!`
            with pytest.raises(Refused):
                src.send_direct(src.publisher(), target, subject, (b"x",))
        else:                               # Malamute keeps mail for whoever opens that address
            src.send_direct(src.publisher(), target, subject, (b"later",))
            assert src.client(target).recv(WAIT).frames == (b"later",)
        nothing(mqks)
        return
    owner, address = dst.mailbox_owner()
    other, _ = dst.mailbox_owner()
    pub = src.publisher()
    if not src.sends_direct:                # nearest equivalent: a queue only it consumes
        queue = unique("ch") + "/1"
        (owner,) = dst.queue_consumers(queue, 1)
        mid = src.publish_queue(pub, queue, subject, (b"for you",))
    else:
        mid = src.send_direct(pub, address, subject, (b"for you",))
    got = owner.recv()
    assert (got.subject, got.frames) == (subject, (b"for you",))
    check_meta(got, src, dst, pub, mid)
    if dst.door == "malamute" and src.sends_direct:
        assert got.tracker == mid           # the message id, for the reply to name
    other.nothing()


NATIVE = [("malamute", "twino"), ("twino", "malamute")]


@pytest.mark.parametrize("pair", NATIVE, ids=[f"{a}-to-{b}" for a, b in NATIVE],
                         indirect=True)
def test_request_reply_between_mailboxes(pair):
    """Twino asks (PendingResponse), Malamute answers by sendto(sender, tracker): the Twino
    client gets its Response. Malamute asks with a tracker, Twino responds: the Malamute
    client gets the reply with its tracker."""
    requester, answerer = pair
    owner, address = answerer.mailbox_owner()
    asker = requester.publisher()
    if requester.door == "twino":
        asker.send_frame(Frame(MessageType.DIRECT_MESSAGE, pending_response=True,
                               message_id="req-1", target=address,
                               headers=[("Subject", "question")], content=b"6*7?"))
        question = owner.recv()
        assert (question.subject, question.frames, question.tracker) == (
            "question", (b"6*7?",), "req-1")
        owner.client.sendto(question.sender, "answer", b"42", tracker=question.tracker)
        reply = asker.recv(WAIT)
        assert (reply.type, reply.message_id, reply.content) == (
            MessageType.RESPONSE, "req-1", b"42")
    else:
        asker.sendto(address, "question", b"6*7?", tracker="req-2")
        question = owner.recv()
        assert (question.id, question.subject, question.sender) == (
            "req-2", "question", asker.address)
        owner.client.respond(question.raw, b"42")
        reply = asker.recv(WAIT)
        assert (reply.command, reply.sender, reply.tracker, reply.frames) == (
            "MAILBOX DELIVER", owner.client.client_id, "req-2", (b"42",))


def test_request_reply_through_queues(pair):
    """What every pair shares: the request names a reply queue, the worker answers there."""
    requester, worker = pair
    reply_queue, work_queue = unique("reply") + "/1", unique("work") + "/1"
    (replies,) = requester.queue_consumers(reply_queue, 1)
    (jobs,) = worker.queue_consumers(work_queue, 1)
    asking, answering = requester.publisher(), worker.publisher()
    publish(requester, asking, "ask", (reply_queue.encode(),), work_queue)
    request = jobs.recv()
    assert request.sender == asking.sender
    assert request.origin == requester.door or not worker.shows_origin
    mid = publish(worker, answering, "answer", (b"42",), request.frames[0].decode())
    got = replies.recv()
    assert (got.subject, got.frames) == ("answer", (b"42",))
    check_meta(got, worker, requester, answering, mid)


def test_manual_ack_and_reject(pair):
    """MQKS: reject sends it to the back with retry+1, to the other consumer. Twino has no
    reject: a consumer that leaves unacked hands it back, a nack is final. Malamute has no
    acks: a worker that took a request has it for good. Ids stay."""
    src, dst = pair
    queue = unique("ch") + "/1"
    first, second = dst.queue_consumers(queue, 2, manual_ack=True)
    pub = src.publisher()
    kwargs = {"wait_ack": False} if src.door == "twino" else {}
    mid = src.publish_queue(pub, queue, "task", (b"do it",), **kwargs)
    got = first.recv()
    assert got.frames == (b"do it",) and got.retry == 0
    if dst.door == "malamute":
        first.close()
        second.nothing()
        return
    if dst.rejects:
        first.reject(got)
    else:
        first.close()
    again = second.recv()
    assert again.frames == (b"do it",)
    check_meta(again, src, dst, pub, mid)
    assert again.retry == (1 if dst.rejects else 0)
    second.ack(again)
    if dst.door == "twino":
        src.publish_queue(pub, queue, "task", (b"refused",), **kwargs)
        second.nack(second.recv())
    second.nothing()
    if dst.rejects:
        first.nothing()
