"""Soak: every door under mixed load and hostile clients, for minutes (docs/limits.md).

    python -m bench.soak [--duration 600] [--baseline 60] [--idle 5000] [--out bench/results]

One `twistd -n mqksbridge` (MQKS, Malamute, Twino, admin), then two phases:

1. unloaded (`--baseline` s): only the healthy clients run;
2. loaded (`--duration` s): besides them, mixed load (MQKS publish -> consume at 1,000/s,
   Twino push -> consume at 300/s, a Malamute stream at 300/s), a stuck consumer per door
   (subscribed to the loaded stream/queue, never reads), slowloris clients (a byte a second
   of a request that never ends, 30 per door), a garbage sender (2 KB of random bytes on a new
   connection, 10 a second per door) and `--idle` idle connections (60% MQKS, 20% Twino after
   its hello, 20% Malamute after OPEN; the Twino and Malamute ones kept alive with a ping
   every 20 s, each at its own moment, reopened if closed). The hostile clients spread what
   they send over each second, a slice every 10 ms, as independent clients would.

Healthy clients, ten probes a second per door on average, at random (Poisson) times: MQKS publish -> delivery on another
connection, Twino PING -> PONG, Malamute CONNECTION-PING -> PONG; and a control, the same
round trip to a bare echo process, which shows what the machine itself adds (a shared 2-CPU
machine under load delays every process). Every second the broker's RSS, open descriptors
and CPU (/proc), its connections per door (admin API) and the probes' latencies are
sampled. Results: bench/results/soak-latest.json and soak.png (matplotlib, the `bench`
extra). Not a test: it runs for minutes; `make soak` runs it, `make bench` leaves it out.

Every role is its own OS process (`python -m bench.soak ROLE PORTS-JSON ...`), so the load
generators do not share an interpreter lock with the probes that measure.
"""
import argparse
import json
import os
import random
import resource
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from bench.processes import HERE, PY, ROOT, free_port
from bench.procstat import cpu_seconds, rss_mb

TWISTD = os.path.join(os.path.dirname(PY), "twistd")
PROBES_PER_SECOND = 10
PROBED = ("mqks", "twino", "malamute", "control")   # control: a bare echo process


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# -- roles (each in its own process) -----------------------------------------------------------

def role_healthy(ports, which):
    """One door's probe (PROBED[which]), ten a second on average at random times, in a
    process of its own so that the probes never wait for each other's interpreter lock.
    One JSON line a second: {door: [latency ms, ...]}."""
    from mqksbridge.bridge.clients import twino
    from mqksbridge.bridge.clients.malamute import MalamuteClient
    from mqksbridge.bridge.clients.mqks import MqksClient

    door = PROBED[which]
    samples = []
    lock = threading.Lock()

    def record(seconds):
        with lock:
            samples.append(seconds * 1000)

    def paced(probe):
        """Probes at random intervals, exponential with a mean of 100 ms: Poisson arrivals
        see the broker's time average. On a fixed 100 ms lattice a probe locked onto the
        phase of the hostile clients' once-a-second bursts, and one door's p99 (one probe
        in ten) measured nothing but the turn that serves the burst: which door depended
        on the run (MQKS 12x in one; in the next, of the same code, Twino's probe instead)."""
        rng = random.Random(which)
        next_at = time.monotonic()
        while True:
            next_at = max(next_at, time.monotonic()) + rng.expovariate(PROBES_PER_SECOND)
            time.sleep(max(0.0, next_at - time.monotonic()))
            probe()

    def mqks():
        sub, pub = MqksClient(port=ports["mqks"], timeout=60), MqksClient(port=ports["mqks"])
        sub.consume("soak-healthy", ["soak.healthy"])

        def probe():
            sent = time.monotonic()
            pub.publish("soak.healthy", "%r" % sent, confirm=False)
            sub.recv(60)
            record(time.monotonic() - sent)
        paced(probe)

    def twino_probe():
        client = twino.connect(port=ports["twino"], timeout=60)
        paced(lambda: record(client.ping(60)))

    def malamute():
        client = MalamuteClient(f"tcp://127.0.0.1:{ports['malamute']}", "soak-healthy",
                                timeout=60)
        client.connect()

        def probe():
            sent = time.monotonic()
            client.ping()
            record(time.monotonic() - sent)
        paced(probe)

    def control():
        """The same round trip to a bare echo process: what the machine adds."""
        sock = socket.create_connection(("127.0.0.1", ports["echo"]))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def probe():
            sent = time.monotonic()
            sock.sendall(b"x")
            sock.recv(16)
            record(time.monotonic() - sent)
        paced(probe)

    probes = {"mqks": mqks, "twino": twino_probe, "malamute": malamute, "control": control}
    threading.Thread(target=probes[door], daemon=True).start()
    while True:
        time.sleep(1)
        with lock:
            taken, samples[:] = samples[:], []
        print(json.dumps({"t": time.time(), door: taken}), flush=True)


