"""`mqksbridge user add NAME`: add a user to the users file (docs/security.md).

The password is asked for (twice, not echoed) or read from the first line of stdin with
`--password-stdin`; only its salted scrypt hash is written. The new entry is appended as
a TOML table, so the rest of the file (and its comments) stays as it was; the file is
read back and checked before the command succeeds.
"""
import getpass
import os
import tomllib

from mqksbridge.bridge.security.users import UsersError, hash_password, load
from mqksbridge.core.permissions import RuleError, parse_rule


def add_arguments(p):
    p.add_argument("action", choices=["add"], help="add: a new user")
    p.add_argument("name", help="the user name (no ':')")
    p.add_argument("--file", required=True, help="the users file (security.users); created "
                                                 "if missing")
    p.add_argument("--password-stdin", action="store_true",
                   help="read the password from the first line of stdin")
    for verb in ("publish", "consume", "manage"):
        p.add_argument(f"--{verb}", action="append", default=[], metavar="RULE",
                       help=f"a {verb} rule (queue:GLOB, stream:GLOB[:SUBJECTS], mailbox:GLOB, "
                            "broker, *); repeatable")


def _toml_string(value):
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def run(args, out, stdin):
    name = args.name
    if not name or ":" in name or name == "anonymous" or any(c in name for c in "\"\\\n"):
        raise ValueError(f"not a usable user name: {name!r}")
    for rule in args.publish + args.consume + args.manage:
        try:
            parse_rule(rule)
        except RuleError as exc:
            raise ValueError(str(exc)) from None
    existing = b""
    if os.path.exists(args.file):
        with open(args.file, "rb") as f:
            existing = f.read()
        if name in tomllib.loads(existing.decode()).get("users", {}):
            raise ValueError(f"user {name!r} is already in {args.file}")
    if args.password_stdin:
        password = stdin.readline().decode().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {name}: ")
        if password != getpass.getpass("again: "):
            raise ValueError("the passwords differ")
    if not password:
        raise ValueError("an empty password")
    lines = [f"[users.{_toml_string(name)}]", f"password = {_toml_string(hash_password(password))}"]
    for verb in ("publish", "consume", "manage"):
        lines.append(f"{verb} = [{', '.join(map(_toml_string, getattr(args, verb)))}]")
    entry = ("\n" if existing and not existing.endswith(b"\n\n") else "") + "\n".join(lines) + "\n"
    with open(args.file, "a", encoding="utf-8") as f:
        f.write(entry)
        f.flush()
        os.fsync(f.fileno())
    try:
        load(args.file)
    except UsersError as exc:            # (what was there before was broken already)
        raise ValueError(str(exc)) from None
    out.write(f"added user {name!r} to {args.file}\n".encode())
