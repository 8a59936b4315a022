"""The core's delivery rules as a state machine (docs/delivery.md holds the same table).

Hypothesis drives one broker on a FakeClock: queues `ch` and `ch/1` made by "any door"
(plain Broker.queue, in any mode) before or after channel `ch`, which is created, removed
and created again; every mode and mode change, wait-for-ack, only-first and ack timeouts
set live; consumers of the kinds each door makes (MQKS manual- and auto-ack, Malamute
service offers with a subject filter and opt-in credit, Twino channel members acking or
not, TextQueue outbox files acking within their credit) coming, going, pausing,
disconnecting; puts with and without a producer observer,
acks, nacks, rejects, pulls and time passing. After every step it checks what each mode
promises against what consumers were handed:

- Nothing is lost while it is not settled (acked or nacked, or taken by an auto-ack
  consumer): it is stored in its queue, or held unacked by a consumer. Only what a mode
  says may vanish does (a broadcast nobody takes, a cache's older message, a stopped or
  deleted queue).
- A message handed to one consumer (round-robin, pull, only-first) is held by at most one
  consumer and never also stored; it comes again only with a higher retry, and only after
  something handed it back (a reject, an ack timeout, its consumer leaving).
- A message handed to every consumer (push-all, broadcast) goes in one round to each
  consumer present that takes it (filter, credit), at most once, and never comes again.
- Credit is never exceeded, a filter is always honoured, round robin skips paused clients,
  wait-for-ack hands nothing on while a message is unacked (broadcast, which cannot keep
  anything, does not wait), ack timeouts are exact (never
  early, never late), pull, cache, paused and stopped queues push nothing, broadcast stores
  nothing, cache keeps at most one message and stopped none, and nothing waits that a ready
  consumer could take (no stall).
- The channel holds every queue of its name, whoever made it, and each member has exactly
  one consumer on each of them.
"""
import re

from hypothesis import settings, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule)

from mqksbridge.core import Broker, Client, Consumer, FakeClock, Message
from mqksbridge.core.queue import (BROADCAST, CACHE, MODES, PULL, PUSH_ALL, ROUND_ROBIN,
                                   STOPPED)
from tests.support.pager import tiny_windows

CHANNEL = "ch"
NAMES = ("ch", "ch/1")
KEYS = {"ch": 0, "ch/1": 1}
SUBJECTS = ("a", "b", "c")
PATTERNS = ("", "^a", "^(a|b)$")          # Malamute offers: a subject filter
ACK_TIMEOUT = 5.0                         # one value: deadlines stay in delivery order
TIMEOUTS = st.sampled_from([None, ACK_TIMEOUT])
PUSHING = (ROUND_ROBIN, PUSH_ALL, BROADCAST)
MODE_CHOICES = st.sampled_from(PUSHING * 2 + MODES)   # every mode, the pushing ones more often
KINDS = ("mqks-auto", "mqks-manual", "malamute", "malamute-credit", "twino-acking",
         "twino-acking", "twino-auto", "textqueue")
MEMBERS = ("twino-acking", "twino-auto", "mqks-manual")
LOSSY = (CACHE, STOPPED, BROADCAST)       # a message handed back here may vanish
RARELY = st.sampled_from([False, False, False, True])   # steps that undo much act 1 in 4


class Track:
    """What the machine knows about one accepted message."""

    __slots__ = ("queue", "settled", "vanish_ok", "handbacks", "last_retry", "round",
                 "shared_done", "verdicts")

    def __init__(self, queue):
        self.queue = queue
        self.settled = False       # acked, nacked, or taken by an auto-ack consumer
        self.vanish_ok = False     # something happened that lets it vanish
        self.handbacks = 0         # rejects, timeouts, departures that handed it back
        self.last_retry = -1       # retry of its last one-consumer delivery
        self.round = None          # (expected receivers, receivers) of a shared round
        self.shared_done = False   # every consumer present had it
        self.verdicts = 0          # final observer events


def matches(consumer, subject):
    return consumer.filter is None or consumer.filter.search(subject) is not None


