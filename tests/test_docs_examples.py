"""The examples of README.md and docs/*.md, run from the pages themselves.

The convention: each fenced block carries one HTML comment on the line right before its
opening fence, saying what the block is and how it is checked.

  <!-- example: GROUP [broker] -->   a ```sh (or ```python) block, run as written. The
                                     blocks of one GROUP in one page run in page order as
                                     one bash script (python blocks as `python - <<EOF`).
                                     `broker` on any of them: a `twistd -n mqksbridge` with
                                     every door runs while the group does.
  <!-- example: GROUP output -->     a plain block the group's standard output must show:
                                     its non-blank lines, in order, white space runs alike,
                                     `...` standing for any text.
  <!-- example: config -->           a ```toml block `twistd mqksbridge --check-config
                                     --config FILE` accepts (exit 0).
  <!-- example: users-file -->       a ```toml block the users-file loader accepts.
  <!-- not run: REASON -->           anything else (a synopsis, an output, a record, what
                                     needs Spark or files a test cannot have), with why.
  <!-- shell example, run as written by tests/PATH -->
                                     a block another test runs (that file must exist).

A block without such a comment fails `test_every_block_says_how_it_is_checked`, so a new
example is either run or excused in words.

How a group runs: in a fresh directory where `.venv` is a link to the virtualenv running
the tests, with its `bin` first on PATH (so `.venv/bin/mqksbridge` and `mqksbridge` both
work), under `bash -e -o pipefail`: every command must exit 0 unless its line ends with the
comment `# exit N` (then it must exit N). Commands put in the background (`&`) must have
ended when the group ends: exit 0, killed by the example itself (143), or waited for by
the example (which then checked its status).

Ports: the docs show the default ports (MQKS 25000, Malamute 9999, Twino 22200, admin
15680), which other brokers on this machine may hold. Each group gets free loopback ports
instead: the script's `:25000`, `:9999`, `:22200` and `:15680` become them, the host name
`broker` (the docs' name for "your broker") becomes 127.0.0.1, `$MQKSBRIDGE_ADMIN_URL`
points the admin commands at the group's admin port (their default is the default port),
and a `twistd ... mqksbridge` the example starts itself gets a loopback listener on the
group's port for each door its line does not name. Nothing else of the text changes.
"""
import glob
import os
import re
import subprocess
import sys

import pytest

from mqksbridge.bridge.security.users import load as load_users
from tests.support.process import TWISTD, BrokerProcess, door_args, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", *sorted(os.path.relpath(p, ROOT)
                              for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))]
DEFAULT_PORTS = {"mqks": 25000, "malamute": 9999, "twino": 22200, "admin": 15680}
MARKER = re.compile(r"^<!--\s*(example:\s*(?P<spec>.*?)|not run:\s*(?P<reason>.+?)|"
                    r"shell example, run as written by (?P<test>\S+))\s*-->\s*$")
EXIT = re.compile(r"\s#\s*exit\s+(\d+)\b.*$")
BACKGROUND = re.compile(r"(?<!&)&\s*(#.*)?$")
GROUP_SECONDS = 300      # generous: a group takes 5-20 s, the pipeline one (two Spark jobs) about 60 s quiet


class Block:
    def __init__(self, page, line, language, text, marker):
        self.page, self.line, self.language, self.text = page, line, language, text
        self.marker = marker

    def __repr__(self):
        return f"{self.page}:{self.line}"


def blocks(page):
    """Every fenced block of a page, with the marker line before it (None if absent)."""
    lines = open(os.path.join(ROOT, page), encoding="utf-8").read().split("\n")
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start, language = i, lines[i][3:].strip()
            i += 1
            while i < len(lines) and lines[i].rstrip() != "```":
                i += 1
            marker = MARKER.match(lines[start - 1]) if start else None
            found.append(Block(page, start + 1, language, "\n".join(lines[start + 1:i]) + "\n",
                               marker))
        i += 1
    return found


