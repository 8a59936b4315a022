"""Parsing MQKS request lines and the arguments of each action.

Everything works on bytes and mirrors the original server's string handling
(py2 `str` semantics): `bytes.rstrip()`, splits on a single space, empty
tokens kept or skipped exactly where the original kept or skipped them.
A parse error means the door answers `{id} error {eid}` and changes nothing.

`delete_consumer`, `delete_queue` and `ping` take `data` as it is: the whole
rest of the line is the consumer id, the queue name or the echo.
"""

from .errors import MqksProtocolError, Reason

CONFIRM = b'--confirm '
WHEN_UNUSED = b'--delete-queue-when-unused'
WHEN_UNUSED_EQ = WHEN_UNUSED + b'='
WORKER_EQ = b'--worker='


def _argument(reason):
    """The action's arguments are invalid; the door answers an error reply."""
    return MqksProtocolError(Reason.ARGUMENT, reason)


def parse_request(line):
    """Split one line (without `\\n`) into `(req_id, action, data, confirm)`.

    Raises MqksProtocolError (REQUEST) for a line with fewer than 3 parts (req_id None)
    or containing a TAB (the original dropped the connection; we answer).
    An empty action (double space) is returned as b'' for the door to refuse.
    """
    parts = line.rstrip().split(b' ', 2)
    if len(parts) < 3:
        raise MqksProtocolError(Reason.REQUEST, 'fewer than 3 parts', None)
    req_id, action, data = parts
    if 9 in line:  # TAB; an int probe is a plain memchr, several times faster than b'\t'
        raise MqksProtocolError(Reason.REQUEST, 'TAB in request', req_id)
    if data[:10] == CONFIRM:
        return req_id, action, data[10:], True
    return req_id, action, data, False


def fast_request(line):
    """The two requests that are nearly all the traffic, in one split: a plain `publish`
    or `ack` (no `--confirm`, no TAB, no trailing whitespace) as the parts
    `[req_id, action, event or consumer id, body or message id]`; None for any other
    line, which takes `parse_request`. Tests hold it equal to parse_request followed by
    parse_publish or parse_ack."""
    parts = line.split(b' ', 3)
    if (len(parts) == 4 and parts[2] != b'--confirm' and line[-1] > 32 and 9 not in line
            and (parts[1] == b'publish' or parts[1] == b'ack')):
        return parts
    return None


def plain_run(lines, start, first):
    """The run of plain requests of one action that `first` begins (`fast_request` of
    `lines[start]`, not None), each as fast_request takes it: `(their parts, the index of
    the first line after the run)`. One loop for a read's publishes (or acks) instead of a
    call per line; the caller has `first` already, as it needs it to tell a plain line from
    any other, so a line that is not plain costs no call here. Tests hold it equal to
    fast_request line by line."""
    action = first[1]
    run = [first]
    add = run.append
    for i in range(start + 1, len(lines)):
        line = lines[i]
        parts = line.split(b' ', 3)
        if (len(parts) == 4 and parts[1] == action and parts[2] != b'--confirm'
                and line[-1] > 32 and 9 not in line):
            add(parts)
        else:
            return run, i
    return run, len(lines)


def parse_publish(data):
    """`event data...` -> `(event, body)`; the body keeps inner and leading spaces."""
    event, sep, body = data.partition(b' ')
    if not sep:
        raise _argument('publish needs an event and data')
    return event, body


MAX_SECONDS = 1e12                  # about 31,700 years
_INF = float('inf')


def _seconds(token):
    """py2 `float()`: like py3's but without `_` digit separators."""
    value = token.replace(WHEN_UNUSED_EQ, b'')  # the original replaced every occurrence
    if b'_' in value:
        raise _argument('bad seconds %r' % value)
    try:
        seconds = float(value)
    except ValueError:
        raise _argument('bad seconds %r' % value) from None
    # nan, negatives and -inf made the timer raise inside a connection's teardown; inf
    # (the original's "never") stays, past MAX_SECONDS no timer is meant
    if not (0 <= seconds <= MAX_SECONDS or seconds == _INF):
        raise _argument('bad seconds %r' % value)
    return seconds


def parse_consume(data):
    """`queue [ev..] [--add ev..] [--delete-queue-when-unused[=s]] [--manual-ack]`.

    Returns `(queue, replace, add, when_unused, manual_ack)`: `replace` and
    `add` are lists of events (plain tokens before / after `--add`),
    `when_unused` is None (absent), True (bare flag) or a float.
    """
    queue, _, rest = data.partition(b' ')
    replace = []
    add = []
    target = replace
    when_unused = None
    manual_ack = False
    for token in rest.split(b' '):
        if token[:2] == b'--':
            if token == b'--add':
                target = add
            elif token == b'--manual-ack':
                manual_ack = True
            elif token == WHEN_UNUSED:
                when_unused = True
            elif token.startswith(WHEN_UNUSED_EQ):
                when_unused = _seconds(token)
            else:
                raise _argument('unknown consume option %r' % token)
        elif token:
            target.append(token)
    return queue, replace, add, when_unused, manual_ack


def parse_rebind(data):
    """`queue [ev..] [--remove ev..] [--remove-mask m..] [--add ev..]` (any order, repeatable).

    Returns `(queue, replace, remove, remove_masks, add)`.  `--replace` is
    accepted as the original did; any other `--x` (including `--confirm`) is an error.
    """
    queue, sep, rest = data.partition(b' ')
    if not sep:
        raise _argument('rebind needs arguments')
    lists = {b'--replace': [], b'--remove': [], b'--remove-mask': [], b'--add': []}
    target = lists[b'--replace']
    for token in rest.split(b' '):
        if token[:2] == b'--':
            target = lists.get(token)
            if target is None:
                raise _argument('unknown rebind option %r' % token)
        elif token:
            target.append(token)
    return (queue, lists[b'--replace'], lists[b'--remove'],
            lists[b'--remove-mask'], lists[b'--add'])


def parse_ack(data):
    """`consumer msg` or `consumer --all` -> `(consumer_id, msg_id)`, msg_id None for --all.

    Used for ack and reject alike.  The msg id is the rest of the line.
    """
    consumer_id, sep, msg_id = data.partition(b' ')
    if not sep:
        raise _argument('ack/reject needs a message id or --all')
    return consumer_id, (None if msg_id == b'--all' else msg_id)


def parse_eval(data, worker=0):
    """`[--worker=N] expression` -> the expression; N must equal `worker`."""
    if data.startswith(WORKER_EQ):
        token, sep, data = data.partition(b' ')
        number = token[9:].split(b'=', 1)[0]
        if not sep or b'_' in number:
            raise _argument('bad --worker')
        try:
            wanted = int(number)
        except ValueError:
            raise _argument('bad --worker') from None
        if wanted != worker:
            raise _argument('--worker=%d is not this worker' % wanted)
    return data
