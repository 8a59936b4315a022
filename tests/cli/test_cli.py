"""The `mqksbridge` console script end to end: a real `twistd mqksbridge` subprocess with
every door and the admin endpoint on loopback ports, and the installed script run as a
subprocess, the way a shell script would use it: publish through one door, consume or
tail through another, admin commands, exit codes."""
import json
import os
import subprocess
import sys

import pytest

from tests.support.admin import fetch_json
from tests.support.process import BrokerProcess, free_port
from tests.support.waits import wait_until

SCRIPT = os.path.join(os.path.dirname(sys.executable), "mqksbridge")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("cli"),
                            doors=("mqks", "malamute", "twino", "admin"))
    process.start()
    yield process
    process.stop()


def urls(broker):
    return {"mqks": f"mqks://127.0.0.1:{broker.ports['mqks']}",
            "malamute": f"malamute://tcp://127.0.0.1:{broker.ports['malamute']}",
            "twino": f"twino://127.0.0.1:{broker.ports['twino']}"}


def admin_url(broker):
    return f"http://127.0.0.1:{broker.ports['admin']}"


def run(*args, input=None, timeout=60):
    return subprocess.run([SCRIPT, *args], input=input, capture_output=True, timeout=timeout)


def start(*args):
    return subprocess.Popen([SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def consumers(broker, queue):
    status_ok = fetch_json(broker.ports["admin"], "/api/queues?limit=100000")
    for q in status_ok["items"]:
        if q["name"] == queue:
            return q["consumers"]
    return 0


def subscribed(broker, stream, door):
    streams = fetch_json(broker.ports["admin"], "/api/streams")["items"]
    return any(s["name"] == stream and s["subscriptions_by_door"].get(door)
               for s in streams)


def finish(proc, timeout=30):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, (proc.returncode, err.decode())
    return [json.loads(line) for line in out.decode().splitlines()]


# (consumer door, how it consumes, publisher door, publish arguments)
QUEUE_CASES = [
    ("mqks", ["cq-mqks", "--event", "ev-cq-mqks"], "malamute", ["--event", "ev-cq-mqks"]),
    ("malamute", ["cq-mlm"], "twino", ["--queue", "cq-mlm"]),
    ("twino", ["cq-tw"], "malamute", ["--queue", "cq-tw", "--subject", "job"]),
]


@pytest.mark.parametrize("door,consume,publisher,publish", QUEUE_CASES,
                         ids=[f"{c[2]}-to-{c[0]}" for c in QUEUE_CASES])
def test_consume_through_each_door_what_another_published(broker, door, consume, publisher,
                                                          publish):
    u = urls(broker)
    proc = start("consume", u[door], *consume, "--count", "2", "--json", "--timeout", "30")
    wait_until(lambda: consumers(broker, consume[0]) == 1 or proc.poll() is not None,
               20, "the consumer", step=0.05)
    done = run("publish", u[publisher], *publish, "first body", "second body")
    assert done.returncode == 0, done.stderr.decode()
    got = finish(proc)
    assert [m["body"] for m in got] == ["first body", "second body"]
    assert all(m["door"] == door for m in got)
    if door != "malamute":                   # a Malamute DELIVER carries no origin
        assert {m["origin"] for m in got} == {publisher}


TAIL_CASES = [
    ("malamute", ["mqks", "^ev-tail-m$"], "mqks", ["--event", "ev-tail-m"]),
    ("twino", ["mqks", "ev-tail-t"], "mqks", ["--event", "ev-tail-t"]),
    ("mqks", ["mqks", "ev-tail-q"], "twino", ["--event", "ev-tail-q"]),
]


@pytest.mark.parametrize("door,tail,publisher,publish", TAIL_CASES,
                         ids=[f"{c[2]}-to-{c[0]}" for c in TAIL_CASES])
def test_tail_a_stream_through_each_door(broker, door, tail, publisher, publish):
    u = urls(broker)
    proc = start("tail", u[door], *tail, "--count", "3", "--timeout", "30")
    wait_until(lambda: subscribed(broker, "mqks", door) or proc.poll() is not None,
               20, "the tail's subscription", step=0.05)
    done = run("publish", u[publisher], *publish, "--lines",
               input=b"line one\nline two\nline three\n")
    assert done.returncode == 0, done.stderr.decode()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert out.decode().splitlines() == ["line one", "line two", "line three"]


def test_admin_commands(broker):
    u, admin = urls(broker), admin_url(broker)
    done = run("publish", u["twino"], "--queue", "cli-backlog", input=b"from stdin\n")
    assert done.returncode == 0, done.stderr.decode()
    assert run("publish", u["twino"], "--queue", "cli-backlog", "two").returncode == 0
    stats = run("stats", "--admin", admin, "--json")
    assert stats.returncode == 0
    overview = json.loads(stats.stdout)
    assert {d["name"] for d in overview["doors"]} == {"mqks", "malamute", "twino", "textqueue"}
    text = run("stats", "--admin", admin).stdout.decode()
    assert "mqksbridge" in text and "twino" in text
    queues = run("queues", "--admin", admin).stdout.decode().splitlines()
    row = next(line for line in queues if line.startswith("cli-backlog "))
    assert row.split()[1:3] == ["push-all", "2"]
    listed = json.loads(run("connections", "--admin", admin, "--json").stdout)
    assert listed["total"] == len(listed["items"])
    purged = run("purge", "cli-backlog", "--admin", admin)
    assert purged.returncode == 0 and purged.stdout.decode().strip() == \
        "purged 2 messages from cli-backlog"
    queue = fetch_json(broker.ports["admin"], "/api/queues/cli-backlog")
    assert queue["depth"] == 0


def test_consume_ack_settles_only_what_was_printed(broker):
    """--ack consumes with acknowledgements: one printed and acked, the other delivered
    message goes back to the queue when the command exits."""
    u = urls(broker)
    setup = run("consume", u["mqks"], "cli-acks", "--event", "ev-acks", "--count", "0")
    assert setup.returncode == 0, setup.stderr.decode()
    assert run("publish", u["mqks"], "--event", "ev-acks", "one", "two").returncode == 0
    done = run("consume", u["mqks"], "cli-acks", "--event", "ev-acks", "--ack", "--count", "1",
               "--timeout", "20")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"one\n"
    wait_until(lambda: fetch_json(broker.ports["admin"], "/api/queues/cli-acks")["depth"] == 1,
               20, "the unacked message back in its queue", step=0.05)


def test_malamute_publish_reaches_a_malamute_worker_and_leaves_no_mailbox(broker):
    """`publish --queue` without --subject sends the queue's name as subject (no Malamute
    worker pattern matches an empty one), and the command's Malamute sessions are
    anonymous: a script running it in a loop must not grow the broker by a mailbox a run."""
    u = urls(broker)
    mailboxes = lambda: fetch_json(broker.ports["admin"], "/api/mailboxes")["total"]  # noqa: E731
    before = mailboxes()
    for body in ("one", "two"):
        done = run("publish", u["malamute"], "--queue", "cli-anon", body)
        assert done.returncode == 0, done.stderr.decode()
    got = run("consume", u["malamute"], "cli-anon", "--count", "2", "--timeout", "20")
    assert got.returncode == 0 and got.stdout == b"one\ntwo\n", got.stderr.decode()
    assert mailboxes() == before


def test_exit_codes(broker):
    u, admin = urls(broker), admin_url(broker)
    timed_out = run("consume", u["twino"], "cli-empty", "--count", "1", "--timeout", "1")
    assert timed_out.returncode == 4, timed_out.stderr.decode()
    closed = run("publish", f"mqks://127.0.0.1:{free_port()}", "--event", "e", "x")
    assert closed.returncode == 3 and b"connection failed" in closed.stderr
    usage = run("publish", u["mqks"], "--queue", "q", "x")
    assert usage.returncode == 2 and b"MQKS publishes events" in usage.stderr
    assert run("publish", "gopher://x", "--event", "e", "x").returncode == 2
    spaced = run("publish", u["mqks"], "--event", "two words", "x")   # not event `two`
    assert spaced.returncode == 2 and b"one word" in spaced.stderr
    assert run("consume", u["mqks"], "q x", "--count", "1").returncode == 2
    nobody = run("publish", u["twino"], "--mailbox", "no-such-client", "x")
    assert nobody.returncode == 1 and b"'no-such-client' refused: code " in nobody.stderr
    assert run("publish", u["mqks"]).returncode == 2                 # argparse: no target
    missing = run("purge", "no-such-queue", "--admin", admin)
    assert missing.returncode == 1 and b"404" in missing.stderr
    no_admin = run("stats", "--admin", f"http://127.0.0.1:{free_port()}")
    assert no_admin.returncode == 3
