"""Our journal record layout (specs/textqueue.md, "Our journal record"), on real files."""
import pathlib
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqksbridge.core import Message
from mqksbridge.protocols.textqueue import Parser, Record, TextQueueError, journal, scan
from mqksbridge.protocols.textqueue.journal import Envelope, Settle
from mqksbridge.protocols.textqueue.records import Reason
from tests.textqueue.strategies import apply_edits, soup, write_file

DATA = pathlib.Path(__file__).resolve().parent.parent / "data"
BASE = 1_718_306_771_923
TYPICAL = Envelope("6f1c2a9be03d4471", "order.new1", (b"hello world, twenty!",), None,
                   "127.0.0.1:51012.7-abcdefg", "mqks", created_at=(BASE + 3200) / 1000)

_strings = st.text(st.characters(blacklist_categories=("Cs",))
                   | st.sampled_from("\udc80\udcff% :&=\n\r\t\x00\u00e9"), max_size=12)
_frame = st.binary(max_size=24) | _strings.map(lambda t: t.encode("utf-8", "surrogateescape"))
_ms = st.integers(BASE - 10**10, BASE + 10**10)


@st.composite
def envelopes(draw):
    created = draw(_ms)
    status = draw(st.sampled_from("-=!#"))
    settled = None
    if draw(st.booleans()):
        after = draw(st.integers(0, 9_999_999) | st.integers(0, 10**13))
        settled = Settle(draw(st.sampled_from(sorted(journal.CODE_OF))), (created + after) / 1000)
    return Envelope(
        draw(_strings), draw(_strings),
        tuple(draw(st.lists(_frame, min_size=1, max_size=1) | st.lists(_frame, max_size=3))),
        draw(st.none() | st.dictionaries(_strings, _strings, min_size=1, max_size=3)),
        draw(_strings), draw(st.sampled_from(["", "mqks", "malamute", "twino", "textqueue", "a:b"])),
        draw(_strings), draw(st.booleans()), created / 1000,
        draw(st.none() | _ms.map(lambda ms: ms / 1000)), status,
        draw(st.integers(0, 2000)), settled)


def expected(env):
    """What a round trip keeps: retry saturates, long settle times lose precision."""
    settled = env.settled
    if settled is not None:
        after = max(round(settled.at * 1000) - round(env.created_at * 1000), 0)
        if after >= 10**9:
            after = min(after // 3_600_000, 999_999) * 3_600_000
        elif after >= 10**7:
            after = after // 1000 * 1000
        settled = Settle(settled.reason, (round(env.created_at * 1000) + after) / 1000)
    return Envelope(env.id, env.subject, env.frames, env.headers, env.sender, env.origin,
                    env.tracker, env.priority, env.created_at, env.expires_at, env.status,
                    min(env.retry, 999), settled)


def segment(envs, base=BASE, queue="jobs"):
    return journal.encode_header(queue, 7, base) + b"".join(
        journal.encode_message(e, base_ms=base, status=e.status, retry=e.retry, settled=e.settled)
        for e in envs)


def read_segment(data):
    """Header and records of a whole segment file (its last record taken as whole)."""
    result = scan(data)
    records = list(result.records()) + ([result.incomplete.record()] if result.incomplete else [])
    header = journal.decode_header(records[0])
    return header, records[1:]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(envelopes(), min_size=1, max_size=4), st.integers(0, BASE * 2))
def test_every_envelope_survives_a_file(tmp_path_factory, envs, base):
    path = write_file(tmp_path_factory.mktemp("j") / "jobs.000007.tq", segment(envs, base))
    header, records = read_segment(path.read_bytes())
    assert header == journal.Header("jobs", 7, base, journal.LAYOUT)
    assert [journal.decode(r, header.created_ms) for r in records] == [expected(e) for e in envs]
    for record, env in zip(records, envs):
        assert journal.checksum_state(record) == "ok"
        full = journal.decode(record, base)
        fields = journal.decode_fields(record, journal.FIELDS, base)
        assert fields[:-1] == tuple(getattr(full, name) for name in journal.FIELDS[:-1])
        assert fields[-1] == record.body_bytes       # the body as stored
        assert all(v.text.isascii() for v in record.variables)
        assert not record.problems


