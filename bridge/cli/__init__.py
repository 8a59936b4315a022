"""`mqksbridge`: the command-line client (docs/cli.md).

    mqksbridge publish URL --event E | --queue Q | --mailbox A [BODY...]   (stdin without BODY)
    mqksbridge consume URL QUEUE [--ack] [--count N] [--json]
    mqksbridge tail URL STREAM [PATTERN]
    mqksbridge stats | queues | connections | purge QUEUE | cluster status   [--admin URL]
    mqksbridge user add|passwd NAME --file USERS.toml

Subcommands are registered in COMMANDS (name -> (add_arguments, run)), so new ones (e.g.
`user add`) are one entry. Exit codes, for scripts: 0 done, 1 the broker said no,
2 usage, 3 cannot connect or the connection dropped, 4 timed out.
"""
import argparse
import getpass
import os
import signal
import sys

from mqksbridge.bridge.cli import admin, doors, users
from mqksbridge.bridge.clients.failover import describe

OK, REFUSED, USAGE, CONNECTION, TIMEOUT = 0, 1, 2, 3, 4


class TimedOut(Exception):
    pass


# -- door commands ---------------------------------------------------------------------------

def add_publish(p):
    p.add_argument("url", help="door URL: mqks://HOST:PORT, malamute://tcp://HOST:PORT, "
                               "twino://HOST:PORT; several gateways separated by commas "
                               "(failover)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--event", help="publish to this event (subject) of a stream")
    target.add_argument("--queue", help="publish into this queue (Malamute, Twino)")
    target.add_argument("--mailbox", help="send to this client address (Malamute, Twino)")
    p.add_argument("--stream", help="stream for --event (Malamute, Twino; default mqks)")
    p.add_argument("--subject", help="subject for --queue / --mailbox")
    p.add_argument("--lines", action="store_true",
                   help="read stdin as one message per line (default: all of it is one)")
    p.add_argument("body", nargs="*", help="message bodies (none: read stdin)")


def bodies_from(args, stdin):
    if args.body:
        return [b.encode("utf-8", "surrogateescape") for b in args.body]
    data = stdin.read()
    if args.lines:
        return [line for line in data.split(b"\n") if line]
    return [data[:-1] if data.endswith(b"\n") else data]


def add_door_options(p):
    p.add_argument("--user", help="log in as this user of the broker's users file "
                                  "(Malamute PLAIN, Twino Client-Token, MQKS auth line); the "
                                  "password from $MQKSBRIDGE_PASSWORD, else asked for")


def run_publish(args, out, stdin):
    kind = "event" if args.event else "queue" if args.queue else "mailbox"
    name = args.event or args.queue or args.mailbox
    target = (kind, name, args.stream)
    door = open_door(args)
    door.check_publish(target)
    bodies = bodies_from(args, stdin)
    with_door(args, door, lambda door: door.publish(target, bodies, args.subject))
    if not args.quiet:
        print(f"published {len(bodies)} message{'s' if len(bodies) != 1 else ''}",
              file=sys.stderr)


def add_consume(p):
    p.add_argument("url", help="door URL")
    p.add_argument("queue", help="queue to consume (Twino: CHANNEL or CHANNEL/ID)")
    p.add_argument("--event", action="append", default=[],
                   help="MQKS: bind the queue to this event (repeatable)")
    add_reading(p)
    p.add_argument("--ack", action="store_true",
                   help="acknowledge each message after it is printed (MQKS --manual-ack, "
                        "Twino acks; Malamute has none)")


def add_reading(p):
    p.add_argument("--count", type=int, help="exit 0 after this many messages")
    p.add_argument("--json", action="store_true", help="one JSON object per message")


def run_consume(args, out, stdin):
    door = open_door(args)
    door.check_consume(args.queue, args.event)
    with_door(args, door, lambda door: print_messages(
        door, door.consume(args.queue, args.event, args.ack), args, out))


def add_tail(p):
    p.add_argument("url", help="door URL")
    p.add_argument("stream", help="stream to follow (MQKS: its door's stream, e.g. mqks)")
    p.add_argument("pattern", nargs="?", default="",
                   help="subjects to show: a zrex pattern (Malamute, Twino), "
                        "an exact event (MQKS, required)")
    add_reading(p)


def run_tail(args, out, stdin):
    door = open_door(args)
    door.check_tail(args.stream, args.pattern)
    with_door(args, door, lambda door: print_messages(
        door, door.tail(args.stream, args.pattern), args, out))


def print_messages(door, messages, args, out):
    count = 0
    if args.count is not None and args.count <= 0:
        return
    for received, settle in messages:
        if args.json:
            out.write((received.as_json(door.name) + "\n").encode())
        else:
            out.write(received.body + b"\n")
        out.flush()
        if settle is not None:
            settle()
        count += 1
        if args.count is not None and count >= args.count:
            return


def open_door(args):
    """The door of args.url, checked before anything connects (a usage error is one
    whether or not a broker runs)."""
    credentials = None
    if args.user:
        password = os.environ.get("MQKSBRIDGE_PASSWORD")
        if password is None:
            password = getpass.getpass(f"password for {args.user}: ")
        credentials = (args.user, password)
    return doors.open_door(args.url, args.timeout or 10.0, credentials,
                           None if args.quiet else failed_over)


def failed_over(old, new):
    print(f"mqksbridge: lost {describe(old)}; carrying on with {describe(new)}",
          file=sys.stderr)


class Unreachable(ConnectionError):
    """The door (or admin API) could not be reached; the message names where."""