class DeliveryRules(RuleBasedStateMachine):
    windows = None                 # a broker's storage windows (core.window), or None

    def __init__(self):
        super().__init__()
        self.clock = FakeClock()
        self.broker = Broker(self.clock)
        if self.windows is not None:
            self.broker.windows = self.windows()
        self.n = 0
        self.msgs = {}             # message id -> Track
        self.held = {}             # (consumer, message id) -> ack deadline or None
        self.granted = {}          # credit consumer -> credit granted so far
        self.got = {}              # credit consumer -> deliveries
        self.clients = []
        self.member_acks = {}      # member client -> whether its consumers ack manually
        self.rounds = []           # Tracks with a shared round in this step
        self.quiet = False         # a step in which nobody may be handed anything

    def _id(self, prefix):
        self.n += 1
        return f"{prefix}{self.n}"

    # -- what consumers are handed -------------------------------------------------------
    def _deliver(self, consumer, entry):
        queue, message = consumer.queue, entry.message
        track = self.msgs[message.id]
        assert not self.quiet, "something was handed on while its queue or channel went"
        assert queue is track.queue and not queue.deleted
        assert queue.mode in PUSHING, f"a {queue.mode} queue pushed {message.id}"
        assert consumer.active and matches(consumer, message.subject), "filter not honoured"
        if consumer in self.granted:
            self.got[consumer] += 1
            assert self.got[consumer] <= self.granted[consumer], "credit exceeded"
        assert entry.retry <= track.handbacks, "a redelivery that nothing handed back"
        assert not track.shared_done, "a message every consumer had came again"
        if queue.wait_for_ack and queue.mode != BROADCAST:     # broadcast cannot wait
            assert not [mid for (c, mid) in self.held if c.queue is queue and mid != message.id], \
                "wait-for-ack: handed on while another message is unacked"
        if queue.mode in (PUSH_ALL, BROADCAST) and not queue.only_first:
            if track.round is None:
                expected = {c for c in queue.consumers if c.active and c.credit is None
                            and matches(c, message.subject)}
                track.round = (expected, set())
                self.rounds.append(track)
            assert consumer not in track.round[1], "a consumer got a shared message twice"
            track.round[1].add(consumer)
        else:
            self._single(consumer, entry, track)
            if queue.mode == ROUND_ROBIN and not queue.only_first:
                assert not consumer.client.paused, "round robin handed to a paused client"
        if consumer.manual_ack:
            self._hold(consumer, message.id, queue)

    def _single(self, consumer, entry, track):
        mid = entry.message.id
        assert not [c for (c, m) in self.held if m == mid], "two consumers hold one message"
        assert entry.retry > track.last_retry, "a message handed to two consumers at once"
        track.last_retry = entry.retry
        if not consumer.manual_ack:
            track.settled = True

    def _hold(self, consumer, mid, queue):
        timeout = queue.ack_timeout
        self.held[(consumer, mid)] = self.clock.now() + timeout if timeout else None

    def _observe(self, event, entry, consumer, reason, receipt):
        if event != "sent":
            track = self.msgs[entry.message.id]
            track.verdicts += 1
            assert track.verdicts == 1, "an observer heard two verdicts"

    def _handed_back(self, consumer, mid):
        """The machine is about to hand back what `consumer` holds of `mid`."""
        del self.held[(consumer, mid)]
        track = self.msgs[mid]
        track.handbacks += 1
        if consumer.queue.mode in LOSSY:
            track.vanish_ok = True

    def _leaving(self, consumers):
        consumers = set(consumers)
        for consumer, mid in [key for key in self.held if key[0] in consumers]:
            self._handed_back(consumer, mid)

    def _queue_going(self, queue):
        self._leaving(queue.consumers)
        for track in self.msgs.values():
            if track.queue is queue:
                track.vanish_ok = True

    # -- queues and channels ---------------------------------------------------------------
    @initialize(queues=st.lists(st.tuples(MODE_CHOICES, TIMEOUTS, st.booleans()), min_size=2,
                                max_size=2),
                channel_first=st.booleans(), with_channel=st.sampled_from([True, True, False]),
                consumers=st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(NAMES),
                                             st.sampled_from(PATTERNS)), min_size=2, max_size=5))
    def start(self, queues, channel_first, with_channel, consumers):
        """Both queues (mode, ack timeout, wait-for-ack), made by other doors before or after
        the channel (if any), and a few consumers."""
        if with_channel and channel_first:
            self.create_channel()
        for name, (mode, timeout, wait) in zip(NAMES, queues):
            self.create_queue(name, mode, timeout)
            self.broker.queues[name].configure(wait_for_ack=wait)
        if with_channel and not channel_first:
            self.create_channel()
        for kind, name, pattern in consumers:
            self.consumer_comes(kind, name, pattern)

    @rule(name=st.sampled_from(NAMES), mode=MODE_CHOICES, timeout=TIMEOUTS)
    def create_queue(self, name, mode, timeout):
        """Any door: an MQKS consume, a Malamute service, a Twino queue."""
        if name not in self.broker.queues:
            self.broker.queue(name, mode=mode, ack_timeout=timeout)

    @precondition(lambda self: self.broker.queues)
    @rule(name=st.sampled_from(NAMES), rarely=RARELY)
    def delete_queue(self, name, rarely):
        queue = self.broker.queues.get(name)
        if queue is not None and rarely:
            self._queue_going(queue)
            self.quiet = True
            self.broker.delete_queue(name)
            self.quiet = False

    @rule()
    def create_channel(self):
        self.broker.channel(CHANNEL)

    @precondition(lambda self: CHANNEL in self.broker.channels)
    @rule(rarely=RARELY)
    def remove_channel(self, rarely):
        channel = self.broker.channels.get(CHANNEL)
        if channel is not None and rarely:
            for queue in channel.queues.values():
                self._queue_going(queue)
            self.quiet = True
            self.broker.remove_channel(CHANNEL)
            self.quiet = False
            for client in list(self.member_acks):
                self.member_acks.pop(client)

    @precondition(lambda self: self.broker.queues)
    @rule(name=st.sampled_from(NAMES), mode=MODE_CHOICES, rarely=RARELY)
    def set_mode(self, name, mode, rarely):
        queue = self.broker.queues.get(name)
        if queue is None or not rarely:
            return
        if mode in (CACHE, STOPPED):
            for track in self.msgs.values():
                if track.queue is queue:
                    track.vanish_ok = True
        queue.set_mode(mode)

    @precondition(lambda self: self.broker.queues)
    @rule(name=st.sampled_from(NAMES), wait=st.booleans(), only_first=st.booleans(),
          timeout=TIMEOUTS, rarely=RARELY)
    def configure(self, name, wait, only_first, timeout, rarely):
        queue = self.broker.queues.get(name)
        if queue is not None and rarely:
            queue.configure(wait_for_ack=wait, only_first=only_first, ack_timeout=timeout)

    # -- consumers -----------------------------------------------------------------------------
    def _client(self, kind):
        client = Client(self._id(kind), kind)
        self.broker.connect(client)
        self.clients.append(client)
        return client

    @precondition(lambda self: self.broker.queues)
    @rule(kind=st.sampled_from(KINDS), name=st.sampled_from(NAMES),
          pattern=st.sampled_from(PATTERNS))
    def consumer_comes(self, kind, name, pattern):
        """MQKS `consume` (acking manually or not), a Malamute service offer (with a subject
        filter, and credit if it opted in), a Twino client joining the channel (its member
        consumers ack or not, as the queue's RequestAcknowledge says), a TextQueue outbox
        file (acks manually, takes no more than its credit)."""
        if kind.startswith("twino"):
            channel = self.broker.channels.get(CHANNEL)
            if channel is None:
                return
            client = self._client("twino")
            manual = self.member_acks[client] = kind == "twino-acking"

            def make(queue):
                return Consumer(f"{client.id}:{queue.name}", client, self._deliver,
                                manual_ack=manual)
            assert self.broker.join_channel(channel, client, make)
            return
        queue = self.broker.queues.get(name)
        if queue is None:
            return
        client = self._client(kind)
        if kind.startswith("mqks"):
            consumer = Consumer(self._id("c"), client, self._deliver,
                                manual_ack=kind == "mqks-manual")
        elif kind == "textqueue":
            consumer = Consumer(self._id("c"), client, self._deliver, manual_ack=True, credit=0)
            self.granted[consumer] = self.got[consumer] = 0
        else:
            credit = kind == "malamute-credit"
            consumer = Consumer(self._id("c"), client, self._deliver, filter=re.compile(pattern),
                                credit=0 if credit else None)
            if credit:
                self.granted[consumer] = self.got[consumer] = 0
        self.broker.add_consumer(queue, consumer)

    def _consumers(self):
        return sorted((c for q in self.broker.queues.values() for c in q.consumers),
                      key=lambda c: c.id)

    @precondition(lambda self: any(q.consumers for q in self.broker.queues.values()))
    @rule(data=st.data())
    def consumer_goes(self, data):
        """An MQKS delete_consumer, a Malamute worker's offer ending, a Twino member
        leaving the channel."""
        consumer = data.draw(st.sampled_from(self._consumers()))
        client = consumer.client
        if client in self.member_acks:
            channel = self.broker.channels[CHANNEL]
            self._leaving(c for c in client.consumers.values()
                          if c.queue is not None and c.queue.channel is channel)
            del self.member_acks[client]
            assert self.broker.leave_channel(channel, client)
        else:
            self._leaving([consumer])
            self.broker.remove_consumer(consumer)

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), rarely=RARELY)
    def disconnect(self, data, rarely):
        client = data.draw(st.sampled_from(self.clients))
        if not rarely:
            return
        self._leaving(client.consumers.values())
        self.clients.remove(client)
        self.member_acks.pop(client, None)
        self.broker.disconnect(client)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def pause_or_resume(self, data):
        client = data.draw(st.sampled_from(self.clients))
        if client.paused:
            client.resume()
        else:
            client.pause()

    @precondition(lambda self: self.granted)
    @rule(data=st.data(), amount=st.integers(1, 3))
    def credit(self, data, amount):
        consumer = data.draw(st.sampled_from(sorted(self.granted, key=lambda c: c.id)))
        self.granted[consumer] += amount
        consumer.add_credit(amount)

    # -- messages --------------------------------------------------------------------------------
    @precondition(lambda self: self.broker.queues)
    @rule(name=st.sampled_from(NAMES), count=st.integers(1, 4),
          subject=st.sampled_from(SUBJECTS), priority=st.booleans(), observed=st.booleans())
    def put(self, name, count, subject, priority, observed):
        """A publish through any door, `count` times."""
        queue = self.broker.queues.get(name)
        if queue is not None:
            for _ in range(count):
                self._put(queue, subject, priority, observed)

    def _put(self, queue, subject, priority, observed):
        mid = self._id("m")
        track = self.msgs[mid] = Track(queue)
        mode = queue.mode
        if mode == BROADCAST and not any(c.active and (c.credit is None or c.credit > 0)
                                         and matches(c, subject) for c in queue.consumers):
            track.vanish_ok = True           # nobody to take it: dropped, as promised
        if mode == CACHE:
            for other in self.msgs.values():
                if other.queue is queue:
                    other.vanish_ok = True   # the latest only
        accepted = queue.put_message(Message(mid, subject, (b"x",), priority=priority),
                                     self._observe if observed else None, None)
        assert accepted == (mode != STOPPED)
        if not accepted:
            del self.msgs[mid]
        elif mode == BROADCAST:
            assert mid not in self._stored(queue), "broadcast stored a message"

    def _held_by(self, mid):
        return [c for (c, m) in self.held if m == mid]

    @precondition(lambda self: self.held)
    @rule(data=st.data(), verdict=st.sampled_from(["ack", "nack", "reject"]))
    def settle(self, data, verdict):
        consumer, mid = data.draw(st.sampled_from(sorted(self.held, key=lambda k: (k[0].id, k[1]))))
        if verdict == "reject":
            self._handed_back(consumer, mid)
            assert consumer.reject(mid)
        else:
            del self.held[(consumer, mid)]
            self.msgs[mid].settled = True
            assert consumer.ack(mid, verdict == "ack")

    @rule(name=st.sampled_from(NAMES), count=st.integers(1, 3), data=st.data())
    def pull(self, name, count, data):
        """A Twino member's pull (only from a pull queue, as the door allows)."""
        queue = self.broker.queues.get(name)
        if queue is None or queue.mode != PULL:
            return
        pullers = [c for c in queue.consumers if c.client in self.member_acks]
        if not pullers:
            return
        consumer = data.draw(st.sampled_from(pullers))
        for entry in queue.pull(consumer, count):
            track = self.msgs[entry.message.id]
            assert not track.shared_done and entry.retry <= track.handbacks
            self._single(consumer, entry, track)
            if consumer.manual_ack:
                self._hold(consumer, entry.message.id, queue)

    @rule(seconds=st.sampled_from([1.0, 3.0, ACK_TIMEOUT]))
    def time_passes(self, seconds):
        """The broker's sweep: exactly the deliveries whose ack deadline passed time out."""
        self.clock.advance(seconds)
        now = self.clock.now()
        for (consumer, mid), deadline in list(self.held.items()):
            if deadline is not None and deadline <= now:
                self._handed_back(consumer, mid)
        self.broker.tick()

    # -- promises --------------------------------------------------------------------------------
    @staticmethod
    def _stored(queue):
        return [e.message.id for e in queue.stored_entries()]

    @invariant()
    def promises_hold(self):
        """In this order: a shared round is complete before it counts as settled."""
        self.shared_rounds_reach_every_consumer_present()
        self.holdings_are_what_was_handed_and_not_settled()
        self.nothing_is_lost_or_stored_twice()
        self.modes_keep_what_they_promise()
        self.credit_is_never_negative()
        self.nothing_waits_that_a_ready_consumer_could_take()
        self.the_channel_sees_every_queue_of_its_name()

    def shared_rounds_reach_every_consumer_present(self):
        for track in self.rounds:
            expected, receivers = track.round
            assert expected <= receivers, "a consumer present missed a push-all message"
            track.shared_done = True
        self.rounds = []

    def holdings_are_what_was_handed_and_not_settled(self):
        actual = {(c, mid) for q in self.broker.queues.values() for c in q.consumers
                  for mid in c.unacked}
        assert actual == set(self.held), "unacked messages differ from what consumers hold"

    def nothing_is_lost_or_stored_twice(self):
        stored = {}
        for queue in self.broker.queues.values():
            for mid in self._stored(queue):
                assert mid not in stored, "a message stored twice"
                stored[mid] = queue
                assert self.msgs[mid].queue is queue
        held = {mid for (_, mid) in self.held}
        for mid, track in self.msgs.items():
            if mid in stored:
                assert mid not in held, "a message both stored and held"
            elif (mid not in held and not track.settled and not track.shared_done
                  and not track.vanish_ok):
                raise AssertionError(f"{mid} was lost (mode {track.queue.mode})")

    def modes_keep_what_they_promise(self):
        for queue in self.broker.queues.values():
            if queue.mode == CACHE:
                assert len(queue) <= 1, "a cache keeps more than the latest message"
            elif queue.mode == STOPPED:
                assert len(queue) == 0, "a stopped queue keeps messages"

    def credit_is_never_negative(self):
        assert all(c.credit >= 0 for c in self.granted if c.credit is not None)

    def nothing_waits_that_a_ready_consumer_could_take(self):
        for queue in self.broker.queues.values():
            if queue.mode not in (ROUND_ROBIN, PUSH_ALL) or not len(queue):
                continue
            if queue.wait_for_ack and any(c.queue is queue for (c, _) in self.held):
                continue
            for entry in list(queue.stored_entries()):
                assert not [c for c in queue.consumers
                            if c.ready() and matches(c, entry.message.subject)], \
                    f"{entry.message.id} waits in a {queue.mode} queue a consumer could take"

    def the_channel_sees_every_queue_of_its_name(self):
        channel = self.broker.channels.get(CHANNEL)
        queues = {name: q for name, q in self.broker.queues.items() if name in NAMES}
        if channel is None:
            assert all(q.channel is None for q in queues.values())
            assert not self.member_acks
            return
        assert channel.queues == {KEYS[name]: q for name, q in queues.items()}
        assert all(q.channel is channel for q in queues.values())
        for client in self.member_acks:
            assert client.id in channel.members
            for queue in queues.values():
                mine = [c for c in queue.consumers if c.client is client]
                assert len(mine) == 1, "a member without exactly one consumer of a queue"


