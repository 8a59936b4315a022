"""What the admin API shows: plain dicts read from the live broker, doors and sampler.

Every function here reads; nothing is cached or counted per message. docs/admin.md and
bridge/admin/openapi.json describe each shape (a test validates responses against it).
Lists are capped (`limit`, 1000 by default) and say how many there are in all.
"""
from collections import Counter
from importlib import metadata

from twisted.internet import defer

DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000

try:
    VERSION = metadata.version("mqksbridge")
except metadata.PackageNotFoundError:      # running from a tree that is not installed
    VERSION = "0.0.0"


def _round(value):
    return round(value, 3)


def listing(things, limit, describe):
    """The first `limit` of `things` (a list), described: a dashboard asks for 200 of 5,000
    connections every second, and describing all of them cost 5 us each."""
    return {"total": len(things), "items": [describe(t) for t in things[:limit]]}


class AdminView:
    def __init__(self, broker, doors, listeners, sampler, clock, interval=1.0,
                 node="mqksbridge"):
        self.broker = broker
        self.doors = doors               # name -> door (each with .traffic)
        self.listeners = listeners       # name -> [listener services]
        self.sampler = sampler
        self.clock = clock               # IReactorTime
        self.node = node
        self.interval = interval
        self.started = clock.seconds()
        self.cluster_status = None       # bridge.cluster.status.ClusterStatus on a gateway

    def cluster(self):
        """A Deferred of /api/cluster: the RabbitMQ cluster as this gateway sees it, or
        {"engine": "embedded"} for a broker that is its own engine."""
        if self.cluster_status is None:
            return defer.succeed({"engine": "embedded"})
        return self.cluster_status.describe()

    # -- overview --------------------------------------------------------------------------
    def overview(self):
        sampler = self.sampler
        doors, totals, by_door = [], Counter(), {}
        for name, door in self.doors.items():
            counts = by_door[name] = sampler.totals(name, door)
            rates = sampler.door_rates.get(name, {})
            doors.append({
                "name": name,
                "listeners": [self._listener(svc) for svc in self.listeners.get(name, ())
                              if hasattr(svc, "ready")],
                "connections": counts["connections"],
                "opened": counts["opened"],
                "refused": counts["refused"],
                "messages_in": counts["messages_in"],
                "messages_out": counts["messages_out"],
                "bytes_in": counts["bytes_in"],
                "bytes_out": counts["bytes_out"],
                "rates": {key: _round(rates.get(key, 0.0)) for key in
                          ("messages_in", "messages_out", "bytes_in", "bytes_out")},
                "history": [[t, _round(i), _round(o)] for t, i, o in sampler.history[name]],
            })
            for key in ("connections", "messages_in", "messages_out", "bytes_in", "bytes_out"):
                totals[key] += counts[key]
        broker = self.broker
        queued = sum(len(q) for q in broker.queues.values())
        unacked = sum(len(c.unacked) for q in broker.queues.values() for c in q.consumers)
        now = self.clock.seconds()
        return {
            "version": VERSION,
            "node": self.node,
            "now": _round(now),
            "started_at": _round(self.started),
            "uptime": _round(now - self.started),
            "sample_interval": self.interval,
            "doors": doors,
            "totals": {
                **{key: totals[key] for key in ("connections", "messages_in", "messages_out",
                                                "bytes_in", "bytes_out")},
                "queues": len(broker.queues),
                "streams": len(broker.streams),
                "mailboxes": len(broker.mailboxes),
                "channels": len(broker.channels),
                "messages_queued": queued,
                "unacked": unacked,
            },
            "rates": {key: _round(sum(d["rates"][key] for d in doors)) for key in
                      ("messages_in", "messages_out", "bytes_in", "bytes_out")},
            "flows": self.flows(by_door),
            "memory": broker.memory.state() if broker.memory is not None else None,
        }

    def flows(self, by_door):
        """Messages delivered through each door, by the door they were published through;
        `by_door` is each door's totals as of the last sample."""
        result = []
        for name in self.doors:
            for origin, count in sorted(by_door[name]["flows_in"].items()):
                if count:
                    result.append({"from": origin or "unknown", "to": name, "messages": count,
                                   "rate": _round(self.sampler.flow_rates.get((origin, name),
                                                                              0.0))})
        return result

    @staticmethod
    def _listener(svc):
        bound = None
        if getattr(svc, "endpoints", None):         # ZeroMQ: tcp://host:port as bound
            bound = svc.endpoints[0]
        elif svc.port is not None:
            host = svc.port.getHost()
            bound = f"{getattr(host, 'host', '')}:{host.port}" if hasattr(host, "port") \
                else str(getattr(host, "name", host))
        return {"endpoint": getattr(svc, "requested", svc.description), "bound": bound}

    # -- connections -----------------------------------------------------------------------
    def connections(self, limit=DEFAULT_LIMIT):
        return listing([t for door in self.doors.values() for t in door.traffic.live.values()],
                       limit, self.connection)

    def find_connection(self, conn_id):
        for door in self.doors.values():
            traffic = door.traffic.live.get(conn_id)
            if traffic is not None:
                return traffic
        return None

    @staticmethod
    def connection(traffic):
        client = traffic.client
        consumers = list(client.consumers.values()) if client is not None else []
        described = None
        if client is not None and client.id is not None:
            described = {"id": client.id, "name": client.name or "", "type": client.type or "",
                         "address": client.address or ""}
        return {
            "id": traffic.id,
            "door": traffic.door,
            "peer": traffic.peer,
            "client": described,
            "connected_at": _round(traffic.opened_at),
            "consumers": len(consumers),
            "unacked": sum(len(c.unacked) for c in consumers),
            "paused": bool(client is not None and client.paused),
            "input_held": sorted(traffic.input.reasons),
            "bytes_in": traffic.bytes_in,
            "bytes_out": traffic.bytes_out,
            "messages_in": traffic.messages_in,
            "messages_out": traffic.messages_out,
        }

    # -- queues ------------------------------------------------------------------------------
    def queues(self, limit=DEFAULT_LIMIT):
        return listing(list(self.broker.queues.values()), limit, self.queue)

    def queue(self, queue):
        rates = self.sampler.queue_rates.get(queue.name, {})
        by_door = Counter(c.client.door for c in queue.consumers)
        window = getattr(queue, "window", None)       # a gateway's queues keep nothing
        resident = len(queue.entries) + len(queue.priority) if hasattr(queue, "entries") else 0
        return {
            "name": queue.name,
            "mode": queue.mode,
            "paused": queue.mode == "paused",
            "depth": len(queue),
            "priority_depth": queue.lengths()[0],
            "resident": resident,                                  # stored, in memory
            "paged_out": window.paged if window is not None else 0,  # stored, on disk
            "paged_out_bytes": window.paged_bytes if window is not None else 0,
            "bytes": getattr(queue, "bytes", 0),
            "unacked": sum(len(c.unacked) for c in queue.consumers),
            "consumers": len(queue.consumers),
            "consumers_by_door": dict(by_door),
            "channel": queue.channel.name if queue.channel is not None else None,
            "published": queue.received,
            "delivered": queue.delivered,
            "acked": queue.acked,
            "requeued": queue.requeued,
            "dropped": queue.dropped,
            "expired": queue.expired,
            "rates": {key: _round(rates.get(key, 0.0)) for key in ("publish", "deliver", "ack")},
            "durable": queue.journal is not None,
            "journal_bytes": queue.journal.bytes if queue.journal is not None else None,
        }

    # -- streams, mailboxes, channels -----------------------------------------------------------
    def streams(self, limit=DEFAULT_LIMIT):
        return listing(list(self.broker.streams.values()), limit, self.stream)

    def stream(self, stream):
        queues = self.broker.queues
        by_door = Counter(r.client.door for r in stream.readers)
        bound = set(stream.bindings) | set(stream.routed)
        for name in bound:
            queue = queues.get(name)
            if queue is not None:
                by_door.update({door for door in (c.client.door for c in queue.consumers)})
        return {
            "name": stream.name,
            "route": stream.route,
            "published": stream.published,
            "unrouted": stream.unrouted,
            "rate": _round(self.sampler.stream_rates.get(stream.name, {}).get("publish", 0.0)),
            "bound_queues": len(bound),
            "subjects": len(stream.exact),
            "readers": len(stream.readers),
            "subscriptions_by_door": dict(by_door),
        }

    def mailboxes(self, limit=DEFAULT_LIMIT):
        return listing(list(self.broker.mailboxes.values()), limit, self.mailbox)

    @staticmethod
    def mailbox(mailbox):
        owner = mailbox.owner
        return {
            "name": mailbox.name,
            "owner": owner.id if owner is not None else None,
            "owner_door": owner.door if owner is not None else None,
            "depth": len(mailbox),                 # paged-out mail too
            "bytes": mailbox.bytes,
            "limit_bytes": mailbox.limit_bytes,
            "delivered": mailbox.delivered,
            "dropped": mailbox.dropped,
            "expired": mailbox.expired,
        }

    def channels(self, limit=DEFAULT_LIMIT):
        return listing(list(self.broker.channels.values()), limit, self.channel)

    def channel(self, channel):
        return {
            "name": channel.name,
            "queues": sorted(q.name for q in channel.queues.values()),
            "members": [{"id": client.id, "door": client.door}
                        for client in self.broker.members(channel)],
        }
