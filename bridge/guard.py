"""One failure costs one connection, never a stall: steps that must not skip each other.

A connection's teardown and a sweep over every connection are chains of independent steps;
written plainly, a step that raises (a bug, often in another door's callback reached through
the core) skips the rest, leaving a gone client's consumers in their queues or the later
connections unswept, every time. `each` runs every step whatever the others do.
"""


def each(log, what, steps):
    """Call every step (a callable) in order; a step that raises is logged with
    log.failure and the next one runs. Returns how many failed."""
    failed = 0
    for step in steps:
        try:
            step()
        except Exception:
            failed += 1
            log.failure("{what}: a step failed, the others ran", what=what)
    return failed
