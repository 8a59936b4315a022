"""Speed as an outsider measures it: the real `twistd -n mqksbridge`, load from other processes.

    python -m bench.outside [--baseline TREE_OR_VENV] [--rounds N] [--scale F]
                            [--scenarios a,b,...] [--profile]

Each round starts one broker per tree with `twistd -n mqksbridge` (MQKS and Malamute
listening on loopback, the other doors and the admin endpoint off, pinned to CPU 0) and
runs every scenario against it; with --baseline the trees alternate which goes first.
The load roles are their own processes over real sockets (bench.mqks_load,
bench.malamute_load; every Malamute peer is a pyzmq DEALER).
Per scenario: throughput, the broker's CPU-us per message from /proc (the figure a busy
machine moves least), p50/p99 where the scenario times messages, and the load average.
Each round also measures what no broker gets under on this host: `floor` (a relay that
does nothing, under the latency rows) and, with the round trip, `rtt_floor` (its peers
through a splice), `zmq_floor` (through a pyzmq ROUTER that only passes messages on) and
`c_floor` (the same relay in C, bench/c/zmq_relay.c, where gcc and libzmq3-dev are here).

--baseline is another checkout (its `.venv/bin/twistd` is used) or a venv (`bin/twistd`).
--profile then runs each scenario once more with py-spy sampling the broker (no code
change in it, `--nonblocking` so it is not paused) and keeps the top frames by own and
cumulative time, and where the broker's CPU-us per message go: read, parse, route, queue,
encode, write, poll, other.

Results: bench/results/outside-latest.json and outside-latest.md.
"""
import argparse
import functools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

from bench import malamute_service_bench as mlm
from bench import run as mqks
from bench.processes import HERE, PY, ROOT, _cpus, free_port
from bench.procstat import cpu_ns

# name: (what, n at --scale 1, messages per n delivered, what the outsider's table calls it)
SCENARIOS = {
    "mqks-simple": ("mqks simple", 200_000, 1, "MQKS simple flood"),
    "mqks-fanout-x10": ("mqks fanout", 20_000, 10, "MQKS fan-out x10 (deliveries)"),
    "mqks-manual-ack": ("mqks manual-ack", 100_000, 1, "MQKS manual ack"),
    "mqks-p99-2000": ("mqks latency-2000", 10_000, 1, "MQKS latency at 2,000 msg/s"),
    "malamute-stream": ("malamute stream", 100_000, 1, "Malamute stream (pyzmq)"),
    "malamute-mailbox": ("malamute mailbox", 100_000, 1, "Malamute mailbox (pyzmq)"),
    "malamute-service": ("malamute service", 200_000, 1, "Malamute service requests (pyzmq)"),
    "malamute-rtt": ("malamute rtt", 3_000, 1, "Malamute mailbox round trip (pyzmq)"),
}


class Broker:
    """`twistd -n mqksbridge` from one tree, MQKS and Malamute on free loopback ports."""

    def __init__(self, twistd):
        self.dir = tempfile.mkdtemp(prefix="outside-")
        self.port = free_port()
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        cpus = _cpus("server")
        self.proc = subprocess.Popen(
            [twistd, "-n", "--pidfile=", "-l", os.path.join(self.dir, "twistd.log"),
             "mqksbridge", "--data", os.path.join(self.dir, "var"),
             "--mqks", f"tcp:{self.port}:interface=127.0.0.1", "--malamute", self.endpoint,
             "--twino", "none", "--admin", "none", "--malamute-timeout", "3600"],
            cwd=self.dir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            preexec_fn=None if cpus is None else (lambda: os.sched_setaffinity(0, cpus)))
        self.pid = self.proc.pid
        self._wait_listening()
        self.runs = 0

    def _wait_listening(self):
        deadline = time.monotonic() + 30
        for port in (self.port, int(self.endpoint.rsplit(":", 1)[1])):
            while True:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"twistd did not start: see {self.dir}/twistd.log")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)

    def scenario(self, name, scale):
        """One scenario: {per_s, cpu_us per message, p50_us/p99_us where timed}."""
        kind, what = SCENARIOS[name][0].split()
        n = max(1, int(SCENARIOS[name][1] * scale))
        self.runs += 1
        cpu0 = cpu_ns(self.pid)
        if kind == "mqks":
            spec = mqks.SCENARIOS[what]
            r = mqks.run_scenario("twistd", f"{what}-{self.runs}", self.port, self.pid, spec, n)
            out = {"per_s": r["deliveries_per_s"], "messages": r["deliveries"]}
            out.update({k: r[k] for k in ("p50_us", "p99_us") if k in r})
        elif what == "service":
            r = mlm.service(self.endpoint, self.pid, f"bench-{self.runs}", 1, 1, 20, n, True)
            out = {"per_s": r["per_s"], "messages": n}
        elif what == "rtt":
            out = {**mlm.rtt(self.endpoint, n, True), "messages": 2 * n}
        else:
            out = {"per_s": mlm.path(self.endpoint, self.pid, what, n, True)["per_s"],
                   "messages": n}
        out["cpu_us"] = (cpu_ns(self.pid) - cpu0) / 1e3 / out["messages"]
        return out

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def twistd_of(path):
    """The twistd of a checkout (its .venv) or of a venv."""
    for candidate in (os.path.join(path, ".venv", "bin", "twistd"),
                      os.path.join(path, "bin", "twistd")):
        if os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit(f"no twistd under {path} (.venv/bin/twistd or bin/twistd)")


