"""Who may do what, as a table over real sockets: every Twino operation code (601-663 and
codes the door does not know), every MQKS action and every Malamute command, each tried by
the user who owns the objects (alice: `a.*`), another user (bob: `b.*` only, no manage),
an anonymous client and an administrator (root: `*`), against one broker with a users
file. A refused request must change nothing (docs/security.md, "Who may do what")."""
import json
import os
import struct

import pytest
import pytest_twisted
import zmq
import zmq.auth
from twisted.internet import defer

from mqksbridge.bridge.security.users import hash_password
from mqksbridge.protocols.malamute import codec
from mqksbridge.protocols.twino.codec import ContentType as Op
from tests.conftest import RunningBroker
from tests.security.test_security_curve import CurvePeer
from tests.security.test_security_plain import PlainPeer
from tests.support.lines import LineClient

FAST = {"n": 1 << 10}
ANON, AUTH = "tcp:0:interface=127.0.0.1", "tcp:0:interface=127.0.0.1:backlog=52"
PLAIN_ENDPOINT = "tcp://127.0.0.1:*"
ACTORS = ("alice", "bob", "anonymous", "root")
PASSWORD = "pw-{}"


def users_file(path):
    rules = {
        "alice": ('["queue:a.*", "stream:a.*", "stream:mqks:a.*", "mailbox:*"]',
                  '["queue:a.*", "stream:a.*", "stream:mqks:a.*", "mailbox:alice*"]',
                  '["queue:a.*", "stream:a.*"]'),
        "bob": ('["queue:b.*", "stream:b.*", "stream:mqks:b.*"]',
                '["queue:b.*", "stream:b.*", "stream:mqks:b.*", "mailbox:bob*"]', "[]"),
        "root": ('["*"]', '["*"]', '["*"]'),
    }
    text = "".join(f'''
[users.{name}]
password = "{hash_password(PASSWORD.format(name), **FAST)}"
publish = {publish}
consume = {consume}
manage = {manage}
''' for name, (publish, consume, manage) in rules.items())
    path.write_text(text + '''
[anonymous]
publish = ["stream:mqks:public.*"]
consume = ["stream:mqks:public.*", "mailbox:anon*"]
''')
    return str(path)


@pytest.fixture
def broker(tmp_path):
    public, secret = zmq.auth.create_certificates(str(tmp_path), "server")
    curve = f"ipc://@mqksbridge-table-{os.getpid()}-{os.urandom(4).hex()}"
    running = RunningBroker({
        "security": {"users": users_file(tmp_path / "users.toml")},
        "mqks": {"listen": [ANON, AUTH], "auth": [AUTH]},
        "malamute": {"listen": [PLAIN_ENDPOINT, curve], "mechanism": "plain",
                     "curve": {curve: secret}}})
    running.server_key = zmq.auth.load_certificate(public)[0]
    running.endpoint_of = lambda n: running.listeners["malamute"][n].endpoints[0]
    pytest_twisted.blockon(defer.ensureDeferred(running.start()))
    yield running
    for peer in running.malamute_peers:
        peer.close()
    running.malamute_peers.clear()
    pytest_twisted.blockon(defer.ensureDeferred(running.stop()))


# -- Twino ----------------------------------------------------------------------------------------

async def twino_as(broker, actor):
    if actor == "anonymous":
        return await broker.twino()
    return await broker.twino(token=f"{actor}:{PASSWORD.format(actor)}")


def ch(name="a.ch"):
    return [("Channel-Name", name)]


def queue_headers(queue_id, name="a.ch"):
    return ch(name) + [("Queue-Id", str(queue_id))]


U16 = struct.Struct("<H").pack
BINDING = json.dumps({"Name": "b2", "Target": "a.ch", "ContentType": 1, "Priority": 0,
                      "Interaction": 0, "BindingType": 1, "Method": None}).encode()
OK, DENIED, NOT_FOUND, NONE = 0, 401, 404, None
OWNER = {"alice": OK, "bob": DENIED, "anonymous": DENIED, "root": OK}    # manage on a.*
SERVER = {"alice": DENIED, "bob": DENIED, "anonymous": DENIED, "root": OK}   # on broker
EVERYONE = {actor: DENIED for actor in ACTORS}