# Malamute sessions expire after `malamute.timeout` (60 s) without a frame from the client:
# the load's reader and the stuck reader, which only receive, ping this often.
KEEPALIVE = 20.0
# The hostile clients spread what they send over each second, a slice every TICK, as
# independent clients would: a once-a-second burst is served in one turn that a probe
# can lock onto (docs/limits.md, "Soak").
TICK = 0.01


def role_load(ports):
    """Mixed load on every door, at fixed rates, each with a consumer that keeps up.

    The rates are offered, not caught up on: a sender that falls more than 20 ms behind
    (its process waited for a CPU) skips what it missed instead of sending it in a burst,
    and counts it; the broker's own counts say what was sent."""
    from mqksbridge.bridge.clients import twino
    from mqksbridge.bridge.clients.malamute import MalamuteClient
    from mqksbridge.bridge.clients.mqks import MqksClient
    from mqksbridge.protocols.malamute.codec import ConnectionPing

    skipped = {}

    def paced(rate, send, name):
        next_at = time.monotonic()
        skipped[name] = 0
        while True:
            send()
            next_at += 1 / rate
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -0.02:
                missed = int(-delay * rate)
                skipped[name] += missed
                next_at += missed / rate

    def mqks():
        sub = MqksClient(port=ports["mqks"], timeout=60)
        sub.consume("soak-load", ["soak.load"])
        threading.Thread(target=lambda: [sub.recv(3600) for _ in iter(int, 1)],
                         daemon=True).start()
        pub = MqksClient(port=ports["mqks"])
        body = "x" * 100
        paced(1000, lambda: pub.publish("soak.load", body, confirm=False), "mqks")

    def twino_load():
        sub = twino.connect(port=ports["twino"], timeout=3600)
        sub.join("soak")

        def drain():
            while True:
                frame = sub.recv(3600)
                if frame is not None and frame.pending_ack:
                    sub.ack(frame)
        threading.Thread(target=drain, daemon=True).start()
        pub = twino.connect(port=ports["twino"])
        body = b"x" * 100
        paced(300, lambda: pub.push("soak", 1, body), "twino")

    def malamute():
        endpoint = f"tcp://127.0.0.1:{ports['malamute']}"
        reader = MalamuteClient(endpoint, "soak-reader", timeout=60)
        reader.connect()
        reader.set_consumer("soak", "")

        def read():
            pinged = time.monotonic()
            while True:
                reader.recv(1.0)
                if time.monotonic() - pinged > KEEPALIVE:
                    reader.send_command(ConnectionPing())    # the PONG is skipped by recv
                    pinged = time.monotonic()
        threading.Thread(target=read, daemon=True).start()
        writer = MalamuteClient(endpoint, "soak-writer")
        writer.connect()
        writer.set_producer("soak")
        paced(300, lambda: writer.send("load", b"x" * 100), "malamute")

    for fn in (mqks, twino_load, malamute):
        threading.Thread(target=fn, daemon=True).start()
    while True:
        time.sleep(10)
        print(json.dumps({"skipped": skipped}), flush=True)


def role_stuck(ports):
    """A consumer per door on the loaded queue/stream that never reads its socket (the
    Malamute one pings every KEEPALIVE s, as a live client does, so that its session
    does not expire: it stays a reader that does not read)."""
    from mqksbridge.protocols.malamute.codec import ConnectionPing
    from mqksbridge.bridge.clients import twino
    from mqksbridge.bridge.clients.malamute import MalamuteClient
    from mqksbridge.bridge.clients.mqks import MqksClient

    held = [MqksClient(port=ports["mqks"])]
    held[0].consume("soak-stuck", ["soak.load"])
    stuck = twino.connect(port=ports["twino"])
    stuck.join("soak")
    held.append(stuck)
    reader = MalamuteClient(f"tcp://127.0.0.1:{ports['malamute']}", "soak-stuck")
    reader.connect()
    reader.set_consumer("soak", "")
    held.append(reader)
    print("ready", flush=True)
    while True:
        time.sleep(KEEPALIVE)
        reader.send_command(ConnectionPing())      # never read: its PONGs pile up too