ALL = [block for page in PAGES for block in blocks(page)]


def kind(block):
    """('group', name, options) | ('config',) | ('users-file',) | ('not run',) | ('test',)
    | ('unmarked',)."""
    m = block.marker
    if m is None:
        return ("unmarked",)
    if m.group("reason"):
        return ("not run",)
    if m.group("test"):
        return ("test",)
    name, *options = m.group("spec").split()
    if name in ("config", "users-file"):
        return (name,)
    return ("group", name, options)


def test_every_block_says_how_it_is_checked():
    assert len(PAGES) > 5 and len(ALL) > 20
    unmarked = [b for b in ALL if b.marker is None]
    assert not unmarked, ("fenced blocks without an example/not-run comment (see this "
                          f"test's docstring): {unmarked}")
    for block in ALL:
        what = kind(block)
        if what[0] == "test":
            assert os.path.exists(os.path.join(ROOT, block.marker.group("test"))), block
        elif what[0] in ("config", "users-file"):
            assert block.language == "toml", block
        elif what[0] == "group":
            assert block.language in ("sh", "python") or what[2] == ["output"], block
            assert set(what[2]) <= {"broker", "output"}, block


def groups():
    found = {}
    for block in ALL:
        what = kind(block)
        if what[0] == "group":
            found.setdefault(f"{block.page}:{what[1]}", []).append((block, what[2]))
    return found


def toml_blocks(name):
    return [b for b in ALL if kind(b) == (name,)]


