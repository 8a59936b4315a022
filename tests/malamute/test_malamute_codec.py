"""Wire vectors, strictness and schema/codec equivalence for the Malamute codec."""

import json
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqksbridge.protocols.malamute import codec, schema
from mqksbridge.protocols.malamute.codec import MalamuteDecodeError, Reason

DATA = json.loads((pathlib.Path(__file__).parents[1] / "data" / "malamute_vectors.json").read_text())


def _frames(hexes):
    return [bytes.fromhex(h) for h in hexes]


def _command(spec):
    name, fields = spec
    fields = dict(fields)
    if "content" in fields:
        fields["content"] = tuple(bytes.fromhex(h) for h in fields["content"])
    return getattr(codec, name)(**fields)


VECTORS = [pytest.param(_frames(v["frames"]), _command(v["command"]), id=v["name"])
           for v in DATA["frames"]]
INVALID = [pytest.param(_frames(v["frames"]), id=v["name"]) for v in DATA["invalid"]]
LENIENT = [pytest.param(_frames(v["frames"]), _command(v["command"]), id=v["name"])
           for v in DATA["lenient"]]


def test_every_command_has_a_vector():
    assert {type(cmd) for _, cmd in (p.values for p in VECTORS)} == set(codec.COMMANDS)


@pytest.mark.parametrize("frames, command", VECTORS)
def test_vector_decodes(frames, command):
    assert codec.decode(frames) == command


@pytest.mark.parametrize("frames, command", VECTORS)
def test_vector_encodes(frames, command):
    assert codec.encode(command) == frames


@pytest.mark.parametrize("frames, command", VECTORS)
def test_vector_schema(frames, command):
    assert schema.parse(frames) == command
    assert schema.build(command) == frames


@pytest.mark.parametrize("frames", INVALID)
def test_invalid_frames_rejected(frames):
    with pytest.raises(MalamuteDecodeError):
        codec.decode(frames)
    with pytest.raises(MalamuteDecodeError):
        schema.parse(frames)


@pytest.mark.parametrize("frames, command", LENIENT)
def test_trailing_bytes_and_extra_frames_are_ignored(frames, command):
    assert codec.decode(frames) == command
    assert schema.parse(frames) == command


def test_known_sizes():
    assert len(codec.encode(codec.ConnectionOpen("writer"))[0]) == 21
    assert codec.OK == [bytes.fromhex("aaa80e00c800")]


def test_fast_encoders_match_generic():
    content = (b"a", b"", b"\x00" * 3)
    assert codec.encode_stream_deliver("s", "w", "x.y", content) == \
        codec.encode(codec.StreamDeliver("s", "w", "x.y", content))
    assert codec.encode_mailbox_deliver("w", "r", "subj", "trk", content) == \
        codec.encode(codec.MailboxDeliver("w", "r", "subj", "trk", content))
    assert codec.encode_service_deliver("w", "svc", "req", "t", content) == \
        codec.encode(codec.ServiceDeliver("w", "svc", "req", "t", content))
    assert codec.encode_ok() == codec.encode(codec.Ok())
    assert codec.encode_ok(201, "fine") == codec.encode(codec.Ok(201, "fine"))
    assert codec.encode_error(500) == codec.encode(codec.Error(500))
    assert codec.encode_error(300, "why") == codec.encode(codec.Error(300, "why"))
    assert codec.PONG == codec.encode(codec.ConnectionPong())


def test_encoders_accept_bytes_and_str_frames():
    assert codec.encode_stream_deliver(b"s", b"w", b"x", ["10"]) == \
        codec.encode_stream_deliver("s", "w", "x", [b"10"])


def test_long_string_truncated_like_the_c_setter():
    frames = codec.encode(codec.StreamSend("x" * 300))
    assert codec.decode(frames).subject == "x" * 255
    frames = codec.encode_stream_deliver("s" * 256, "", "")
    assert codec.decode(frames).address == "s" * 255


def test_non_utf8_strings_round_trip():
    header = bytes.fromhex("aaa805") + b"\x02\xff\xfe"
    command = codec.decode([header])
    assert codec.encode(command) == [header]
    assert schema.parse([header]) == command


def test_encode_rejects_non_commands():
    with pytest.raises(TypeError):
        codec.encode(("not", "a", "command"))


# -- properties ---------------------------------------------------------------

def _text(max_bytes=255):
    # any str whose UTF-8 (surrogateescape) form fits a 1-byte length
    raw = st.binary(max_size=max_bytes)
    return raw.map(lambda b: b.decode("utf-8", "surrogateescape"))