def floor(n=10_000, rate=2000):
    """This host's floor under the latency rows: p50/p99 us through a relay that does
    nothing (a publisher stamps lines at `rate`, a plain-socket process pinned where the
    broker runs passes them on, a consumer times them; the two ends unpinned, as in the
    latency scenarios). What the relay shows is the machine's wake-up jitter, which no
    broker can get under."""
    into, relay_in = socket.socketpair()
    relay_out, out = socket.socketpair()
    result_r, result_w = os.pipe()
    relay = os.fork()
    if relay == 0:                       # each end is open in one process only: EOF ends it
        into.close()
        out.close()
        cpus = _cpus("server")
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        while data := relay_in.recv(65536):
            relay_out.sendall(data)
        os._exit(0)
    relay_in.close()
    relay_out.close()
    consumer = os.fork()
    if consumer == 0:
        into.close()
        lat, tail = [], b""
        while len(lat) < n:
            chunk = out.recv(65536)
            now = time.monotonic_ns()
            *lines, tail = (tail + chunk).split(b"\n")
            lat += [now - int(line) for line in lines]
        lat.sort()
        os.write(result_w, json.dumps({"p50_us": lat[n // 2] / 1e3,
                                       "p99_us": lat[int(n * 0.99)] / 1e3}).encode())
        os._exit(0)
    next_at = time.monotonic()
    for _ in range(n):
        into.sendall(b"%d\n" % time.monotonic_ns())
        next_at += 1 / rate
        if (delay := next_at - time.monotonic()) > 0:
            time.sleep(delay)
    os.waitpid(consumer, 0)
    into.close()
    out.close()
    os.waitpid(relay, 0)
    found = json.loads(os.read(result_r, 4096))
    os.close(result_r)
    os.close(result_w)
    return found


def _pinned_fork():
    """fork(); the child pinned where the broker runs."""
    pid = os.fork()
    if pid == 0:
        cpus = _cpus("server")
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
    return pid


def _round_trips(a, b, relay, n):
    """`malamute_load.rtt`'s loop on two pyzmq DEALERs through `relay` (a pid): 100 round
    trips to warm up, then `n` timed; p50/p99 us and the relay's CPU-us per hop. Each
    DEALER has its own zmq.Context (its own I/O thread), as the scenario's peers do: one
    shared I/O thread made a round trip 30-70 us faster on a 2-core host."""
    from mqksbridge.protocols.malamute import codec
    ping = codec.encode(codec.MailboxSend("rtt-b", "ping", "", 0, (b"x",)))
    pong = codec.encode(codec.MailboxSend("rtt-a", "pong", "", 0, (b"x",)))
    samples = []
    for i in range(100 + n):
        if i == 100:
            cpu0 = cpu_ns(relay)
        t0 = time.perf_counter_ns()
        a.send_multipart(ping)
        b.recv_multipart()
        b.send_multipart(pong)
        a.recv_multipart()
        if i >= 100:
            samples.append(time.perf_counter_ns() - t0)
    cpu = cpu_ns(relay) - cpu0
    samples.sort()
    return {"p50_us": samples[n // 2] / 1e3, "p99_us": samples[int(n * 0.99)] / 1e3,
            "relay_cpu_us_per_hop": cpu / 1e3 / (2 * n)}


def rtt_floor(n=3_000):
    """This host's floor under the round trip: the malamute-rtt scenario's two pyzmq
    DEALERs and timing through a relay that splices their TCP connections (each hop one
    epoll_wait, one recv, one send, as the broker's): ZMTP end to end, nothing parsed, so
    it shows the wake-ups of the relay and of the clients' I/O threads, under any broker."""
    import select

    import zmq
    listener = socket.create_server(("127.0.0.1", 0))
    relay = _pinned_fork()
    if relay == 0:
        ends = [listener.accept()[0] for _ in range(2)]
        own = {end.fileno(): end for end in ends}
        peer = {ends[0].fileno(): ends[1], ends[1].fileno(): ends[0]}
        poll = select.epoll()
        for end in ends:
            end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            poll.register(end.fileno(), select.EPOLLIN)
        while True:
            for fd, _ in poll.poll():
                data = own[fd].recv(65536)
                if not data:
                    os._exit(0)
                peer[fd].sendall(data)
    port = listener.getsockname()[1]
    listener.close()
    contexts = [zmq.Context(), zmq.Context()]
    a, b = (context.socket(zmq.DEALER) for context in contexts)
    for end in (a, b):
        end.connect(f"tcp://127.0.0.1:{port}")
    found = _round_trips(a, b, relay, n)
    a.close(linger=0)
    b.close(linger=0)
    for context in contexts:
        context.term()
    os.waitpid(relay, 0)
    return found


def zmq_floor(n=3_000):
    """What a libzmq broker's I/O path costs here under the round trip: the same peers
    and timing through a pyzmq ROUTER that hands each message to the other peer and does
    nothing else. A broker built on libzmq, as the original Malamute is, takes every
    message through libzmq's I/O thread as this relay does."""
    import zmq
    port = free_port()
    ready_r, ready_w = os.pipe()
    relay = _pinned_fork()
    if relay == 0:
        router = zmq.Context().socket(zmq.ROUTER)
        router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        router.bind(f"tcp://127.0.0.1:{port}")
        os.write(ready_w, b"x")
        other = {b"a": b"b", b"b": b"a"}
        while True:
            frames = router.recv_multipart(copy=False)
            if len(frames) == 2 and not frames[1].bytes:      # the cue to end
                os._exit(0)
            while True:      # the first ping can come before the other peer is connected
                try:
                    router.send_multipart([other[frames[0].bytes], *frames[1:]], copy=False)
                    break
                except zmq.error.ZMQError as exc:
                    if exc.errno != zmq.EHOSTUNREACH:
                        raise
                    time.sleep(0.001)
    os.read(ready_r, 1)
    os.close(ready_r)
    os.close(ready_w)
    found = _through_router(port, relay, n)
    os.waitpid(relay, 0)
    return found


def _through_router(port, relay, n):
    """`_round_trips` with DEALERs "a" and "b" (a zmq.Context each) through the relay's
    ROUTER at `port`; then the cue to end (a message of one empty frame)."""
    import zmq
    contexts = [zmq.Context(), zmq.Context()]
    ends = []
    for name, context in zip((b"a", b"b"), contexts):
        end = context.socket(zmq.DEALER)
        end.setsockopt(zmq.ROUTING_ID, name)
        end.connect(f"tcp://127.0.0.1:{port}")
        ends.append(end)
    a, b = ends
    found = _round_trips(a, b, relay, n)
    a.send(b"")
    a.close(linger=1000)
    b.close(linger=0)
    for context in contexts:
        context.term()
    return found


C_RELAY = os.path.join(HERE, "c", "zmq_relay.c")


def c_floor(n=3_000):
    """`zmq_floor` with the relay in C (bench/c/zmq_relay.c, built here with gcc against
    Debian's libzmq3-dev): no Python in it, so what a C broker on libzmq, as the original
    Malamute is, cannot go under on this host. None where gcc or zmq.h is missing."""
    built = _c_relay()
    if built is None:
        return None
    port = free_port()
    cpus = _cpus("server")
    relay = subprocess.Popen(
        [built, str(port)], stdout=subprocess.PIPE, text=True,
        preexec_fn=None if cpus is None else (lambda: os.sched_setaffinity(0, cpus)))
    try:
        if relay.stdout.readline().strip() != "ready":
            raise SystemExit("bench/c/zmq_relay did not start")
        return _through_router(port, relay.pid, n)
    finally:
        relay.wait(15)


@functools.cache
def _c_relay():
    """bench/c/zmq_relay.c built once per run (in a temporary directory); None without
    gcc or zmq.h."""
    if shutil.which("gcc") is None or not os.path.exists("/usr/include/zmq.h"):
        return None
    built = os.path.join(tempfile.mkdtemp(prefix="zmq-relay-"), "zmq_relay")
    subprocess.run(["gcc", "-O2", "-o", built, C_RELAY, "-lzmq"], check=True)
    return built


def measure(trees, names, rounds, scale):
    """{(tree, scenario): [result per round]}, trees alternating who goes first; and
    the host's floors once a round: ("host", "floor") (`floor`), and with the round trip
    among the scenarios ("host", "rtt floor"), ("host", "zmq floor") and, where it can be
    built, ("host", "c floor") (`rtt_floor`, `zmq_floor`, `c_floor`)."""
    runs = {}
    floors = [("floor", floor, "host floor at 2,000/s")]
    if "malamute-rtt" in names:
        floors += [("rtt floor", rtt_floor, "round-trip floor"),
                   ("zmq floor", zmq_floor, "libzmq relay round trip"),
                   ("c floor", c_floor, "C libzmq relay round trip")]
    for r in range(rounds):
        for key, measure_floor, label in floors:
            found = measure_floor()
            if found is None:            # c_floor without gcc or libzmq3-dev
                continue
            runs.setdefault(("host", key), []).append(found)
            print(f"round {r + 1}     {label}  " + "  ".join(
                f"{k} {v:,.1f}" for k, v in runs[("host", key)][-1].items()), flush=True)
        order = list(trees.items())
        for tree, twistd in (order[::-1] if r % 2 else order):
            broker = Broker(twistd)
            try:
                for name in names:
                    load0 = os.getloadavg()[0]
                    result = broker.scenario(name, scale)
                    result["load1"] = round((load0 + os.getloadavg()[0]) / 2, 2)
                    runs.setdefault((tree, name), []).append(result)
                    print(f"round {r + 1} {tree:>8} {name:<17} " + "  ".join(
                        f"{k} {v:,.1f}" for k, v in result.items()), flush=True)
            finally:
                broker.stop()
    return runs


def summary(trees, names, runs):
    """Medians per tree and scenario; new/base ratios when there is a baseline."""
    rows = []
    for name in names:
        row = {"scenario": name, "label": SCENARIOS[name][3]}
        for tree in trees:
            results = runs[(tree, name)]
            for key in ("per_s", "cpu_us", "p50_us", "p99_us", "load1"):
                if key in results[0]:
                    row[f"{tree}_{key}"] = round(statistics.median(x[key] for x in results), 2)
            row[f"{tree}_cpu_us_all"] = [round(x["cpu_us"], 2) for x in results]
        if "base" in trees:
            for key in ("per_s", "cpu_us", "p50_us", "p99_us"):
                if f"new_{key}" in row and row.get(f"base_{key}"):
                    row[f"{key}_new/base"] = round(row[f"new_{key}"] / row[f"base_{key}"], 3)
        rows.append(row)
    return rows


# -- py-spy -----------------------------------------------------------------------------------

# Where a sample's time goes: the frame nearest the leaf that matches decides (path
# fragment, function names or None for any; py-spy names methods Class.function). Each
# bucket holds the syscalls it makes (recv in read, send in write, epoll_wait in poll):
# py-spy sees Python frames only. doPoll is every stack's root, so it is `poll` only as
# the leaf. parse includes the doors' dispatch of a parsed request.
BUCKETS = [
    ("protocols/zmtp/codec.py", {"message", "frame", "pair"}, "encode"),
    ("protocols/malamute/codec.py", {"encode", "encode_service_deliver",
                                     "encode_mailbox_deliver", "encode_stream_deliver"},
     "encode"),
    ("protocols/mqks/replies.py", None, "encode"),
    ("convert/", None, "encode"),
    ("protocols/", None, "parse"),
    ("bridge/outbox.py", None, "write"),
    ("core/queues/", None, "queue"),
    ("core/queue.py", None, "queue"),
    ("core/", None, "route"),
    ("bridge/engine/", None, "route"),
    ("bridge/mqks/door.py", {"_deliver"}, "encode"),
    ("bridge/mqks/", None, "parse"),
    ("malamute/zmtp_router.py", {"dataReceived", "_events"}, "parse"),
    ("malamute/door.py", {"received_all", "received", "_active", "_command", "_apply"},
     "parse"),
    ("malamute/", None, "route"),
    ("twisted/internet/tcp.py", {"doRead", "_dataReceived"}, "read"),
    ("twisted/internet/", {"write", "doWrite", "writeSomeData", "writeSequence",
                           "_postLoseConnection"}, "write"),
]
ORDER = ["read", "parse", "route", "queue", "encode", "write", "poll", "other"]


def _frames(line):
    """A py-spy raw line -> ([(function, file)], samples)."""
    stack, count = line.rsplit(" ", 1)
    frames = []
    for frame in stack.split(";"):
        function, _, where = frame.partition(" (")
        frames.append((function, where.rsplit(":", 1)[0].rstrip(")")))
    return frames, int(count)


def bucket_of(frames):
    if frames[-1][0].endswith("doPoll"):
        return "poll"
    for function, path in reversed(frames):
        function = function.rsplit(".", 1)[-1]
        for fragment, functions, bucket in BUCKETS:
            if fragment in path and (functions is None or function in functions):
                return bucket
    return "other"


def read_profile(path, cpu_us, top=12):
    """Top frames by own and cumulative samples, and cpu_us per message split by bucket."""
    own, cumulative, buckets, total = Counter(), Counter(), Counter(), 0
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            frames, count = _frames(line.rstrip("\n"))
            total += count
            names = [f"{fn} ({os.path.relpath(p, ROOT) if p.startswith(ROOT) else p})"
                     for fn, p in frames]
            own[names[-1]] += count
            for name in set(names):
                if "mqksbridge/" in name:        # the broker's own code, not the reactor
                    cumulative[name] += count
            buckets[bucket_of(frames)] += count
    share = lambda c: round(100 * c / max(1, total), 1)
    return {
        "samples": total,
        "cpu_us_per_message": round(cpu_us, 2),
        "us_per_message": {b: round(cpu_us * buckets[b] / max(1, total), 2) for b in ORDER},
        "top_own_pct": [[name, share(c)] for name, c in own.most_common(top)],
        "top_cumulative_broker_code_pct": [[name, share(c)]
                                           for name, c in cumulative.most_common(top)],
    }


def profile(twistd, names, scale):
    """Each scenario once on a fresh broker with py-spy recording it."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(PY), "py-spy")
    out = {}
    for name in names:
        broker = Broker(twistd)
        raw = os.path.join(broker.dir, "profile.txt")
        try:
            sampler = subprocess.Popen(
                [spy, "record", "--pid", str(broker.pid), "--format", "raw", "--rate", "250",
                 "--nonblocking", "--output", raw], stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True)
            time.sleep(1.0)                      # attached before the load starts
            result = broker.scenario(name, scale)
            sampler.send_signal(signal.SIGINT)
            err = sampler.communicate(timeout=60)[1]
            if not os.path.exists(raw):
                raise SystemExit(f"py-spy wrote nothing: {err.strip()}")
            out[name] = read_profile(raw, result["cpu_us"])
            print(f"profile {name:<17} " + "  ".join(
                f"{b} {v}" for b, v in out[name]["us_per_message"].items())
                + f"  (us per message of {result['cpu_us']:.2f})", flush=True)
        finally:
            broker.stop()
    return out


# -- report -------------------------------------------------------------------------------------

def markdown(trees, rows, profiles, meta):
    def cell(row, tree, key, fmt):
        value = row.get(f"{tree}_{key}")
        return "" if value is None else fmt.format(value)
    lines = [f"Measured {meta['when']} on {meta['cpus']} CPUs, load average (1 min) "
             f"{meta['load_before']} before, {meta['load_after']} after; {meta['rounds']} "
             f"round(s), medians. CPU-us/msg is the broker process's CPU (/proc) per "
             "message delivered (per request for service; per one-way hop for the round "
             "trip).", ""]
    head = "| scenario | " + " | ".join(
        f"{t} msg/s | {t} CPU-us/msg | {t} p50 / p99 us" for t in trees)
    if "base" in trees:
        head += " | CPU-us new/base"
    lines += [head + " | load |", "|" + "---|" * (3 * len(trees) + 2 + ("base" in trees))]
    for row in rows:
        cells = []
        for t in trees:
            lat = (f"{row[f'{t}_p50_us']:,.0f} / {row[f'{t}_p99_us']:,.0f}"
                   if f"{t}_p99_us" in row else "")
            cells += [cell(row, t, "per_s", "{:,.0f}"), cell(row, t, "cpu_us", "{:.2f}"), lat]
        if "base" in trees:
            cells.append(cell(row, "cpu_us", "new/base", "{:.2f}"))
        lines.append(f"| {row['label']} | " + " | ".join(cells)
                     + f" | {row.get('new_load1', '')} |")
    if meta.get("floor"):
        lines += ["", "Host floor under the latency rows (bench.outside.floor: a relay that "
                  "does nothing, pinned as the broker, 2,000 msg/s), medians over the "
                  f"rounds: p50 {meta['floor']['p50_us']:,.0f} us, p99 "
                  f"{meta['floor']['p99_us']:,.0f} us."]
    for key, what in (("rtt_floor", "Round-trip floor (bench.outside.rtt_floor: the round "
                                    "trip's two pyzmq peers through a relay that splices "
                                    "their connections, pinned as the broker)"),
                      ("zmq_floor", "A libzmq broker's I/O path under the round trip "
                                    "(bench.outside.zmq_floor: the same peers through a "
                                    "pyzmq ROUTER that only passes each message on)"),
                      ("c_floor", "The same in C (bench.outside.c_floor: bench/c/zmq_relay.c, "
                                  "a libzmq ROUTER that only passes each message on: under "
                                  "any C broker on libzmq)")):
        if meta.get(key):
            f = meta[key]
            lines += ["", f"{what}, medians over the rounds: p50 {f['p50_us']:,.0f} us, "
                      f"p99 {f['p99_us']:,.0f} us, the relay's CPU "
                      f"{f['relay_cpu_us_per_hop']:.1f} us per hop."]
    if profiles:
        lines += ["", "Where the broker's CPU-us per message go (py-spy, own tree):", "",
                  "| scenario | " + " | ".join(ORDER) + " | total |",
                  "|" + "---|" * (len(ORDER) + 2)]
        for name, p in profiles.items():
            lines.append(f"| {name} | " + " | ".join(
                f"{p['us_per_message'][b]:.2f}" for b in ORDER)
                + f" | {p['cpu_us_per_message']:.2f} |")
        for name, p in profiles.items():
            lines += ["", f"{name}: top own time (% of samples): " + "; ".join(
                f"{n} {s}%" for n, s in p["top_own_pct"][:8]),
                "", f"{name}: top cumulative (broker code): " + "; ".join(
                f"{n} {s}%" for n, s in p["top_cumulative_broker_code_pct"][:8])]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", help="another checkout (with .venv) or a venv")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply message counts")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    names = args.scenarios.split(",")
    own = os.path.join(os.path.dirname(PY), "twistd")     # this venv's, whatever its name
    trees = {"new": own if os.access(own, os.X_OK) else twistd_of(ROOT)}
    if args.baseline:
        trees["base"] = twistd_of(os.path.abspath(args.baseline))
    meta = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cpus": os.cpu_count(), "load_before": round(os.getloadavg()[0], 2),
            "rounds": args.rounds, "scale": args.scale, "trees": trees}
    runs = measure(trees, names, args.rounds, args.scale)
    for key in ("floor", "rtt floor", "zmq floor", "c floor"):
        floors = runs.pop(("host", key), None)
        if floors:
            meta[key.replace(" ", "_")] = {k: round(statistics.median(f[k] for f in floors), 1)
                                           for k in floors[0]}
    rows = summary(trees, names, runs)
    profiles = profile(trees["new"], names, args.scale) if args.profile else {}
    meta["load_after"] = round(os.getloadavg()[0], 2)
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "outside-latest.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "profiles": profiles,
                   "runs": {f"{t} {n}": v for (t, n), v in runs.items()}}, f, indent=1)
    table = markdown(trees, rows, profiles, meta)
    with open(os.path.join(out, "outside-latest.md"), "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    sys.exit(main())
