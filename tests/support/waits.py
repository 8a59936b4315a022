"""Waiting for explicit conditions between reactor turns, never for a fixed time.

`until` polls a predicate (broker state in-process: the `server` fixture runs the broker
in the test reactor) while the reactor keeps running; `timeout` only bounds a failure, so
it is generous: a busy machine makes the condition late, not false.
"""
from twisted.internet import reactor, task

POLL = 0.002


async def until(predicate, timeout=10.0, what="the condition"):
    """Return once predicate() is true; AssertionError after `timeout` seconds."""
    deadline = reactor.seconds() + timeout
    while not predicate():
        if reactor.seconds() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await task.deferLater(reactor, POLL, lambda: None)


async def turn():
    """Let the reactor run one turn (its I/O included) before going on."""
    await task.deferLater(reactor, 0, lambda: None)
