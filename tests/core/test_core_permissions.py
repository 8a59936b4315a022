"""Authorization in the core (core.permissions, core.guarded): rules, and the property that
a principal without consume permission on `secret.*` is never handed a `secret.*` message
by any path the core has (live delivery, redelivery after reject and after reconnect, pull,
channel membership, stream bindings, stream readers, mailboxes)."""
import itertools
import re

import pytest
from hypothesis import given, settings, strategies as st

from mqksbridge.core import Broker, Client, Consumer, Denied, FakeClock, Message, Principal, Rules
from mqksbridge.core.permissions import (CONSUME, MAILBOX, MANAGE, PUBLISH, QUEUE, STREAM,
                                         RuleError, Taken, parse_rule)

NAMES = ["secret.a", "public.a", "secret.a/1", "public.a/1"]
BOB = Rules(publish=["*"], consume=["queue:public.*", "stream:public.*",
                                    "stream:mqks:public.*", "mailbox:public.*"])
ADMIN = Rules(publish=["*"], consume=["*"], manage=["*"])


def test_rules_match_whole_names_by_kind():
    rules = Rules(publish=["queue:jobs.*"], consume=["stream:mqks:orders.*", "mailbox:app"],
                  manage=["broker"])
    assert rules.allows(PUBLISH, QUEUE, "jobs.1")
    assert not rules.allows(PUBLISH, QUEUE, "xjobs.1")
    assert not rules.allows(PUBLISH, MAILBOX, "jobs.1")
    assert rules.allows(CONSUME, STREAM, "mqks") and not rules.allows(CONSUME, STREAM, "other")
    assert rules.subjects(CONSUME, "mqks")("orders.new")
    assert not rules.subjects(CONSUME, "mqks")("payments")
    assert rules.allows(CONSUME, MAILBOX, "app") and not rules.allows(CONSUME, MAILBOX, "app2")
    assert rules.allows(MANAGE, "broker", "") and not rules.allows(MANAGE, QUEUE, "jobs.1")


@pytest.mark.parametrize("rule", ["", "queue", "queue:", "topic:x", "stream:a:", 3])
def test_malformed_rules_are_refused(rule):
    with pytest.raises(RuleError):
        parse_rule(rule)


def test_a_live_owner_keeps_its_mailbox_against_another_door_and_user():
    broker = Broker(FakeClock(), guarded=True)
    alice = Client("alice", "malamute", principal=Principal("alice", ADMIN))
    broker.mailbox("alice").attach(alice, lambda *_: None)
    thief = Client("alice", "twino", principal=Principal("alice", ADMIN))
    with pytest.raises(Taken):
        broker.mailbox("alice").attach(thief, lambda *_: None)
    other_user = Client("alice", "malamute", principal=Principal("mallory", ADMIN))
    with pytest.raises(Taken):
        broker.mailbox("alice").attach(other_user, lambda *_: None)
    same_user = Client("alice", "malamute", principal=Principal("alice", ADMIN))
    broker.mailbox("alice").attach(same_user, lambda *_: None)       # Malamute's takeover
    assert broker.mailbox("alice").owner is same_user


def test_publish_is_checked_per_message_on_a_guarded_broker():
    broker = Broker(FakeClock(), guarded=True)
    bob = Client("bob", "test", principal=Principal("bob", Rules(publish=["queue:public.*"])))
    broker.queue("public.a").put_message(Message("1", "", (b"x",)), publisher=bob)
    with pytest.raises(Denied):
        broker.queue("secret.a").put_message(Message("2", "", (b"x",)), publisher=bob)
    assert len(broker.queue("secret.a")) == 0
    with pytest.raises(Denied):
        broker.mailbox("secret.a").send(Message("3", "", (b"x",)), sender=bob)
    with pytest.raises(Denied):
        broker.stream("mqks").publish(Message("4", "secret.a", (b"x",)), publisher=bob)


