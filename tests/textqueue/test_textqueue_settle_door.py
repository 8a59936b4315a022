"""The consumer's door in the settle stamp (specs/textqueue.md, "The settle field"): written by
the encoder and the in-place settle edit, read back by decode, decode_fields and the column
decoder; stamps without a door read as before."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.textqueue import TextQueueError, journal, scan
from mqksbridge.protocols.textqueue.columns import decode_columns
from mqksbridge.protocols.textqueue.journal import DOOR_LETTERS, Envelope, Settle
from tests.textqueue.strategies import apply_edits, write_file
from tests.textqueue.test_textqueue_journal import BASE, TYPICAL, segment

DOORS = sorted(DOOR_LETTERS.values())


def _kept(after_ms):
    """What a stamp with a door keeps of a duration: ms up to 6 digits, then seconds
    (5 digits), then hours (5 digits, saturating)."""
    if after_ms < 10**6:
        return after_ms
    if after_ms < 10**8:
        return after_ms // 1000 * 1000
    return min(after_ms // 3_600_000, 99_999) * 3_600_000


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["acked", "dead-lettered", "expired", "removed", "moved"]),
       st.sampled_from(DOORS), st.integers(0, 10**6) | st.integers(0, 10**14))
def test_a_stamp_with_a_door_round_trips_in_eight_bytes(reason, door, after):
    created = BASE + 3200
    settled = Settle(reason, (created + after) / 1000, door)
    env = Envelope("m1", "s", (b"x",), created_at=created / 1000, settled=settled)
    record = journal.encode_message(env, base_ms=BASE, settled=settled).rstrip(b"\n")
    stamp = journal.value_of(record, b"e")
    assert len(stamp) == journal.SETTLE_WIDTH
    want = Settle(reason, (created + _kept(after)) / 1000, door)
    assert journal.decode(record, BASE).settled == want
    assert journal.decode_fields(record, ["settled"], BASE) == (want,)
    columns = decode_columns([record], ["settle_reason", "settled_ms", "settle_door"], BASE)
    assert columns == {"settle_reason": [reason], "settled_ms": [created + _kept(after)],
                       "settle_door": [door]}
    assert journal.checksum_state(record) == "ok"


def test_settling_in_place_records_the_consumers_door(tmp_path):
    envs = [Envelope(f"id{i}", "s", (b"body",), created_at=(BASE + i) / 1000) for i in range(3)]
    path = write_file(tmp_path / "jobs.tq", segment(envs))
    records = list(scan(path.read_bytes()).records())[1:]
    last = scan(path.read_bytes()).incomplete.record()
    places = [journal.places_of(r) for r in records + [last]]
    created = [e.created_at for e in envs]
    apply_edits(path, [
        *journal.settle_edits(places[0], "acked", created[0] + 0.35, created[0], door="twino"),
        *journal.settle_edits(places[1], "dead-lettered", created[1] + 86_400, created[1], "mqks"),
        *journal.settle_edits(places[2], "expired", created[2] + 30, created[2]),
    ])
    data = path.read_bytes()
    assert b"\\e=aT350   \n" in data and b"\\e=dK86400s\n" in data and b"\\e=x30000  \n" in data
    result = scan(data)
    raws = result.raws[1:] + [result.incomplete.record().raw]
    assert [journal.decode(r, BASE).settled for r in raws] == [
        Settle("acked", created[0] + 0.35, "twino"),
        Settle("dead-lettered", created[1] + 86_400, "mqks"),
        Settle("expired", created[2] + 30, None)]
    assert decode_columns(raws, ["settle_door"], BASE) == {"settle_door": ["twino", "mqks", None]}
    assert all(journal.verify(r) for r in raws)


def test_an_unknown_door_is_refused_and_an_unknown_letter_is_kept():
    with pytest.raises(TextQueueError):
        journal.encode_message(TYPICAL, settled=Settle("acked", 1.0, "smtp"))
    raw = journal.encode_message(TYPICAL, base_ms=BASE).rstrip(b"\n").replace(
        b"\\e=        ", b"\\e=aZ12    ")
    assert journal.decode(raw, BASE).settled == Settle("acked", TYPICAL.created_at + 0.012, "Z")
    assert decode_columns([raw], ["settle_door"], BASE) == {"settle_door": ["Z"]}