# (label, code, target, headers, content, expected per actor)
TWINO = [
    ("join a.ch", Op.JOIN, "a.ch", ch(), b"", {a: OK for a in ACTORS}),
    ("join a new channel", Op.JOIN, "a.new", ch("a.new"), b"", OWNER),
    ("leave", Op.LEAVE, "a.ch", ch(), b"", {a: NOT_FOUND for a in ACTORS}),
    ("create channel", Op.CREATE_CHANNEL, "a.new", ch("a.new"), b"", OWNER),
    ("remove channel", Op.REMOVE_CHANNEL, "a.ch", ch(), b"", OWNER),
    ("channel information", Op.CHANNEL_INFORMATION, "a.ch", ch(), b"", OWNER),
    ("channel list", Op.CHANNEL_LIST, "", [], b"", SERVER),
    ("channel consumers", Op.CHANNEL_CONSUMERS, "a.ch", ch(), b"", SERVER),
    ("create queue", Op.CREATE_QUEUE, "a.ch", queue_headers(2), b"", OWNER),
    ("create queue in a new channel", Op.CREATE_QUEUE, "a.new", queue_headers(1, "a.new"),
     b"", OWNER),
    ("remove queue", Op.REMOVE_QUEUE, "a.ch", ch(), U16(1), OWNER),
    ("update queue: stopped", Op.UPDATE_QUEUE, "a.ch", queue_headers(1), b'{"Status": 5}',
     OWNER),
    ("clear messages", Op.CLEAR_MESSAGES, "a.ch", queue_headers(1) + [("Messages", "yes")],
     b"", OWNER),
    ("queue information", Op.QUEUE_INFORMATION, "a.ch", ch(), U16(1), OWNER),
    ("queue list", Op.QUEUE_LIST, "a.ch", ch(), b"", OWNER),
    ("instance list", Op.INSTANCE_LIST, "", [], b"", SERVER),
    ("client list", Op.CLIENT_LIST, "", [], b"", SERVER),
    ("decision over node (not served)", Op.DECISION_OVER_NODE, "", [], b"", EVERYONE),
    ("router list", Op.ROUTER_LIST, "", [], b"", SERVER),
    ("create router", Op.CREATE_ROUTER, "a.r2", [("Route-Method", "0")], b"", OWNER),
    ("remove router", Op.REMOVE_ROUTER, "a.r", [], b"", OWNER),
    ("list bindings", Op.LIST_BINDINGS, "a.r", [], b"", OWNER),
    ("add binding", Op.ADD_BINDING, "a.r", [], BINDING, OWNER),
    ("remove binding", Op.REMOVE_BINDING, "a.r", [("Binding-Name", "b1")], b"", OWNER),
] + [(f"unknown operation {code}", code, "a.ch", ch(), b"", EVERYONE)
     for code in [600, *range(601, 664), 664, 699, 1000]
     if code not in set(Op)]


def snapshot(broker):
    """What any operation could change: channels, queues (length, mode), routers."""
    core = broker.broker
    return (sorted(core.channels),
            {name: (len(q), q.mode) for name, q in core.queues.items()},
            {name: [b["name"] for b in router["bindings"]]
             for name, router in broker.doors["twino"].routers.routers.items()})


async def twino_reset(broker, root):
    """alice's objects as every case starts from: channel a.ch, its queue 1 holding one
    message, router a.r bound to it; nothing of a.new or a.r2."""
    for name in ("a.ch", "a.new"):
        await root.operation(Op.REMOVE_CHANNEL, name, ch(name))
    for name in ("a.r", "a.r2"):
        await root.operation(Op.REMOVE_ROUTER, name)
    assert (await root.operation(Op.CREATE_CHANNEL, "a.ch", ch())).content_type == OK
    assert (await root.operation(Op.CREATE_QUEUE, "a.ch", queue_headers(1))).content_type == OK
    await root.push("a.ch", 1, b"kept")
    assert (await root.operation(Op.CREATE_ROUTER, "a.r", [("Route-Method", "0")])
            ).content_type == OK
    binding = json.dumps({"Name": "b1", "Target": "a.ch", "ContentType": 1, "Priority": 0,
                          "Interaction": 0, "BindingType": 1, "Method": None}).encode()
    assert (await root.operation(Op.ADD_BINDING, "a.r", (), binding)).content_type == OK
    await root.nothing()


