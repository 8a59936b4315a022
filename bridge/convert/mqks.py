"""Core Message <-> MQKS delivery line (DESIGN §4, docs/mapping.md "to MQKS").

An MQKS delivery is `{cid} ok {mid} {props} {data}`: one line, space-separated, so
everything a foreign message carries must fit the props field (`k=v` joined by `,`).
The original MQKS client parses props generically, so extra keys arrive as attributes.
"""
import base64
import re

DOOR = "mqks"

# Bytes an MQKS id/event/prop value cannot carry literally.
_UNSAFE = re.compile(rb"[\x00-\x20,=%\x7f]")


def pct(value: bytes) -> bytes:
    """Percent-encode only what would break the line or the props syntax."""
    return _UNSAFE.sub(lambda m: b"%%%02X" % m.group()[0], value)


def _wire(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _line_safe(body: bytes) -> bool:
    """Bodies that can travel as-is: UTF-8 text without line or tab characters."""
    if b"\n" in body or b"\r" in body or b"\t" in body:
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not body.endswith((b" ", b"\x0b", b"\x0c"))


def delivery_tail(message, retry):
    """`{mid} {props} {data}\\n` for any message; the consumer adds `{cid} ok `."""
    props = [b"event=" + pct(_wire(message.subject))]
    if retry:
        props.append(b"retry=%d" % retry)
    if message.origin != DOOR:
        props.append(b"origin=" + pct(_wire(message.origin)))
        if message.sender:
            props.append(b"sender=" + pct(_wire(message.sender)))
    frames = message.frames
    if len(frames) == 1 and _line_safe(frames[0]):
        data = frames[0]
    elif len(frames) == 1:
        props.append(b"enc=base64")
        data = base64.b64encode(frames[0])
    else:
        props.append(b"enc=base64")
        props.append(b"frames=%d" % len(frames))
        data = b" ".join(base64.b64encode(f) for f in frames)
    if message.headers:
        for key, value in message.headers.items():
            props.append(b"h." + pct(_wire(key)) + b"=" + pct(_wire(value)))
    return b"%s %s %s\n" % (pct(_wire(message.id)), b",".join(props), data)
