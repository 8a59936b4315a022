"""The codec properties again, over the wire: arbitrary subjects, bodies and headers
published through one door of the real broker arrive through another exactly as the
table promises (a few dozen examples per pair; the codec-level properties do the many)."""
import itertools

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from tests.interop.codecs import CODECS, core_subject, shown_headers
from tests.interop.conftest import Net
from tests.interop.sides import unique
from tests.interop.test_interop_codec_properties import published

PAIRS = list(itertools.permutations(sorted(CODECS), 2))


@pytest.fixture(scope="module")
def wire(broker):
    """One consumer per door on its own queue, one publisher per door, for every example."""
    net = Net(broker.ports)
    queues = {door: unique("wire") + "/1" for door in CODECS}
    consumers = {door: net.side(door).queue_consumers(queues[door], 1)[0] for door in CODECS}
    publishers = {door: net.side(door).publisher() for door in CODECS}
    yield net, queues, consumers, publishers
    net.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=st.sampled_from(PAIRS), data=st.data())
def test_what_crosses_the_wire_is_what_the_table_promises(wire, pair, data):
    net, queues, consumers, publishers = wire
    src, dst = pair
    p = data.draw(published(src))
    subject = core_subject(src, p)            # Malamute: zrex never matches "", no NUL
    assume(dst != "malamute" or (subject and "\x00" not in subject))
    side, pub = net.side(src), publishers[src]
    side.publish_queue(pub, queues[dst], p.subject, p.frames,
                       headers=dict(p.headers) if src == "twino" else None)
    got = consumers[dst].recv()
    assert (got.subject, got.frames) == (core_subject(src, p), p.frames)
    assert got.sender == pub.sender
    assert got.headers == shown_headers(src, dst, p)
    if CODECS[dst].shows_origin:
        assert got.origin == src
