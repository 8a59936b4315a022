"""The read-only view `_eval` expressions see, shaped like the original server's state.

Only names MQKS tooling uses are offered; values are computed when asked for, from the
live core, and are plain dicts/sets/ints so the safe evaluator can walk them.
"""
from collections.abc import Mapping

from mqksbridge.protocols.mqks.safe_eval import Namespace


class _LazyView(Mapping):
    """A mapping whose values are computed on lookup (so unused stats cost nothing)."""

    def __init__(self, makers):
        self._makers = makers

    def __getitem__(self, key):
        return self._makers[key]()

    def __iter__(self):
        return iter(self._makers)

    def __len__(self):
        return len(self._makers)


def eval_names(door, conn):
    broker, stream = door.broker, door.stream

    def consumers_by_queues():
        return {name: {c.id: c.manual_ack for c in q.consumers}
                for name, q in broker.queues.items()}

    def queues_by_events():
        return {event: set(names) for event, names in stream.exact.items()}

    state = _LazyView({
        "queues": lambda: {name: len(q) for name, q in broker.queues.items()},
        "messages_by_queues": lambda: {name: len(q) for name, q in broker.queues.items()},
        "consumers_by_queues": consumers_by_queues,
        "events_by_queues": lambda: {name: set(ev) for name, ev in stream.bindings.items()},
        "queues_by_events": queues_by_events,
        "queues_by_consumers": lambda: {cid.decode("utf-8", "replace"): c.queue.name
                                        for cid, c in door.consumers.items()
                                        if c.queue is not None},
        "consumers": lambda: {cid.decode("utf-8", "replace"): c.client.id
                              for cid, c in door.consumers.items()},
        "clients": lambda: {c.client.id: c.client.address for c in door.connections},
        "delete_queue_when_unused": lambda: {name: q.when_unused
                                             for name, q in broker.queues.items()
                                             if q.when_unused is not None},
        "counters": lambda: dict(broker.counters),    # ours: broker-wide counts, e.g. drops
        "memory": lambda: broker.memory.state() if broker.memory is not None else {},
    })
    return {
        "state": Namespace(state),
        "request": {"client": conn.client.id},
        "WORKERS": 1,
        "WORKER": 0,
    }
