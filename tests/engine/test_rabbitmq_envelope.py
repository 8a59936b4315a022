"""The cluster engine's envelope and topology, without a node: a core Message survives
the trip through AMQP properties, headers and body as pika encodes them on the wire, and
a queue's options survive the trip through its declare arguments."""
from hypothesis import given, strategies as st
from pika import spec

from mqksbridge.bridge.engine import Message
from mqksbridge.bridge.engine.rabbitmq import envelope, topology

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=300)
names = st.one_of(text.filter(bool), text.map(lambda t: envelope.PREFIX + t))
headers = st.one_of(st.none(), st.dictionaries(names, text, min_size=1, max_size=4))
messages = st.builds(
    Message, text.filter(bool), text, st.lists(st.binary(max_size=40), min_size=1,
                                               max_size=3).map(tuple),
    headers, text, text, text, st.booleans(),
    st.one_of(st.none(), st.floats(0, 2e9)), st.floats(0, 2e9))


def on_the_wire(properties):
    """BasicProperties as pika sends and reads them (content header frame)."""
    again = spec.BasicProperties()
    again.decode(b"".join(properties.encode()))
    return again


def same(a, b):
    return all(getattr(a, slot) == getattr(b, slot)
               for slot in ("id", "subject", "frames", "headers", "sender", "origin",
                            "tracker", "priority", "expires_at", "created_at"))


@given(messages, st.integers(0, 5), st.one_of(st.none(), st.floats(0, 2e9)))
def test_a_message_survives_the_trip_through_amqp(message, retry, now):
    properties, body = envelope.encode(message, now)
    if retry:
        properties.headers = dict(properties.headers or {}, **{"x-delivery-count": retry})
    back, count = envelope.decode(on_the_wire(properties), body, Message)
    assert same(back, message), (back, message)
    assert count == retry


def test_a_plain_client_reads_the_envelope_in_amqp_properties():
    message = Message("m1", "orders.new", (b"a", b"bc"), {"Kind": "x"}, "alice", "mqks",
                      "t-1", True, None, 1_700_000_000.5)
    properties, body = envelope.encode(message)
    assert (properties.message_id, properties.type, properties.reply_to, properties.app_id,
            properties.correlation_id, properties.priority, properties.timestamp) == (
        "m1", "orders.new", "alice", "mqks", "t-1", 1, 1_700_000_000)
    assert properties.headers["Kind"] == "x" and body == b"abc"
    assert properties.delivery_mode == 2


def test_an_expiry_is_what_is_left_of_it_in_milliseconds():
    message = Message("m1", "s", (b"x",), expires_at=1_000.25)
    assert envelope.encode(message, 990.0)[0].expiration == "10250"
    assert envelope.encode(message, 2_000.0)[0].expiration == "0"     # late: at once


@given(st.fixed_dictionaries({}, optional={
    "max_messages": st.integers(1, 10**6), "max_bytes": st.integers(1, 10**9),
    "ack_timeout": st.floats(0.1, 1e4), "max_deliveries": st.integers(1, 50),
    "dead_letter": st.text(min_size=1, max_size=20),
    "mode": st.sampled_from(["round-robin", "push-all", "pull", "paused"]),
    "overflow": st.sampled_from(["reject", "drop-oldest", "dead-letter:spill"])}))
def test_queue_options_survive_the_trip_through_declare_arguments(options):
    names = topology.Names("fleet.")
    arguments = topology.queue_arguments(names, "jobs", options, 3)
    assert arguments["x-queue-type"] == "quorum"
    assert arguments["x-quorum-initial-group-size"] == 3
    back, doors = topology.options_from(arguments)
    expected = dict({"mode": "round-robin", "overflow": "reject"}, **options)
    assert back == expected and doors == {}


def test_dead_letters_go_to_the_core_queue_the_core_would_use():
    names = topology.Names("f.")
    arguments = topology.queue_arguments(names, "jobs", {"max_deliveries": 3}, 1)
    assert arguments["x-delivery-limit"] == 2          # the third hand-back dead-letters
    assert arguments["x-dead-letter-routing-key"] == "f.q.jobs.dlq"
    assert topology.dead_letter_target("jobs", {"max_deliveries": 3}) == "jobs.dlq"
    assert topology.dead_letter_target("jobs", {"overflow": "dead-letter:spill"}) == "spill"
    assert topology.dead_letter_target("jobs", {}) is None


def test_door_arguments_ride_along():
    class Door:
        def arguments(self):
            return {"acks": "required", "timeout": 30}
    arguments = topology.queue_arguments(topology.Names(), "q", {}, 1, {"twino": Door(),
                                                                      "plain": {}})
    assert topology.options_from(arguments)[1] == {"twino": {"acks": "required",
                                                             "timeout": 30}}
