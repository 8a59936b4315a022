"""Stream readers grouped by pattern and indexed by literal text (core.stream) deliver
exactly what one search per reader, in registration order, delivers."""
from hypothesis import given, settings
from hypothesis import strategies as st

from mqksbridge.core import Client, Message
from mqksbridge.core.stream import Stream
from mqksbridge.protocols.malamute import zrex

PATTERNS = st.sampled_from([
    "", ".*", "^", "^$", "$", "(^)", "temp", "temp.*", ".*temp", "^temp", "^temp$", "temp$",
    "^te", "mp$", "p.m", "^t.*p$", "a|temp", "(te|x)mp", "é", "^\\w+$", "t?e", "\\.",
    "^temp\\.moscow", "moscow$", "^$|temp",
])
SUBJECTS = st.text(alphabet="temp.moscowé\x00x", max_size=14)


def message(subject):
    return Message("1", subject, (b"",), sender="w", origin="test")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), PATTERNS), max_size=12),
       st.lists(st.integers(0, 3), max_size=3), st.lists(SUBJECTS, min_size=1, max_size=4),
       st.one_of(st.none(), st.integers(0, 3)))
def test_grouped_and_indexed_readers_equal_one_search_per_reader(reads, cancels, subjects,
                                                               excluded):
    clients = [Client(f"c{i}", "malamute") for i in range(4)]
    stream, got, plain = Stream("s", {}), [], []
    for who, pattern in reads:
        stream.add_reader(clients[who], pattern, zrex.compile(pattern),
                          lambda name, m, tag=(who, pattern): got.append((tag, m.subject)))
        if (who, pattern) not in plain:
            plain.append((who, pattern))
    for who in cancels:
        stream.remove_readers(clients[who])
        plain = [r for r in plain if r[0] != who]
    exclude = None if excluded is None else clients[excluded]
    for subject in subjects:
        count = stream.publish(message(subject), exclude)
        expected = [((who, p), subject) for who, p in plain
                    if who != excluded and zrex.compile(p).search(subject)]
        assert got == expected and count >= len(expected)
        got.clear()
    assert [(r.client.id, r.key) for r in stream.readers] == [(f"c{w}", p) for w, p in plain]


OPS = st.one_of(st.tuples(st.just("read"), st.integers(0, 3), PATTERNS),
                st.tuples(st.just("cancel"), st.integers(0, 3)),
                st.tuples(st.just("publish"), SUBJECTS))


@settings(max_examples=300, deadline=None)
@given(st.lists(OPS, max_size=30))
def test_remembered_matches_follow_every_read_and_cancel(ops):
    """Subjects published again after readers came or went reach exactly the readers one
    search per reader finds then (publish remembers each subject's readers)."""
    clients = [Client(f"c{i}", "malamute") for i in range(4)]
    stream, got, plain = Stream("s", {}), [], []
    for op in ops:
        if op[0] == "read":
            _, who, pattern = op
            stream.add_reader(clients[who], pattern, zrex.compile(pattern),
                              lambda name, m, tag=(who, pattern): got.append(tag))
            if (who, pattern) not in plain:
                plain.append((who, pattern))
        elif op[0] == "cancel":
            stream.remove_readers(clients[op[1]])
            plain = [r for r in plain if r[0] != op[1]]
        else:
            stream.publish(message(op[1]))
            assert got == [r for r in plain if zrex.compile(r[1]).search(op[1])]
            got.clear()


def test_a_reader_cancelled_by_a_delivery_still_gets_that_message_only():
    """A delivery that ends another reader's session: the message being delivered still
    reaches it (its readers were fixed when it was matched), the next one does not."""
    stream, got = Stream("s", {}), []
    a, b = Client("a", "malamute"), Client("b", "malamute")
    stream.add_reader(a, "", zrex.compile(""), lambda n, m: (got.append("a"),
                                                             stream.remove_readers(b)))
    stream.add_reader(b, "", zrex.compile(""), lambda n, m: got.append("b"))
    stream.publish(message("x"))
    stream.publish(message("x"))
    assert got == ["a", "b", "a"]


def test_many_identical_patterns_are_one_search():
    calls = []

    class Counting:
        key, literal = "same", None

        def search(self, subject):
            calls.append(subject)
            return True
    stream, got = Stream("s", {}), []
    for i in range(1000):
        stream.add_reader(Client(f"c{i}", "t"), "p", Counting(), lambda n, m: got.append(1))
    stream.publish(message("x"))
    assert len(calls) == 1 and len(got) == 1000


def test_literal_readers_are_never_called():
    class Literal:
        def __init__(self, kind, text):
            self.literal = (kind, text)

        def search(self, subject):
            raise AssertionError("a literal matcher is answered by the stream's index")
    stream, got = Stream("s", {}), []
    for kind, text in [("exact", "a.b"), ("prefix", "a."), ("suffix", ".b"), ("contains", ""),
                       ("contains", "."), ("prefix", "")]:
        stream.add_reader(Client(kind + text, "t"), "p", Literal(kind, text),
                          lambda n, m, tag=(kind, text): got.append(tag))
    stream.publish(message("a.b\x00zzz"))
    assert got == [("exact", "a.b"), ("prefix", "a."), ("suffix", ".b"), ("contains", ""),
                   ("contains", "."), ("prefix", "")]
    got.clear()
    stream.publish(message(""))
    assert got == [("prefix", "")]