_u16 = st.integers(0, 0xFFFF)
_u32 = st.integers(0, 0xFFFFFFFF)
_content = st.lists(st.binary(max_size=40), max_size=4).map(tuple)

_FIELD = {"timeout": _u32, "code": _u16, "amount": _u16, "content": _content}


def _strategy(cls):
    return st.builds(cls, **{name: _FIELD.get(name, _text()) for name in cls._fields})


COMMANDS = st.one_of([_strategy(cls) for cls in codec.COMMANDS])


@given(COMMANDS)
def test_round_trip(command):
    assert codec.decode(codec.encode(command)) == command


@given(COMMANDS)
def test_schema_builds_what_codec_encodes(command):
    assert schema.build(command) == codec.encode(command)


@given(COMMANDS)
def test_schema_parses_what_codec_decodes(command):
    frames = codec.encode(command)
    assert schema.parse(frames) == codec.decode(frames) == command


@settings(max_examples=500, deadline=None)
@given(COMMANDS, st.binary(min_size=1, max_size=8), st.lists(st.binary(max_size=4), max_size=2))
def test_any_command_with_trailing_bytes_decodes_to_itself(command, trailing, extra):
    """A newer client may add fields: bytes after the last field, and frames after a
    command that carries none, are ignored by both decoders (as malamute 1.2 does)."""
    frames = codec.encode(command)
    frames[0] += trailing
    if command.__class__ not in codec.WITH_CONTENT:
        frames += extra
    assert codec.decode(frames) == command
    assert schema.parse(frames) == command


def _outcome(fn, frames):
    try:
        return fn(frames)
    except MalamuteDecodeError as exc:
        assert isinstance(exc.code, Reason) and exc.reason
        return "error"


_FRAMES = st.lists(st.binary(max_size=30), max_size=3)


@settings(max_examples=500, deadline=None)
@given(_FRAMES)
def test_garbage_frames_only_raise_the_decode_error(frames):
    assert _outcome(codec.decode, frames) == _outcome(schema.parse, frames)


@settings(max_examples=500, deadline=None)
@given(COMMANDS, st.data())
def test_mutated_commands_agree_with_schema(command, data):
    frames = codec.encode(command)
    header = bytearray(frames[0])
    action = data.draw(st.sampled_from(["truncate", "append", "flip", "frame"]))
    if action == "truncate":
        del header[data.draw(st.integers(0, len(header) - 1)):]
    elif action == "append":
        header += data.draw(st.binary(min_size=1, max_size=4))
    elif action == "flip":
        i = data.draw(st.integers(0, len(header) - 1))
        header[i] = data.draw(st.integers(0, 255))
    else:
        frames = frames + [data.draw(st.binary(max_size=4))]
    frames = [bytes(header)] + frames[1:]
    assert _outcome(codec.decode, frames) == _outcome(schema.parse, frames)


# -- the door's SEND fast paths agree with decode -------------------------------------------

SENDS = st.one_of(_strategy(codec.MailboxSend), _strategy(codec.ServiceSend))


def _fast(header):
    if header[2:3] == bytes((codec.StreamSend.ID,)):
        return (codec.stream_send_subject(header)[0],)
    return codec.send_fields(header)[:4]


def _slow(frames):
    command = codec.decode(frames)
    if isinstance(command, codec.StreamSend):
        return (command.subject,)
    return (command.address, command.subject, command.tracker, command.timeout)


@given(st.one_of(SENDS, _strategy(codec.StreamSend)))
def test_send_fast_paths_equal_decode(command):
    frames = codec.encode(command)
    assert _fast(frames[0]) == _slow(frames)


@settings(max_examples=1000, deadline=None)
@given(st.one_of(SENDS, _strategy(codec.StreamSend)), st.data())
def test_mutated_send_headers_agree_with_decode(command, data):
    """Whatever a header says, the fast path and decode accept or refuse it alike."""
    header = bytearray(codec.encode(command)[0])
    action = data.draw(st.sampled_from(["truncate", "append", "flip"]))
    if action == "truncate":
        del header[data.draw(st.integers(0, len(header) - 1)):]
    elif action == "append":
        header += data.draw(st.binary(min_size=1, max_size=4))
    else:
        i = data.draw(st.integers(0, len(header) - 1))
        header[i] = data.draw(st.integers(0, 255))
    header = bytes(header)
    if header[2:3] != bytes((command.ID,)):
        return                               # another command now: not a SEND
    assert _outcome(_fast, header) == _outcome(_slow, [header, b"x"])
