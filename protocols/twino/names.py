"""Names as the Twino MQ 3.x server reads them: which channel names it accepts, how its list
filters match, and the two target forms of a direct message besides a client id."""

NAME_TARGET = "@name:"     # DirectMessage to every client with this name
TYPE_TARGET = "@type:"     # DirectMessage to every client of this type


def valid_name(name):
    """Channel names the real server accepts (no @, space, ; or *), 1 to 255 bytes."""
    return (bool(name) and len(name.encode("utf-8")) <= 255
            and not any(c in name for c in "@ ;*"))


def name_matches(pattern, value):
    """List filters and tag bindings: `*x*` contains, `*x` ends with, `x*` starts with,
    else equal; an empty pattern matches everything."""
    if not pattern:
        return True
    value = value or ""
    if len(pattern) > 1 and pattern[0] == "*" and pattern[-1] == "*":
        return pattern[1:-1] in value
    if pattern[0] == "*":
        return value.endswith(pattern[1:])
    if pattern[-1] == "*":
        return value.startswith(pattern[:-1])
    return value == pattern


def target_of(target):
    """A DirectMessage target as (kind, value): ("name", n) for `@name:n`, ("type", t) for
    `@type:t`, else ("id", target)."""
    if target.startswith(NAME_TARGET):
        return "name", target[len(NAME_TARGET):]
    if target.startswith(TYPE_TARGET):
        return "type", target[len(TYPE_TARGET):]
    return "id", target
