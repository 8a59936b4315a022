"""A RabbitMQ cluster on loopback, started from Debian's `rabbitmq-server`: for the tests,
`make cluster` and the benches, never for production (docs/cluster.md says how to run one).

Every node is a `rabbitmq-server` process of its own, in its own session (process group),
with its own ports, data, log and configuration under one directory, and the cluster has an
Erlang cookie and an `epmd` of its own: nothing is shared with the system's service or with
another cluster started on the same machine, so node names can stay `rabbit-1@localhost`...
The nodes boot in parallel (booting is the slow part: seconds of CPU each); the first one
forms the cluster and the others join it at boot through RabbitMQ's classic-config peer
discovery, which spares the `stop_app / join_cluster / start_app` round of three command-line
tool runs per node. Readiness is explicit: `rabbitmqctl wait` per node (pid file, Erlang
distribution, applications), then `cluster_status` must list every node as running.

Blocking calls (subprocesses and waits): not for a reactor thread.

    python -m mqksbridge.bridge.cluster.local start DIR [--nodes 3] [--management]
    python -m mqksbridge.bridge.cluster.local stop DIR
"""
import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time

RABBITMQ_BIN = "/usr/lib/rabbitmq/bin"   # the package's own scripts: the /usr/sbin wrappers
SERVER = os.path.join(RABBITMQ_BIN, "rabbitmq-server")      # switch to the system's user,
CTL = os.path.join(RABBITMQ_BIN, "rabbitmqctl")            # data and /etc configuration
EPMD = "epmd"
STATE = "cluster.json"          # what `stop` (another process) needs: ports and process groups
BOOT_SECONDS = 180.0            # bounds a failure only: three nodes on a busy 2-core machine
CTL_SECONDS = 60.0


class ClusterError(RuntimeError):
    """A node did not start, join or answer; the message ends with its log's last lines."""


def missing():
    """Why no local cluster can start here (None: it can)."""
    for path in (SERVER, CTL):
        if not os.access(path, os.X_OK):
            return f"{path} not found: install Debian's rabbitmq-server (apt-get install " \
                   "rabbitmq-server; `make test` does it when run as root)"
    if not any(os.access(os.path.join(d, EPMD), os.X_OK)
               for d in os.environ.get("PATH", "").split(os.pathsep)):
        return "epmd (Erlang) not found on PATH"
    return None


