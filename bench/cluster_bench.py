"""The cluster engine measured from outside: RabbitMQ nodes, real gateways, client processes.

    python -m bench.cluster_bench [--nodes 1|3] [--messages N] [--rate R] [--quick]

Starts a RabbitMQ cluster on loopback (bridge/cluster/local.py) and two gateways on it
(`twistd -n mqksbridge` with `[cluster] engine = "rabbitmq"`, MQKS and Twino on free
loopback ports), then runs, each client its own process over real sockets
(bench.cluster_load, bench.mqks_load):

  mqks-1gw     MQKS publisher with `--confirm` (windows of confirmations) and consumer,
               both on gateway 1;
  mqks-2gw     the publisher on gateway 1, the consumer on gateway 2;
  pika         a plain pika publisher (confirm mode, the same windows) and consumer
               (prefetch, ack per message) on a quorum queue of the same cluster;
  *-lat        each of them again at a fixed moderate rate: publish-to-deliver p50/p99;
  twino-*      bench.twino_load's producer (no acks asked) and consumer, through the
               Twino door of one gateway, then across the two at the fixed rate.

Per run: messages/s (publisher's first send to the consumer's last delivery), CPU-us per
message of the gateways (/proc, exact per thread), of the RabbitMQ nodes (every beam.smp)
and of the client processes, and the load average. The target ratio: messages per
gateway CPU-second against messages per pika-client CPU-second, the gateway doing for its
clients what the pika processes do for themselves (>= 0.8 wanted).

Every node and gateway started is stopped on the way out, error or not.
Results: bench/results/cluster-latest.json and .md (cluster-3nodes-latest.* with --nodes 3).
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pika

from bench.processes import HERE, PY, ROOT, free_port, last_json
from bench.procstat import cpu_ns, tree_cpu_seconds
from bench.twino_bench import make_queue
from mqksbridge.bridge.cluster.local import LocalCluster

RUN_SECONDS = 120          # a run that takes longer is stuck: its processes are killed
PREFETCH = 256             # the gateway's default `cluster.prefetch`, for the pika consumer


class Gateway:
    """`twistd -n mqksbridge` on the cluster, MQKS and Twino on free loopback ports."""

    def __init__(self, directory, cluster, name):
        self.dir = os.path.join(directory, name)
        os.makedirs(self.dir)
        self.mqks, self.twino = free_port(), free_port()
        urls = ", ".join(f'"{url}"' for url in cluster.urls())
        with open(os.path.join(self.dir, "gateway.toml"), "w") as f:
            f.write(f'data_dir = "var"\n\n'
                    f'[cluster]\nengine = "rabbitmq"\nurls = [{urls}]\nnode = "{name}"\n'
                    f'replicas = {cluster.size}\n\n'
                    f'[mqks]\nlisten = ["tcp:{self.mqks}:interface=127.0.0.1"]\n\n'
                    f'[malamute]\nlisten = []\n\n'
                    f'[twino]\nlisten = ["tcp:{self.twino}:interface=127.0.0.1"]\n'
                    f'node = "{name}"\n\n[admin]\nlisten = []\n')
        twistd = os.path.join(os.path.dirname(PY), "twistd")
        self.proc = subprocess.Popen(
            [twistd, "-n", "--pidfile=", "-l", "twistd.log", "mqksbridge",
             "--config", "gateway.toml"],
            cwd=self.dir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        self.pid = self.proc.pid

    def wait(self, timeout=120):
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.mqks), 1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"gateway did not open its doors: {self.dir}/twistd.log")
                time.sleep(0.1)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def spawn(module, *args):
    return subprocess.Popen([PY, "-m", module, *map(str, args)], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def finish(proc):
    try:
        proc.wait(RUN_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise SystemExit(f"{proc.args[2:4]} did not finish in {RUN_SECONDS} s")
    return last_json(proc)


def await_consumer(rabbit, queue):
    """A consumer on another gateway is in place once RabbitMQ lists it (the gateway
    answers its client before its own round trips to RabbitMQ are done)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        channel = rabbit.channel()
        try:
            if channel.queue_declare(queue, passive=True).method.consumer_count:
                return
        except pika.exceptions.ChannelClosedByBroker:
            pass                          # not declared yet
        finally:
            if channel.is_open:
                channel.close()
        time.sleep(0.05)
    raise SystemExit(f"no consumer on {queue} after 30 s")


