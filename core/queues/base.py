"""The delivery modes, and what a mode decides for its queue.

A mode is one stateless object (the queue's state is passed in): `Queue.set_mode` swaps
it, and the queue asks it what a put does (`accept`), where a hand-back goes (`requeue`),
what a dispatch hands out (`dispatch`) and which shortcuts `put_message` and `put_run` may
take (`shortcut`, `run_shortcut`). The defaults here are the storing modes': a put is stored, a hand-back goes
to the back of the queue, nothing is pushed. Paused is exactly that; pull differs only in
being pulled from (core.queues.pull), cache and stopped in a line or two each, below.
docs/delivery.md has the table.
"""
ROUND_ROBIN, PUSH_ALL, BROADCAST, PULL, CACHE, PAUSED, STOPPED = (
    "round-robin", "push-all", "broadcast", "pull", "cache", "paused", "stopped")
MODES = (ROUND_ROBIN, PUSH_ALL, BROADCAST, PULL, CACHE, PAUSED, STOPPED)


class Delivery:
    """A mode family (module docstring)."""

    pushes = False     # dispatch hands stored entries out (flow control judges such queues)
    refuses = None     # why this mode refuses every put, or None

    def enter(self, queue):
        """The queue switched to this mode (before it dispatches)."""

    def shortcut(self, queue, unlimited):
        """The put_message shortcut for the queue as configured now, or None: a function
        (queue, entry, observer) that hands the entry over and returns True, or returns
        False for the plain path. `unlimited`: nothing may refuse or hold a put."""
        return None

    def run_shortcut(self, queue, unlimited):
        """The put_run shortcut, or None: a function (queue, messages) that hands a run of
        messages over at once and returns how many, all or none (none: put one by one)."""
        return None

    def accept(self, queue, entry, publisher):
        """A put the queue took: stored, and dispatched unless every consumer is paused
        (a burst: resume() dispatches); a publisher that fills a pushing queue with
        consumers is held (core.flow), judged on what is left once they took theirs."""
        queue.backlog.store(entry)
        if not queue.dispatching:
            for c in queue.consumers:
                if not c.client.paused:
                    queue.dispatch()
                    break
        limit = queue.flow_limit
        if (limit is not None and queue.consumers and self.pushes
                and queue.backlog.regular() >= limit):
            # a publisher this queue holds already is nothing new (most puts to a backlog)
            if publisher is not None and queue not in publisher.held:
                queue.broker.flow.congested(queue, publisher)

    def requeue(self, queue, entry):
        """An entry handed back unsettled, retry + 1 already counted: at the back."""
        queue.backlog.store(entry)
        queue.dispatch()

    def dispatch(self, queue):
        """Hand stored entries to ready consumers as the mode allows."""


class Paused(Delivery):
    """Stored; nothing is handed out until the mode changes."""


class Pull(Delivery):
    """Stored; handed out by a pull only (core.queues.pull)."""


class Cache(Delivery):
    """Keeps only the latest message; never pushed."""

    def enter(self, queue):
        queue.backlog.keep_latest(queue.settle_record)

    def accept(self, queue, entry, publisher):
        queue.clear()
        Delivery.accept(self, queue, entry, publisher)

    def requeue(self, queue, entry):
        """Back, unless a newer message is stored: then it is dropped."""
        if len(queue.backlog):
            queue.dropped += 1
            entry.notify("dropped", None, "replaced")
            queue.settle_record(entry, "removed")
            return
        Delivery.requeue(self, queue, entry)


class Stopped(Delivery):
    """Refuses puts (the queue's `refusal`); entering it clears the queue. A hand-back is
    dropped before it reaches the mode (Queue.requeue)."""

    refuses = STOPPED

    def enter(self, queue):
        queue.clear()