def test_a_core_message_goes_in_as_it_is():
    message = Message("m-1", "orders.eu", (b"a", b"\x00b"), {"k": "v w"}, "c1", "twino",
                      "trk", True, 1_700_000_010.5, 1_700_000_000.5)   # expires, created
    record = journal.encode_message(message)
    env = journal.decode(record.rstrip(b"\n"))
    assert (env.id, env.subject, env.frames, env.headers, env.sender, env.origin, env.tracker,
            env.priority, env.created_at, env.expires_at) == (
        "m-1", "orders.eu", (b"a", b"\x00b"), {"k": "v w"}, "c1", "twino", "trk", True,
        1_700_000_000.5, 1_700_000_010.5)
    assert b"\\enc=base64\n\\frames=2\n" in record and b"\\headers=k=v%20w\n" in record


def test_the_typical_message_fits_the_size_budget():
    budget = 1.5 * 20 + 100
    record = journal.encode_message(TYPICAL, base_ms=BASE)
    assert len(record) == 127 <= budget
    # `t` grows with the segment's age: 7 digits (2.7 hours) still fit.
    old = Envelope(**{**_fields(TYPICAL), "created_at": (BASE + 9_999_999) / 1000})
    assert len(journal.encode_message(old, base_ms=BASE)) == 130 <= budget
    assert record == (b"-hello world, twenty!\n\\i=6f1c2a9be03d4471\n\\s=order.new1\n"
                      b"\\f=mqks:127.0.0.1:51012.7-abcdefg\n\\t=3200\n\\r=0  \n\\e=        \n"
                      b"\\c=" + record[-7:-1] + b"\n")


def _fields(env):
    return {name: getattr(env, name) for name in Envelope.__slots__}


@pytest.mark.parametrize("body, stored", [
    (b"plain", b"-plain\n"),
    (b"two\nlines\n", b"-two\n lines\n \n"),
    ("tab\t form\x0c sep\u2028 nel\x85 \U0001F600".encode(), None),
    (b"nul\x00", b"-bnVsAA==\n"),
    (b"cr\r\n", b"-Y3INCg==\n"),
    (b"\xff\xfe", b"-//4=\n"),
])
def test_which_bodies_are_text(body, stored):
    record = journal.encode_message(Envelope(frames=(body,)))
    if stored is None:
        assert record.startswith(b"-" + body + b"\n")
    else:
        assert record.startswith(stored)
    assert (b"\\enc=base64\n" in record) == (not journal.is_text(body))
    assert journal.decode(record.rstrip(b"\n")).frames == (body,)


def test_any_single_bit_flip_of_the_immutable_part_is_detected():
    raw = journal.encode_message(TYPICAL, base_ms=BASE).rstrip(b"\n")
    mutable = raw.index(b"\n\\r=") + 1
    for position in range(1, mutable):
        for bit in range(8):
            flipped = bytearray(raw)
            flipped[position] ^= 1 << bit
            assert journal.checksum_state(bytes(flipped)) != "ok", (position, bit)
    # The control character, the retry counter and the settle field are not covered.
    for position in (0, mutable + 3, raw.index(b"\\e=") + 3):
        changed = bytearray(raw)
        changed[position:position + 1] = b"="
        assert journal.checksum_state(bytes(changed)) == "ok"


def test_a_torn_tail_is_never_taken_as_whole():
    envs = [TYPICAL, Envelope("x", "y", (b"multi\nline",), {"a": "b"}, created_at=BASE / 1000),
            Envelope("z", frames=(b"\x00\x01",), created_at=BASE / 1000)]
    data = segment(envs)
    ends = {r.end for r in read_segment(data)[1]}
    for cut in range(len(data) + 1):
        result = scan(data[:cut])
        assert all(journal.verify(r) for r in list(result.records())[1:])
        tail = result.incomplete
        if tail is None or tail.offset == 0:
            continue
        whole = journal.whole_tail(tail)
        assert (whole is not None) == (cut in ends), cut
        assert whole is None or whole.end == cut