@pytest_twisted.ensureDeferred
async def test_twino_operations_table(broker):
    root = await twino_as(broker, "root")
    clients = {actor: await twino_as(broker, actor) for actor in ACTORS}
    await twino_reset(broker, root)
    baseline = snapshot(broker)
    assert len(broker.broker.queues["a.ch/1"]) == 1
    got, want = {}, {}
    for label, code, target, headers, content, expected in TWINO:
        for actor in ACTORS:
            if snapshot(broker) != baseline:
                await twino_reset(broker, root)
            client = clients[actor]
            answer = await client.operation(code, target, headers, content, timeout=10)
            got[label, actor] = answer.content_type
            want[label, actor] = expected[actor]
            if expected[actor] == DENIED:
                assert snapshot(broker) == baseline, (label, actor)
            if code == Op.JOIN and answer.content_type == OK:
                await client.operation(Op.LEAVE, target, headers)
    assert got == want
    # bob, a member of alice's channel, got nothing of her queue
    assert len(broker.broker.queues["a.ch/1"]) == 1


def test_every_twino_operation_served_has_a_rule_and_a_row(broker):
    from mqksbridge.bridge.twino.ops import RULES
    served = set(broker.doors["twino"].ops.table)
    assert served == set(RULES)
    assert served <= {code for _, code, *_ in TWINO}


@pytest_twisted.ensureDeferred
async def test_twino_stock_client_makes_its_own_queues_only(broker):
    bob = await twino_as(broker, "bob")
    assert (await bob.push("b.ch", 1, b"mine", wait_ack=False)) is None
    await bob.nothing()
    assert len(broker.broker.queues["b.ch/1"]) == 1          # pushed: made with its channel
    refused = await bob.push("a.bob", 1, b"not mine", wait_ack=True)
    assert not refused.ok
    assert "a.bob" not in broker.broker.channels and "a.bob/1" not in broker.broker.queues
    refused = await bob.push("b.ch", 1, b"cc", headers=[("CC", "a.cc;1")])
    await bob.nothing()
    assert "a.cc" not in broker.broker.channels
    assert (await bob.operation(Op.JOIN, "a.join", ch("a.join"))).content_type == DENIED
    assert "a.join" not in broker.broker.channels


# -- MQKS -----------------------------------------------------------------------------------------

async def mqks_as(broker, actor):
    if actor == "anonymous":
        return await LineClient.connect(broker.port("mqks"))
    client = await LineClient.connect(broker.listeners["mqks"][1].port.getHost().port)
    assert await client.request(f"l auth {actor} {PASSWORD.format(actor)}") == "l ok "
    return client


def is_error(line, req_id):
    parts = line.split(" ")
    return len(parts) == 3 and parts[0] == req_id and parts[1] == "error" \
        and len(parts[2]) == 24


# (label, request line (X: the request id), expected per actor: "ok", "error" or "nothing")
OK_LINE, ERROR_LINE, NOTHING = "ok", "error", "nothing"
MQKS_OWNER = {"alice": OK_LINE, "bob": ERROR_LINE, "anonymous": ERROR_LINE, "root": OK_LINE}
MQKS_SERVER = {"alice": ERROR_LINE, "bob": ERROR_LINE, "anonymous": ERROR_LINE,
               "root": OK_LINE}
OWN_CONSUMER = {"alice": OK_LINE, "bob": NOTHING, "anonymous": NOTHING, "root": NOTHING}
MQKS = [
    ("publish", "X publish --confirm a.e body", MQKS_OWNER),
    ("consume", "X consume --confirm a.q2 a.e", MQKS_OWNER),
    ("consume another's subjects", "X consume --confirm a.q2 b.e",
     {a: ERROR_LINE for a in ACTORS} | {"root": OK_LINE}),
    ("rebind", "X rebind --confirm a.q a.e a.e2", MQKS_OWNER),
    ("ack another's consumer", "X ack --confirm c.alice --all", OWN_CONSUMER),
    ("reject another's consumer", "X reject --confirm c.alice --all", OWN_CONSUMER),
    ("delete another's consumer", "X delete_consumer --confirm c.alice", OWN_CONSUMER),
    ("delete queue", "X delete_queue --confirm a.q", MQKS_OWNER),
    ("ping", "X ping x", {a: OK_LINE for a in ACTORS}),
    ("_eval", "X _eval len(state.consumers)", MQKS_SERVER),
    ("auth after the login", "X auth root pw-root", {a: ERROR_LINE for a in ACTORS}),
    ("unknown action", "X frob a.q", {a: ERROR_LINE for a in ACTORS}),
]