def _hello_bytes():
    from mqksbridge.protocols.twino.codec import PROTOCOL, ContentType, Frame, MessageType
    from mqksbridge.protocols.twino.codec import encode, new_id
    return PROTOCOL + encode(Frame(MessageType.SERVER, first_acquirer=True, message_id=new_id(),
                                   content_type=ContentType.HELLO, content=b"CONNECT /\r\n"))


def _open_bytes(address):
    from mqksbridge.protocols.malamute import codec as malamute
    from mqksbridge.protocols.zmtp import codec as zmtp
    return zmtp.Connection("DEALER").preamble() + zmtp.message(
        malamute.encode(malamute.ConnectionOpen(address)))


def _ping_bytes(door):
    if door == "twino":
        from mqksbridge.protocols.twino.codec import PING_BYTES
        return PING_BYTES
    if door == "malamute":
        from mqksbridge.protocols.malamute import codec as malamute
        from mqksbridge.protocols.zmtp import codec as zmtp
        return zmtp.message(malamute.encode(malamute.ConnectionPing()))
    return b"i ping x\n"


class Sockets:
    """Many non-blocking client sockets in one selector: reads are drained and dropped,
    a closed one is counted and opened again by `reopen`."""

    def __init__(self, ports):
        self.ports = ports
        self.selector = selectors.DefaultSelector()
        self.closed = 0
        self.dead = []

    def open(self, door, first=b"", tag=None):
        s = socket.create_connection(("127.0.0.1", self.ports[door]), timeout=30)
        if first:
            s.sendall(first)
        s.setblocking(False)
        self.selector.register(s, selectors.EVENT_READ, (door, tag))
        return s

    def poll(self, timeout):
        for key, _ in self.selector.select(timeout):
            try:
                data = key.fileobj.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if not data:
                self.closed += 1
                self.selector.unregister(key.fileobj)
                key.fileobj.close()
                self.dead.append(key.data)

    def send(self, sock, data):
        try:
            sock.send(data)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            pass


