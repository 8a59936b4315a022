"""'to MQKS' conversion: whatever a foreign message carries survives the MQKS line."""
from hypothesis import given, settings, strategies as st

from mqksbridge.bridge.clients.mqks import parse_delivery
from mqksbridge.bridge.convert.mqks import delivery as mqks_delivery
from mqksbridge.bridge.convert.mqks import delivery_tail, unpct
from mqksbridge.bridge.convert.mqks import message as mqks_message
from mqksbridge.core import Message

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
names = text.filter(lambda s: s != "")


@settings(max_examples=300, deadline=None)
@given(subject=names, frames=st.lists(st.binary(max_size=200), min_size=1, max_size=4),
       headers=st.dictionaries(names, text, max_size=4), origin=st.sampled_from(["malamute", "twino"]),
       sender=text, mid=names, retry=st.integers(0, 5))
def test_foreign_message_round_trips_through_an_mqks_line(subject, frames, headers, origin,
                                                         sender, mid, retry):
    message = Message(mid, subject, tuple(frames), headers or None, sender, origin)
    line = b"c1 ok " + delivery_tail(message, retry)
    assert line.count(b"\n") == 1 and line.endswith(b"\n")
    got = parse_delivery(line[:-1])
    assert got.consumer == "c1" and got.id == mid and got.event == subject
    assert got.frames == frames
    assert got.headers == headers
    assert got.props["origin"] == origin
    assert got.props.get("sender", "") == sender
    assert got.retry == retry


def test_plain_text_body_is_not_encoded():
    line = b"c ok " + delivery_tail(Message("m1", "jobs", (b"hello world",), None, "alice", "twino"), 0)
    assert line == b"c ok m1 event=jobs,origin=twino,sender=alice hello world\n"


def test_body_with_newline_and_binary_go_base64():
    line = delivery_tail(Message("m", "e", (b"a\nb",), None, "", "malamute"), 0)
    assert line == b"m event=e,origin=malamute,enc=base64 YQpi\n"
    line = delivery_tail(Message("m", "e", (b"x", b"\xff"), None, "", "malamute"), 2)
    assert line == b"m event=e,retry=2,origin=malamute,enc=base64,frames=2 eA== /w==\n"


def test_same_door_delivery_is_the_original_line_also_on_retry():
    """MQKS-origin messages are never re-encoded: ids, events and bodies stay as sent."""
    message = mqks_message(b"m%1,x", "e=v", b"\xff data", "client")
    assert mqks_delivery(message, 0) == b"m%1,x event=e=v \xff data\n"
    assert mqks_delivery(message, 2) == b"m%1,x event=e=v,retry=2 \xff data\n"


def test_a_foreign_id_shown_percent_encoded_decodes_back():
    line = b"c ok " + delivery_tail(Message("a b,c", "e", (b"x",), None, "", "twino"), 0)
    shown = line.split(b" ")[2]
    assert shown == b"a%20b%2Cc" and unpct(shown) == b"a b,c"
