"""Formatting MQKS reply lines, byte for byte as the original server wrote them.

Every reply is `{id} ok {data}\\n` or `{id} error {error_id}\\n`.  An empty
payload still gets its space (`{id} ok \\n`): the original client splits on it.
"""

import random
from datetime import datetime, timezone

_ALPHABET = '0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'
_INF = float('inf')


def ok(req_id, data=b''):
    """`{id} ok {data}\\n`; with no data this is the confirm `{id} ok \\n`."""
    return req_id + b' ok ' + data + b'\n'


def error(req_id, eid):
    """`{id} error {eid}\\n`; req_id None (a line too short to carry one) prints `None`."""
    return (b'None' if req_id is None else req_id) + b' error ' + eid + b'\n'


def error_id(now=None):
    """A 24-byte error id: UTC `YYYYMMDDhhmmssffffff` plus 4 random [0-9a-zA-Z].

    The door logs the details under this id; the client only sees the id.
    """
    now = now or datetime.now(timezone.utc)
    return (now.strftime('%Y%m%d%H%M%S%f') + ''.join(random.choices(_ALPHABET, k=4))).encode()


def delivery_prefix(cid):
    """`{cid} ok `: what every line to consumer `cid` starts with (deliveries, updates)."""
    return cid + b' ok '


# A first delivery's line after the consumer's prefix, as a %-format of (mid, event, data):
# a publish's tail is formatted once and relayed to every consumer (delivery_tail below).
DELIVERY_TAIL = b'%s event=%s %s\n'


def delivery_tail(mid, event, retry, data, extra=b''):
    """`{mid} event={event}[,retry=N]{extra} {data}\\n`, the line after `delivery_prefix`.

    `retry` 0 is left out as the original does; `extra` is already-encoded
    props such as `,origin=x,sender=y` for messages from other doors.
    """
    if retry:
        extra = b',retry=%d%s' % (retry, extra)
    return b''.join((mid, b' event=', event, extra, b' ', data, b'\n'))


def delivery(cid, mid, event, retry, data, extra=b''):
    """`{cid} ok {mid} event={event}[,retry=N]{extra} {data}\\n` (see delivery_tail)."""
    return delivery_prefix(cid) + delivery_tail(mid, event, retry, data, extra)


def update_payload(queue, events, when_unused):
    """The shared part of an `--update` line, computed once per rebind.

    `--update {queue}[ {events sorted bytewise}][ --delete-queue-when-unused[=secs]]`;
    `when_unused` is None, True (bare flag) or seconds (py2 float text).
    """
    parts = [b'--update', queue]
    parts.extend(sorted(events))
    if when_unused is True:
        parts.append(b'--delete-queue-when-unused')
    elif when_unused is not None:
        parts.append(b'--delete-queue-when-unused=' + py2_float_repr(when_unused))
    return b' '.join(parts)


def update(cid, payload, manual_ack):
    """One consumer's `--update` line: the payload plus its own `--manual-ack`."""
    if manual_ack:
        return delivery_prefix(cid) + payload + b' --manual-ack\n'
    return delivery_prefix(cid) + payload + b'\n'


def when_unused_equal(a, b):
    """Whether two when-unused settings count as the same (None, True or float).

    Plain `==`, kept as a named rule because the original relies on py2's
    `True == 1.0`: a bare flag and `=1` are "no change" (and the stored value
    stays whichever came first).  NaN never equals itself, so it always changes.
    """
    return a == b


def py2_float_repr(x):
    """Python 2 `str(float)` as bytes: 12 significant digits, as MQKS printed seconds.

    Exponent form when the rounded decimal exponent is < -4 or >= 11
    (py2 used `%.12g` with the switch one digit early because of the added
    `.0`), trailing zeros cut, at least 2 exponent digits; otherwise fixed
    notation with `.0` added to whole numbers.
    """
    if x != x:
        return b'nan'
    if x == _INF:
        return b'inf'
    if x == -_INF:
        return b'-inf'
    mantissa, _, exponent = ('%.11e' % x).partition('e')
    if -4 <= int(exponent) < 11:
        text = '%.12g' % x
        if '.' not in text:
            text += '.0'
        return text.encode()
    return (mantissa.rstrip('0').rstrip('.') + 'e' + exponent).encode()
