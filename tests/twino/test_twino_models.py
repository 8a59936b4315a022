"""JSON models written the way Newtonsoft.Json writes them, and the option/status readers."""
import pytest

from mqksbridge.protocols.twino import models
from mqksbridge.protocols.twino.codec import TwinoProtocolError


def test_client_information_order_nulls_and_defaults():
    assert models.client_information(id="c1", type="worker", online=1500) == (
        b'{"Id":"c1","Name":null,"Type":"worker","Online":1500,"IsAuthenticated":false}')


def test_queue_information_field_order():
    body = models.queue_information(channel="orders", id=1001, status="push", messages=3,
                                    request_acknowledge=True, acknowledge_timeout=15000,
                                    last_message_received=1600000000000)
    assert body == (
        b'{"Channel":"orders","TagName":null,"Id":1001,"PriorityMessages":0,"Messages":3,'
        b'"Status":"push","OnlyFirstAcquirer":false,"RequestAcknowledge":true,'
        b'"AcknowledgeTimeout":15000,"MessageTimeout":0,"UseMessageId":false,'
        b'"WaitForAcknowledge":false,"HideClientNames":false,"ReceivedMessages":0,'
        b'"SentMessages":0,"Deliveries":0,"NegativeAcks":0,"Acks":0,"TimeoutMessages":0,'
        b'"SavedMessages":0,"RemovedMessages":0,"Errors":0,"LastMessageReceived":1600000000000,'
        b'"LastMessageSent":0,"MessageLimit":0,"MessageSizeLimit":0}')


def test_channel_information_lists_and_null_lists():
    body = models.channel_information(name="c", queues=[1001, 1200], active_clients=2)
    assert body.startswith(b'{"Name":"c","Queues":[1001,1200],"AllowMultipleQueues":false,'
                           b'"AllowedQueues":null,"OnlyFirstAcquirer":false,')
    assert body.endswith(b'"ActiveClients":2,"ClientLimit":0,"QueueLimit":0,'
                         b'"DestroyWhenEmpty":false}')


@pytest.mark.parametrize("model, fields", [
    (models.node_information, "Id Name Host IsSlave IsConnected Lifetime"),
    (models.router_information, "Name IsEnabled Method"),
    (models.binding_information,
     "Name Target ContentType Priority Interaction BindingType Method"),
    (models.client_event, "Id Name Type Node"),
    (models.channel_event, "Name ActiveClients ClientLimit Node"),
    (models.subscription_event, "Channel ClientId ClientName ClientType Node"),
    (models.queue_event, "Channel Id Tag Status PriorityMessages Messages Node"),
    (models.message_event, "Channel Queue Id Saved ProducerId ProducerName ProducerType"),
])
def test_model_field_order(model, fields):
    body = model().decode()
    positions = [body.index(f'"{field}":') for field in fields.split()]
    assert positions == sorted(positions) and body.count(":") == len(positions)


def test_enums_are_numbers_and_bools_are_not_numbers():
    assert models.router_information(name="r", is_enabled=True, method=2) == (
        b'{"Name":"r","IsEnabled":true,"Method":2}')


def test_strings_are_escaped_like_newtonsoft():
    body = models.client_event(id='a"b\\c\n\x01\x7fé\u2028')
    assert body == (b'{"Id":"a\\"b\\\\c\\n\\u0001\x7f\xc3\xa9\\u2028",'
                    b'"Name":null,"Type":null,"Node":null}')


def test_unknown_field_is_refused():
    with pytest.raises(TypeError):
        models.client_information(nickname="x")


def test_json_list():
    assert models.json_list([models.router_information(name="a")]) == (
        b'[{"Name":"a","IsEnabled":false,"Method":0}]')
    assert models.json_list([]) == b"[]"


@pytest.mark.parametrize("value, status", [
    ("push", models.PUSH), ("Round-Robin", models.ROUND_ROBIN), ("round", models.ROUND_ROBIN),
    ("PULL", models.PULL), ("cache", models.CACHE), ("pause", models.PAUSED),
    ("stoped", models.STOPPED), ("nonsense", models.BROADCAST), (None, models.BROADCAST),
])
def test_queue_status_header(value, status):
    assert models.queue_status_from_header(value) == status


def test_status_names_follow_the_server_enum():
    assert models.QUEUE_STATUS_NAMES[models.CACHE] == "cache"
    assert models.CLIENT_STATUS_NAMES[4] == "paused"  # the real client's 4 is the server's Cache


def test_parse_options_skips_nulls_and_unknown_members():
    content = (b'{"SendOnlyFirstAcquirer":true,"acknowledgeTimeout":33000,"Status":3,'
               b'"MessageLimit":null,"Bogus":1,"ClientLimit":5}')
    assert models.parse_options(content, models.QUEUE_OPTIONS) == {
        "send_only_first_acquirer": True, "acknowledge_timeout": 33000, "status": 3}
    assert models.parse_options(content)["client_limit"] == 5
    assert models.parse_options(b"") == {}


@pytest.mark.parametrize("content", [b"{", b"[1]", b"\xff"])
def test_parse_options_rejects_bad_json(content):
    with pytest.raises(TwinoProtocolError):
        models.parse_options(content)


def test_event_names():
    assert models.SERVER_EVENTS + models.CHANNEL_EVENTS + models.QUEUE_EVENTS == (
        "ClientConnected", "ClientDisconnected", "ChannelCreated", "ChannelRemoved",
        "ClientJoined", "ClientLeft", "QueueCreated", "QueueUpdated", "QueueRemoved",
        "MessageProduced")


def test_server_level_event_frame_has_no_target():
    frame = models.event_frame(models.CLIENT_CONNECTED, models.client_event(id="c"))
    assert frame.target is None and frame.message_id is None and frame.content_type == 0
    assert frame.source == "ClientConnected"


def test_names_with_undecodable_bytes_go_out_as_those_bytes():
    """A Malamute address that is not UTF-8 reaches the core as surrogate escapes; a Twino
    ClientConnected event about it must be built (it used to raise and cost the Malamute
    client its OPEN reply), carrying the address's own bytes."""
    raw = b"caf\xe9-\xff"
    name = raw.decode("utf-8", "surrogateescape")
    data = models.client_event(id=name, name=None, type=None, node="n")
    assert b'"' + raw + b'"' in data
    assert b"?" in models.client_event(id="\ud800", name=None, type=None, node="n")


def test_option_status_numbers_are_the_clients():
    """A Status number in option JSON is the stock client's: its 4 is paused (a 3.7.2 server
    reads it as cache, B8), and unknown numbers mean broadcast."""
    assert [models.status_from_option(n) for n in range(7)] == [
        models.BROADCAST, models.PUSH, models.ROUND_ROBIN, models.PULL, models.PAUSED,
        models.STOPPED, models.STOPPED]
    assert models.status_from_option(99) == models.BROADCAST
    assert models.status_from_option("2") == models.ROUND_ROBIN
