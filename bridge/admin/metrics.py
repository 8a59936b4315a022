"""Prometheus exposition (`/metrics`) through prometheus_client.

The counters and gauges are read from the broker at scrape time by one custom Collector
(the same numbers the JSON API shows); nothing is instrumented per message. Two
histograms are observed as things happen:

- `mqksbridge_publish_to_deliver_seconds`: one queue delivery in 256 per connection whose
  message carries its arrival time (bridge.traffic; the Twino door stamps every push, MQKS
  and Malamute publishes are not stamped today and are not observed);
- `mqksbridge_fsync_seconds`: the hook for durable queues' journals. The journal calls
  `metrics.fsync.observe(seconds)` from its worker thread after each fsync
  (prometheus_client metrics are thread-safe).

Each broker gets its own CollectorRegistry, so several brokers in one process (tests)
never share series.
"""
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from mqksbridge.bridge.admin.view import VERSION

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, 30.0, 60.0)
FSYNC_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                 1.0, 2.5)


class BrokerCollector:
    """Reads the broker, its doors' traffic and its queues/streams/mailboxes per scrape."""

    def __init__(self, view):
        self.view = view

    def collect(self):
        view = self.view
        broker = view.broker
        info = InfoMetricFamily("mqksbridge", "Broker version and node name")
        info.add_metric([], {"version": VERSION, "node": view.node})
        yield info
        uptime = GaugeMetricFamily("mqksbridge_uptime_seconds", "Seconds since start")
        uptime.add_metric([], view.clock.seconds() - view.started)
        yield uptime
        if hasattr(broker, "confirm_seconds"):       # a gateway: RabbitMQ's publisher confirms
            confirms = CounterMetricFamily("mqksbridge_engine_confirms",
                                           "Publishes the cluster answered (ack or nack): "
                                           "engine round trips", labels=[])
            confirms.add_metric([], broker.confirms)
            seconds = CounterMetricFamily("mqksbridge_engine_confirm_seconds",
                                          "Their publish-to-answer times, summed (mean "
                                          "confirm latency: the ratio of the two rates)",
                                          labels=[])
            seconds.add_metric([], broker.confirm_seconds)
            resent = CounterMetricFamily("mqksbridge_engine_resent",
                                         "Nacked publishes sent again (a queue starting, "
                                         "electing a leader or full)", labels=[])
            resent.add_metric([], broker.resends.resent)
            yield from (confirms, seconds, resent)

        door_families = {
            "connections": GaugeMetricFamily("mqksbridge_door_connections",
                                             "Open connections", labels=["door"]),
            "opened": CounterMetricFamily("mqksbridge_door_connections_opened",
                                          "Connections accepted", labels=["door"]),
            "refused": CounterMetricFamily("mqksbridge_door_connections_refused",
                                           "Connections refused over the door's "
                                           "max_connections", labels=["door"]),
            "messages_in": CounterMetricFamily("mqksbridge_door_messages_received",
                                               "Messages published through the door",
                                               labels=["door"]),
            "messages_out": CounterMetricFamily("mqksbridge_door_messages_delivered",
                                                "Messages delivered through the door",
                                                labels=["door"]),
            "bytes_in": CounterMetricFamily("mqksbridge_door_bytes_received",
                                            "Bytes read from clients", labels=["door"]),
            "bytes_out": CounterMetricFamily("mqksbridge_door_bytes_sent",
                                             "Bytes written to clients", labels=["door"]),
        }
        flows = CounterMetricFamily("mqksbridge_flow_messages",
                                    "Messages delivered through door `to` that were "
                                    "published through door `from`", labels=["from", "to"])
        for name, door in view.doors.items():
            totals = view.sampler.totals(name, door)     # as of the last sample
            for key, family in door_families.items():
                family.add_metric([name], totals[key])
            for origin, count in sorted(totals["flows_in"].items()):
                flows.add_metric([origin or "unknown", name], count)
        yield from door_families.values()
        yield flows

        depth = GaugeMetricFamily("mqksbridge_queue_messages", "Messages waiting",
                                  labels=["queue"])
        priority = GaugeMetricFamily("mqksbridge_queue_priority_messages",
                                     "Messages waiting in the priority lane", labels=["queue"])
        size = GaugeMetricFamily("mqksbridge_queue_bytes", "Bytes waiting", labels=["queue"])
        unacked = GaugeMetricFamily("mqksbridge_queue_unacked",
                                    "Deliveries not yet acknowledged", labels=["queue"])
        consumers = GaugeMetricFamily("mqksbridge_queue_consumers", "Consumers by door",
                                      labels=["queue", "door"])
        counters = {
            "received": CounterMetricFamily("mqksbridge_queue_published",
                                            "Messages the queue took", labels=["queue"]),
            "delivered": CounterMetricFamily("mqksbridge_queue_delivered",
                                             "Deliveries to consumers", labels=["queue"]),
            "acked": CounterMetricFamily("mqksbridge_queue_acked",
                                         "Deliveries settled by an ack", labels=["queue"]),
            "requeued": CounterMetricFamily("mqksbridge_queue_requeued",
                                            "Messages put back (reject, consumer gone)",
                                            labels=["queue"]),
            "dropped": CounterMetricFamily("mqksbridge_queue_dropped",
                                           "Messages refused or dropped", labels=["queue"]),
            "expired": CounterMetricFamily("mqksbridge_queue_expired",
                                           "Messages expired while waiting", labels=["queue"]),
        }
        for name, queue in list(broker.queues.items()):
            depth.add_metric([name], len(queue))
            priority.add_metric([name], queue.lengths()[0])
            size.add_metric([name], getattr(queue, "bytes", 0))   # 0 on a gateway
            unacked.add_metric([name], sum(len(c.unacked) for c in queue.consumers))
            by_door = {}
            for c in queue.consumers:
                by_door[c.client.door] = by_door.get(c.client.door, 0) + 1
            for door, count in sorted(by_door.items()):
                consumers.add_metric([name, door], count)
            for attr, family in counters.items():
                family.add_metric([name], getattr(queue, attr))
        yield from (depth, priority, size, unacked, consumers, *counters.values())

        published = CounterMetricFamily("mqksbridge_stream_published",
                                        "Messages published to the stream", labels=["stream"])
        unrouted = CounterMetricFamily("mqksbridge_stream_unrouted",
                                       "Messages no subscription took", labels=["stream"])
        subscriptions = GaugeMetricFamily("mqksbridge_stream_subscriptions",
                                          "Subscriptions (readers, bound queues' consumers) "
                                          "by door", labels=["stream", "door"])
        for stream in list(broker.streams.values()):
            published.add_metric([stream.name], stream.published)
            unrouted.add_metric([stream.name], stream.unrouted)
            for door, count in sorted(view.stream(stream)["subscriptions_by_door"].items()):
                subscriptions.add_metric([stream.name, door], count)
        yield from (published, unrouted, subscriptions)

        mail = GaugeMetricFamily("mqksbridge_mailbox_messages", "Mail waiting for its owner",
                                 labels=["mailbox"])
        for mailbox in list(broker.mailboxes.values()):
            mail.add_metric([mailbox.name], len(mailbox))
        yield mail


class Metrics:
    """The registry /metrics renders: the collector plus the two histograms."""

    def __init__(self, view, sample_every=256):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(view))
        self.latency = Histogram("mqksbridge_publish_to_deliver_seconds",
                                 "Sampled time from a message's arrival to its delivery",
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.fsync = Histogram("mqksbridge_fsync_seconds",
                               "Time of each journal fsync (fed by durable journals)",
                               buckets=FSYNC_BUCKETS, registry=self.registry)
        for door in view.doors.values():
            door.traffic.latency = self.latency.observe
            door.traffic.mask = sample_every - 1    # before any connection (Traffic.mask)

    def render(self):
        return generate_latest(self.registry)
