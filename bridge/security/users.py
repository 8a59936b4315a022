"""The users file: who may log in, with which password or certificate, and what each may do.

A TOML file (its path is `security.users`), one table per user:

    [users.app]
    password = "scrypt$16384$8$1$<salt>$<hash>"   # written by `mqksbridge user add app`
    publish = ["queue:jobs", "stream:mqks:orders.*"]
    consume = ["queue:results.app", "mailbox:app"]
    manage = []
    certificates = ["CN=app.example.com"]         # TLS client certificates that are `app`
    max_connections = 20                          # optional: the [security] defaults else

    [anonymous]                                   # optional: clients that show no credentials
    consume = ["stream:public"]

Passwords are stored as salted scrypt hashes (hashlib.scrypt; `$`-separated: the word
`scrypt`, N, r, p, then the 16-byte salt and the 32-byte hash in base64), never in clear.
Rules are core.permissions rules. Without an [anonymous] table a client that shows no
credentials is refused by every door that can refuse it at connect time.
"""
import base64
import hashlib
import hmac
import os
import tomllib

from mqksbridge.core.permissions import Principal, RuleError, Rules, VERBS

SCRYPT = {"n": 1 << 14, "r": 8, "p": 1}     # about 16 MiB and 20-60 ms per check
SALT, KEY = 16, 32
LIMITS = ("max_connections", "max_message_size", "max_consumers", "max_unacked")
USER_KEYS = {"password", "certificates", *VERBS, *LIMITS}
ANONYMOUS = "anonymous"


class UsersError(ValueError):
    """The users file cannot be used (start-up refuses it, naming the entry)."""


def hash_password(password, salt=None, n=SCRYPT["n"], r=SCRYPT["r"], p=SCRYPT["p"]):
    """The stored form of a password: `scrypt$N$r$p$SALT$HASH` (base64)."""
    salt = os.urandom(SALT) if salt is None else salt
    key = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=KEY,
                         maxmem=_maxmem(n, r, p))
    return "$".join(("scrypt", str(n), str(r), str(p), base64.b64encode(salt).decode(),
                     base64.b64encode(key).decode()))


def verify_password(stored, password):
    """Whether `password` is the one `stored` was made from (constant-time compare). It
    costs the scrypt of the stored parameters: call it off the reactor thread."""
    try:
        scheme, n, r, p, salt, key = stored.split("$")
        n, r, p = int(n), int(r), int(p)
        salt, key = base64.b64decode(salt, validate=True), base64.b64decode(key, validate=True)
    except (ValueError, AttributeError):
        return False
    if scheme != "scrypt":
        return False
    made = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p,
                          dklen=len(key), maxmem=_maxmem(n, r, p))
    return hmac.compare_digest(made, key)


def _maxmem(n, r, p):
    return 128 * r * (n + p + 2) + (1 << 20)


def _check_hash(name, stored):
    parts = stored.split("$") if isinstance(stored, str) else []
    if len(parts) != 6 or parts[0] != "scrypt" or not all(x.isdigit() for x in parts[1:4]):
        raise UsersError(f"user {name!r}: password must be a scrypt$N$r$p$salt$hash string "
                         "(`mqksbridge user passwd` writes one)")
    n, r, p = map(int, parts[1:4])
    if n < 2 or n & (n - 1) or not 1 <= r <= 64 or not 1 <= p <= 16 or n > 1 << 20:
        raise UsersError(f"user {name!r}: scrypt parameters out of range")


class User:
    """One entry of the users file."""

    __slots__ = ("name", "password", "rules", "certificates", "limits")

    def __init__(self, name, password, rules, certificates, limits):
        self.name, self.password, self.rules = name, password, rules
        self.certificates, self.limits = certificates, limits


