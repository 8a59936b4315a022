"""The bulk reader of a journal's queued records (`scan_queued`) held equal to the simple
path: the incremental Parser for records, offsets, statuses and the torn tail, and
`Record.variable`, `checksum_state`, `places_of`, `decode` for what it says of each
fresh record, on journals as we write them, mutated (bit flips, tears, hand edits, CRLF,
garbage), forged (any fields under a valid checksum) and on any bytes."""
import random
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.textqueue import Record, TextQueueError, journal, scan_queued
from mqksbridge.protocols.textqueue.journal import Envelope
from mqksbridge.protocols.textqueue.queued import decode_fresh
from tests.textqueue.strategies import chunked, parse_chunks, soup
from tests.textqueue.test_textqueue_journal import BASE, envelopes, segment

cuts = st.lists(st.integers(min_value=0, max_value=2000), max_size=6)


def check(data, points=(), base=0):
    """scan_queued(data) against the simple path; returns it."""
    found = scan_queued(data, base)
    items, incomplete = parse_chunks(chunked(data, points), base)
    assert found.scan.items() == items
    assert found.scan.incomplete == incomplete
    tail = journal.whole_tail(incomplete)
    assert found.tail == tail
    records = [item for item in items if isinstance(item, Record)] + ([tail] if tail else [])
    queued = [r for r in records if r.control == "-"]
    assert found.offsets == [r.offset for r in queued]
    assert found.raws == [r.raw for r in queued]
    assert len(found.retries) == len(found.sizes) == len(queued)
    for record, retry, size in zip(queued, found.retries, found.sizes):
        if retry is None:
            assert size is None
            continue
        # What a fresh record is, by the simple path.
        assert journal.checksum_state(record) == "ok"
        assert journal.places_of(record) == journal.fresh_places(record.offset, len(record.raw) + 1)
        assert int(record.variable("r").value) == retry
        assert record.variable("e").value == ""
        try:
            env = journal.decode(record)
        except TextQueueError:
            continue                    # only a forged checksum gets here (see forged())
        assert env.retry == retry and env.settled is None and env.status == "-"
        assert env.frames == (record.raw[1:1 + size],) and not env.priority
        assert env.expires_at is None
    check_decode_fresh(found, BASE)
    return found


def check_decode_fresh(found, base_ms):
    """decode_fresh over the fresh records of `found`, against journal.decode of each:
    equal, or None (a layout it leaves to decode); returns the columns."""
    fresh = [(raw, size) for raw, retry, size in zip(found.raws, found.retries, found.sizes)
             if retry is not None]
    columns = decode_fresh([raw for raw, _ in fresh], [size for _, size in fresh], base_ms)
    if columns is None:
        return None
    assert all(len(column) == len(fresh) for column in columns)
    for (raw, _), values in zip(fresh, zip(*columns)):
        env = journal.decode(raw, base_ms)
        assert values == (env.id, env.subject, env.frames[0], env.sender, env.origin,
                          env.created_at)
        assert env.frames == (values[2],) and env.headers is None and env.tracker == ""
        assert not env.priority and env.expires_at is None
    return columns


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(envelopes(), max_size=6), cuts)
def test_a_journal_as_written(envs, points):
    check(segment(envs), points, 0)


def _plain(env):
    return (len(env.frames) == 1 and journal.is_text(env.frames[0]) and b"\n" not in env.frames[0]
            and not env.priority and env.expires_at is None)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(envelopes(), min_size=1, max_size=6))