def test_edits_in_place_ack_retry_dead_letter_settle(tmp_path):
    envs = [Envelope(f"id{i}", "s", (b"body %d" % i,), created_at=(BASE + i) / 1000) for i in range(4)]
    data = segment(envs)
    path = write_file(tmp_path / "jobs.tq", data)
    header, records = read_segment(data)
    places = [journal.places_of(r) for r in records]
    assert places == [journal.fresh_places(r.offset, r.end - r.offset) for r in records]
    created = [e.created_at for e in envs]
    apply_edits(path, [
        journal.ack_edit(places[0]),
        journal.settle_edit(places[0], "acked", created[0] + 0.25, created[0]),
        journal.retry_edit(places[1], 1),
        journal.retry_edit(places[2], 12),
        *journal.settle_edits(places[2], "dead-lettered", created[2] + 86_400, created[2]),
        *journal.settle_edits(places[3], "expired", created[3] + 30, created[3]),
        journal.retry_edit(places[3], 5000),
    ])
    after = path.read_bytes()
    assert len(after) == len(data)
    header, records = read_segment(after)
    decoded = [journal.decode(r, header.created_ms) for r in records]
    assert [(d.status, d.retry, d.settled) for d in decoded] == [
        ("=", 0, Settle("acked", created[0] + 0.25)),
        ("-", 1, None),
        ("!", 12, Settle("dead-lettered", created[2] + 86_400)),
        ("!", 999, Settle("expired", created[3] + 30)),
    ]
    assert all(journal.verify(r) for r in records)
    assert b"\\e=d86400s \n" in after and b"\\e=x30000  \n" in after


def test_hand_edits_between_runs(tmp_path):
    data = segment([TYPICAL, Envelope("b", frames=(b"second",), created_at=BASE / 1000)])
    header, (first, second) = read_segment(data)
    # Status changes need nothing else.
    revived = data.replace(b"-hello", b"!hello").replace(b"!hello", b"-hello")
    assert all(journal.verify(r) for r in read_segment(revived)[1])
    # A body changed by hand fails the checksum, unless the operator vouches with \c=-.
    edited = data.replace(b"hello world", b"HELLO WORLD")
    assert journal.checksum_state(read_segment(edited)[1][0]) == "mismatch"
    vouched = edited.replace(first.raw[-6:], b"-     ")
    record = read_segment(vouched)[1][0]
    assert journal.checksum_state(record) == "edited" and journal.verify(record)
    assert journal.decode(record, BASE).frames == (b"HELLO WORLD, twenty!",)
    # An editor that saves CRLF and trims trailing spaces: still whole, still editable.
    windows = b"\n".join(line.rstrip(b" ") for line in data.split(b"\n")).replace(b"\n", b"\r\n")
    path = write_file(tmp_path / "edited.tq", windows)
    header, records = read_segment(windows)
    assert [journal.decode(r, header.created_ms) for r in records] == [
        journal.decode(first, BASE), journal.decode(second, BASE)]
    assert all(journal.verify(r) for r in records)
    places = journal.places_of(records[0])
    assert places.retry_width == 1 and places.settle_width == 0
    apply_edits(path, [journal.retry_edit(places, 12), journal.ack_edit(places)])
    assert journal.decode(read_segment(path.read_bytes())[1][0], BASE).retry == 9
    with pytest.raises(TextQueueError):
        journal.settle_edit(places, "acked", 1.0, 0.0)          # no room left to stamp


def test_the_segment_header():
    data = journal.encode_header("orders/eu \u00e9", 3, BASE)
    record, = Parser().feed(data + b"-")
    assert record.control == "#" and data.isascii()
    assert journal.decode_header(record) == journal.Header("orders/eu \u00e9", 3, BASE, 1)
    assert journal.decode_header(Record(0, b"-not a header\n\\queue=x")) is None
    assert journal.decode_header(Record(0, b"#just a comment")) is None


@pytest.mark.parametrize("raw", [
    b"-!!!\n\\enc=base64",
    b"-YQ== Yg==\n\\enc=base64\n\\frames=3",
    b"-x\n\\enc=rot13",
    b"-x\n\\t=soon",
    b"-x\n\\r=many",
    b"-x\n\\e=a12q",
    b"-x\n\\headers=novalue",
])
def test_values_that_do_not_decode(raw):
    with pytest.raises(TextQueueError):
        journal.decode(raw)


