"""The MQKS door converts a turn's foreign deliveries together (convert.mqks.deliveries,
through Outbox.defer): it must give exactly the bytes the one-message converter gives,
in order, whatever mix of messages a turn holds, and deferred output must keep its
place among direct writes and count toward the high-water mark."""
from hypothesis import given, settings, strategies as st
from twisted.internet.testing import StringTransport

from mqksbridge.bridge.convert import mqks
from mqksbridge.bridge.outbox import Outbox
from mqksbridge.core import Message

# Bodies and ids close to the batch shortcut's edges: blanks and NULs next to each other
# (the shortcut joins bodies with NUL), line characters, non-ASCII, empty.
edge_bytes = st.sampled_from(b"ax -%,=\x00\x0b\x0c\t\r\n\x7f\xc3\xa9")
bodies = st.one_of(st.binary(max_size=24), st.lists(edge_bytes, max_size=12).map(bytes),
                   st.just(b"0-" + b"x" * 18))
safe_ids = st.from_regex(r"\A[a-z]{3}-[0-9]{1,6}\Z")
ids = st.one_of(safe_ids, st.text(max_size=10))
names = st.sampled_from(["req", "temp.moscow", "a b", "x,y=z", "été", ""])


@st.composite
def messages(draw):
    origin = draw(st.sampled_from(["malamute", "twino", "mqks"]))
    frames = draw(st.one_of(st.tuples(bodies), st.lists(bodies, min_size=2, max_size=3)
                            .map(tuple)))
    headers = draw(st.one_of(st.none(), st.just({}), st.just({"k": "v w"})))
    raw = None
    if origin == "mqks":
        raw = b"%s event=%s %s\n" % (draw(ids).encode("utf-8", "surrogateescape"),
                                     b"req", frames[0])
    return Message(draw(ids), draw(names), frames, headers, draw(names), origin, "", False,
                   None, 0.0, raw, "mqks" if raw is not None else None)


# Prefixes and heads may hold '%' (a consumer id, a percent-encoded subject): the shared
# shortcut formats lines with %, so it must escape both.
prefixes = st.sampled_from([b"c1 ok ", b"c2 ok ", b"c%s ok "])
items = st.lists(st.tuples(prefixes, messages(),
                           st.sampled_from([0, 0, 0, 1, 3])), max_size=12)
# A turn of plain foreign traffic: what the shortcut is for.
plain = st.lists(st.tuples(prefixes,
                           st.builds(lambda i, s, b, o: Message(i, s, (b,), None, "writer", o),
                                     safe_ids, names, bodies,
                                     st.sampled_from(["malamute", "twino"])),
                           st.just(0)), min_size=1, max_size=20)


def one_by_one(batch):
    return b"".join(prefix + mqks.delivery(message, retry) for prefix, message, retry in batch)


@settings(max_examples=400, deadline=None)
@given(items)
def test_a_batch_is_the_one_by_one_conversion_joined(batch):
    assert mqks.deliveries(batch) == one_by_one(batch)


@settings(max_examples=400, deadline=None)
@given(plain)
def test_plain_foreign_turns_match_too(batch):
    assert mqks.deliveries(batch) == one_by_one(batch)


def test_a_trailing_blank_or_a_line_break_in_one_body_is_still_encoded():
    ok = Message("mlm-1", "req", (b"fine",), None, "w", "malamute")
    for bad in (b"ends in blank ", b"two\nlines", b"tab\there", b"\xff\xfe"):
        batch = [(b"c ok ", ok, 0), (b"c ok ", Message("mlm-2", "req", (bad,), None, "w",
                                                       "malamute"), 0)]
        out = mqks.deliveries(batch)
        assert out == one_by_one(batch)
        assert b"enc=base64" in out and out.count(b"\n") == 2


class Client:
    paused = False

    def pause(self):
        self.paused = True

    def resume(self):
        self.paused = False


class Scheduler:
    def __init__(self):
        self.marked = []

    def mark(self, outbox):
        self.marked.append(outbox)

    def enrol(self):
        return 0


def outbox(high_water=1000):
    transport = StringTransport()
    box = Outbox(transport, Scheduler(), Client(), high_water,
                 render=lambda items: b"".join(b"<%s>" % i for i in items))
    return box, transport


def test_deferred_output_keeps_its_place_among_writes():
    box, transport = outbox()
    box.write(b"a")
    box.defer(b"x", 3)
    box.defer(b"y", 3)
    box.write(b"b")
    box.defer(b"z", 3)
    box.flush()
    assert transport.value() == b"a<x><y>b<z>"
    assert box.scheduler.marked == [box]          # one flush per turn, however many calls


def test_defer_counts_toward_the_high_water_mark_and_close_renders():
    box, transport = outbox(high_water=10)
    box.defer(b"big", 8)
    assert not box.client.paused
    box.defer(b"more", 8)
    assert box.client.paused
    box.close()
    assert transport.value() == b"<big><more>"


def test_a_full_transport_keeps_deferred_items_until_it_drains():
    box, transport = outbox()
    box.pauseProducing()
    box.defer(b"x", 1)
    box.flush()
    assert transport.value() == b""
    box.resumeProducing()
    assert transport.value() == b"<x>"
