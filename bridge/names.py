"""Wire names <-> core names.

Core names are str. Byte-oriented doors decode UTF-8 with surrogateescape so any byte
string survives the round trip exactly (byte-exact replies), while valid UTF-8 names
meet the same queues and streams as the str-native doors.
"""


def to_name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def to_wire(name: str) -> bytes:
    return name.encode("utf-8", "surrogateescape")
