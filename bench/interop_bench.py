"""Cross-door paths against the same-door path, in the same run and the same broker.

    python -m bench.interop_bench [--quick] [--repeat R]

| comparison | cross-door path | same-door path |
|---|---|---|
| stream-to-malamute | MQKS publish -> Malamute stream reader | Malamute writer -> reader |
| queue-from-malamute | Malamute SERVICE-SEND -> MQKS consumer | MQKS publish -> consumer |
| queue-from-twino | Twino push -> MQKS consumer | MQKS publish -> consumer |
| queue-to-twino | MQKS publish -> Twino member | Twino push -> member |

One broker process (every door; the MQKS stream is named `bench` so Malamute's stream load
roles read it) pinned to one CPU, one process per publisher and consumer on the others: the
load roles of bench.mqks_load, bench.twino_load and bench.malamute_load. Each comparison
also runs the publisher door's own path (Malamute -> Malamute service, Twino -> Twino,
MQKS -> MQKS), and the three run alternately R times (7 by default: on a shared 2-vCPU
machine one path's rate varies by up to 1.8x from run to run); medians give msgs/s and
the broker's CPU per message.

`ratio` = same-door rate / cross-door rate, as asked (target: a crossing costs at most 25%
more, ratio <= 1.25), from the medians of each path's rates. `paired_ratio` is the median of
each round's own ratio: the two paths of one round run seconds apart, so it is less exposed
to the machine's speed drifting between rounds. It also charges the crossing with the difference between the two doors'
own costs (a Malamute or Twino publish costs the broker more than an MQKS line), so
`ratio_vs_slower_door` = the slower of the two same-door rates / the cross-door rate isolates
what crossing itself costs. Results go to bench/results/interop-latest.json and a chart to
bench/results/interop.png.
"""
import argparse
import json
import os
import statistics
import sys
import time

from bench.procstat import cpu_seconds
from bench.processes import HERE, free_port, last_json
from bench.processes import spawn as _spawn
from mqksbridge.bridge.clients import twino

TARGET = 1.25

# comparison: (cross path, the consumer door's own path, the publisher door's own path);
# a path is (publisher door, consumer door, kind)
MQKS_OWN, TWINO_OWN = ("mqks", "mqks", "queue"), ("twino", "twino", "queue")
COMPARISONS = {
    "stream-to-malamute": (("mqks", "malamute", "stream"), ("malamute", "malamute", "stream"),
                           MQKS_OWN),
    "queue-from-malamute": (("malamute", "mqks", "queue"), MQKS_OWN,
                            ("malamute", "malamute", "queue")),
    "queue-from-twino": (("twino", "mqks", "queue"), MQKS_OWN, TWINO_OWN),
    "queue-to-twino": (("mqks", "twino", "queue"), TWINO_OWN, MQKS_OWN),
}


def server(mqks_port, twino_port, endpoint, admin_port=None):
    """The broker process; with `admin_port`, the admin endpoint too (bench.admin_overhead)."""
    from twisted.internet import reactor

    from mqksbridge.bridge import config
    from mqksbridge.bridge.service import build
    admin = [f"tcp:{admin_port}:interface=127.0.0.1"] if admin_port else []
    overrides = {"mqks": {"listen": [f"tcp:{mqks_port}:interface=127.0.0.1"], "stream": "bench"},
                 "twino": {"listen": [f"tcp:{twino_port}:interface=127.0.0.1"]},
                 "malamute": {"listen": [endpoint]}, "admin": {"listen": admin}}
    build(config.load(overrides=overrides), reactor)[0].startService()
    reactor.callWhenRunning(lambda: print("ready", flush=True))
    reactor.run()


def spawn(module, *args):
    return _spawn(module, *args, pin=True)


class Broker:
    def __init__(self, admin=False):
        self.mqks, self.twino = free_port(), free_port()
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.admin = free_port() if admin else None
        self.proc = spawn("bench.interop_bench", "server", str(self.mqks), str(self.twino),
                          self.endpoint, *([str(self.admin)] if admin else []))
        assert self.proc.stdout.readline().strip() == "ready"
        self.runs = 0

    def names(self):
        """Fresh names per run, so no run sees another's queue or bindings."""
        self.runs += 1
        return f"q{self.runs}", f"ev{self.runs}", f"ch{self.runs}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)


def consumer(broker, door, kind, n, queue, event, channel):
    """Start the counting consumer of `door`; returns its process once it is ready."""
    if door == "malamute":                 # stream `bench` (pattern `temp.`) or service `bench`
        proc = spawn("bench.malamute_load", "reader", broker.endpoint,
                     "stream" if kind == "stream" else "service", str(n))
    elif door == "mqks":
        proc = spawn("bench.mqks_load", "consumer", str(broker.mqks), f"c-{queue}", queue,
                     event, str(n))
    else:
        with twino.connect(port=broker.twino) as admin:
            answer = admin.operation(610, channel, [("Channel-Name", channel), ("Queue-Id", "1"),
                                                    ("Queue-Status", "push")],
                                     b'{"RequestAcknowledge": false}')
            assert answer.content_type == 0, answer
        proc = spawn("bench.twino_load", "consumer", str(broker.twino), channel, str(n))
    assert proc.stdout.readline().strip() == "ready"
    return proc


BODY = 20   # bytes of every message body, whichever door publishes it


