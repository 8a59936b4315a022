"""Rates from counter deltas, sampled once per interval (a bridge.clock.periodic service).

The doors and the core only ever increment integers; this turns them into per-second
rates (doors, queues, streams, door-to-door flows) and keeps a short history per door for
the dashboard's charts. Its cost is one pass over the queues and connections per interval,
never anything per message, and the pass over connections takes SLICE of them per reactor
turn (bridge.traffic.Scan): with 5,000 connections one pass held the reactor 2.3 ms each
second, the longest of a soak's turns. Its door totals are what the overview and /metrics
show (`door_totals`): counters as of the last sample, however many dashboards ask.
"""
from collections import deque

HISTORY = 120                        # samples kept per door (two minutes at 1/s)
SLICE = 512                          # connections summed per reactor turn (~0.15 ms)


def rate(now, before, seconds):
    return max(0.0, (now - before) / seconds) if seconds > 0 else 0.0


class Sampler:
    def __init__(self, broker, doors, clock):
        self.broker = broker
        self.doors = doors               # name -> door (each with .traffic)
        self.clock = clock               # IReactorTime
        self.at = None
        self.door_rates = {}             # door -> {messages_in, messages_out, bytes_in, bytes_out}
        self.queue_rates = {}            # queue -> {publish, deliver, ack}
        self.stream_rates = {}           # stream -> {publish}
        self.flow_rates = {}             # (origin, door) -> messages/s
        self.history = {name: deque(maxlen=HISTORY) for name in doors}
        self._doors = {}
        self._queues = {}
        self._streams = {}
        self.samples = 0
        self.door_totals = {}            # door -> its totals at the last sample
        self._pass = None                # (start time, door -> Scan) while a pass runs

    def sample(self):
        """Start a pass: door counters a SLICE of connections per turn, then the rest."""
        if self._pass is not None:       # the last one is still going (a very busy turn)
            return
        self._pass = (self.clock.seconds(),
                      {name: door.traffic.scan() for name, door in self.doors.items()})
        self._step()

    def _step(self):
        now, scans = self._pass
        budget = SLICE
        try:
            for scan in scans.values():
                while budget > 0 and not scan.done:
                    budget -= scan.step(budget)
                if not scan.done:
                    self.clock.callLater(0, self._step)
                    return
        except Exception:
            self._pass = None            # a failed pass must not stop the next ones
            raise
        self._pass = None
        self._record(now, {name: scan.totals() for name, scan in scans.items()})

    def totals(self, name, door):
        """A door's counters as of the last sample (fresh connection counts); summed now
        before the first one."""
        sampled = self.door_totals.get(name)
        if sampled is None:
            return door.traffic.totals()
        traffic = door.traffic
        return {**sampled, "connections": len(traffic.live), "opened": traffic.opened,
                "refused": traffic.refused}

    def _record(self, now, door_totals):
        seconds = now - self.at if self.at is not None else 0.0
        first = self.at is None
        self.door_totals = door_totals
        for name, totals in door_totals.items():
            before = self._doors.get(name)
            if before is not None and not first:
                rates = {key: rate(totals[key], before[key], seconds)
                         for key in ("messages_in", "messages_out", "bytes_in", "bytes_out")}
                self.door_rates[name] = rates
                self.history[name].append((round(now, 3), rates["messages_in"],
                                           rates["messages_out"]))
                for origin, count in totals["flows_in"].items():
                    self.flow_rates[origin, name] = rate(
                        count, before["flows_in"].get(origin, 0), seconds)
        queues = {}
        queue_rates = {}
        for name, queue in self.broker.queues.items():
            counts = (queue.received, queue.delivered, queue.acked)
            queues[name] = counts
            before = self._queues.get(name)
            if before is not None and not first:
                queue_rates[name] = {"publish": rate(counts[0], before[0], seconds),
                                     "deliver": rate(counts[1], before[1], seconds),
                                     "ack": rate(counts[2], before[2], seconds)}
        streams = {}
        stream_rates = {}
        for name, stream in self.broker.streams.items():
            streams[name] = stream.published
            before = self._streams.get(name)
            if before is not None and not first:
                stream_rates[name] = {"publish": rate(stream.published, before, seconds)}
        if not first:
            self.queue_rates, self.stream_rates = queue_rates, stream_rates
        self._doors, self._queues, self._streams = door_totals, queues, streams
        self.at = now
        self.samples += 1