def mqks_state(broker):
    core = broker.broker
    stream = core.streams["mqks"]
    return ({name: (len(q), sorted(c.id for c in q.consumers)) for name, q in
             core.queues.items()}, sorted(stream.bound_subjects("a.q")))


@pytest_twisted.ensureDeferred
async def test_mqks_actions_table(broker):
    clients = {actor: await mqks_as(broker, actor) for actor in ACTORS}
    alice, root = clients["alice"], clients["root"]

    async def drain(client):
        tag = "drain"
        client.send(f"{tag} ping {tag}")
        while await client.line() != f"{tag} ok {tag}":
            pass

    async def reset():
        if b"c.alice" in broker.doors["mqks"].consumers:
            alice.send("r delete_consumer c.alice")
        for queue in ("a.q", "a.q2"):
            root.send(f"r delete_queue {queue}")
        for client in clients.values():
            await drain(client)
        alice.send("c.alice consume a.q a.e --manual-ack", "p publish a.e kept")
        await drain(alice)                           # delivered, not acked
        assert b"c.alice" in broker.doors["mqks"].consumers

    await reset()
    baseline = mqks_state(broker)
    got, want = {}, {}
    for n, (label, line, expected) in enumerate(MQKS):
        for actor in ACTORS:
            if mqks_state(broker) != baseline:
                await reset()
            client = clients[actor]
            req_id = f"r{n}{actor}"
            client.send(line.replace("X", req_id, 1))
            tag = f"b{n}{actor}"
            client.send(f"{tag} ping {tag}")
            replies = []
            while (reply := await client.line()) != f"{tag} ok {tag}":
                replies.append(reply)
            mine = [r for r in replies if r.startswith(req_id + " ")]
            kind = NOTHING if not mine else ERROR_LINE if is_error(mine[0], req_id) \
                else OK_LINE
            got[label, actor], want[label, actor] = kind, expected[actor]
            if expected[actor] != OK_LINE:
                assert mqks_state(broker) == baseline, (label, actor)
    assert got == want
    for client in clients.values():
        await client.close()


# -- Malamute -------------------------------------------------------------------------------------

async def malamute_as(broker, actor):
    """A raw DEALER: users log in with PLAIN, anonymous comes through the CURVE endpoint
    (CURVE clients are [anonymous] with a users file)."""
    if actor == "anonymous":
        peer = CurvePeer(broker.endpoint_of(1), broker.server_key)
    else:
        peer = PlainPeer(broker.endpoint_of(0), actor, PASSWORD.format(actor))
    broker.malamute_peers.append(peer)
    return peer


SESSION_ERROR = codec.Error(300, "")
PONG = codec.ConnectionPong()
OPENED = codec.Ok(200, "")
# (label, command or [commands], expected per actor: the OKs and ERRORs before the PING's
# answer; deliveries of what earlier rows sent are left out)
OWNER_OK = {"alice": (OPENED,), "bob": (SESSION_ERROR,), "anonymous": (SESSION_ERROR,),
            "root": (OPENED,)}
OWNER_SILENT = {"alice": (), "bob": (SESSION_ERROR,), "anonymous": (SESSION_ERROR,),
                "root": ()}
