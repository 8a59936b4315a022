"""`make cluster`: a 3-node RabbitMQ cluster on loopback and two gateways on it, for a
newcomer to try the cluster engine (docs/cluster.md); `make cluster-stop` ends them all.

The cluster's nodes take free ports (printed); the gateways take fixed ones beside the
defaults of `make run` so that the commands in docs/cluster.md work as written:

    gateway  MQKS    Malamute             Twino   admin
    gw1      25001   tcp://127.0.0.1:9901 22201   15681
    gw2      25002   tcp://127.0.0.1:9902 22202   15682

Each gateway is `twistd mqksbridge --config DIR/gwN/gateway.toml`, daemonized, its log in
DIR/gwN/twistd.log. Everything lives under DIR (`./var/cluster`).
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time

from mqksbridge.bridge.cluster.local import ClusterError, LocalCluster

GATEWAYS = 2
STARTUP_SECONDS = 120.0


def ports(n):
    return {"mqks": 25000 + n, "malamute": 9900 + n, "twino": 22200 + n, "admin": 15680 + n}


def gateway_config(cluster, n):
    """A gateway's configuration: its own ports and data, the cluster's nodes starting at
    a different one for each gateway (their connections spread over the nodes)."""
    urls = cluster.urls()
    urls = urls[(n - 1) % len(urls):] + urls[:(n - 1) % len(urls)]
    p = ports(n)
    listed = ", ".join(f'"{url}"' for url in urls)
    management = ", ".join(f'"{url}"' for url in cluster.management_urls())
    return (f'data_dir = "var"\n\n'
            f'[cluster]\nengine = "rabbitmq"\nurls = [{listed}]\nnode = "gw{n}"\n'
            f"management = [{management}]\n\n"
            f'[mqks]\nlisten = ["tcp:{p["mqks"]}:interface=127.0.0.1"]\n\n'
            f'[malamute]\nlisten = ["tcp://127.0.0.1:{p["malamute"]}"]\n\n'
            f'[twino]\nlisten = ["tcp:{p["twino"]}:interface=127.0.0.1"]\nnode = "gw{n}"\n\n'
            f'[admin]\nlisten = ["tcp:{p["admin"]}:interface=127.0.0.1"]\n')


def twistd():
    return os.path.join(os.path.dirname(sys.executable), "twistd")


def listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
        return True
    except OSError:
        return False


def start_gateway(directory, cluster, n):
    home = os.path.join(directory, f"gw{n}")
    os.makedirs(home, exist_ok=True)
    with open(os.path.join(home, "gateway.toml"), "w") as f:
        f.write(gateway_config(cluster, n))
    taken = [port for port in ports(n).values() if listening(port)]
    if taken:
        raise ClusterError(f"gateway gw{n}: ports {taken} are taken (a `make run`, or a "
                           "cluster started before?)")
    subprocess.run([twistd(), "--pidfile", "twistd.pid", "--logfile", "twistd.log",
                    "mqksbridge", "--config", "gateway.toml"], cwd=home, check=True)


def await_gateway(directory, n):
    """The gateway opens its doors once connected to the cluster: wait for its MQKS port."""
    deadline = time.monotonic() + STARTUP_SECONDS
    while not listening(ports(n)["mqks"]):
        if time.monotonic() > deadline or _pid(directory, n) is None:
            log = os.path.join(directory, f"gw{n}", "twistd.log")
            with open(log, errors="replace") as f:
                tail = "".join(f.readlines()[-20:])
            raise ClusterError(f"gateway gw{n} did not open its doors; {log}:\n{tail}")
        time.sleep(0.1)


def _pid(directory, n):
    """The gateway's pid while it runs, else None."""
    try:
        with open(os.path.join(directory, f"gw{n}", "twistd.pid")) as f:
            pid = int(f.read().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def stop_gateways(directory):
    """SIGTERM (the ordered shutdown) to every gateway, SIGKILL to one still there 30 s
    later; returns the pids stopped."""
    pids = [pid for n in range(1, GATEWAYS + 1) if (pid := _pid(directory, n))]
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30.0
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    return pids


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def start(directory):
    try:
        LocalCluster.load(directory)
        print(f"a cluster already runs under {directory}: make cluster-stop first",
              file=sys.stderr)
        return 1
    except FileNotFoundError:
        pass
    print("starting 3 RabbitMQ nodes (a minute on a busy machine)...", flush=True)
    cluster = LocalCluster(directory, 3, management=True)
    try:
        cluster.start()
        for n in range(1, GATEWAYS + 1):
            start_gateway(directory, cluster, n)
        for n in range(1, GATEWAYS + 1):
            await_gateway(directory, n)
    except (ClusterError, subprocess.CalledProcessError) as exc:
        print(f"make cluster: {exc}", file=sys.stderr)
        stop_gateways(directory)
        cluster.stop(kill=True)
        return 1
    print("\nRabbitMQ nodes (user mqksbridge, password in "
          f"{os.path.join(directory, 'cluster.json')}):")
    for node in cluster.nodes:
        print(f"  {node.name}  amqp 127.0.0.1:{node.amqp_port}  "
              f"http://127.0.0.1:{node.management_port}/")
    print("gateways:")
    for n in range(1, GATEWAYS + 1):
        p = ports(n)
        print(f"  gw{n}  mqks://127.0.0.1:{p['mqks']}  malamute://tcp://127.0.0.1:"
              f"{p['malamute']}  twino://127.0.0.1:{p['twino']}  admin "
              f"http://127.0.0.1:{p['admin']}/  log {directory}/gw{n}/twistd.log")
    print("\ntry:  .venv/bin/mqksbridge consume twino://127.0.0.1:22202 jobs --count 1 &\n"
          "      .venv/bin/mqksbridge publish twino://127.0.0.1:22201 --queue jobs hello\n"
          "      .venv/bin/mqksbridge cluster status --admin http://127.0.0.1:15681\n"
          "stop: make cluster-stop")
    return 0


def stop(directory):
    gateways = stop_gateways(directory)
    try:
        LocalCluster.load(directory).stop()
    except FileNotFoundError:
        if not gateways:
            print(f"nothing runs under {directory}", file=sys.stderr)
            return 1
    print(f"stopped {len(gateways)} gateways and the RabbitMQ nodes under {directory}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mqksbridge.bridge.cluster.sandbox",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("start", "stop"))
    parser.add_argument("directory")
    args = parser.parse_args(argv)
    directory = os.path.abspath(args.directory)
    return start(directory) if args.command == "start" else stop(directory)


if __name__ == "__main__":
    sys.exit(main())