def test_what_encode_refuses():
    with pytest.raises(TextQueueError):
        journal.encode_message(Envelope(id="\ud800"))
    with pytest.raises(TextQueueError):
        journal.encode_message(TYPICAL, status="?")
    with pytest.raises(TextQueueError):
        journal.encode_message(TYPICAL, settled=Settle("lost", 0.0))
    with pytest.raises(TextQueueError):
        journal.decode_fields(b"-x", ["colour"])


@settings(max_examples=300, deadline=None)
@given(soup | st.builds(lambda e, cut, junk: journal.encode_message(e)[:cut] + junk,
                        envelopes(), st.integers(0, 200), st.binary(max_size=8)))
def test_garbage_raises_only_the_codec_error(data):
    for record in scan(data).records():
        assert journal.checksum_state(record) in ("ok", "edited", "missing", "mismatch")
        for call in (lambda: journal.decode(record),
                     lambda: journal.decode_fields(record, journal.FIELDS),
                     lambda: journal.decode_header(record),
                     lambda: journal.places_of(record)):
            try:
                call()
            except TextQueueError as exc:
                assert isinstance(exc.code, Reason) and exc.reason


def test_the_worked_example_of_the_spec():
    """specs/textqueue.md quotes tests/data/textqueue_journal_example.tq and its edits."""
    with open(DATA / "textqueue_journal_example.tq", "rb") as f:
        data = f.read()
    base = 1718306771923
    envs = [
        Envelope("6f1c2a9be03d4471", "order.new", (b"hello world, twenty!",), None,
                 "127.0.0.1:51012.7", "mqks", created_at=(base + 3200) / 1000),
        Envelope("b7", "img.png", (b"\x89PNG\r\n",), {"content-type": "image/png", "x y": "a&b"},
                 "w-1", "twino", created_at=(base + 4100) / 1000,
                 expires_at=(base + 4100 + 60000) / 1000),
        Envelope("m3", "multi", (b"first", b"second"), None, "svc", "malamute", "t-9", True,
                 created_at=(base + 5000) / 1000),
        Envelope("n4", "notes", (b"two\nlines\n-dash",), None, "c2", "textqueue",
                 created_at=(base + 6000) / 1000),
    ]
    assert data == journal.encode_header("orders", 1, base) + b"".join(
        journal.encode_message(e, base_ms=base) for e in envs)
    header, records = read_segment(data)
    assert [r.offset for r in records] == [271, 389, 533, 667]
    places = [journal.places_of(r) for r in records]
    created = [e.created_at for e in envs]
    assert [journal.ack_edit(places[0]),
            journal.settle_edit(places[0], "acked", created[0] + 0.35, created[0]),
            journal.retry_edit(places[1], 1),
            *journal.settle_edits(places[2], "dead-lettered", created[2] + 86_400, created[2])] == [
        (271, b"="), (370, b"a350    "), (507, b"1  "), (533, b"!"), (648, b"d86400s ")]


@settings(max_examples=60, deadline=None)
@given(envelopes())
def test_encode_fields_is_the_record_between_its_control_character_and_its_tail(env):
    """Other writers of message records (the TextQueue door's outbox) reuse the fields;
    a record made of them and their own tail decodes as the journal's does."""
    fields = journal.encode_fields(env, BASE)
    record = journal.encode_message(env, base_ms=BASE, status=env.status)
    assert record.startswith(env.status.encode() + fields)
    assert record[1 + len(fields):].startswith(b"\\r=")
    ours = journal.decode(Record(0, b"-" + fields + b"\\r=%d\n\\error=" % env.retry), BASE)
    theirs = expected(env)
    assert (ours.id, ours.subject, ours.frames, ours.headers, ours.sender, ours.origin,
            ours.tracker, ours.priority, ours.created_at, ours.expires_at) == (
        theirs.id, theirs.subject, theirs.frames, theirs.headers, theirs.sender,
        theirs.origin, theirs.tracker, theirs.priority, theirs.created_at, theirs.expires_at)


