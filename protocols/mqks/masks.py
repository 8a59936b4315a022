"""Rebind masks and the fixed order in which rebind changes a queue's events.

A mask is literal except `*`, which stands for any run of non-dot bytes
(`[^.]*`), and it must match the whole event.  Masks only ever remove events
that contain a dot.  Because `*` never crosses a dot, a mask matches exactly
when it has the same number of dot-separated segments as the event and each
segment matches on its own; so no regular expression is needed.

One rebind may carry thousands of masks against a queue bound to thousands of
events, so masks are indexed: `*`-free masks are a set, the others are filed
by segment count and first segment, and only masks that could match an event
are tried on it. Masks whose first segment has a `*` must be tried on every
event with their segment count; a rebind that would need more than
MAX_MASK_TESTS such tries is refused (MqksProtocolError, ARGUMENT) before anything changes.
"""
from mqksbridge.protocols.mqks.errors import MqksProtocolError, Reason

MAX_MASK_TESTS = 200_000     # mask-against-event tries one rebind may need


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
        events -= _masked(events, remove_masks)
    events.update(add)
    return events


def _masked(events, masks):
    """The events some mask matches (each a dotted event: see mask_match)."""
    exact, by_first, scanned = set(), {}, {}
    for mask in set(masks):
        if b'*' not in mask:
            exact.add(mask)
            continue
        patterns = mask.split(b'.')
        if b'*' in patterns[0]:
            scanned.setdefault(len(patterns), []).append(patterns)
        else:
            by_first.setdefault((len(patterns), patterns[0]), []).append(patterns)
    dotted = [(e, e.split(b'.')) for e in events if b'.' in e]
    tries = sum(len(scanned.get(len(segments), ())) for _, segments in dotted)
    if tries > MAX_MASK_TESTS:
        raise MqksProtocolError(Reason.ARGUMENT,
                                'too many masks with a leading * for this queue\'s events')
    masked = set()
    for event, segments in dotted:
        candidates = by_first.get((len(segments), segments[0]), [])
        candidates = candidates + scanned.get(len(segments), []) if candidates else \
            scanned.get(len(segments), ())
        if event in exact or any(all(map(_segment_match, patterns, segments))
                                 for patterns in candidates):
            masked.add(event)
    return masked
