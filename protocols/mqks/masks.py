"""Rebind masks and the fixed order in which rebind changes a queue's events.

A mask is literal except `*`, which stands for any run of non-dot bytes
(`[^.]*`), and it must match the whole event.  Masks only ever remove events
that contain a dot.  Because `*` never crosses a dot, a mask matches exactly
when it has the same number of dot-separated segments as the event and each
segment matches on its own; so no regular expression is needed.
"""


def _segment_match(pattern, segment):
    """Glob match of one dot-free segment, where `*` is the only wildcard."""
    pieces = pattern.split(b'*')
    if len(pieces) == 1:
        return pattern == segment
    first, last = pieces[0], pieces[-1]
    if len(first) + len(last) > len(segment) or not (
            segment.startswith(first) and segment.endswith(last)):
        return False
    pos, end = len(first), len(segment) - len(last)
    for piece in pieces[1:-1]:  # leftmost placement is always safe for `*`-only globs
        pos = segment.find(piece, pos, end)
        if pos < 0:
            return False
        pos += len(piece)
    return True


def mask_match(mask, event):
    """Whether rebind `--remove-mask mask` removes `event` (never a dot-less event)."""
    if b'.' not in event:
        return False
    segments = event.split(b'.')
    patterns = mask.split(b'.')
    return len(patterns) == len(segments) and all(
        map(_segment_match, patterns, segments))


def apply_rebind(current, replace=(), remove=(), remove_masks=(), add=()):
    """The new event set: replace (if given) -> remove -> remove-mask -> add.

    The order is fixed whatever the order on the request line, so
    `--add e5 --remove e5` keeps e5.  `current` is left untouched.
    """
    events = set(replace) if replace else set(current)
    events.difference_update(remove)
    if remove_masks:
        events = {e for e in events
                  if not any(mask_match(m, e) for m in remove_masks)}
    events.update(add)
    return events