def with_door(args, door, action):
    try:
        try:
            door.connect()
        except TimeoutError:             # ZeroMQ connects lazily: silence is the failure
            raise Unreachable(f"no answer from {door.address} ({args.url}) within "
                              f"{args.timeout or 10.0:g}s: is the broker running, its "
                              f"{door.name} door on that endpoint (a door with logins "
                              "wants --user)?") from None
        except ConnectionRefusedError:
            raise Unreachable(f"{door.address} refused the connection ({args.url}): is the "
                              f"broker running, its {door.name} door on that port?") from None
        except OSError as exc:
            raise Unreachable(f"cannot connect to {door.address} ({args.url}): "
                              f"{exc.strerror or exc}") from None
        try:
            action(door)
        except (ConnectionError, OSError) as exc:
            if isinstance(exc, TimeoutError):
                raise
            raise Unreachable(f"the connection to {door.address} ({args.url}) dropped: "
                              f"{exc}") from None
    finally:
        try:
            door.close()
        except (OSError, TimeoutError):
            pass


# -- the program -----------------------------------------------------------------------------

def admin_command(fn):
    def run(args, out, stdin):
        admin.check_url(args.admin)
        fn(args, sys.stdout)
    return run


COMMANDS = {
    "publish": (add_publish, run_publish, "publish messages through a door"),
    "consume": (add_consume, run_consume, "print messages from a queue through a door"),
    "tail": (add_tail, run_tail, "follow a stream through a door"),
    "stats": (None, admin_command(admin.stats), "broker overview (admin API)"),
    "queues": (None, admin_command(admin.queues), "queues with depth and rates (admin API)"),
    "connections": (None, admin_command(admin.connections), "open connections (admin API)"),
    "purge": (lambda p: p.add_argument("queue"), admin_command(admin.purge),
              "drop every waiting message of a queue (admin API)"),
    "cluster": (lambda p: p.add_argument("action", choices=["status"]),
                admin_command(admin.cluster),
                "a gateway's RabbitMQ cluster: nodes, gateways, queues (admin API)"),
    "user": (users.add_arguments, users.run,
             "add a user to the users file, or change a password (docs/security.md)"),
}
DOOR_COMMANDS = ("publish", "consume", "tail")
ADMIN_COMMANDS = ("stats", "queues", "connections", "purge", "cluster")


def parser():
    """The top-level parser; each command's own parser (command_parser) reads the rest, so
    bodies may follow options (`publish URL --event e body...`)."""
    top = argparse.ArgumentParser(
        prog="mqksbridge", description="Command-line client for mqksbridge. Exit codes: "
        "0 done, 1 refused by the broker, 2 usage, 3 connection failed, 4 timed out.")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, _, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return top


def command_parser(name):
    add, _, help_text = COMMANDS[name]
    p = argparse.ArgumentParser(prog=f"mqksbridge {name}", description=help_text)
    if add is not None:
        add(p)
    p.add_argument("--timeout", type=float,
                   help="give up after this many seconds (exit 4); door commands also use "
                        "it for each answer (default 10)")
    if name in DOOR_COMMANDS:
        add_door_options(p)
    if name in ADMIN_COMMANDS:
        default = os.environ.get("MQKSBRIDGE_ADMIN_URL") or admin.DEFAULT_ADMIN
        p.add_argument("--admin", default=default,
                       help=f"admin API base URL (default $MQKSBRIDGE_ADMIN_URL, else "
                            f"{admin.DEFAULT_ADMIN})")
        p.add_argument("--json", action="store_true", help="print the API's JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return p


def _alarm(signum, frame):
    raise TimedOut()


def parse(argv):
    argv = sys.argv[1:] if argv is None else list(argv)
    command, rest = parser().parse_known_args(argv[:1] or argv)
    args = command_parser(command.command).parse_intermixed_args(argv[1:])
    args.command = command.command
    return args


def main(argv=None, stdin=None):
    args = parse(argv)
    _, run, _ = COMMANDS[args.command]
    if args.timeout is not None and args.timeout > 0:
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, args.timeout)
    stdin = stdin if stdin is not None else sys.stdin.buffer
    try:
        run(args, sys.stdout.buffer, stdin)
        return OK
    except TimedOut:
        return fail(TIMEOUT, f"timed out after {args.timeout}s")
    except TimeoutError as exc:
        return fail(TIMEOUT, f"no answer in time: {exc}")
    except (doors.Usage, admin.Usage, ValueError) as exc:
        return fail(USAGE, str(exc))
    except (doors.Refused, admin.AdminError) as exc:
        return fail(REFUSED, str(exc))
    except Exception as exc:
        refused = _refusal(exc)
        if refused:
            return fail(REFUSED, refused)
        if isinstance(exc, (OSError, ConnectionError)):
            return fail(CONNECTION, f"connection failed: {exc}")
        raise
    except KeyboardInterrupt:
        return 130
    finally:
        if args.timeout is not None and args.timeout > 0:
            signal.setitimer(signal.ITIMER_REAL, 0)


def _refusal(exc):
    """The door clients' own 'the broker said no' errors."""
    from mqksbridge.bridge.clients.malamute import (MalamuteError, MalamuteLoginRefused,
                                                    MalamuteTimeout)
    from mqksbridge.bridge.clients.mqks import MqksError
    from mqksbridge.bridge.clients.twino import TwinoError, TwinoRefused
    if isinstance(exc, MalamuteTimeout):
        return None
    if isinstance(exc, MalamuteLoginRefused):
        return f"login refused: {exc}"
    if isinstance(exc, TwinoRefused) and exc.code == 401:
        return (f"login refused: the Twino door answered 401 (a wrong user or password, or "
                "no --user where the broker wants one)")
    if isinstance(exc, (MqksError, MalamuteError, TwinoError)):
        return f"refused by the broker: {exc}"
    return None


def fail(code, message):
    print(f"mqksbridge: {message}", file=sys.stderr)
    return code
