"""The bulk reader of a journal's queued records (`scan_queued`) and `decode_fresh`: that
they take what the broker writes, and mark exactly the damaged record. The property that
holds them equal to the plain path on any input is the codec's shared one
(tests/textqueue/test_textqueue_fast_paths.py)."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.textqueue import journal, scan_queued
from mqksbridge.protocols.textqueue.journal import Envelope
from tests.textqueue.test_textqueue_fast_paths import check_decode_fresh, check_scan_queued
from tests.textqueue.test_textqueue_journal import BASE, envelopes, segment


def _plain(env):
    return (len(env.frames) == 1 and journal.is_text(env.frames[0]) and b"\n" not in env.frames[0]
            and not env.priority and env.expires_at is None)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(envelopes(), min_size=1, max_size=6))
def test_every_plain_queued_record_we_write_is_fresh(envs):
    """Not vacuous: what the broker writes for a one-line text message takes the fast path."""
    for env in envs:
        env.status, env.settled = "-", None
    found = check_scan_queued(segment(envs))
    fresh = [env for env in envs if _plain(env)]
    assert [r for r in found.retries if r is not None] == [min(env.retry, 999) for env in fresh]
    assert [s for s in found.sizes if s is not None] == [len(env.frames[0]) for env in fresh]
    if all(env.id and env.subject and (env.origin or env.sender) and env.tracker == ""
           and env.headers is None for env in fresh):
        assert check_decode_fresh(found, BASE) is not None      # the bulk decoder takes them


def test_a_bulk_checksum_mismatch_marks_only_that_record():
    envs = [Envelope("m%d" % i, "s", (b"body %d" % i,), created_at=BASE / 1000) for i in range(50)]
    data = bytearray(segment(envs))
    at = data.index(b"body 17") + 2
    data[at] ^= 0x01                       # a bit flip in record 17's body
    found = check_scan_queued(bytes(data))
    assert [i for i, r in enumerate(found.retries) if r is None] == [17]
    value = data.index(b"\\c=", data.index(b"body 30")) + 3
    data[value:value + 1] = b"+"           # a checksum character out of the alphabet
    found = check_scan_queued(bytes(data))
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