def role_idle(ports, count):
    """`count` idle connections (60% MQKS, 20% Twino after hello, 20% Malamute after OPEN),
    a ping on each every 20 s so sessions stay; those closed are reopened (and counted)."""
    raise_nofile()
    pool = Sockets(ports)
    shares = {"mqks": count * 3 // 5, "twino": count // 5}
    shares["malamute"] = count - shares["mqks"] - shares["twino"]
    firsts = {"mqks": lambda i: b"", "twino": lambda i: _hello_bytes(),
              "malamute": lambda i: _open_bytes(f"idle-{i}")}
    live = []
    for door, n in shares.items():
        for i in range(n):
            live.append((door, pool.open(door, firsts[door](i), i)))
            if len(live) % 200 == 0:
                pool.poll(0)
    print("ready", flush=True)
    pings = {door: _ping_bytes(door) for door in shares}
    # each connection's keep-alive every KEEPALIVE s on a timer of its own, as clients'
    # timers would be: every TICK, the connections whose turn it is. (Sent a twentieth
    # at a time once a second, the pings came as one burst that the broker served in one
    # turn, and a probe that locked onto its phase measured only that turn.)
    slices = int(KEEPALIVE / TICK)
    tick, next_tick = 0, time.monotonic() + TICK
    while True:
        pool.poll(max(0.0, next_tick - time.monotonic()))
        for door, i in pool.dead:
            live.append((door, pool.open(door, firsts[door](i), i)))
        pool.dead.clear()
        if time.monotonic() < next_tick:
            continue
        next_tick += TICK
        if tick % slices == 0:
            live = [(d, s) for d, s in live if s.fileno() >= 0]
        for door, s in live[tick % slices::slices]:
            if door != "mqks" and s.fileno() >= 0:
                pool.send(s, pings[door])
        tick += 1
        if tick % 2000 == 0:
            print(json.dumps({"reopened": pool.closed}), flush=True)


def role_slowloris(ports, per_door=30):
    """A byte a second on each connection, of a request that never ends (each connection
    at its own moment in the second: a slice every TICK)."""
    pool = Sockets(ports)
    starts = {"mqks": b"x1 publish soak.slow " + b"y" * 1_000_000,
              "twino": _hello_bytes()[:9] + b"\x00" * 100_000,
              "malamute": _open_bytes("slow")[:20]}
    conns = [[door, pool.open(door), 0] for door in starts for _ in range(per_door)]
    slices = int(1 / TICK)
    tick, next_tick = 0, time.monotonic()
    while True:
        for conn in conns[tick % slices::slices]:
            door, s, at = conn
            if s.fileno() < 0:
                conn[1], conn[2] = pool.open(door), 0
                continue
            if at < len(starts[door]):
                pool.send(s, starts[door][at:at + 1])
                conn[2] += 1
        tick += 1
        next_tick += TICK
        pool.poll(max(0.0, next_tick - time.monotonic()))
        pool.dead.clear()


def role_garbage(ports, per_second=10):
    """New connections that send 2 KB of random bytes and hang up after a second:
    `per_second` a second per door, one every 1 / (3 x per_second) s, the doors in turn."""
    rng = random.Random(12)
    pool = Sockets(ports)
    doors = ("mqks", "twino", "malamute")
    opened, turn, next_at = [], 0, time.monotonic()
    while True:
        if time.monotonic() < next_at:
            pool.poll(next_at - time.monotonic())
            continue
        next_at += 1.0 / (len(doors) * per_second)
        try:
            opened.append((time.monotonic(),
                           pool.open(doors[turn % len(doors)], rng.randbytes(2048))))
        except OSError:
            pass
        turn += 1
        while opened and time.monotonic() - opened[0][0] > 1.0:
            s = opened.pop(0)[1]
            if s.fileno() >= 0:
                pool.selector.unregister(s)
                s.close()


def role_echo(ports):
    """A bare TCP echo server: the control for the probes' latency."""
    server = socket.create_server(("127.0.0.1", ports["echo"]))
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.fileobj is server:
                conn, _ = server.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                selector.register(conn, selectors.EVENT_READ)
                continue
            data = key.fileobj.recv(65536)
            if data:
                key.fileobj.sendall(data)
            else:
                selector.unregister(key.fileobj)
                key.fileobj.close()


ROLES = {"echo": role_echo, "healthy": role_healthy, "load": role_load, "stuck": role_stuck, "idle": role_idle,
         "slowloris": role_slowloris, "garbage": role_garbage}


# -- the driver ----------------------------------------------------------------------------------

# The load generators and hostile clients are not under test: they run at the lowest CPU
# priority, so that on a busy machine the broker and the probes (priority 0) get the CPU
# first and the generators the rest. (Their rates are then what the machine leaves them;
# the broker's message counts, in door_totals, say what they offered.)
GENERATOR_NICE = 19


def spawn_role(role, ports, *args, nice=0):
    return subprocess.Popen([PY, "-m", "bench.soak", role, json.dumps(ports), *map(str, args)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            preexec_fn=(lambda: os.nice(nice)) if nice else None)


# The operator's choice for this soak (docs/limits.md, "Queues nobody reads"): the MQKS
# queue of the consumer that never reads keeps its newest STUCK_LIMIT messages and drops
# the oldest, so the broker's memory plateaus instead of growing for as long as it is stuck.
STUCK_LIMIT = 100_000
CONFIG = f"""\
[broker]
queue_length_limit = [["soak-stuck", {STUCK_LIMIT}]]
queue_overflow = [["soak-stuck", "drop-oldest"]]
"""


def start_broker(workdir, stalls=None, settings=(), garbage=None, trace=None):
    ports = {door: free_port() for door in ("mqks", "malamute", "twino", "admin")}
    config = os.path.join(workdir, "soak.toml")
    with open(config, "w") as f:
        f.write(CONFIG)
    env = dict(os.environ)
    if stalls:                               # bench/stallwatch: GC and reactor-lag records
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [os.path.join(HERE, "stallwatch"), env.get("PYTHONPATH")]))
        env["STALLWATCH"] = stalls
        if garbage:
            env["STALLWATCH_GARBAGE"] = str(garbage)
        if trace:
            env["STALLWATCH_TRACEMALLOC"] = str(trace)
    args = [TWISTD, "-n", "--pidfile=", "mqksbridge", "--config", config,
            "--data", os.path.join(workdir, "var"),
            "--mqks", f"tcp:{ports['mqks']}:interface=127.0.0.1",
            "--twino", f"tcp:{ports['twino']}:interface=127.0.0.1",
            "--malamute", f"tcp://127.0.0.1:{ports['malamute']}",
            "--admin", f"tcp:{ports['admin']}:interface=127.0.0.1",
            *(f"--set={setting}" for setting in settings)]
    log = open(os.path.join(workdir, "twistd.log"), "wb")
    proc = subprocess.Popen(args, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, env=env)
    for port in ports.values():
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("twistd did not start; see " + log.name)
                time.sleep(0.1)
    return proc, ports