@given(envelopes(), st.integers(0, 10**6), st.integers(0, 10**12))
@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
def test_a_compaction_copy_names_its_original_place(env, segment_no, offset):
    """`moved` is immutable (the checksum covers it), decodes like any record (the fast
    layout and the general path agree), and fresh_places still finds the mutable tail."""
    record = journal.encode_message(env, base_ms=BASE, status=env.status, retry=env.retry,
                                    settled=env.settled, moved=(segment_no, offset))
    assert journal.moved_from(record) == (segment_no, offset)
    assert journal.decode(record, BASE) == expected(env)
    assert journal._decode_any(journal.raw_of(record), BASE) == expected(env)
    assert journal.verify(record)
    assert journal.fresh_places(0, len(record)) == journal.places_of(Record(0, record))
    assert not journal.verify(record.replace(b"\\moved=%d." % segment_no,
                                             b"\\moved=%d." % (segment_no + 1)))
    assert journal.moved_from(journal.encode_message(env)) is None


def test_a_nack_settles_as_an_error():
    places = journal.fresh_places(0, len(journal.encode_message(TYPICAL)))
    edits = journal.settle_edits(places, "nacked", TYPICAL.created_at + 2, TYPICAL.created_at)
    assert [e.data for e in edits] == [b"!", b"n2000   "]


@given(envelopes(), st.sampled_from(sorted(journal.CODE_OF)), st.integers(0, 10**12),
       st.sampled_from([None, *sorted(journal.DOOR_LETTERS.values())]))
@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
def test_settling_a_fresh_record_in_one_copy_equals_the_edits(env, reason, after, door):
    record = journal.encode_message(env, base_ms=BASE, retry=env.retry)
    settled_at = env.created_at + after / 1000
    edited = bytearray(record)
    for edit in journal.settle_edits(journal.fresh_places(0, len(record)), reason,
                                     settled_at, env.created_at, door):
        edited[edit.offset:edit.offset + len(edit.data)] = edit.data
    assert journal.settle_fresh(record, reason, settled_at, env.created_at,
                                door) == bytes(edited)
    assert journal.decode(bytes(edited), BASE).settled.door == door


_plain_text = st.text(st.characters(min_codepoint=0, max_codepoint=127)
                      | st.sampled_from("\n x%"), max_size=40)
_plain_id = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), min_size=1,
                    max_size=20)


@st.composite
def plain_envelopes(draw):
    """Envelopes mostly inside encode_plain's case (ASCII bodies and ids, no extras), with
    one thing outside it now and then."""
    env = Envelope(draw(_plain_id | _strings), draw(_strings),
                   (draw(_plain_text).encode(),), None, draw(_strings),
                   draw(st.sampled_from(["", "mqks", "twino"])), "", False,
                   draw(_ms) / 1000)
    extra = draw(st.sampled_from([None, None, None, "frames", "headers", "ttl", "priority",
                                  "tracker"]))
    if extra == "frames":
        env.frames = tuple(draw(st.lists(_frame, max_size=3)))
    elif extra == "headers":
        env.headers = draw(st.dictionaries(_strings, _strings, min_size=1, max_size=2))
    elif extra == "ttl":
        env.expires_at = env.created_at + 1
    elif extra == "priority":
        env.priority = True
    elif extra == "tracker":
        env.tracker = draw(_strings.filter(bool))
    return env


def test_the_plain_encoder_takes_a_typical_message_and_leaves_the_rest():
    assert journal.encode_plain(TYPICAL, BASE) == journal.encode_message(TYPICAL, base_ms=BASE)
    for other in (Envelope(id="a b", frames=(b"x",)), Envelope(id="x", frames=(b"\xc3\xa9",)),
                  Envelope(id="x", frames=(b"a", b"b")), Envelope(id="x", priority=True),
                  Envelope(id="50%", frames=(b"x",)), Envelope(id="", frames=(b"x",))):
        assert journal.encode_plain(other, BASE) is None