def publisher(broker, door, kind, dst, n, queue, event, channel):
    """Start the publisher of `door` aimed at the consumer's queue or stream (waits for go).
    Each sends BODY-byte bodies, so paths differ only in what their protocols add."""
    if door == "malamute":
        mode = "stream" if kind == "stream" else "service"   # service `bench` = queue `bench`
        return spawn("bench.malamute_load", "writer", broker.endpoint, mode, str(n),
                     str(BODY))
    if door == "twino":
        target = channel if dst == "twino" else queue.split("/")[0]
        return spawn("bench.twino_load", "producer", str(broker.twino), target, "1", str(n),
                     str(BODY), "0")     # a BODY-byte body: timestamp, dash, padding
    if kind == "stream":
        event = "temp.moscow"
    elif dst == "twino":                   # bind the event to the Twino queue first
        bind(broker, f"{channel}/1", event)
    return spawn("bench.mqks_load", "publisher", str(broker.mqks), event, str(n), "0",
                 str(BODY + 18))         # "0-" and SIZE - 20 bytes of padding


def bind(broker, queue, event):
    import socket
    with socket.create_connection(("127.0.0.1", broker.mqks)) as sock:
        sock.sendall(f"b rebind --confirm {queue} --add {event}\n".encode())
        assert sock.recv(100).startswith(b"b ok ")


def run_path(broker, path, n):
    src, dst, kind = path
    queue, event, channel = broker.names()
    if src == "malamute" and dst == "mqks":
        queue = "bench"                    # the Malamute service load role's service name
        event = "req"
    if src == "twino" and dst == "mqks":
        queue = f"{channel}/1"             # a Twino push reaches MQKS queue `C/1`
    cons = consumer(broker, dst, kind, n, queue, event, channel)
    pub = publisher(broker, src, kind, dst, n, queue, event, channel)
    time.sleep(0.2)
    cpu0 = cpu_seconds(broker.proc.pid)
    pub.stdin.write("go\n")
    pub.stdin.flush()
    p, c = last_json(pub), last_json(cons)
    cpu = cpu_seconds(broker.proc.pid) - cpu0
    seconds = (c["last_ns"] - p["start_ns"]) / 1e9
    assert c["count"] == n, (path, c)
    return {"msgs_per_s": n / seconds, "server_cpu_us_per_msg": cpu / n * 1e6,
            "consumer_cpu_share": c["cpu_s"] / seconds}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "server":
        return server(int(argv[1]), int(argv[2]), argv[3], *map(int, argv[4:5]))
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args(argv)
    n = 30_000 if args.quick else 200_000
    repeat = args.repeat or (1 if args.quick else 7)
    broker = Broker()
    rows = []
    try:
        for name, paths in COMPARISONS.items():
            samples = []
            for k in range(repeat):
                samples.append([run_path(broker, path, n) for path in paths])
                print(f"  {name} {k + 1}/{repeat}: " + "  ".join(
                    f"{'->'.join(p[:2])} {s['msgs_per_s']:,.0f}/s"
                    for p, s in zip(paths, samples[-1])), file=sys.stderr, flush=True)
            cross, same, own = ({m: statistics.median(s[i][m] for s in samples)
                                 for m in samples[0][i]} for i in range(3))
            ratio = same["msgs_per_s"] / cross["msgs_per_s"]
            paired = statistics.median(s[1]["msgs_per_s"] / s[0]["msgs_per_s"] for s in samples)
            slower = min(same["msgs_per_s"], own["msgs_per_s"]) / cross["msgs_per_s"]
            row = {"comparison": name, "messages": n, "repeat": repeat,
                   **{f"{k}_path": "->".join(p[:2]) + f" {p[2]}"
                      for k, p in zip(("cross", "same", "publisher_own"), paths)},
                   **{f"{k}_msgs_per_s": round(v["msgs_per_s"])
                      for k, v in (("cross", cross), ("same", same), ("publisher_own", own))},
                   **{f"{k}_cpu_us_per_msg": round(v["server_cpu_us_per_msg"], 2)
                      for k, v in (("cross", cross), ("same", same), ("publisher_own", own))},
                   "ratio": round(ratio, 3), "within_target": ratio <= TARGET,
                   "paired_ratio": round(paired, 3),
                   "ratio_vs_slower_door": round(slower, 3)}
            rows.append(row)
            print(f"{name:<20} cross {row['cross_msgs_per_s']:>8,}/s  same "
                  f"{row['same_msgs_per_s']:>8,}/s  publisher's own "
                  f"{row['publisher_own_msgs_per_s']:>8,}/s  ratio {row['ratio']:.2f}  paired "
                  f"{row['paired_ratio']:.2f}  vs slower "
                  f"{row['ratio_vs_slower_door']:.2f}", flush=True)
    finally:
        broker.stop()
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "interop-latest.json"), "w") as f:
        json.dump({"target_ratio": TARGET, "comparisons": rows}, f, indent=1)
    chart(rows, os.path.join(HERE, "results", "interop.png"))


def chart(rows, path):
    """Grouped bars per comparison: the cross-door path, the consumer door's own path and
    the publisher door's own path, with the ratio against the target."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.27
    kinds = (("cross", "cross-door path"), ("same", "consumer door's own path"),
             ("publisher_own", "publisher door's own path"))
    for i, (key, label) in enumerate(kinds):
        ax.bar([x + i * width for x in range(len(rows))],
               [r[f"{key}_msgs_per_s"] for r in rows], width, label=label)
    for x, r in enumerate(rows):
        ax.annotate(f"{r['ratio']:.2f}x", (x, r["cross_msgs_per_s"]), ha="center",
                    va="bottom", fontsize=9,
                    color="tab:green" if r["within_target"] else "tab:red")
    ax.set_xticks([x + width for x in range(len(rows))],
                  [r["cross_path"] for r in rows], fontsize=8)
    ax.set_ylabel("messages / s (median)")
    ax.set_title(f"Cross-door cost (target: ratio <= {TARGET}), "
                 f"{rows[0]['messages']:,} messages x {rows[0]['repeat']} runs")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


if __name__ == "__main__":
    main()