def admin(admin_port, path):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}{path}", timeout=5) as answer:
        return json.load(answer)


def overview(admin_port, key="connections"):
    """A count per door (open connections, messages in...), from the admin API."""
    try:
        doors = admin(admin_port, "/api/overview")["doors"]
    except OSError:
        return {}
    return {d["name"]: d[key] for d in doors if d["name"] != "textqueue"}


def queues(admin_port):
    """What the queues hold at the end (where memory went)."""
    try:
        items = admin(admin_port, "/api/queues")["items"]
    except OSError:
        return {}
    return {q["name"]: {"depth": q["depth"], "bytes": q["bytes"], "unacked": q["unacked"],
                        "consumers": q["consumers_by_door"]} for q in items}


def keep_last(out, reports, role):
    """A generator's stdout: keep its last JSON report (its lines are few)."""
    for line in out:
        if line.startswith("{"):
            reports[role] = json.loads(line)


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(args):
    raise_nofile()
    # SIGTERM (kill PID) stops the run the way the end of it does: roles and broker too
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit("soak: SIGTERM"))
    workdir = tempfile.mkdtemp(prefix="soak-")
    print("workdir:", workdir, flush=True)
    stalls = (os.path.join(workdir, "stalls.jsonl")
              if args.stalls or args.garbage or args.tracemalloc else None)
    broker, ports = start_broker(workdir, stalls, args.set, args.garbage, args.tracemalloc)
    ports["echo"] = free_port()
    echo = spawn_role("echo", ports)
    echo.stdout.readline()
    roles, rows = [echo], []
    lines = []
    for which in range(len(PROBED)):
        healthy = spawn_role("healthy", ports, which)
        roles.append(healthy)
        threading.Thread(target=lambda out: [lines.append(json.loads(line)) for line in out],
                         args=(healthy.stdout,), daemon=True).start()
    reports = {}                         # a generator's last report (skipped, reopened)
    started = time.monotonic()
    phase, load_at = "unloaded", None
    cpu_before = cpu_seconds(broker.pid)
    end_at = started + args.baseline + args.duration
    try:
        while time.monotonic() < end_at:
            time.sleep(1.0 - (time.monotonic() - started) % 1.0)
            now = time.monotonic() - started
            if phase == "unloaded" and now >= args.baseline:
                phase, load_at = "loaded", now
                for role, extra in (("stuck", ()), ("idle", (args.idle,)), ("load", ()),
                                    ("slowloris", ()), ("garbage", ())):
                    if role in args.skip:
                        continue
                    proc = spawn_role(role, ports, *extra, nice=args.generator_nice)
                    roles.append(proc)
                    threading.Thread(target=keep_last, args=(proc.stdout, reports, role),
                                     daemon=True).start()
            if broker.poll() is not None:
                raise SystemExit("the broker exited; see " + workdir)
            taken, lines[:] = lines[:], []
            latency = {door: [v for line in taken for v in line.get(door, [])]
                       for door in PROBED}
            cpu_now = cpu_seconds(broker.pid)
            row = {"t": round(now, 1), "phase": phase, "rss_mb": round(rss_mb(broker.pid), 1),
                   "load": os.getloadavg()[0],
                   "fds": fds(broker.pid), "cpu": round(cpu_now - cpu_before, 2),
                   "connections": overview(ports["admin"]),
                   **{f"{door}_p99_ms": percentile(v, 0.99) for door, v in latency.items()},
                   **{f"{door}_n": len(v) for door, v in latency.items()},
                   "samples": latency}
            rows.append(row)
            cpu_before = cpu_now
            if int(now) % 10 == 0:
                print(f"{now:6.0f}s {phase:8} rss {row['rss_mb']:7.1f} MB fds {row['fds']:5} "
                      f"cpu {row['cpu']:4.2f} {row['connections']} "
                      + " ".join(f"{d} p99 {row[d + '_p99_ms'] or 0:6.1f} ms"
                                 for d in latency), flush=True)
        totals = {key: overview(ports["admin"], key)
                  for key in ("messages_in", "messages_out", "refused")}
        totals["queues"] = queues(ports["admin"])
        if stalls:                       # where the memory is, after the last sample
            os.kill(broker.pid, signal.SIGUSR2)
            time.sleep(5)
    finally:
        for proc in roles:
            proc.kill()
        broker.terminate()
        broker.wait(30)
    summary = summarize(rows, load_at)
    summary["door_totals"] = totals
    summary["generators"] = reports
    if stalls:
        summary["stalls"] = stall_summary(stalls, load_at and started + load_at,
                                          time.monotonic() - time.time())
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "soak-latest.json"), "w") as f:
        json.dump({"args": vars(args), "summary": summary,
                   "rows": [{k: v for k, v in r.items() if k != "samples"} for r in rows]},
                  f, indent=1)
    chart(rows, load_at, summary, os.path.join(args.out, "soak.png"))
    print(json.dumps(summary, indent=1))


