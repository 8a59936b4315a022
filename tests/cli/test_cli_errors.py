"""A newcomer's mistakes get one line that names the value given and the fix: the
`mqksbridge` command's usage errors (before anything connects), unreachable doors named by
host and port, the users file's command, a refused Malamute PLAIN login, and the broker's
own start-up errors (unknown keys and sections, misspelt options, a taken address). Real
processes and sockets throughout."""
import os
import socket
import subprocess
import sys
import time

import pytest

from mqksbridge.bridge import config
from mqksbridge.bridge.clients.malamute import MalamuteClient, MalamuteLoginRefused
from mqksbridge.bridge.security.users import hash_password, load, verify_password
from tests.support.process import TWISTD, BrokerProcess, free_port

SCRIPT = os.path.join(os.path.dirname(sys.executable), "mqksbridge")


def run(*args, input=b"", env=None, cwd=None):
    return subprocess.run([SCRIPT, *args], input=input, capture_output=True, timeout=60,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def one_line(done):
    text = done.stderr.decode()
    assert text.count("\n") == 1 and text.startswith("mqksbridge: "), text
    return text


@pytest.mark.parametrize("args, says", [
    (["queues", "--admin", "127.0.0.1:15680"], "write --admin http://127.0.0.1:15680"),
    (["stats", "--admin", "htp://127.0.0.1:15680"], "unknown scheme 'htp'"),
    (["purge", "q", "--admin", "http://127.0.0.1:99999"], "bad port"),
    (["publish", "mqks://127.0.0.1:{port}", "--queue", "jobs", "x"], "use --event"),
    (["publish", "mqks://127.0.0.1:{port}", "--event", "two words", "x"], "one word"),
    (["consume", "twino://127.0.0.1:{port}", "jobs", "--event", "e"], "--event is for MQKS"),
    (["publish", "malamute://tcp://127.0.0.1", "--event", "e", "x"], "tcp://HOST:PORT"),
    (["publish", "twino://127.0.0.1:{port}/jobs", "--event", "e", "x"], "nothing after it"),
    (["tail", "malamute://tcp://127.0.0.1:{port}", "mqks", "(("], "not a zrex pattern"),
])
def test_usage_errors_are_found_before_connecting(args, says):
    """Nothing listens on the port: each is exit 2 with its fix, not a connection failure."""
    port = free_port()
    done = run(*(a.replace("{port}", str(port)) for a in args))
    assert done.returncode == 2, done.stderr
    assert says in one_line(done)


@pytest.mark.parametrize("door", ["mqks", "twino"])
def test_a_refused_connection_names_the_host_and_port(door):
    port = free_port()
    done = run("publish", f"{door}://127.0.0.1:{port}", "--event", "e", "x")
    assert done.returncode == 3
    assert f"127.0.0.1:{port} refused the connection" in one_line(done)
    admin = run("stats", "--admin", f"http://127.0.0.1:{port}")
    assert admin.returncode == 3
    assert f"admin API at 127.0.0.1:{port}" in one_line(admin)


def test_user_add_names_a_missing_directory_before_asking_for_a_password(tmp_path):
    done = run("user", "add", "app", "--file", str(tmp_path / "etc" / "users.toml"))
    assert done.returncode == 2
    text = one_line(done)
    assert f"no directory {tmp_path / 'etc'}" in text and "mkdir -p" in text
    assert "password" not in text and not (tmp_path / "etc").exists()


def test_user_passwd_changes_the_password_and_nothing_else(tmp_path):
    path = tmp_path / "users.toml"
    path.write_text("# our users\n[users.ops]\npassword = \"%s\"\nmanage = [\"broker\"]\n"
                    % hash_password("ops-password"))
    added = run("user", "add", "app", "--file", str(path), "--password-stdin",
                "--publish", "queue:jobs", input=b"old\n")
    assert added.returncode == 0, added.stderr
    changed = run("user", "passwd", "app", "--file", str(path), "--password-stdin",
                  input=b"new\n")
    assert changed.returncode == 0, changed.stderr
    users = load(str(path))
    assert verify_password(users.users["app"].password, "new")
    assert not verify_password(users.users["app"].password, "old")
    assert verify_password(users.users["ops"].password, "ops-password")
    text = path.read_text()
    assert text.startswith("# our users\n") and 'publish = ["queue:jobs"]' in text
    nobody = run("user", "passwd", "bob", "--file", str(path), "--password-stdin",
                 input=b"x\n")
    assert nobody.returncode == 2 and "mqksbridge user add bob" in one_line(nobody)


@pytest.mark.parametrize("overrides, message", [
    ({"mqks": {"max_lines": 10}},
     "unknown configuration key mqks.max_lines = 10: did you mean mqks.max_line?"),
    ({"mqk": {"max_line": 10}}, "unknown configuration section [mqk]: did you mean [mqks]?"),
    ({"durabilty": {"queues": ["jobs"]}},
     "unknown configuration section [durabilty]: did you mean [durability]?"),
    ({"dat_dir": "x"}, 'unknown configuration key dat_dir = "x": did you mean data_dir?'),
])
def test_unknown_keys_and_sections_name_the_nearest(overrides, message):
    with pytest.raises(config.ConfigError) as refused:
        config.load(None, overrides)
    assert str(refused.value) == message


def test_a_misspelt_option_is_the_first_thing_printed(tmp_path):
    done = subprocess.run([TWISTD, "-n", "--pidfile=", "mqksbridge", "--cofnig", "x.toml"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines()[0] == (
        "twistd mqksbridge: option --cofnig not recognized (did you mean --config?); "
        "every option: twistd mqksbridge --help")


def test_a_taken_address_is_named_as_configured_without_a_traceback(tmp_path):
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run([TWISTD, "-n", "mqksbridge", "--malamute", f"tcp://*:{port}",
                               "--mqks", "none", "--twino", "none", "--admin", "none"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
    log = done.stdout + done.stderr
    assert done.returncode == 1, log
    assert f"cannot listen on tcp://*:{port}: Address already in use" in log
    assert "Traceback" not in log and "backlog" not in log
    assert not (tmp_path / "twistd.pid").exists()


@pytest.fixture(scope="module")
def plain_broker(tmp_path_factory):
    work = tmp_path_factory.mktemp("plain")
    users = work / "users.toml"
    users.write_text('[users.app]\npassword = "%s"\npublish = ["*"]\nconsume = ["*"]\n'
                     % hash_password("right"))
    broker = BrokerProcess(work, doors=("malamute",),
                           args=["--set", f"security.users={users}",
                                 "--set", "malamute.mechanism=plain"])
    broker.start()
    yield f"tcp://127.0.0.1:{broker.ports['malamute']}"
    broker.stop()


def test_a_wrong_plain_password_is_a_refused_login_not_a_timeout(plain_broker):
    client = MalamuteClient(plain_broker, timeout=20, username="app", password="wrong")
    started = time.monotonic()
    try:
        with pytest.raises(MalamuteLoginRefused) as refused:
            client.connect()
    finally:
        client.close()
    assert time.monotonic() - started < 10 and refused.value.code == 400
    assert "refused the PLAIN login of user 'app'" in str(refused.value)
    url = f"malamute://{plain_broker}"
    wrong = run("publish", url, "--queue", "jobs", "--user", "app", "x",
                env={"MQKSBRIDGE_PASSWORD": "wrong"})
    assert wrong.returncode == 1 and "login refused" in one_line(wrong)
    right = run("publish", url, "--queue", "jobs", "--user", "app", "x",
                env={"MQKSBRIDGE_PASSWORD": "right"})
    assert right.returncode == 0, right.stderr