class Users:
    """The users file, read once at start (rules do not change while the broker runs)."""

    def __init__(self, users, anonymous=None, defaults=None, path=None):
        self.users = users               # name -> User
        self.anonymous = anonymous       # Rules for clients without credentials, or None
        self.defaults = dict(defaults or {})
        self.path = path
        self.by_certificate = {}
        for user in users.values():
            for identity in user.certificates:
                self.by_certificate[identity] = user.name
        self._principals = {}

    def principal(self, name):
        """The Principal of a user (one per user, so its memo is shared); None if unknown."""
        found = self._principals.get(name)
        if found is None:
            user = self.users.get(name)
            if user is None:
                return None
            limits = {**self.defaults, **user.limits}
            found = self._principals[name] = Principal(name, user.rules, limits)
        return found

    def anonymous_principal(self):
        """What a client without credentials acts as, or None when it is refused."""
        if self.anonymous is None:
            return None
        found = self._principals.get(None)
        if found is None:
            found = self._principals[None] = Principal(ANONYMOUS, self.anonymous,
                                                        dict(self.defaults), anonymous=True)
        return found

    def check(self, name, password):
        """Whether the password is the user's (slow: scrypt; off the reactor thread)."""
        user = self.users.get(name)
        if user is None or not user.password:
            verify_password(_DUMMY, password)        # the same time for unknown users
            return False
        return verify_password(user.password, password)

    def certificate_user(self, identities):
        """The user a client certificate names (its `CN=...`, `DNS:...` identities), or None."""
        for identity in identities:
            name = self.by_certificate.get(identity)
            if name is not None:
                return name
        return None


_DUMMY = "scrypt$16384$8$1$" + base64.b64encode(b"\0" * SALT).decode() + "$" + \
    base64.b64encode(b"\0" * KEY).decode()


def _rules(where, table):
    try:
        return Rules(**{verb: _strings(where, verb, table.get(verb, [])) for verb in VERBS})
    except RuleError as exc:
        raise UsersError(f"{where}: {exc}") from None


def _strings(where, key, value):
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsersError(f"{where}: {key} must be a list of strings")
    return value


def _limits(where, table):
    limits = {}
    for key in LIMITS:
        if key in table:
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UsersError(f"{where}: {key} must be an integer >= 0 (0: no limit)")
            limits[key] = value
    return limits


def parse(data, defaults=None, path=None):
    """Users from the users file's parsed TOML; UsersError naming the entry at fault."""
    unknown = set(data) - {"users", ANONYMOUS}
    if unknown:
        raise UsersError(f"unknown table(s) in the users file: {', '.join(sorted(unknown))}")
    users = {}
    for name, table in (data.get("users") or {}).items():
        where = f"user {name!r}"
        if not isinstance(table, dict):
            raise UsersError(f"{where} must be a table")
        if name == ANONYMOUS or not name or ":" in name:
            raise UsersError(f"{where}: not a usable user name (empty, `anonymous` or with ':')")
        extra = set(table) - USER_KEYS
        if extra:
            raise UsersError(f"{where}: unknown key(s) {', '.join(sorted(extra))}")
        password = table.get("password", "")
        if password:
            _check_hash(name, password)
        certificates = _strings(where, "certificates", table.get("certificates", []))
        users[name] = User(name, password, _rules(where, table), certificates,
                           _limits(where, table))
    anonymous = None
    if ANONYMOUS in data:
        table = data[ANONYMOUS]
        extra = set(table) - set(VERBS) - set(LIMITS)
        if extra:
            raise UsersError(f"[anonymous]: unknown key(s) {', '.join(sorted(extra))}")
        anonymous = _rules("[anonymous]", table)
    return Users(users, anonymous, defaults, path)


def load(path, defaults=None):
    """The users file at `path`; UsersError when it cannot be read or used."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise UsersError(f"users file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsersError(f"users file {path}: {exc}") from None
    try:
        return parse(data, defaults, path)
    except UsersError as exc:
        raise UsersError(f"users file {path}: {exc}") from None