class Bench:
    def __init__(self, cluster, gateways, args):
        self.cluster, self.gateways, self.args = cluster, gateways, args
        self.rabbit = pika.BlockingConnection(pika.URLParameters(cluster.urls()[0]))
        self.beams = [node.process.pid for node in cluster.nodes]
        self.runs = 0

    def _cpu(self):
        return (sum(cpu_ns(gw.pid) for gw in self.gateways) / 1e9,
                sum(tree_cpu_seconds(pid) for pid in self.beams))

    def mqks(self, pub_gw, sub_gw, n, rate):
        self.runs += 1
        queue, event = f"bench{self.runs}", f"e{self.runs}"
        sub = spawn("bench.mqks_load", "consumer", sub_gw.mqks, "c", queue, event, n,
                    "--latency")
        if sub.stdout.readline().strip() != "ready":
            raise SystemExit("MQKS consumer did not start")
        await_consumer(self.rabbit, f"mqksbridge.q.{queue}")
        pub = spawn("bench.cluster_load", "mqks-pub", pub_gw.mqks, event, n, rate,
                    self.args.size, self.args.window)
        return self._measure(pub, sub, n)

    def twino(self, pub_gw, sub_gw, n, rate):
        """bench.twino_load's producer (queue messages without asking for acks) and
        consumer (joined to the channel) on queue `CHANNEL/1`, made round-robin: the
        mode the cluster engine delivers."""
        self.runs += 1
        channel = f"tc{self.runs}"
        for gw in {pub_gw, sub_gw}:      # round-robin: what the cluster engine consumes;
            make_queue(gw.twino, channel, "round-robin", False)   # each gateway's own view
        sub = spawn("bench.twino_load", "consumer", sub_gw.twino, channel, n, "--latency")
        if sub.stdout.readline().strip() != "ready":
            raise SystemExit("Twino consumer did not start")
        if pub_gw is not sub_gw:
            await_consumer(self.rabbit, f"mqksbridge.q.{channel}/1")
        pub = spawn("bench.twino_load", "producer", pub_gw.twino, channel, "1", n,
                    self.args.size, rate)
        return self._measure(pub, sub, n)

    def pika(self, n, rate):
        self.runs += 1
        queue = f"bench.pika{self.runs}"
        self.rabbit.channel().queue_declare(
            queue, durable=True, arguments={"x-queue-type": "quorum",
                                            "x-quorum-initial-group-size": self.cluster.size})
        url = self.cluster.urls()[0]
        sub = spawn("bench.cluster_load", "pika-sub", url, queue, n, PREFETCH)
        if sub.stdout.readline().strip() != "ready":
            raise SystemExit("pika consumer did not start")
        pub = spawn("bench.cluster_load", "pika-pub", url, queue, n, rate, self.args.size,
                    self.args.window)
        return self._measure(pub, sub, n)

    def _measure(self, pub, sub, n):
        load = os.getloadavg()[0]
        gw0, beam0 = self._cpu()
        pub.stdin.write("go\n")
        pub.stdin.flush()
        try:
            p, c = finish(pub), finish(sub)
        finally:
            for proc in (pub, sub):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        gw1, beam1 = self._cpu()
        if c["count"] < n or p.get("confirmed", n) < n:
            raise SystemExit(f"lost messages: {p} {c}")
        seconds = (c["last_ns"] - p["start_ns"]) / 1e9
        return {"messages": n, "seconds": round(seconds, 3), "msg_s": round(n / seconds),
                "gateway_us_msg": round((gw1 - gw0) / n * 1e6, 1),
                "rabbitmq_us_msg": round((beam1 - beam0) / n * 1e6, 1),
                "clients_us_msg": round((p["cpu_s"] + c["cpu_s"]) / n * 1e6, 1),
                "publisher_us_msg": round(p["cpu_s"] / n * 1e6, 1),
                "consumer_us_msg": round(c["cpu_s"] / n * 1e6, 1),
                "p50_us": round(c["p50_us"]), "p99_us": round(c["p99_us"]),
                "load": round(load, 2)}


