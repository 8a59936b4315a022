"""Logins and identities for every door (docs/security.md).

`Security` holds the users file (bridge.security.users) and answers the doors' three
questions: who is this (a password login, a TLS client certificate, a listener's
configured user, or anonymous), may this user open one more connection, and what was
refused (counted per door and reason for the admin API and /metrics). Without a users
file (`security.users` empty) it is disabled: every client acts without a principal and
may do everything, as the broker always did (for trusted networks only).

Without a users file only loopback peers (and Unix sockets) are served unless
`security.allow_remote_anonymous` says otherwise, as Redis' protected mode and RabbitMQ's
loopback-only `guest` do: `peer_filter` gives each door the test its listeners refuse
others with, in the door's own terms.

A password check costs a scrypt (tens of milliseconds of CPU), so it runs in a worker
thread, at most `CONCURRENT` at once and `MAX_PENDING` waiting (more fail at once, so a
flood of logins cannot queue without bound). A password checked good is remembered as
an HMAC under a key made at start (never the password), so a client that reconnects
logs in at the cost of one HMAC.
"""
import hashlib
import hmac
import ipaddress
import os
from collections import Counter

from twisted.internet import defer, threads
from twisted.logger import Logger

from mqksbridge.bridge.security import users as users_file
from mqksbridge.core.cache import bounded

log = Logger(namespace="mqksbridge.security")
CONCURRENT = 2
MAX_PENDING = 64
REMEMBERED = 4096


class LoginFailed(Exception):
    """A login that did not succeed; `reason` is for the log, never for the client."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class Security:
    def __init__(self, users=None, run=None, counters=None, allow_remote=False):
        self.users = users
        self.enabled = users is not None
        self.allow_remote = allow_remote     # security.allow_remote_anonymous
        self.counters = counters if counters is not None else Counter()
        self.connections = Counter()         # user -> live connections
        self._key = os.urandom(32)
        self._good, self._remember_good = bounded(REMEMBERED)   # HMAC of (user, password)
        self._pending = 0
        self._limit = defer.DeferredSemaphore(CONCURRENT)
        self._run = run or (lambda f, *args: threads.deferToThread(f, *args))

    # -- who is this -------------------------------------------------------------------------
    def login(self, user, password):
        """A Deferred firing with the user's Principal, or failing with LoginFailed. A
        login checked before fires at once."""
        if not self.enabled:
            return defer.fail(LoginFailed("no users are configured"))
        principal = self.users.principal(user)
        if principal is None or not self.users.users[user].password:
            return self._slow_no(user, password)
        mark = self._mark(user, password)
        if mark in self._good:
            return defer.succeed(principal)
        if self._pending >= MAX_PENDING:
            return defer.fail(LoginFailed("too many logins waiting"))
        self._pending += 1
        d = self._limit.run(self._run, self.users.check, user, password)

        def checked(good):
            if not good:
                raise LoginFailed(f"wrong password for {user!r}")
            self._remember_good(mark, True)
            return principal
        d.addBoth(self._done).addCallback(checked)
        return d

    def _slow_no(self, user, password):
        """An unknown user costs what a wrong password costs (no timing oracle)."""
        if self._pending >= MAX_PENDING:
            return defer.fail(LoginFailed("too many logins waiting"))
        self._pending += 1
        d = self._limit.run(self._run, self.users.check, user, password)

        def refuse(_):
            raise LoginFailed(f"unknown user {user!r}")
        d.addBoth(self._done).addCallback(refuse)
        return d

    def _done(self, result):
        self._pending -= 1
        return result

    def _mark(self, user, password):
        data = user.encode("utf-8", "surrogateescape") + b"\0" + \
            password.encode("utf-8", "surrogateescape")
        return hmac.new(self._key, data, hashlib.sha256).digest()

    def user(self, name):
        """The Principal of a configured user by name (listener identities, the TextQueue
        door); None when there is no such user or no users file."""
        return self.users.principal(name) if self.enabled else None

    def anonymous(self):
        """What a client without credentials acts as: None without a users file (no
        checks at all) and when anonymous clients are refused (`refused_anonymous`)."""
        return self.users.anonymous_principal() if self.enabled else None

    def certificate(self, transport):
        """The Principal a TLS client certificate maps to (users' `certificates`), or None."""
        if not self.enabled:
            return None
        name = self.users.certificate_user(peer_identities(transport))
        return None if name is None else self.users.principal(name)

    # -- limits and counts ----------------------------------------------------------------------
    def admit(self, principal):
        """Count one more connection of this principal's user; False (nothing counted) when
        its `max_connections` are open already."""
        if principal is None:
            return True
        limit = principal.limits.get("max_connections") or 0
        if limit and self.connections[principal.user] >= limit:
            return False
        self.connections[principal.user] += 1
        return True

    def release(self, principal):
        if principal is not None and self.connections[principal.user] > 0:
            self.connections[principal.user] -= 1
            if not self.connections[principal.user]:
                del self.connections[principal.user]

    def refused(self, door, reason, who="", detail=""):
        """Count (and log) a refusal: `reason` one of login, anonymous, denied, limit,
        taken."""
        self.counters[f"security.{door}.{reason}"] += 1
        log.info("{door}: refused ({reason}) {who}: {detail}", door=door, reason=reason,
                 who=who, detail=detail)


    def peer_filter(self, door):
        """None when every peer may connect (a users file, or allow_remote_anonymous);
        else `refuses(address)`: True for a peer that is not on loopback, counted as
        `security.DOOR.remote` and logged (the 1st, 1024th, ... refusal of the door) with
        the key that would let it in."""
        if self.enabled or self.allow_remote:
            return None
        key = f"security.{door}.remote"

        def refuses(address):
            if is_local(address):
                return False
            self.counters[key] += 1
            count = self.counters[key]
            if count == 1 or not count & 1023:
                log.warn("{door}: refused {peer} ({count} so far): without a users file only "
                         "loopback peers are served; set security.allow_remote_anonymous = "
                         "true to serve other hosts without credentials, or security.users",
                         door=door, peer=getattr(address, "host", address), count=count)
            return True
        return refuses


def is_local(address):
    """Whether a peer address is this host's own: loopback IPv4/IPv6 (also IPv4-mapped),
    or not an IP address at all (a Unix socket)."""
    host = getattr(address, "host", None)
    if host is None:
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def peer_identities(transport):
    """`CN=...` and `DNS:`/`email:`/`URI:`/`IP:` names of a TLS peer's certificate."""
    get = getattr(transport, "getPeerCertificate", None)
    cert = get() if get is not None else None
    if cert is None:
        return []
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    cert = cert.to_cryptography()
    found = [f"CN={a.value}" for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return found
    for kind, prefix in ((x509.DNSName, "DNS:"), (x509.RFC822Name, "email:"),
                         (x509.UniformResourceIdentifier, "URI:"), (x509.IPAddress, "IP:")):
        found += [prefix + str(value) for value in names.get_values_for_type(kind)]
    return found


def build(config, counters=None):
    """The broker's Security from `[security]` (UsersError when the users file is bad)."""
    settings = config["security"]
    remote = settings["allow_remote_anonymous"]
    if not settings["users"]:
        return Security(None, counters=counters, allow_remote=remote)
    defaults = {key: settings[key] for key in users_file.LIMITS}
    return Security(users_file.load(settings["users"], defaults), counters=counters,
                    allow_remote=remote)
