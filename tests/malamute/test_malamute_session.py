"""The Malamute session state machine: every command in each state."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.malamute import codec as c
from mqksbridge.protocols.malamute import session as s

OK = c.Ok(200, "")
PONG = c.ConnectionPong()
E300 = c.Error(300, "")
E500 = c.Error(500, "")

ONE_OF_EACH = {
    c.ConnectionOpen: c.ConnectionOpen("me"),
    c.ConnectionPing: c.ConnectionPing(),
    c.ConnectionPong: c.ConnectionPong(),
    c.ConnectionClose: c.ConnectionClose(),
    c.StreamWrite: c.StreamWrite("weather"),
    c.StreamRead: c.StreamRead("weather", "temp."),
    c.StreamSend: c.StreamSend("temp.x", (b"1",)),
    c.StreamDeliver: c.StreamDeliver("weather", "w", "temp.x", (b"1",)),
    c.MailboxSend: c.MailboxSend("bob", "hi", "trk", 100, (b"x",)),
    c.MailboxDeliver: c.MailboxDeliver("w", "bob", "hi", "trk", (b"x",)),
    c.ServiceSend: c.ServiceSend("svc", "req.1", "t1", 0, (b"a", b"b")),
    c.ServiceOffer: c.ServiceOffer("svc", "req.*"),
    c.ServiceDeliver: c.ServiceDeliver("w", "svc", "req.1", "t1", (b"a",)),
    c.Ok: c.Ok(),
    c.Error: c.Error(500),
    c.Credit: c.Credit(10),
    c.Confirm: c.Confirm("t1"),
    c.StreamCancel: c.StreamCancel("weather"),
}


def sent(command, stream="news", sender="me"):
    """The Send event a session opened as `sender`, writing to `stream`, gives for a SEND
    command: its DELIVER header is what the encoders make."""
    header = c.encode(command._replace(content=()))[0]
    if command.__class__ is c.StreamSend:
        deliver = c.encode_stream_deliver(stream, sender, command.subject)[0]
        return s.Send(s.STREAM, header, stream, command.subject, "", 0, deliver)
    encode = (c.encode_mailbox_deliver if command.__class__ is c.MailboxSend
              else c.encode_service_deliver)
    deliver = encode(sender, command.address, command.subject, command.tracker)[0]
    return s.Send(command.ID, header, command.address, command.subject, command.tracker,
                  command.timeout, deliver)


def test_table_covers_every_command():
    assert set(ONE_OF_EACH) == set(c.COMMANDS)


def connected(stream=None):
    session = s.Session()
    assert session.receive(c.ConnectionOpen("me")) == (OK, (s.Open("me"),), None)
    if stream is not None:
        session.receive(c.StreamWrite(stream))
    return session


# -- start state ----------------------------------------------------------------

START_TABLE = {
    c.ConnectionOpen: (OK, (s.Open("me"),), s.CONNECTED),
    c.ConnectionClose: (OK, (), s.START),     # malamute 1.2 segfaults here
}


@pytest.mark.parametrize("cls", c.COMMANDS, ids=lambda cls: cls.__name__)
def test_start_state(cls):
    session = s.Session()
    reply, events, state = START_TABLE.get(cls, (E500, (), s.START))
    outcome = session.receive(ONE_OF_EACH[cls])
    assert outcome == s.Outcome(reply, events)
    assert session.state == state


# -- connected state ------------------------------------------------------------

CONNECTED_TABLE = {
    c.ConnectionOpen: (E500, (s.Drop("CONNECTION-OPEN while connected"),), s.START),
    c.ConnectionPing: (PONG, (), s.CONNECTED),
    c.ConnectionClose: (OK, (s.Close(),), s.START),
    c.StreamWrite: (OK, (s.StreamWrite("weather"),), s.CONNECTED),
    c.StreamRead: (OK, (s.StreamRead("weather", "temp."),), s.CONNECTED),
    c.StreamCancel: (OK, (s.StreamCancel("weather"),), s.CONNECTED),
    c.StreamSend: (None, (sent(ONE_OF_EACH[c.StreamSend]),), s.CONNECTED),
    c.MailboxSend: (None, (sent(ONE_OF_EACH[c.MailboxSend]),), s.CONNECTED),
    c.ServiceSend: (None, (sent(ONE_OF_EACH[c.ServiceSend]),), s.CONNECTED),
    c.ServiceOffer: (OK, (s.ServiceOffer("svc", "req.*"),), s.CONNECTED),
    c.Credit: (None, (s.Credit(10),), s.CONNECTED),
    c.Confirm: (E300, (s.Drop("CONFIRM is not implemented"),), s.START),
}


@pytest.mark.parametrize("cls", c.COMMANDS, ids=lambda cls: cls.__name__)
def test_connected_state(cls):
    session = connected(stream="news")
    expected = CONNECTED_TABLE.get(cls)
    if expected is None:   # server-only commands
        expected = (E500, (s.Drop("%s is a server command" % cls.__name__),), s.START)
    reply, events, state = expected
    assert session.receive(ONE_OF_EACH[cls]) == s.Outcome(reply, events)
    assert session.state == state


def test_stream_send_without_write_is_fatal():
    session = connected()
    outcome = session.receive(c.StreamSend("x"))
    assert outcome == s.Outcome(E300, (s.Drop("STREAM-SEND before STREAM-WRITE"),))
    assert session.state == s.START


def test_write_switches_stream():
    session = connected(stream="a")
    session.receive(c.StreamWrite("b"))
    assert session.receive(c.StreamSend("x")).events == (sent(c.StreamSend("x"), "b"),)


def test_drop_resets_to_a_fresh_session():
    session = connected(stream="news")
    session.receive(c.Confirm("t"))
    assert (session.state, session.address, session.stream) == (s.START, None, None)
    assert session.receive(c.ConnectionPing()).reply == E500   # client re-opens on this
    assert session.receive(c.ConnectionOpen("me")).reply == OK
    assert session.receive(c.StreamSend("x")).reply == E300    # the old WRITE is gone


def test_close_then_reopen():
    session = connected(stream="news")
    assert session.receive(c.ConnectionClose()).events == (s.Close(),)
    assert session.receive(c.ConnectionOpen("you")) == s.Outcome(OK, (s.Open("you"),))


def test_expire():
    session = connected()
    assert session.expire() == s.Outcome(None, (s.Drop("expired"),))
    assert session.state == s.START
    assert session.expire("takeover") == s.Outcome()
    assert session.receive(c.ConnectionPing()).reply == E500


def test_replay_after_reopen_is_accepted_pipelined():
    session = s.Session()
    replies = [session.receive(cmd).reply for cmd in (
        c.ConnectionOpen("me"), c.StreamWrite("w"), c.StreamRead("r", ""), c.ServiceOffer("svc", ""))]
    assert replies == [OK, OK, OK, OK]


def test_undecodable_frames_get_no_reply():
    session = connected()
    outcome = session.receive_frames([b"\xaa\xa8\x05\x07wea"])      # WRITE, cut short
    assert outcome.reply is None and outcome.events == ()
    assert isinstance(outcome.error, c.MalamuteDecodeError)
    assert session.state == s.CONNECTED


def test_trailing_bytes_and_extra_frames_are_ignored():
    """As malamute 1.2 does: a newer client may add fields."""
    session = connected()
    assert session.receive_frames([b"\xaa\xa8\x02\x00\x01"]) == s.Outcome(PONG)
    assert session.receive_frames([b"\xaa\xa8\x02", b"extra"]) == s.Outcome(PONG)


def test_receive_frames_decodes():
    session = s.Session()
    assert session.receive_frames(c.encode(c.ConnectionOpen("x"))).reply == OK


def test_non_command_is_a_programming_error():
    with pytest.raises(TypeError):
        connected().receive(("PING",))
    with pytest.raises(TypeError):
        s.Session().receive(("PING",))


ALLOWED_REPLIES = {None, OK, PONG, E300, E500}


@given(st.lists(st.sampled_from(list(ONE_OF_EACH.values())), max_size=30))
def test_only_replies_a_real_client_accepts(commands):
    session = s.Session()
    for command in commands:
        outcome = session.receive(command)
        assert outcome.reply in ALLOWED_REPLIES
        if outcome.reply is not None:
            assert c.decode(c.encode(outcome.reply)) == outcome.reply


@given(st.lists(st.binary(max_size=12), max_size=3))
def test_garbage_never_crashes(frames):
    outcome = s.Session().receive_frames(frames)
    assert outcome.reply in ALLOWED_REPLIES


# -- the SENDs, bytes in ------------------------------------------------------------

H = bytes.fromhex
SERVICE_SEND = H("aaa80b 03737663 057265712e31 027431 00000000")    # svc req.1 t1 0


def test_send_reads_a_header_once_per_run():
    session = connected()
    first = session.send(SERVICE_SEND)
    assert first == s.Send(s.SERVICE, SERVICE_SEND, "svc", "req.1", "t1", 0,
                           H("aaa80d 026d65 03737663 057265712e31 027431"))
    assert session.send(bytes(SERVICE_SEND)) is first           # equal bytes: no new read
    assert session.receive_frames([SERVICE_SEND, b"a"]) == s.Outcome(events=(first,))


def test_two_headers_taking_turns_are_read_once_each():
    session = connected(stream="s")
    a, b, c_ = (c.encode(c.StreamSend(subject))[0] for subject in "abc")
    first_a, first_b = session.send(a), session.send(b)
    assert session.send(a) is first_a and session.send(b) is first_b
    assert session.send(c_).subject == "c"
    assert session.send(b) is first_b and session.send(a) is not first_a   # a was dropped
    assert session.send(a) == first_a


def test_send_follows_the_stream_chosen_last():
    session = connected(stream="a")
    header = c.encode(c.StreamSend("x"))[0]
    assert session.send(header).target == "a"
    assert session.receive_frames(c.encode(c.StreamWrite("b"))).reply == OK
    assert session.send(header) == sent(c.StreamSend("x"), "b")


def test_send_refusals_are_the_state_tables():
    assert s.Session().send(SERVICE_SEND) == s.Outcome(E500)             # start state
    session = connected()
    header = c.encode(c.StreamSend("x"))[0]
    assert session.send(header) == s.Outcome(
        E300, (s.Drop("STREAM-SEND before STREAM-WRITE"),))
    assert session.state == s.START
    assert session.send(SERVICE_SEND) == s.Outcome(E500)                # dropped: start


def test_send_leaves_other_commands_to_receive_frames():
    session = connected()
    for command in ONE_OF_EACH.values():
        header = c.encode(command)[0]
        if command.__class__ not in (c.StreamSend, c.MailboxSend, c.ServiceSend):
            assert session.send(header) is None
    assert session.send(b"") is None and session.send(b"\xaa\xa8") is None


@pytest.mark.parametrize("header", [H("aaa80b 03737663 05726571"), H("aaa807 05 7375"),
                                    H("aaa90b 03737663 00 00 00000000")])
def test_unreadable_send_gets_no_reply(header):
    session = connected(stream="news")
    outcome = session.send(header)
    assert (outcome.reply, outcome.events) == (None, ())
    assert isinstance(outcome.error, c.MalamuteDecodeError)
    assert session.state == s.CONNECTED


def _text():
    return st.binary(max_size=255).map(lambda b: b.decode("utf-8", "surrogateescape"))


SENDS = st.one_of(
    st.builds(c.StreamSend, _text()),
    st.builds(c.MailboxSend, _text(), _text(), _text(), st.integers(0, 2**32 - 1)),
    st.builds(c.ServiceSend, _text(), _text(), _text(), st.integers(0, 2**32 - 1)))


@settings(max_examples=300)
@given(SENDS, _text(), _text(), st.binary(max_size=6))
def test_send_is_decode_then_the_encoders(command, sender, stream, trailing):
    """A SEND header, trailing bytes and all (ignored, as malamute does), gives the
    fields decode gives and the DELIVER header the encoders make for them."""
    session = s.Session()
    session.receive(c.ConnectionOpen(sender))
    session.receive(c.StreamWrite(stream))
    header = c.encode(command)[0] + trailing
    assert c.decode([header]) == command
    assert session.send(header) == sent(command, stream, sender)._replace(header=header)