def summarize(rows, load_at):
    unloaded = [r for r in rows if r["phase"] == "unloaded"][2:]      # skip the connects
    loaded = [r for r in rows if r["phase"] == "loaded"]
    settled = loaded[len(loaded) // 2:]
    loads = [r["load"] for r in loaded]
    out = {"seconds_loaded": len(loaded),
           "machine_load": {"min": min(loads), "mean": round(statistics.mean(loads), 2),
                            "max": max(loads)},
           "rss_mb": {"unloaded": unloaded[-1]["rss_mb"] if unloaded else None,
                      "max": max(r["rss_mb"] for r in loaded),
                      "at_half": settled[0]["rss_mb"], "at_end": loaded[-1]["rss_mb"],
                      "second_half_growth_mb_per_min": round(
                          (loaded[-1]["rss_mb"] - settled[0]["rss_mb"]) / max(
                              1, (loaded[-1]["t"] - settled[0]["t"]) / 60), 2)},
           "fds": {"unloaded": unloaded[-1]["fds"] if unloaded else None,
                   "max": max(r["fds"] for r in loaded), "at_end": loaded[-1]["fds"]},
           "latency_ms": {}}
    for door in PROBED:
        base = [v for r in unloaded for v in r["samples"][door]]
        load = [v for r in loaded for v in r["samples"][door]]
        p99_base, p99_load = percentile(base, 0.99), percentile(load, 0.99)
        out["latency_ms"][door] = {
            "unloaded_p50": round(statistics.median(base), 2) if base else None,
            "unloaded_p99": round(p99_base, 2) if base else None,
            "loaded_p50": round(statistics.median(load), 2) if load else None,
            "loaded_p99": round(p99_load, 2) if load else None,
            "loaded_max": round(max(load), 2) if load else None,
            "probes": [len(base), len(load)],
            "p99_ratio": round(p99_load / p99_base, 2) if base and load and p99_base else None}
    return out


def stall_summary(path, loaded_from, mono_minus_wall):
    """What bench/stallwatch recorded in the loaded phase: reactor turns that kept a call
    waiting over 30 ms (by length, with the stacks seen most during them) and the
    collector's long or full collections."""
    lags, collections, frames = [], [], {}
    turns = {"timers": {}, "io": {}, "slow_timers": {}, "slow_io": {}}
    end = None
    blocks = []                          # (seconds since the load began, Python's blocks)
    try:
        with open(path) as f:
            records = [json.loads(line) for line in f]
    except OSError:
        return None
    for record in records:
        if loaded_from is not None and record["t"] + mono_minus_wall < loaded_from:
            continue
        if record["kind"] == "end":
            end = record
        elif record["kind"] == "turns":
            blocks.append((round(record["t"] + mono_minus_wall - (loaded_from or 0)),
                           record["blocks"]))
            for part in ("timers", "io"):
                for bucket, n in record[part].items():
                    turns[part][bucket] = turns[part].get(bucket, 0) + n
            for part in ("slow_timers", "slow_io"):
                for name, n in record[part]:
                    turns[part][name] = turns[part].get(name, 0) + n
        elif record["kind"] == "gc":
            collections.append(record)
        elif record["kind"] == "lag":
            lags.append(record["ms"])
            for n, stack in record["top"]:
                key = " < ".join(stack[:4])
                frames[key] = frames.get(key, 0) + n
    return {"at_end": end, "python_blocks": blocks,
            "lags_over_30ms": len(lags),
            "lags_over_100ms": sum(1 for ms in lags if ms > 100),
            "lag_max_ms": max(lags, default=None),
            "lag_ms_total": round(sum(lags)),
            "gc": {gen: {"count": sum(1 for c in collections if c["gen"] == gen),
                         "max_ms": max((c["ms"] for c in collections if c["gen"] == gen),
                                       default=None)} for gen in (0, 1, 2)},
            "top_frames": sorted(((n, key) for key, n in frames.items()), reverse=True)[:8],
            "turns": {**{part: turns[part] for part in ("timers", "io")},
                      **{part: sorted(((n, k) for k, n in turns[part].items()),
                                      reverse=True)[:10]
                         for part in ("slow_timers", "slow_io")}}}


def chart(rows, load_at, summary, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install -e '.[bench]'): no chart")
        return
    t = [r["t"] for r in rows]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    ax1.plot(t, [r["rss_mb"] for r in rows])
    ax1.set_ylabel("broker RSS (MB)")
    ax2.plot(t, [r["fds"] for r in rows], color="tab:orange")
    ax2.set_ylabel("open descriptors")
    load = ax2.twinx()
    load.plot(t, [r.get("load") for r in rows], color="tab:grey", linewidth=0.8)
    load.set_ylabel("machine load (1-min average, grey)")
    for door in PROBED:
        ax3.plot(t, [r[f"{door}_p99_ms"] for r in rows], label=f"{door} p99 (per second)",
                 **({"color": "black", "linestyle": ":"} if door == "control" else {}))
    ax3.set_yscale("log")
    ax3.set_ylabel("healthy latency (ms)")
    ax3.set_xlabel("seconds")
    ax3.legend()
    for ax in (ax1, ax2, ax3):
        if load_at is not None:
            ax.axvline(load_at, color="grey", linestyle="--")
        ax.grid(True, alpha=0.3)
    ax1.set_title("soak: load, stuck consumers, slowloris, garbage, idle connections "
                  "from the dashed line")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print("chart:", path)


def main(argv):
    if argv and argv[0] in ROLES:
        ports = json.loads(argv[1])
        ROLES[argv[0]](ports, *map(int, argv[2:]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="loaded seconds")
    parser.add_argument("--baseline", type=float, default=60.0,
                        help="unloaded seconds first (600 probes per door: a p99 of 300 "
                             "is their third-largest)")
    parser.add_argument("--idle", type=int, default=5000, help="idle connections")
    parser.add_argument("--out", default=os.path.join(HERE, "results"))
    parser.add_argument("--skip", action="append", default=[],
                        choices=["stuck", "idle", "load", "slowloris", "garbage"],
                        help="leave a hostile role out (to see what costs what)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting (twistd mqksbridge --set), repeatable")
    parser.add_argument("--stalls", action="store_true",
                        help="record the broker's long reactor turns and garbage collections "
                             "(bench/stallwatch) and summarize them")
    parser.add_argument("--generator-nice", type=int, default=GENERATOR_NICE,
                        help="CPU priority (nice) of the load generators and hostile "
                             "clients (0: the same as the broker's)")
    parser.add_argument("--garbage", type=float, metavar="SECONDS",
                        help="diagnosis: every SECONDS a full collection in the broker that "
                             "records its cyclic garbage by type (bench/stallwatch; it holds "
                             "the reactor, so latencies are not representative)")
    parser.add_argument("--tracemalloc", type=float, metavar="SECONDS",
                        help="diagnosis: tracemalloc in the broker, and every SECONDS the "
                             "allocation sites that grew most (bench/stallwatch; slows it)")
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main(sys.argv[1:])