name = st.sampled_from(NAMES)
step = st.one_of(
    st.tuples(st.just("consume"), name, st.booleans()),
    st.tuples(st.just("bind"), name, name),
    st.tuples(st.just("pull"), name),
    st.tuples(st.just("read"), st.sampled_from(["mqks", "secret.a", "public.a"]),
              st.sampled_from([".*", "secret", "public", "a"])),
    st.tuples(st.just("mailbox"), name),
    st.tuples(st.just("join"), st.sampled_from(["secret.a", "public.a"])),
    st.tuples(st.just("reject")),
    st.tuples(st.just("reconnect")),
    st.tuples(st.just("put"), name),
    st.tuples(st.just("publish"), name),
    st.tuples(st.just("publish_named"), name),
    st.tuples(st.just("send"), name),
    st.tuples(st.just("admin_reject")),
    st.tuples(st.just("admin_consume"), name),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(step, min_size=2, max_size=30))
def test_no_secret_message_reaches_a_user_without_consume_permission(steps):
    broker = Broker(FakeClock(), guarded=True)
    ids = itertools.count()
    got = []
    admin = Client("admin", "test", principal=Principal("admin", ADMIN))
    broker.connect(admin)
    mqks = broker.stream("mqks")
    for n in NAMES:                                   # the admin's world: subject S -> queue S
        mqks.set_bindings(n, {n}, client=admin)
    bob = [None]

    def connect():
        client = Client(f"bob{next(ids)}", "test", principal=Principal("bob", BOB))
        broker.connect(client)
        bob[0] = client
    connect()

    def to_bob(consumer, entry):
        got.append(entry.message.body)

    def message(body, subject=""):
        return Message(str(next(ids)), subject, (body.encode(),))

    for op, *args in steps:
        client = bob[0]
        try:
            if op == "consume":
                broker.add_consumer(broker.queue(args[0]),
                                    Consumer(str(next(ids)), client, to_bob, manual_ack=args[1]))
            elif op == "bind":
                queue, subject = args
                mqks.set_bindings(queue, mqks.bindings.get(queue, set()) | {subject}, client)
            elif op == "pull":
                for entry in broker.queue(args[0]).pull(Consumer("p", client, None), 5):
                    got.append(entry.message.body)
            elif op == "read":
                stream, pattern = args
                broker.stream(stream).add_reader(
                    client, pattern, re.compile(pattern),
                    lambda stream, message: got.append(message.body))
                client.streams.add(stream)
            elif op == "mailbox":
                broker.mailbox(args[0]).attach(client,
                                               lambda mailbox, message: got.append(message.body))
            elif op == "join":
                broker.join_channel(broker.channel(args[0]), client,
                                    lambda queue: Consumer(str(next(ids)), client, to_bob,
                                                           manual_ack=True))
            elif op == "reject":
                for consumer in list(client.consumers.values()):
                    consumer.reject_all()
            elif op == "reconnect":
                broker.disconnect(client)
                connect()
            elif op == "put":
                broker.queue(args[0]).put_message(message(args[0]), publisher=admin)
            elif op == "publish":
                mqks.publish(message(args[0], args[0]), publisher=admin)
            elif op == "publish_named":
                broker.stream(args[0]).publish(message(args[0], "x"), publisher=admin)
            elif op == "send":
                broker.mailbox(args[0]).send(message(args[0]), sender=admin)
            elif op == "admin_reject":
                for consumer in list(admin.consumers.values()):
                    consumer.reject_all()
            elif op == "admin_consume":
                broker.add_consumer(broker.queue(args[0]),
                                    Consumer(str(next(ids)), admin, lambda c, e: None,
                                             manual_ack=True))
        except (Denied, Taken):
            pass
    assert not [body for body in got if body.startswith(b"secret")]


def test_binding_a_secret_subject_to_a_readable_queue_is_refused():
    broker = Broker(FakeClock(), guarded=True)
    bob = Client("bob", "test", principal=Principal("bob", BOB))
    mqks = broker.stream("mqks")
    with pytest.raises(Denied):
        mqks.set_bindings("public.a", {"public.a", "secret.a"}, bob)
    assert mqks.bindings.get("public.a", set()) == set()
    with pytest.raises(Denied):
        mqks.set_bindings("secret.a", {"public.a"}, bob)
    assert mqks.set_bindings("public.a", {"public.a"}, bob)