MALAMUTE = [
    ("open alice's address", codec.ConnectionOpen("alice.x"), OWNER_OK),
    ("stream write+send", [codec.StreamWrite("a.s"), codec.StreamSend("a.e", (b"x",))],
     {actor: (OPENED,) + replies for actor, replies in OWNER_SILENT.items()}),
    ("stream read", codec.StreamRead("a.s", "a.*"), OWNER_OK),
    ("stream cancel", codec.StreamCancel("a.s"), {a: (OPENED,) for a in ACTORS}),
    ("mailbox send", codec.MailboxSend("alice.box", "s", "", 0, (b"x",)), OWNER_SILENT),
    ("service send", codec.ServiceSend("a.svc", "s", "", 0, (b"x",)), OWNER_SILENT),
    ("service offer", codec.ServiceOffer("a.svc", ".*"), OWNER_OK),
    ("credit", codec.Credit(10), {a: () for a in ACTORS}),
    ("confirm (a server's command)", codec.Confirm("t"), {a: (SESSION_ERROR,) for a in ACTORS}),
    ("ping", codec.ConnectionPing(), {a: () for a in ACTORS}),
    ("close", codec.ConnectionClose(), {a: (OPENED,) for a in ACTORS}),
]


def malamute_state(broker):
    core = broker.broker
    return ({name: (len(q), len(q.consumers)) for name, q in core.queues.items()},
            {name: len(box.stored) for name, box in core.mailboxes.items()})


@pytest_twisted.ensureDeferred
async def test_malamute_commands_table(broker):
    own = {"alice": "alice.me", "bob": "bob.me", "anonymous": "anon.me", "root": "root.me"}
    baseline = malamute_state(broker)
    got, want = {}, {}
    for label, command, expected in MALAMUTE:
        for actor in ACTORS:
            peer = await malamute_as(broker, actor)
            if not isinstance(command, codec.ConnectionOpen):
                assert await peer.call(codec.ConnectionOpen(own[actor])) == OPENED, actor
            before = malamute_state(broker)
            commands = command if isinstance(command, list) else [command]
            peer.send(*commands)
            peer.send(codec.ConnectionPing())
            replies = []          # up to the PING's answer: PONG, or ERROR 500 (no session)
            while (reply := await peer.recv()) not in (PONG, codec.Error(500, "")):
                replies.append(reply)
            got[label, actor] = tuple(reply._replace(reason="") for reply in replies
                                      if isinstance(reply, (codec.Ok, codec.Error)))
            want[label, actor] = expected[actor]
            if SESSION_ERROR in expected[actor]:
                assert malamute_state(broker) == before, (label, actor)
            peer.close()
            broker.malamute_peers.remove(peer)
    assert got == want
    assert malamute_state(broker) != baseline       # the owner's sends were taken


@pytest_twisted.ensureDeferred
async def test_malamute_unknown_command_does_nothing_for_anyone(broker):
    """A command id Malamute does not have is dropped and counted (the door never sends a
    frame a real client does not expect), whoever sends it."""
    door = broker.doors["malamute"]
    for n, actor in enumerate(ACTORS, 1):
        peer = await malamute_as(broker, actor)
        await peer.open(f"{'anon' if actor == 'anonymous' else actor}.u")
        before = malamute_state(broker)
        peer.send_frames([b"", b"\xaa\xa0\x63"])        # signature, an id no command has
        assert await peer.call(codec.ConnectionPing()) == PONG, actor
        assert door.counters["malformed"] == n and malamute_state(broker) == before
        peer.close()
        broker.malamute_peers.remove(peer)


# -- the [anonymous] example of docs/security.md ---------------------------------------------

def documented_anonymous_table():
    """The `[anonymous]` table of the users file example in docs/security.md, as written."""
    docs = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "security.md")
    with open(docs, encoding="utf-8") as f:
        text = f.read()
    start = text.index("\n[anonymous]") + 1
    return text[start:text.index("```", start)]


@pytest_twisted.ensureDeferred
async def test_the_documented_anonymous_table_works_over_mqks(tmp_path):
    users = tmp_path / "users.toml"
    users.write_text(documented_anonymous_table())
    broker = RunningBroker({"security": {"users": str(users)}})
    await broker.start()
    try:
        client = await broker.mqks()
        assert await client.request("1 consume --confirm public.feed public.news") == "1 ok "
        client.send("2 publish public.news hello")
        assert (await client.line()).endswith(" event=public.news hello")
        assert is_error(await client.request("3 consume --confirm private.q public.news"), "3")
        await client.close()
    finally:
        await broker.stop()
