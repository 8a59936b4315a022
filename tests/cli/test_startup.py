"""Start-up: every flag in `twistd mqksbridge --help` and in docs/configuration.md, bad
configuration refused with the key and the value (each kind, through a real twistd),
--check-config, and JSON logs carrying the MQKS error ids clients are sent."""
import json
import os
import re
import socket
import subprocess

import pytest
import tomllib

from mqksbridge.bridge import config, settings
from mqksbridge.bridge.service import Options
from tests.support.process import TWISTD, BrokerProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = open(os.path.join(ROOT, "docs", "configuration.md")).read()


def twistd(tmp_path, *args, timeout=60):
    return subprocess.run([TWISTD, "-n", "--pidfile=", "mqksbridge", "--data",
                           str(tmp_path / "var"), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout)


def all_flags():
    options = Options()
    names = {f[0] for f in options.optFlags} | {p[0] for p in options.optParameters}
    names |= {name[4:].replace("_", "-") for name in dir(options) if name.startswith("opt_")
              and name not in ("opt_help", "opt_version")}
    return sorted(names)


def test_help_lists_every_flag_and_the_docs_describe_each(tmp_path):
    shown = subprocess.run([TWISTD, "mqksbridge", "--help"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    flags = all_flags()
    assert {"check-config", "set", "admin", "log-format", "shutdown-timeout"} <= set(flags)
    for flag in flags:
        assert f"--{flag}" in shown.stdout, flag
        assert f"`--{flag}" in DOC, f"docs/configuration.md does not describe --{flag}"


def test_the_docs_reference_is_the_settings_table():
    """The "File keys" block of docs/configuration.md is made from bridge/settings.py:
    a key added, changed or described in one and not the other fails here."""
    assert config.with_reference(DOC) == DOC, (
        "docs/configuration.md and bridge/settings.py disagree: run "
        "`python -m mqksbridge.bridge.config docs/configuration.md`")
    edited = DOC.replace("\nflow_limit = 10000 ", "\nflow_limit = 20000 ", 1)
    assert edited != DOC and config.with_reference(edited) == DOC
    assert len(settings.SETTINGS) == len(settings.TABLE)          # no key twice
    assert {s.section for s in settings.TABLE} - {""} == set(settings.SECTIONS)
    for setting in settings.TABLE:
        assert re.search(rf"^{re.escape(setting.name)} = ", DOC, re.M), setting.key
    config.validate(config.load())                 # the defaults pass their own checks


@pytest.mark.parametrize("overrides,message", [
    ({"mqks": {"max_linee": 5}}, "unknown configuration key mqks.max_linee = 5"),
    ({"broker": {"sweep_interval": "1s"}},
     'configuration key broker.sweep_interval = "1s": must be a number'),
    ({"twino": {"allow_admin": "yes"}}, 'twino.allow_admin = "yes": must be true or false'),
    ({"mqks": {"high_water": 0}}, "mqks.high_water = 0: must be between 1 and"),
    ({"twino": {"ping_timeout": -1.0}}, "twino.ping_timeout = -1.0: must be greater than 0"),
    ({"admin": {"listen": ["tcp:70000"]}}, "admin.listen = ['tcp:70000']: 'tcp:70000' is not"),
    ({"malamute": {"listen": ["udp://x:1"]}}, "unsupported ZeroMQ transport"),
    ({"malamute": {"mailbox_size_warn": -1}}, 'must be a byte count or "max"'),
    ({"broker": {"mailbox_size_limit": -1}}, 'must be a byte count, "max", or a list'),
    ({"broker": {"queue_size_limit": [["jobs*", "lots"]]}},
     'broker.queue_size_limit = [[\'jobs*\', \'lots\']]: must be a byte count'),
    ({"malamute": {"service_queue_size_limit": 20}},
     "malamute.service_queue_size_limit = 20: now broker.queue_size_limit"),
    ({"twino": {"producer_ack": [["a*", "later"]]}}, "twino.producer_ack"),
    ({"log": {"format": "xml"}}, "log.format = \"xml\": must be one of 'text', 'json'"),
    ({"broker": {"gc_threshold": [1, -2]}}, "broker.gc_threshold"),
    ({"broker": 3}, "configuration key broker = 3: must be a table"),
    ({"textqueue": {"watch": "fam"}}, "textqueue.watch = \"fam\": must be one of"),
    ({"textqueue": {"outbox": {"jobs": 3}}}, "must be a table of queue name = file name"),
    ({"textqueue": {"outbox": {"a": "x.tq", "b": "x.tq"}}}, "a different file for each"),
    ({"textqueue": {"inbox": "var/inbox"}}, "textqueue.inbox = \"var/inbox\": must be a list"),
    ({"admin": {"latency_sample_every": 100}},
     "admin.latency_sample_every = 100: must be a power of two between 1 and"),
])
def test_validator_names_key_and_value(overrides, message):
    with pytest.raises(config.ConfigError) as refused:
        config.load(overrides=overrides)
    assert message in str(refused.value)


def test_twistd_refuses_each_kind_of_bad_configuration(tmp_path):
    """Unknown key (in a file), wrong type and out of range (flags): exit 1, one line on
    stderr naming the key and the value, nothing started."""
    bad_file = tmp_path / "bad.toml"
    bad_file.write_text('[mqks]\nlisten = ["tcp:0"]\nmax_lines = 10\n')
    cases = [
        (["--config", str(bad_file)], "unknown configuration key mqks.max_lines = 10"),
        (["--set", "twino.ping_interval=\"soon\""],
         'twino.ping_interval = "soon": must be a number'),
        (["--flow-limit", "-3"], "broker.flow_limit = -3: must be between 0 and"),
    ]
    for args, message in cases:
        done = twistd(tmp_path, *args)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "mqksbridge: configuration key" in done.stderr or "unknown" in done.stderr
        assert message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr + done.stdout
    assert not (tmp_path / "var").exists()


def test_check_config_prints_the_effective_configuration(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('[twino]\nnode = "edge-1"\n[textqueue.outbox]\n"ch/1" = "out/ch1.tq"\n')
    done = twistd(tmp_path, "--config", str(good), "--check-config", "--mqks", "tcp:25001",
                  "--set", "broker.flow_limit=77", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    effective = tomllib.loads(done.stdout)
    assert effective["twino"]["node"] == "edge-1"
    assert effective["mqks"]["listen"] == ["tcp:25001"]
    assert effective["broker"]["flow_limit"] == 77 and effective["log"]["format"] == "json"
    assert effective["textqueue"]["outbox"] == {"ch/1": "out/ch1.tq"}
    assert config.load(overrides=effective) == effective
    bad = twistd(tmp_path, "--check-config", "--set", "mqks.max_line=1")
    assert bad.returncode == 1 and "mqks.max_line = 1" in bad.stderr and not bad.stdout


def test_json_log_lines_carry_the_mqks_error_id(tmp_path):
    broker = BrokerProcess(tmp_path, doors=("mqks",), args=["--log-format", "json"])
    broker.start()
    try:
        with socket.create_connection(("127.0.0.1", broker.ports["mqks"]), timeout=10) as s:
            s.sendall(b"x1 no_such_action 1\n")
            reply = b""
            while not reply.endswith(b"\n"):
                reply += s.recv(1024)
        req, status, eid = reply.decode().split()
        assert (req, status, len(eid)) == ("x1", "error", 24)
    finally:
        broker.stop()
    records = [json.loads(line) for line in broker.log().splitlines() if line.strip()]
    assert records and all({"time", "level", "namespace", "message"} <= set(r)
                           for r in records)
    errors = [r for r in records if r.get("eid") == eid]
    assert len(errors) == 1 and errors[0]["level"] == "warn"
    assert eid in errors[0]["message"] and errors[0]["namespace"] == "mqksbridge.mqks"
