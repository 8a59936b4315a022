"""`mqksbridge user add NAME` and `mqksbridge user passwd NAME`: the users file
(docs/security.md).

The password is asked for (twice, not echoed) or read from the first line of stdin with
`--password-stdin`; only its salted scrypt hash is written. `add` appends the new entry
as a TOML table, so the rest of the file (and its comments) stays as it was; `passwd`
replaces the one `password` line of the user's table, through a temporary file renamed
over the old one. Either way the file is read back and checked before the command
succeeds. Everything that can be checked without the password (the name, the rules, the
file and its directory) is checked before the password is asked for.
"""
import getpass
import os
import tomllib

from mqksbridge.bridge.security.users import UsersError, hash_password, load
from mqksbridge.core.permissions import RuleError, parse_rule


def add_arguments(p):
    p.add_argument("action", choices=["add", "passwd"],
                   help="add: a new user; passwd: change a user's password")
    p.add_argument("name", help="the user name (no ':')")
    p.add_argument("--file", required=True, help="the users file (security.users); add "
                                                 "creates it if missing (not its directory)")
    p.add_argument("--password-stdin", action="store_true",
                   help="read the password from the first line of stdin")
    for verb in ("publish", "consume", "manage"):
        p.add_argument(f"--{verb}", action="append", default=[], metavar="RULE",
                       help=f"add: a {verb} rule (queue:GLOB, stream:GLOB[:SUBJECTS], "
                            "mailbox:GLOB, broker, *); repeatable")


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
    existing = _read(args.file, must_exist=args.action == "passwd")
    users = _parse(args.file, existing).get("users", {})
    if args.action == "add":
        if name in users:
            raise ValueError(f"user {name!r} is already in {args.file}: change its password "
                             f"with `mqksbridge user passwd {name} --file {args.file}`")
        password = _password(args, stdin)
        _write(args.file, _append, existing, _entry(name, hash_password(password), args))
        done = f"added user {name!r} to {args.file}"
    else:
        if args.publish or args.consume or args.manage:
            raise ValueError("passwd changes the password only: edit the rules in "
                             f"{args.file}")
        if name not in users:
            raise ValueError(f"no user {name!r} in {args.file}: add it with "
                             f"`mqksbridge user add {name} --file {args.file}`")
        text = _with_password(existing.decode("utf-8"), name, args.file,
                              hash_password(_password(args, stdin)))
        _write(args.file, _replace, text.encode("utf-8"))
        done = f"changed the password of {name!r} in {args.file}"
    try:
        load(args.file)
    except UsersError as exc:            # (what was there before was broken already)
        raise ValueError(str(exc)) from None
    out.write(f"{done}\n".encode())


def _read(path, must_exist):
    """The file's bytes (b"" when `add` creates it); a missing file or directory is named
    with what to do, before any password is asked for."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(f"no directory {directory} for the users file {path}: create it "
                         f"first (mkdir -p {directory})")
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        if must_exist:
            raise ValueError(f"no users file {path}: `mqksbridge user add NAME --file "
                             f"{path}` makes one") from None
    except OSError as exc:
        raise ValueError(f"cannot read the users file {path}: {exc.strerror}") from None
    if not os.access(directory, os.W_OK):
        raise ValueError(f"cannot create the users file {path}: {directory} is not "
                         "writable by you")
    return b""


def _parse(path, data):
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"users file {path}: {exc}") from None


def _password(args, stdin):
    if args.password_stdin:
        password = stdin.readline().decode().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if password != getpass.getpass("again: "):
            raise ValueError("the passwords differ")
    if not password:
        raise ValueError("an empty password")
    return password


def _entry(name, stored, args):
    lines = [f"[users.{_toml_string(name)}]", f"password = {_toml_string(stored)}"]
    for verb in ("publish", "consume", "manage"):
        lines.append(f"{verb} = [{', '.join(map(_toml_string, getattr(args, verb)))}]")
    return "\n".join(lines) + "\n"


def _write(path, how, *data):
    """`how(path, *data)`; a file system refusal names the file (it is no connection)."""
    try:
        how(path, *data)
    except OSError as exc:
        raise ValueError(f"cannot write the users file {path}: {exc.strerror or exc}") from None


def _append(path, existing, entry):
    entry = ("\n" if existing and not existing.endswith(b"\n\n") else "") + entry
    with open(path, "a", encoding="utf-8") as f:
        f.write(entry)
        f.flush()
        os.fsync(f.fileno())


def _with_password(text, name, path, stored):
    """`text` with the user's `password` line replaced (or added under its table header).
    Table headers are recognised by parsing each `[...]` line, so any quoting works."""
    lines = text.splitlines(keepends=True)
    header = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("[") and not stripped.startswith("[["):
            header = i if _names_user(stripped, name) else None
            continue
        if header is not None and stripped.split("=", 1)[0].strip() == "password":
            lines[i] = f"password = {_toml_string(stored)}\n"
            return "".join(lines)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("[") and _names_user(stripped, name):
            lines.insert(i + 1, f"password = {_toml_string(stored)}\n")
            return "".join(lines)
    raise ValueError(f"user {name!r} in {path} is not a [users.{name}] table: set its "
                     "password by hand (`mqksbridge user add` shows the form)")


def _names_user(header, name):
    try:
        table = tomllib.loads(header.split("#", 1)[0])
    except tomllib.TOMLDecodeError:
        return False
    return list(table) == ["users"] and list(table["users"]) == [name]


def _replace(path, data):
    """Write `data` to a temporary file beside `path`, fsync it, rename it over `path`
    (keeping its mode) and fsync the directory: the file is the old one or the new one."""
    directory = os.path.dirname(os.path.abspath(path))
    temporary = os.path.join(directory, f".{os.path.basename(path)}.tmp")
    mode = os.stat(path).st_mode & 0o7777
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
