"""Recovery's order and supersession with compaction copies, on real files, against a
model: a queue comes back in the order its messages were first put (a copy stands where
its original stood), each message once, from its newest instance, and only if that one
is queued; every older queued instance is superseded (flipped to '#'). Segments read
in bulk (fresh records) and one by one (hand-edited ones) must agree."""
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqksbridge.bridge.journal import layout
from mqksbridge.bridge.journal.lazy import LazyMessage
from mqksbridge.bridge.journal.recovery import recover_queue
from mqksbridge.protocols.textqueue import TextQueueError, journal
from mqksbridge.protocols.textqueue.journal import Envelope

BASE = 1_718_306_771_923


@st.composite
def histories(draw):
    """Segments of events: a new message, or a copy of an earlier one (compaction); then
    the status of every instance (newest: queued or acked; older: queued, i.e. a crash
    before the flip, or '#'), and whether an instance is hand edited (`\\c=-`)."""
    segments = draw(st.integers(1, 4))
    events, messages = [], 0
    for number in range(1, segments + 1):
        for _ in range(draw(st.integers(0, 6))):
            if messages and number > 1 and draw(st.booleans()):
                events.append((number, draw(st.integers(0, messages - 1))))
            else:
                events.append((number, None))
                messages += 1
    return segments, events, draw(st.randoms(use_true_random=False))


def write(directory, history):
    """The segment files of a history; returns (instances per message, dropped segments),
    an instance being [segment number, offset, envelope, moved, status]."""
    segments, events, rng = history
    total = {}
    for _, copy_of in events:
        k = len(total) if copy_of is None else copy_of
        total[k] = total.get(k, 0) + 1
    instances = []
    files = {n: [journal.encode_header("jobs", n, BASE)] for n in range(1, segments + 1)}
    sizes = {n: len(files[n][0]) for n in files}
    for number, copy_of in events:
        if copy_of is None:
            k, moved = len(instances), None
            instances.append([])
        else:
            k = copy_of
            moved = tuple(instances[k][0][:2])
        env = Envelope("m%d" % k, "s", (b"body %d" % k,) if k % 3 else (b"two\nlines %d" % k,),
                       created_at=(BASE + k) / 1000)
        newest = len(instances[k]) == total[k] - 1
        status = rng.choice("-=") if newest else rng.choice("-#")
        data = journal.encode_message(env, base_ms=BASE, status=status, retry=k % 4,
                                      moved=moved)
        if rng.random() < 0.2:              # hand edited: the simple path reads it
            data = data[:data.index(b"\\c=") + 3] + b"-     \n"
        instances[k].append([number, sizes[number], env, moved, status])
        files[number].append(data)
        sizes[number] += len(data)
    dropped = set()
    for number, parts in files.items():
        statuses = [i[4] for found in instances for i in found if i[0] == number]
        if number < segments and set(statuses) <= {"#"} and rng.random() < 0.5:
            dropped.add(number)             # all moved on: retired (archived or removed)
            continue
        with open(os.path.join(directory, layout.segment_name(number)), "wb") as f:
            f.write(b"".join(parts))
    return instances, dropped


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(histories())
def test_copies_stand_where_their_originals_stood(tmp_path_factory, history):
    directory = str(tmp_path_factory.mktemp("jobs"))
    instances, dropped = write(directory, history)
    result = recover_queue(directory, lambda name: "never")
    expected, superseded = [], set()
    for k, found in enumerate(instances):
        if found[-1][4] == "-":
            expected.append(k)              # messages in the order first put
        superseded |= {(i[0], i[1]) for i in found[:-1] if i[4] == "-" and i[0] not in dropped}
    if result is None:
        assert not expected
        return
    assert [e.message.id for e in result.entries] == ["m%d" % k for k in expected]
    assert [e.retry for e in result.entries] == [k % 4 for k in expected]
    assert {(s.number, offset) for s, offset, _ in result.superseded} == superseded
    for entry in result.entries:
        k = int(entry.message.id[1:])
        newest = instances[k][-1]
        assert (entry.record.segment.number, entry.record.offset) == (newest[0], newest[1])
        assert entry.record.origin == newest[3]
        assert entry.message.frames == newest[2].frames
    assert sum(s.live for s in result.segments) == len(expected)


def test_a_recovered_message_decodes_on_first_use_to_what_decode_gives(tmp_path):
    envs = [Envelope("id-%d" % i, "sub é%d" % i, (b"body %d" % i,), {"h": "v %d" % i},
                     "127.0.0.1:5.%d" % i, "twino", "trk", created_at=(BASE + i) / 1000)
            for i in range(5)]
    records = [journal.encode_message(env, base_ms=BASE, retry=i) for i, env in enumerate(envs)]
    with open(tmp_path / layout.segment_name(1), "wb") as f:
        f.write(journal.encode_header("jobs", 1, BASE) + b"".join(records))
    result = recover_queue(str(tmp_path), lambda name: "never")
    for entry, record, i in zip(result.entries, records, range(5)):
        message = entry.message
        assert type(message) is LazyMessage and message._record is not None
        assert entry.retry == i and message.size == len(b"body %d" % i)
        env = journal.decode(record[:-1], BASE)
        assert message.subject == env.subject           # the first read decodes it all
        assert message._record is None
        assert (message.id, message.frames, message.headers, message.sender, message.origin,
                message.tracker, message.priority, message.expires_at, message.created_at,
                message.raw, message.raw_door, message.body) == (
            env.id, env.frames, env.headers, env.sender, env.origin, env.tracker,
            env.priority, env.expires_at, env.created_at, None, None, b"body %d" % i)


def test_a_lazy_message_decodes_only_for_its_fields_and_says_when_it_cannot():
    record = journal.encode_message(Envelope("x", "s", (b"hello",)), status="-")[:-1]
    message = LazyMessage(record, 0, 5)
    assert not hasattr(message, "no_such_field") and message._record is not None
    assert message.size == 5 and message.priority is False and message._record is not None
    assert message.body == b"hello" and message._record is None
    forged = LazyMessage(b"-x\n\\t=abc\n\\r=0  \n\\e=        \n\\c=AAAAAA", 0, 1)
    with pytest.raises(TextQueueError):
        forged.id