def test_every_plain_queued_record_we_write_is_fresh(envs):
    """Not vacuous: what the broker writes for a one-line text message takes the fast path."""
    for env in envs:
        env.status, env.settled = "-", None
    found = check(segment(envs))
    fresh = [env for env in envs if _plain(env)]
    assert [r for r in found.retries if r is not None] == [min(env.retry, 999) for env in fresh]
    assert [s for s in found.sizes if s is not None] == [len(env.frames[0]) for env in fresh]
    if all(env.id and env.subject and (env.origin or env.sender) and env.tracker == ""
           and env.headers is None for env in fresh):
        assert check_decode_fresh(found, BASE) is not None      # the bulk decoder takes them


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(envelopes(), min_size=1, max_size=5), st.data())
def test_a_journal_damaged_or_edited(envs, data):
    raw = bytearray(segment(envs))
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "tear", "edit", "crlf", "garbage", "retry",
                                          "settle", "ack"]))
        at = rng.randrange(len(raw)) if raw else 0
        if kind == "flip" and raw:
            raw[at] ^= 1 << rng.randrange(8)
        elif kind == "tear":
            del raw[at:]
        elif kind == "edit":
            raw = bytearray(re.sub(rb"\\c=[^\n]*", rb"\\c=-", bytes(raw), rng.randrange(1, 3)))
        elif kind == "crlf":
            raw = bytearray(bytes(raw).replace(b"\n", b"\r\n", rng.randrange(1, 4)))
        elif kind == "garbage":
            raw[at:at] = data.draw(soup)
        elif kind == "retry":
            raw = bytearray(bytes(raw).replace(b"\\r=", b"\\r=" + data.draw(
                st.sampled_from([b"7", b"x", b" ", b"12", b"", b"999"])), 1))
        elif kind == "settle":
            raw = bytearray(bytes(raw).replace(b"\\e=   ", b"\\e=aK5", 1))
        else:
            raw = bytearray(bytes(raw).replace(b"\n-", b"\n=", 1))
    check(bytes(raw), data.draw(cuts), data.draw(st.integers(0, 10**6)))


_line = st.binary(max_size=10) | st.sampled_from(
    [b"\\i=x", b"\\t=5", b"\\t=abc", b"\\r=1  ", b"\\e=aK1", b"\\c=-", b"\\enc=base64",
     b"\\priority=1", b"\\ttl=5", b"\\headers=a", b" more", b"\\moved=1.2", b"\\x", b""])


@st.composite
def forged(draw):
    """A record with any immutable part under a valid checksum and a fresh tail."""
    lines = [b"-" + draw(st.binary(max_size=8))] + draw(st.lists(_line, max_size=5))
    fixed = b"\n".join(lines)[1:] + b"\n"
    retry = draw(st.integers(0, 999))
    return (b"-" + fixed + b"\\r=%-3d\n\\e=        \n\\c=" % retry
            + journal._checksum(fixed) + b"\n")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(forged() | envelopes().map(lambda e: journal.encode_message(e, status="-")),
                min_size=1, max_size=6), cuts)
def test_forged_records_are_fresh_only_where_the_simple_path_agrees(records, points):
    check(b"".join(records), points)                  # the last one is the tail
    check(b"".join(records) + b"#end\n", points)       # every one complete


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(soup, cuts, st.integers(0, 10**9))
def test_any_bytes(data, points, base):
    check(data, points, base)


def test_a_bulk_checksum_mismatch_marks_only_that_record():
    envs = [Envelope("m%d" % i, "s", (b"body %d" % i,), created_at=BASE / 1000) for i in range(50)]
    data = bytearray(segment(envs))
    at = data.index(b"body 17") + 2
    data[at] ^= 0x01                       # a bit flip in record 17's body
    found = check(bytes(data))
    assert [i for i, r in enumerate(found.retries) if r is None] == [17]
    value = data.index(b"\\c=", data.index(b"body 30")) + 3
    data[value:value + 1] = b"+"           # a checksum character out of the alphabet
    found = check(bytes(data))
    assert [i for i, r in enumerate(found.retries) if r is None] == [17, 30]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8),
                          st.text(max_size=8), st.text(min_size=1, max_size=8),
                          st.binary(max_size=16).filter(lambda b: b"\n" not in b),
                          st.integers(-10**9, 10**9)), min_size=1, max_size=8))
def test_what_a_broker_pages_out_decodes_in_bulk(plain):
    """Not vacuous: a run of plain messages as the broker encodes them (encode_batch) is
    decoded by decode_fresh whenever every body is one line of text, and equal to decode."""
    envs = [Envelope(i, s, (body,), None, sender, origin, created_at=(BASE + t) / 1000)
            for i, s, origin, sender, body, t in plain]
    data, _ = journal.encode_batch(envs, BASE)
    found = scan_queued(journal.encode_header("jobs", 1, BASE) + data)
    columns = check_decode_fresh(found, BASE)
    if all(journal.is_text(env.frames[0]) for env in envs):
        assert columns is not None
        assert columns[2] == [env.frames[0] for env in envs]