class ChannelRules(DeliveryRules):
    """The same promises where channels matter most: Twino members acking or not (and an
    MQKS consumer beside them) on queues that hand each message to one or to all."""

    @initialize(queues=st.lists(st.tuples(st.sampled_from(PUSHING), TIMEOUTS, st.booleans()),
                                min_size=2, max_size=2),
                consumers=st.lists(st.sampled_from(MEMBERS), min_size=2, max_size=4))
    def start(self, queues, consumers):
        self.create_channel()
        for name, (mode, timeout, wait) in zip(NAMES, queues):
            self.create_queue(name, mode, timeout)
            self.broker.queues[name].configure(wait_for_ack=wait)
        for kind in consumers:
            self.consumer_comes(kind, NAMES[0], "")

    @precondition(lambda self: self.broker.queues)
    @rule(kind=st.sampled_from(MEMBERS), name=st.sampled_from(NAMES))
    def consumer_comes(self, kind, name, pattern=""):
        super().consumer_comes(kind, name, pattern)


TestDeliveryRules = DeliveryRules.TestCase
TestDeliveryRules.settings = settings(max_examples=250, stateful_step_count=60, deadline=None)
TestChannelRules = ChannelRules.TestCase
TestChannelRules.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)



# The same rules with every queue's backlog past two messages paged out (core.window).
class PagedDeliveryRules(DeliveryRules):
    windows = staticmethod(tiny_windows)


class PagedChannelRules(ChannelRules):
    windows = staticmethod(tiny_windows)


TestPagedDeliveryRules = PagedDeliveryRules.TestCase
TestPagedDeliveryRules.settings = TestDeliveryRules.settings
TestPagedChannelRules = PagedChannelRules.TestCase
TestPagedChannelRules.settings = TestChannelRules.settings
