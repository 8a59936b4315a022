"""ZMTP 3.1 (RFC 37, framing of RFC 23) described declaratively with ``construct``.

This is the executable spec of what the Malamute door reads and writes on a ZeroMQ
connection: the 64-byte greeting, the frame, a command's body, READY's metadata and the
PING / PONG / ERROR commands. It is written independently of the `struct` codec in
codec.py so the property tests can hold one equal to the other; nothing on the hot path
uses it. See specs/zmtp.md.
"""
import construct as cs
from construct import this

MORE, LONG, COMMAND = 0x01, 0x02, 0x04

# -- greeting: 64 octets, sent by both peers at once ----------------------------------------

Signature = cs.Struct(
    "start" / cs.Const(b"\xff"),
    "padding" / cs.Bytes(8),                 # ZMTP 1.0 compatibility; any value
    "end" / cs.Const(b"\x7f"),
)

Mechanism = cs.FixedSized(20, cs.NullStripped(cs.GreedyBytes))   # b"NULL", zero-padded

Greeting = cs.Struct(
    "signature" / Signature,
    "major" / cs.Int8ub,                     # 3
    "minor" / cs.Int8ub,                     # 0 or 1
    "mechanism" / Mechanism,
    "as_server" / cs.Flag,                   # meaningless for NULL
    "filler" / cs.Padding(31),
    cs.Terminated,
)

# -- framing: flags, 1- or 8-octet size, body ----------------------------------------------

Flags = cs.BitStruct(
    "reserved" / cs.Const(0, cs.BitsInteger(5)),
    "command" / cs.Flag,
    "long" / cs.Rebuild(cs.Flag, lambda ctx: len(ctx._.body) > 255),
    "more" / cs.Flag,
)

Frame = cs.Struct(
    "flags" / Flags,
    "size" / cs.Rebuild(cs.IfThenElse(this.flags.long, cs.Int64ub, cs.Int8ub),
                        cs.len_(this.body)),
    "body" / cs.Bytes(this.size),
)

Frames = cs.Struct("frames" / cs.GreedyRange(Frame), cs.Terminated)

# -- commands: a frame with the COMMAND flag, its body a name and data ----------------------

CommandBody = cs.Struct(
    "name" / cs.Prefixed(cs.Int8ub, cs.GreedyBytes),
    "data" / cs.GreedyBytes,
)

Property = cs.Struct(
    "name" / cs.Prefixed(cs.Int8ub, cs.GreedyBytes),
    cs.Check(cs.len_(this.name) > 0),
    "value" / cs.Prefixed(cs.Int32ub, cs.GreedyBytes),
)

Metadata = cs.Struct("properties" / cs.GreedyRange(Property), cs.Terminated)

Ready = cs.Struct(
    "name" / cs.Const(b"\x05READY"),
    "metadata" / Metadata,
)

Ping = cs.Struct(
    "name" / cs.Const(b"\x04PING"),
    "ttl" / cs.Int16ub,                      # tenths of a second
    "context" / cs.GreedyBytes,
    cs.Check(cs.len_(this.context) <= 16),
)

Pong = cs.Struct(
    "name" / cs.Const(b"\x04PONG"),
    "context" / cs.GreedyBytes,
    cs.Check(cs.len_(this.context) <= 16),
)

Error = cs.Struct(
    "name" / cs.Const(b"\x05ERROR"),
    "reason" / cs.Prefixed(cs.Int8ub, cs.GreedyBytes),
    cs.Terminated,
)


# -- helpers the tests use -----------------------------------------------------------------

def build_greeting(major=3, minor=1, mechanism=b"NULL", as_server=False, padding=None):
    return Greeting.build({
        "signature": {"padding": b"\x00" * 7 + b"\x01" if padding is None else padding},
        "major": major, "minor": minor, "mechanism": mechanism, "as_server": as_server})


def build_frame(body, more=False, command=False):
    return Frame.build({"flags": {"command": command, "more": more}, "body": body})


def build_message(frames):
    last = len(frames) - 1
    return b"".join(build_frame(body, more=i < last) for i, body in enumerate(frames))


def build_command(name, data=b""):
    return build_frame(CommandBody.build({"name": name, "data": data}), command=True)


def build_metadata(properties):
    return Metadata.build({"properties": [{"name": k, "value": v} for k, v in properties]})


def parse_metadata(data):
    """Properties as {lower-case name: value}, like codec.parse_metadata."""
    return {p.name.decode("ascii", "replace").lower(): p.value
            for p in Metadata.parse(data).properties}


def parse_frames(data):
    """Whole frames as (more, command, body) triples; ConstructError if any is cut."""
    return [(f.flags.more, f.flags.command, f.body) for f in Frames.parse(data).frames]
