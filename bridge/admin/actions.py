"""What the admin API changes: queues (purge, delete, pause, resume, move) and connections
(close). Each returns a small dict for the JSON answer or raises ActionError (HTTP status
and message)."""
from mqksbridge.core.queue import PAUSED, ROUND_ROBIN

DEAD_LETTER_SUFFIX = ".dlq"          # `<queue>.dlq` holds what `<queue>` gave up on
_SAVED_MODE = "admin.mode"           # queue.attrs key: the mode a pause replaced


class ActionError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _queue(broker, name):
    queue = broker.queues.get(name)
    if queue is None:
        raise ActionError(404, f"no queue {name!r}")
    return queue


def purge(broker, name):
    """Drop every waiting message (unacked deliveries stay with their consumers)."""
    queue = _queue(broker, name)
    count = len(queue)
    queue.clear()
    queue.dispatch()                 # lets go of publishers it held (core.flow)
    return {"queue": name, "purged": count}


def delete(broker, name):
    _queue(broker, name)
    broker.delete_queue(name)
    return {"queue": name, "deleted": True}


def pause(broker, name):
    """Keep taking messages, deliver none until resumed (core mode `paused`)."""
    queue = _queue(broker, name)
    if queue.mode != PAUSED:
        queue.attrs[_SAVED_MODE] = queue.mode
        queue.set_mode(PAUSED)
    return {"queue": name, "mode": queue.mode}


def resume(broker, name):
    """Back to the mode the pause replaced (round-robin for a queue paused otherwise,
    e.g. by a Twino client's status change)."""
    queue = _queue(broker, name)
    if queue.mode != PAUSED:
        raise ActionError(409, f"queue {name!r} is not paused (mode {queue.mode})")
    queue.set_mode(queue.attrs.pop(_SAVED_MODE, ROUND_ROBIN))
    return {"queue": name, "mode": queue.mode}


def move(broker, source, target):
    """Every waiting message of `source` to the back of `target`, in order, priority lane
    first, with its retry count; `target` delivers them as if just published. A message
    `target` refuses (its limits) is dropped and counted there, as any refused put is."""
    if source == target:
        raise ActionError(400, "source and target are the same queue")
    src, dst = _queue(broker, source), _queue(broker, target)
    moved = refused = 0
    for entry in src.take_stored():
        if dst.put(entry):
            moved += 1
        else:
            refused += 1
    src.dispatch()                   # lets go of publishers it held (core.flow)
    return {"from": source, "to": target, "moved": moved, "refused": refused}


def requeue_dead(broker, name):
    """The dead-letter queue `<name>.dlq` back into `<name>`."""
    return move(broker, name + DEAD_LETTER_SUFFIX, name)


def close_connection(view, conn_id):
    traffic = view.find_connection(conn_id)
    if traffic is None:
        raise ActionError(404, f"no connection {conn_id!r}")
    traffic.goodbye()
    return {"connection": conn_id, "closed": True}