def ratio(results):
    """Messages per gateway CPU-second over messages per pika-client CPU-second."""
    gw, pk = results.get("mqks-1gw"), results.get("pika")
    if not gw or not pk or not gw["gateway_us_msg"]:
        return None
    return round(pk["clients_us_msg"] / gw["gateway_us_msg"], 2)


def markdown(report):
    lines = [f"RabbitMQ nodes: {report['nodes']}, {report['messages']} messages of "
             f"{report['size']} bytes, confirm window {report['window']}, latency runs at "
             f"{report['rate']} msg/s; load average {report['loadavg']}",
             "", "| run | msg/s | gateway us/msg | RabbitMQ us/msg | clients us/msg | "
             "p50 us | p99 us | load |", "|---|---|---|---|---|---|---|---|"]
    for name, r in report["runs"].items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error']} |||||||")
            continue
        lines.append(f"| {name} | {r['msg_s']} | {r['gateway_us_msg']} | "
                     f"{r['rabbitmq_us_msg']} | {r['clients_us_msg']} | {r['p50_us']} | "
                     f"{r['p99_us']} | {r['load']} |")
    lines += ["", f"Gateway rate per CPU-second / pika's: {report['ratio']} (target >= 0.8)"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--messages", type=int, default=30_000)
    parser.add_argument("--rate", type=int, default=1000, help="latency runs, msg/s")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--window", type=int, default=256,
                        help="publishes per confirmation wait when flooding")
    parser.add_argument("--quick", action="store_true", help="10,000 messages, 3 s latency")
    args = parser.parse_args(argv)
    n = 10_000 if args.quick else args.messages
    lat_n = args.rate * (3 if args.quick else 10)
    directory = tempfile.mkdtemp(prefix="cluster-bench-")
    cluster, gateways, results = LocalCluster(directory, args.nodes), [], {}
    try:
        print(f"starting {args.nodes} RabbitMQ node(s) and 2 gateways...", flush=True)
        cluster.start()
        gateways = [Gateway(directory, cluster, f"gw{i}") for i in (1, 2)]
        for gw in gateways:
            gw.wait()
        bench = Bench(cluster, gateways, args)
        gw1, gw2 = gateways
        plan = [("mqks-1gw", lambda: bench.mqks(gw1, gw1, n, 0)),
                ("pika", lambda: bench.pika(n, 0)),
                ("mqks-2gw", lambda: bench.mqks(gw1, gw2, n, 0)),
                ("mqks-1gw-lat", lambda: bench.mqks(gw1, gw1, lat_n, args.rate)),
                ("pika-lat", lambda: bench.pika(lat_n, args.rate)),
                ("mqks-2gw-lat", lambda: bench.mqks(gw1, gw2, lat_n, args.rate)),
                ("twino-1gw", lambda: bench.twino(gw1, gw1, n, 0)),
                ("twino-2gw-lat", lambda: bench.twino(gw1, gw2, lat_n, args.rate))]
        for name, run in plan:
            try:
                results[name] = run()
            except (SystemExit, ValueError, IndexError) as failed:  # stuck, or no result:
                                                                    # the others still count
                results[name] = {"error": str(failed)}
            print(name, json.dumps(results[name]), flush=True)
    finally:
        for gw in gateways:
            gw.stop()
        cluster.stop(kill=True)
    report = {"nodes": args.nodes, "messages": n, "size": args.size, "window": args.window,
              "rate": args.rate, "loadavg": [round(x, 2) for x in os.getloadavg()],
              "cpus": os.cpu_count(), "runs": results, "ratio": ratio(results)}
    stem = os.path.join(HERE, "results", "cluster-latest" if args.nodes == 1
                        else f"cluster-{args.nodes}nodes-latest")
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    with open(stem + ".json", "w") as f:
        json.dump(report, f, indent=1)
    table = markdown(report)
    with open(stem + ".md", "w") as f:
        f.write(table)
    print(table)
    shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