def free_ports(count):
    """`count` distinct free loopback ports (held together while chosen, so none repeats)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Node:
    """One member: its name, ports and directory; `process` while this object started it,
    `pgid` (the process group, what kill and stop signal) also when loaded from the state."""

    def __init__(self, index, directory, amqp_port, dist_port, management_port=None,
                 host="localhost"):
        self.index = index
        self.name = f"rabbit-{index}@{host}"
        self.directory = directory
        self.amqp_port = amqp_port
        self.dist_port = dist_port
        self.management_port = management_port
        self.process = None
        self.pgid = None

    @property
    def log_path(self):
        return os.path.join(self.directory, "log", f"{self.name}.log")

    @property
    def pid_file(self):
        return os.path.join(self.directory, "rabbitmq.pid")

    def state(self):
        return {"index": self.index, "name": self.name, "amqp_port": self.amqp_port,
                "dist_port": self.dist_port, "management_port": self.management_port,
                "pgid": self.pgid}

    def log_tail(self, lines=20):
        texts = []
        for path in (self.log_path, os.path.join(self.directory, "console.log")):
            try:
                with open(path, errors="replace") as f:
                    texts.append(f"--- {path}\n" + "".join(f.readlines()[-lines:]))
            except OSError:
                pass
        return "\n".join(texts)


class LocalCluster:
    """`size` nodes under `directory`, a user (administrator) and a vhost for the gateways.

    start() -> self (every node running and clustered; prepare() first when the URLs are
    needed before), urls() for the gateways' [cluster] urls, kill(i) (SIGKILL, as a
    machine that dies), restart(i), stop(). A context manager.
    """

    def __init__(self, directory, size=3, *, management=False, user="mqksbridge",
                 password=None, vhost="mqksbridge"):
        if size < 1:
            raise ValueError("a cluster has at least one node")
        self.directory = os.path.abspath(str(directory))
        self.size = size
        self.management = management
        self.user = user
        self.password = password or secrets.token_hex(12)
        self.vhost = vhost
        self.cookie = secrets.token_hex(20)
        self.epmd_port = None
        self.epmd = None                    # Popen, or the pgid when loaded from the state
        self.nodes = []

    # -- where things are -----------------------------------------------------------------

    @property
    def home(self):
        """HOME of the nodes and of rabbitmqctl: the cookie lives there."""
        return os.path.join(self.directory, "home")

    def urls(self, nodes=None):
        """amqp:// URLs of the given nodes (default all), in node order."""
        return [f"amqp://{self.user}:{self.password}@127.0.0.1:{node.amqp_port}/{self.vhost}"
                for node in (nodes or self.nodes)]

    def management_urls(self):
        return [f"http://127.0.0.1:{node.management_port}/" for node in self.nodes
                if node.management_port]

    def environment(self, node=None):
        """The environment of a node's server (or of rabbitmqctl): no RABBITMQ_* setting of
        the caller leaks in, nothing is read from /etc/rabbitmq."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update(HOME=self.home, ERL_EPMD_PORT=str(self.epmd_port),
                   RABBITMQ_CONF_ENV_FILE=os.path.join(self.directory, "rabbitmq-env.conf"))
        if node is not None:
            env.update(
                RABBITMQ_NODENAME=node.name,
                RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
                RABBITMQ_NODE_PORT=str(node.amqp_port),
                RABBITMQ_DIST_PORT=str(node.dist_port),
                RABBITMQ_MNESIA_BASE=os.path.join(node.directory, "mnesia"),
                RABBITMQ_LOG_BASE=os.path.join(node.directory, "log"),
                RABBITMQ_CONFIG_FILE=os.path.join(node.directory, "rabbitmq.conf"),
                RABBITMQ_ADVANCED_CONFIG_FILE=os.path.join(node.directory, "advanced.config"),
                RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(node.directory, "enabled_plugins"),
                RABBITMQ_PID_FILE=node.pid_file,
                # inter-node traffic on loopback only
                RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface "
                                                     "{127,0,0,1}")
        return env

    # -- start ----------------------------------------------------------------------------

    def prepare(self):
        """Choose the ports and write every file, without starting anything: urls() are
        known from here on (a test points a gateway at a cluster it starts later). A cluster
        is new each time: what an earlier one left under the directory is removed (its
        database would keep its own users and passwords)."""
        for index in range(1, self.size + 1):
            shutil.rmtree(os.path.join(self.directory, f"rabbit-{index}"), ignore_errors=True)
        os.makedirs(self.home, exist_ok=True)
        cookie = os.path.join(self.home, ".erlang.cookie")
        if os.path.exists(cookie):
            os.chmod(cookie, 0o600)
        with open(cookie, "w") as f:
            f.write(self.cookie)
        os.chmod(cookie, 0o400)
        open(os.path.join(self.directory, "rabbitmq-env.conf"), "w").close()
        ports = free_ports(1 + self.size * (3 if self.management else 2))
        self.epmd_port = ports.pop()
        self.nodes = []
        for index in range(1, self.size + 1):
            node = Node(index, os.path.join(self.directory, f"rabbit-{index}"),
                        ports.pop(), ports.pop(), ports.pop() if self.management else None)
            self._write_files(node)
            self.nodes.append(node)
        return self

    def start(self, timeout=BOOT_SECONDS):
        """Every node booted in parallel, clustered, and the user and vhost there."""
        reason = missing()
        if reason:
            raise ClusterError(reason)
        if not self.nodes:
            self.prepare()
        try:
            self._start_epmd()
            for node in self.nodes:
                self._spawn(node)
            self.save()
            failed = self._await(self.nodes, timeout, check=False)
            if failed and self.nodes[0] not in failed:
                self._reboot(failed, timeout)
            elif failed:
                raise ClusterError("\n".join(failed.values()))
            self.await_cluster(timeout=timeout)
        except BaseException:
            self.stop(kill=True)
            raise
        return self

    def _write_files(self, node):
        """rabbitmq.conf (ports, the gateways' user and vhost; the others join node 1),
        the enabled plugins and an empty advanced.config."""
        os.makedirs(os.path.join(node.directory, "log"), exist_ok=True)
        lines = [f"listeners.tcp.default = 127.0.0.1:{node.amqp_port}",
                 # applied when the first node creates the cluster's database
                 f"default_user = {self.user}", f"default_pass = {self.password}",
                 f"default_vhost = {self.vhost}",
                 "default_user_tags.administrator = true",
                 "loopback_users = none"]
        if node.index > 1:
            first = self.nodes[0].name if self.nodes else "rabbit-1@localhost"
            lines += ["cluster_formation.peer_discovery_backend = classic_config",
                      f"cluster_formation.classic_config.nodes.1 = {first}",
                      # node 1 boots at the same time: keep looking for it while it does
                      "cluster_formation.discovery_retry_limit = 600",
                      "cluster_formation.discovery_retry_interval = 300"]
        plugins = "[]."
        if node.management_port:
            lines += [f"management.tcp.port = {node.management_port}",
                      "management.tcp.ip = 127.0.0.1"]
            plugins = "[rabbitmq_management]."
        with open(os.path.join(node.directory, "rabbitmq.conf"), "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(node.directory, "enabled_plugins"), "w") as f:
            f.write(plugins + "\n")
        with open(os.path.join(node.directory, "advanced.config"), "w") as f:
            f.write("[].\n")

    def _start_epmd(self):
        """The cluster's own port mapper, on loopback, stopped with the cluster."""
        env = dict(self.environment(), ERL_EPMD_ADDRESS="127.0.0.1")
        self.epmd = subprocess.Popen([EPMD, "-port", str(self.epmd_port)], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.epmd_port), 1).close()
                return
            except OSError:
                if self.epmd.poll() is not None or time.monotonic() > deadline:
                    raise ClusterError(f"epmd did not listen on port {self.epmd_port}")
                time.sleep(0.01)

    def _spawn(self, node):
        try:
            os.unlink(node.pid_file)
        except FileNotFoundError:
            pass
        with open(os.path.join(node.directory, "console.log"), "ab") as console:
            node.process = subprocess.Popen([SERVER], env=self.environment(node),
                                            cwd=node.directory, stdin=subprocess.DEVNULL,
                                            stdout=console, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        node.pgid = node.process.pid

    def _await(self, nodes, timeout, check=True):
        """`rabbitmqctl wait` for every node at once: its pid file, its Erlang
        distribution, then its applications (it gives up if the process dies). Raises
        when one did not start; with `check=False`, returns {node: why} instead."""
        waits = [(node, self._ctl_process(node, "wait", node.pid_file, "--timeout",
                                          str(int(timeout))))
                 for node in nodes]
        failed = {}
        for node, process in waits:
            out, _ = process.communicate()
            if process.returncode != 0:
                failed[node] = f"{node.name} did not start:\n{out}\n{node.log_tail()}"
        if failed and check:
            raise ClusterError("\n".join(failed.values()))
        return failed

    def _reboot(self, failed, timeout):
        """Joining nodes that failed their first boot, started once more on an empty
        database. Booting in parallel, a node that joins while the first one is still
        creating the cluster's schema can stop with `schema_integrity_check_failed`
        (seen on 3.10 under load); node 1 is up now, so the second join is sequential."""
        for node in failed:
            if node.process is not None:
                _signal_group(node.pgid, signal.SIGKILL)
                _wait_gone(node.pgid)
                node.process.wait(30)
            shutil.rmtree(os.path.join(node.directory, "mnesia"), ignore_errors=True)
            self._spawn(node)
        self.save()
        self._await(list(failed), timeout)

    def await_cluster(self, nodes=None, timeout=BOOT_SECONDS):
        """Wait until `cluster_status` (asked of the first given node) lists every node of
        the cluster as running; the status is returned."""
        ask = (nodes or self.nodes)[0]
        want = {node.name for node in self.nodes}
        deadline = time.monotonic() + timeout
        while True:
            status = self.cluster_status(ask)
            if want <= set(status.get("running_nodes", ())):
                return status
            if time.monotonic() > deadline:
                raise ClusterError(f"nodes not in the cluster after {timeout:g} s: "
                                   f"{sorted(want - set(status.get('running_nodes', ())))}"
                                   f"\n{json.dumps(status)[:2000]}")
            time.sleep(0.2)

    # -- the command-line tool ----------------------------------------------------------

    def _ctl_process(self, node, *args):
        return subprocess.Popen([CTL, "-q", "-n", node.name, *args], env=self.environment(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def ctl(self, node, *args, timeout=CTL_SECONDS):
        """rabbitmqctl ARGS against `node` (a Node or an index from 1); its output, or
        ClusterError with it when the tool fails."""
        node = self.node(node)
        process = self._ctl_process(node, *args)
        try:
            out, _ = process.communicate(timeout=timeout + 10)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
            raise ClusterError(f"rabbitmqctl {' '.join(args)} on {node.name} timed out:\n{out}")
        if process.returncode != 0:
            raise ClusterError(f"rabbitmqctl {' '.join(args)} on {node.name} failed "
                               f"(exit {process.returncode}):\n{out}")
        return out

    def cluster_status(self, node=1):
        """`rabbitmqctl cluster_status` as a dict (running_nodes, disk_nodes, alarms,
        partitions, listeners, versions...)."""
        return json.loads(self.ctl(node, "cluster_status", "--formatter", "json"))

    def node(self, which):
        return which if isinstance(which, Node) else self.nodes[which - 1]

    # -- faults ---------------------------------------------------------------------------

    def kill(self, which):
        """SIGKILL a node's whole process group, as when its machine dies."""
        node = self.node(which)
        _signal_group(node.pgid, signal.SIGKILL)
        _wait_gone(node.pgid)
        if node.process is not None:
            node.process.wait(30)
        self.save()

    def restart(self, which, timeout=BOOT_SECONDS):
        """Start a stopped or killed node again on its data; returns when it is running
        and back in the cluster (it rejoins from its own database)."""
        node = self.node(which)
        self._spawn(node)
        self.save()
        self._await([node], timeout)
        return self.await_cluster([node], timeout)

    def running(self, which):
        """Whether a node's server process (started by this object) is alive."""
        node = self.node(which)
        return node.process is not None and node.process.poll() is None

    def heal(self, timeout=BOOT_SECONDS):
        """Restart every node this object started that is no longer running (a test that
        killed one and failed before bringing it back); returns the nodes restarted."""
        dead = [node for node in self.nodes if not self.running(node)]
        for node in dead:
            self._spawn(node)
        if dead:
            self.save()
            self._await(dead, timeout)
            self.await_cluster(dead, timeout)
        return dead

    # -- stop -----------------------------------------------------------------------------

    def stop(self, kill=False, timeout=60.0):
        """Stop every node (SIGTERM: RabbitMQ's orderly shutdown, in parallel; SIGKILL
        after `timeout`, or at once with kill=True), then the cluster's epmd."""
        sig = signal.SIGKILL if kill else signal.SIGTERM
        for node in self.nodes:
            _signal_group(node.pgid, sig)
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            if not _wait_gone(node.pgid, max(0.0, deadline - time.monotonic())):
                _signal_group(node.pgid, signal.SIGKILL)
                _wait_gone(node.pgid)
            if node.process is not None:
                node.process.wait(10)
        epmd = self.epmd.pid if isinstance(self.epmd, subprocess.Popen) else self.epmd
        _signal_group(epmd, signal.SIGKILL)
        _wait_gone(epmd)
        if isinstance(self.epmd, subprocess.Popen):
            self.epmd.wait(10)
        try:
            os.unlink(os.path.join(self.directory, STATE))
        except FileNotFoundError:
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop(kill=True)

    # -- the state file (for `stop` from another process) -------------------------------

    def save(self):
        epmd = self.epmd.pid if isinstance(self.epmd, subprocess.Popen) else self.epmd
        state = {"user": self.user, "password": self.password, "vhost": self.vhost,
                 "epmd_port": self.epmd_port, "epmd_pgid": epmd,
                 "management": self.management, "urls": self.urls(),
                 "nodes": [node.state() for node in self.nodes]}
        path = os.path.join(self.directory, STATE)
        with open(path + ".tmp", "w") as f:
            json.dump(state, f, indent=1)
        os.replace(path + ".tmp", path)

    @classmethod
    def load(cls, directory):
        """The cluster a `start` left running under `directory` (FileNotFoundError: none)."""
        directory = os.path.abspath(str(directory))
        with open(os.path.join(directory, STATE)) as f:
            state = json.load(f)
        cluster = cls(directory, len(state["nodes"]), management=state["management"],
                      user=state["user"], password=state["password"], vhost=state["vhost"])
        with open(os.path.join(cluster.home, ".erlang.cookie")) as f:
            cluster.cookie = f.read()
        cluster.epmd_port, cluster.epmd = state["epmd_port"], state["epmd_pgid"]
        for row in state["nodes"]:
            node = Node(row["index"], os.path.join(directory, f"rabbit-{row['index']}"),
                        row["amqp_port"], row["dist_port"], row["management_port"])
            node.pgid = row["pgid"]
            cluster.nodes.append(node)
        return cluster


def _signal_group(pgid, sig):
    if pgid:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass


def _group_alive(pgid):
    """Whether a process of group `pgid` still runs. A zombie does not count (dead, not yet
    reaped by its parent: the leader stays one until its Popen is waited on), but only
    once every thread of it is: a killed multithreaded process shows its main thread as a
    zombie while the others still hold its sockets."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _stat(f"/proc/{entry}/stat")[2:3] == [str(pgid)]:
            try:
                tasks = os.listdir(f"/proc/{entry}/task")
            except OSError:
                continue                        # exited meanwhile
            if any(_stat(f"/proc/{entry}/task/{task}/stat")[:1] not in ([], ["Z"], ["X"])
                   for task in tasks):
                return True
    return False


def _stat(path):
    """The fields of a /proc stat file after the command name: state, ppid, pgrp, ...
    ([] if the process is gone)."""
    try:
        with open(path) as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return []


def _wait_gone(pgid, timeout=30.0):
    """Whether every process of the group has exited within `timeout`."""
    if not pgid:
        return True
    deadline = time.monotonic() + timeout
    while _group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mqksbridge.bridge.cluster.local",
                                     description="A local RabbitMQ cluster on loopback "
                                                 "(docs/cluster.md).")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="start a fresh cluster under DIR")
    start.add_argument("directory")
    start.add_argument("--nodes", type=int, default=3)
    start.add_argument("--management", action="store_true",
                       help="enable the management plugin (HTTP API and UI) on each node")
    stop = commands.add_parser("stop", help="stop the cluster started under DIR")
    stop.add_argument("directory")
    args = parser.parse_args(argv)
    if args.command == "start":
        try:
            LocalCluster.load(args.directory)
            print(f"a cluster is already running under {args.directory}: stop it first",
                  file=sys.stderr)
            return 1
        except FileNotFoundError:
            pass
        cluster = LocalCluster(args.directory, args.nodes, management=args.management)
        try:
            cluster.start()
        except ClusterError as exc:
            print(exc, file=sys.stderr)
            return 1
        for node, url in zip(cluster.nodes, cluster.urls()):
            extra = f"  management http://127.0.0.1:{node.management_port}/" \
                if node.management_port else ""
            print(f"{node.name}  {url}{extra}")
        return 0
    try:
        LocalCluster.load(args.directory).stop()
    except FileNotFoundError:
        print(f"no cluster running under {args.directory}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