HAND_EDITS = {
    "none": lambda text: text,
    "crlf": lambda text: text.replace(b"\n", b"\r\n"),
    "trim": lambda text: b"\n".join(line.rstrip(b" ") for line in text.split(b"\n")),
    "wider": lambda text: text.replace(b"\\r=", b"\\r=  "),
    "note": lambda text: text.replace(b"\\c=", b"\\note=checked by hand\n\\c="),
    "moved": lambda text: text.replace(b"\\e=", b"\\x=1\n\\e="),
    "renamed": lambda text: text.replace(b"\n\\e=", b"\n\\x="),
    # more room for \e, taken from the checksum line: \r and \e stay where they were
    "room": lambda text: re.sub(rb"\n\\c=..", lambda _: b"  \n\\c=", text),
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(envelopes(), min_size=1, max_size=4), st.sampled_from(sorted(HAND_EDITS)),
       st.integers(0, 999), st.booleans())
def test_a_fresh_tail_has_the_places_a_parse_finds(envs, edit, retry, settled):
    """Recovery's shortcut (fresh_tail, then fresh_places) agrees with places_of on every
    record it takes, in-place edits of a record we wrote included; any hand edit that
    moves the tail makes it parse instead."""
    text = segment(envs)
    first = read_segment(text)[1][0]
    places = journal.fresh_places(first.offset, len(first.raw) + 1)
    edits = [journal.retry_edit(places, retry)]
    if settled:
        edits += journal.settle_edits(places, "acked", envs[0].created_at + 1,
                                      envs[0].created_at)
    for offset, data in edits:
        text = text[:offset] + data + text[offset + len(data):]
    text = HAND_EDITS[edit](text)
    for record in read_segment(text)[1]:
        if journal.fresh_tail(record.raw):
            assert journal.places_of(record) == journal.fresh_places(record.offset,
                                                                     len(record.raw) + 1)
        else:
            assert edit != "none", "a record we wrote needs a parse"


@st.composite
def batches(draw):
    """A batch as a broker turn makes it: mostly plain messages sharing a few times (one
    turn's arrival stamp), some settled already with one reason and door, now and then
    something outside encode_batch's fast case (a retry, another kind of settle, a stamp
    out of range, a message that is not plain)."""
    envs = draw(st.lists(plain_envelopes() | envelopes(), min_size=0, max_size=12)
                if draw(st.booleans()) else st.lists(plain_envelopes(), max_size=12))
    times = draw(st.lists(_ms, min_size=1, max_size=2))
    for env in envs:
        if draw(st.booleans()):
            env.created_at = draw(st.sampled_from(times)) / 1000
    retries = [0] * len(envs)
    if envs and draw(st.integers(0, 5)) == 0:
        retries[draw(st.integers(0, len(envs) - 1))] = draw(st.integers(1, 2000))
    kind = (draw(st.sampled_from(sorted(journal.CODE_OF))),
            draw(st.sampled_from([None, *sorted(journal.DOOR_LETTERS.values())])))
    settles = []
    for i in draw(st.lists(st.integers(0, max(len(envs) - 1, 0)), unique=True)
                  if envs else st.just([])):
        reason, door = kind if draw(st.integers(0, 7)) else (
            draw(st.sampled_from(sorted(journal.CODE_OF))), None)
        after = draw(st.sampled_from([0, 0, 2, 350]) | st.integers(-5, 10**13))
        settles.append((i, reason, envs[i].created_at + after / 1000, door))
    if draw(st.booleans()):
        settles.sort()
    return envs, retries, settles


def test_a_typical_batch_takes_the_bulk_path():
    """The property above holds the bulk path only if batches do take it: a turn's plain
    messages, all settled alike, or none."""
    envs = [Envelope("p1.%d" % i, "ev", (b"x" * 40,), None, "127.0.0.1:5000.ab", "mqks",
                     created_at=(BASE + 3200) / 1000) for i in range(5)]
    fixed = journal._plain_fixed(envs, BASE)
    assert fixed is not None
    for settles in ([], [(i, "acked", (BASE + 3550) / 1000, "mqks") for i in range(5)],
                    [(i, "acked", (BASE + 3550 + i) / 1000, "mqks") for i in (0, 3)]):
        assert journal._bulk_records(envs, fixed, *journal.settle_runs(settles)) is not None
