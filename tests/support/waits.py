"""Waiting for explicit conditions, never for a fixed time: the tests' one way to wait.

`until` polls a predicate between reactor turns (broker state in-process: the `server`
fixture runs the broker in the test reactor), so the reactor keeps running; `wait_until`
is the same helper for code that must not touch the reactor (a test body driving
subprocesses, a client thread). Both return the predicate's first truthy value, so a
predicate may be "the next message, or None". `timeout` only bounds a failure, so it is
generous: a busy machine makes the condition late, not false. A failure says what was
awaited (`what`, and `detail()` at that moment when given).
"""
import time

from twisted.internet import reactor, task

POLL = 0.002


class TimedOut(AssertionError, TimeoutError):
    """The condition did not hold in time: a failed assertion to the test, and a
    TimeoutError to a caller that expects nothing to come."""


def _timed_out(what, timeout, detail):
    message = f"timed out after {timeout:g} s waiting for {what}"
    return TimedOut(message if detail is None else f"{message}: {detail()}")


async def until(predicate, timeout=10.0, what="the condition", step=POLL, detail=None,
                between=None):
    """predicate()'s first truthy value, polled every `step` seconds of the reactor;
    `between()` runs after each look that fails (a poll of what sends no event to wait
    for: a spool directory)."""
    deadline = reactor.seconds() + timeout
    while not (value := predicate()):
        if reactor.seconds() > deadline:
            raise _timed_out(what, timeout, detail)
        if between is not None:
            between()
        await task.deferLater(reactor, step, lambda: None)
    return value


def wait_until(predicate, timeout=10.0, what="the condition", step=POLL, detail=None,
               between=None):
    """`until` for a caller that must not touch the reactor: predicate()'s first truthy
    value, polled every `step` seconds; it blocks, so never from the reactor thread."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout, detail)
        if between is not None:
            between()
        time.sleep(step)
    return value


def received(receive, *retry):
    """A predicate for `until`: `receive()`'s result, or None when it raises one of `retry`
    (a non-blocking receive with nothing yet: zmq.Again, BlockingIOError)."""
    def attempt():
        try:
            return receive()
        except retry:
            return None
    return attempt


def unless(predicate, failed):
    """A predicate that gives up at once, with AssertionError(reason), as soon as `failed()`
    returns a reason: a wait that can tell early that it is lost."""
    def attempt():
        if value := predicate():
            return value
        if reason := failed():
            raise AssertionError(reason)
        return None
    return attempt


async def turn():
    """Let the reactor run one turn (its I/O included) before going on."""
    await task.deferLater(reactor, 0, lambda: None)