@pytest.mark.parametrize("block", toml_blocks("config"), ids=repr)
def test_configuration_example_is_accepted(block, tmp_path):
    (tmp_path / "example.toml").write_text(block.text)
    done = subprocess.run([TWISTD, "-n", "--pidfile=", "mqksbridge", "--check-config",
                           "--config", "example.toml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("block", toml_blocks("users-file"), ids=repr)
def test_users_file_example_loads(block, tmp_path):
    (tmp_path / "users.toml").write_text(block.text)
    assert load_users(str(tmp_path / "users.toml")) is not None


# -- running a group ------------------------------------------------------------------------

def logical_lines(text):
    """Lines with their backslash continuations joined (as bash reads them)."""
    joined, pending = [], ""
    for line in text.split("\n"):
        if line.endswith("\\"):
            pending += line + "\n"
            continue
        joined.append(pending + line)
        pending = ""
    return joined


def with_exit_checks(text):
    """`CMD  # exit N` becomes: run CMD, then fail unless it exited N."""
    out = []
    for line in logical_lines(text):
        m = EXIT.search(line)
        if m and not line.lstrip().startswith("#"):
            command, code = line[:m.start()], m.group(1)
            out.append(f"__rc=0; {command} || __rc=$?; [ \"$__rc\" = {code} ] || {{ echo "
                       f"\"docs example: exit $__rc, not {code}: \"{quote(command)} >&2; "
                       "exit 99; }")
        else:
            out.append(line)
            if BACKGROUND.search(line) and not line.lstrip().startswith("#"):
                out.append("__background+=($!)")     # checked when the group ends
    return "\n".join(out)


def quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def on_ports(text, ports):
    """The defaults replaced by the group's ports; a broker the example starts gets a
    listener on the group's port for each door its line does not name."""
    for door, port in DEFAULT_PORTS.items():
        text = re.sub(rf":{port}\b", f":{ports[door]}", text)
    text = text.replace("//broker:", "//127.0.0.1:")
    lines = []
    for line in text.split("\n"):
        if re.search(r"\btwistd\b.*\smqksbridge\b", line):
            flags = [arg for door in DEFAULT_PORTS if f"--{door}" not in line
                     for arg in door_args(door, ports[door])]
            line = re.sub(r"(\smqksbridge)\b", lambda m: m.group(1) + " " + " ".join(flags),
                          line, count=1)
        lines.append(line)
    return "\n".join(lines)


def script(members, ports):
    parts = ["set -eo pipefail", "__background=()",
             "trap 'echo \"docs example: line $LINENO failed: $BASH_COMMAND\" >&2' ERR",
             "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
    for block, options in members:
        if "output" in options:
            continue
        parts.append(f"# {block!r}")
        if block.language == "python":
            parts.append(f"python - <<'__DOCS_PYTHON__'\n{block.text}__DOCS_PYTHON__")
        else:
            parts.append(with_exit_checks(on_ports(block.text, ports)))
    # Every background command's status, even of one that ended long ago (bash keeps
    # it for a $! pid); 127: the example waited for it itself (and checked it, under -e).
    parts.append('for __job in "${__background[@]}"; do __rc=0; wait "$__job" 2>/dev/null '
                 '|| __rc=$?; case $__rc in 0|127|143) ;; *) echo "docs example: a background '
                 'command exited $__rc" >&2; exit 98;; esac; done')
    return "\n".join(parts) + "\n"


def shows(expected, output):
    """Whether `output` has each non-blank line of `expected`, in order (white space runs
    alike, `...` any text)."""
    lines = iter(output.split("\n"))
    for want in filter(str.strip, expected.split("\n")):
        pattern = re.compile(r"\s+".join(
            ".*".join(map(re.escape, word.split("..."))) for word in want.split()) + r"\s*$")
        if not any(pattern.match(line.strip()) for line in lines):
            return False
    return True


@pytest.mark.parametrize("name", sorted(groups()))
def test_example_group_works_as_written(name, tmp_path):
    members = groups()[name]
    broker = None
    if any("broker" in options for _, options in members):
        broker = BrokerProcess(tmp_path / "broker", doors=tuple(DEFAULT_PORTS))
        (tmp_path / "broker").mkdir()
        broker.start()
        ports = broker.ports
    else:
        ports = {door: free_port() for door in DEFAULT_PORTS}
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(sys.prefix, work / ".venv")
    env = {**os.environ, "PATH": os.path.join(sys.prefix, "bin") + os.pathsep
           + os.environ.get("PATH", ""),
           "MQKSBRIDGE_ADMIN_URL": f"http://127.0.0.1:{ports['admin']}"}
    text = script(members, ports)
    process = subprocess.Popen(["bash", "-c", text], cwd=work, env=env, text=True,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = process.communicate(timeout=GROUP_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        out, err = process.communicate()
        pytest.fail(f"{name} still running after {GROUP_SECONDS}s:\n{text}\n{out}\n{err}")
    finally:
        if broker is not None:
            broker.stop()
    assert process.returncode == 0, f"{name}:\n{text}\n--- stdout\n{out}\n--- stderr\n{err}"
    for block, options in members:
        if "output" in options:
            assert shows(block.text, out), f"{block!r} is not what {name} printed:\n{out}"


@pytest.mark.parametrize("text, code", [
    ("true\n", 0), ("false\n", 1), ("false  # exit 1\n", 0), ("true  # exit 2\n", 99),
    ("(exit 3) &\n", 98), ("(exit 3) &  # quick\nsleep 1\n", 98),
    ("sleep 30 &\nkill %1\n", 0), ("sleep 1 &\nwait %1\n", 0), ("false | true\n", 1),
    ("true && true\n", 0),
])
def test_the_harness_checks_exit_statuses(text, code, tmp_path):
    """What a group's script makes of exit statuses, foreground and background."""
    members = [(Block("page.md", 1, "sh", text, None), [])]
    done = subprocess.run(["bash", "-c", script(members, DEFAULT_PORTS)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == code, done.stderr


def test_the_harness_matches_shown_output():
    assert shows("name  depth\njobs  ...  0\n", "x\nname   depth\njobs  round-robin  0\n")
    assert not shows("jobs 1\n", "jobs 0\n")
    assert not shows("b\na\n", "a\nb\n")
