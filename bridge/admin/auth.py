"""Who is asking the admin endpoint, and may they (docs/admin.md, "Logging in").

Three ways in: the bearer token (`admin.token`: every right), HTTP Basic with a users-file
account (scripts, `curl -u`), and a session cookie the dashboard's login form gets. Only
users with at least one `manage` rule may log in; each action then needs `manage` on what
it touches. The password check is Security.login's (scrypt in a worker thread, a good
login remembered as an HMAC), so a script sending Basic on every request pays one scrypt.

Sessions and failed-login counts live in bounded dicts on the injected clock: a session
expires `admin.session_lifetime` after login; a peer with `admin.login_failures` failed
logins within `admin.login_window` seconds is refused (429) without a password check
until the window has passed. Neither dict grows past its bound: the oldest entry goes.
"""
import base64
import binascii
import hashlib
import hmac
import secrets
from collections import OrderedDict

from twisted.internet import defer

from mqksbridge.bridge.admin.actions import ActionError
from mqksbridge.bridge.security import LoginFailed
from mqksbridge.core.permissions import BROKER, MANAGE

COOKIE = b"mqksbridge_session"
MAX_SESSIONS = 1024
MAX_PEERS = 4096
BUSY = "too many logins waiting"             # Security.login's reason when it is full


class Identity:
    """Who a request acts as: `user` (None: the token or an open endpoint), how it came in
    (`via`: open, token, basic, session), the Principal whose rules apply (None: every
    right) and the Session for cookie logins."""

    __slots__ = ("user", "via", "principal", "session")

    def __init__(self, user, via, principal=None, session=None):
        self.user, self.via, self.principal, self.session = user, via, principal, session

    def check(self, kind, name):
        """ActionError 403 unless this identity may manage `kind:name`."""
        if self.principal is not None and not self.principal.allows(MANAGE, kind, name):
            what = "the broker" if kind == BROKER else f"{kind} {name!r}"
            raise ActionError(403, f"{self.user} may not manage {what}")

    def describe(self):
        session = self.session
        return {"user": self.user, "via": self.via,
                "csrf": session.csrf if session is not None else None,
                "expires": session.expires if session is not None else None}


OPEN = Identity(None, "open")
TOKEN = Identity(None, "token")


class Session:
    __slots__ = ("principal", "csrf", "expires")

    def __init__(self, principal, csrf, expires):
        self.principal, self.csrf, self.expires = principal, csrf, expires


class Failures:
    """Failed logins per peer within a window, for at most MAX_PEERS peers."""

    def __init__(self, clock, limit, window, max_peers=MAX_PEERS):
        self.clock, self.limit, self.window, self.max_peers = clock, limit, window, max_peers
        self.peers = OrderedDict()           # peer -> [failures, window start]

    def blocked(self, peer):
        """Seconds until `peer` may try again (0: now)."""
        entry = self.peers.get(peer)
        if entry is None:
            return 0
        left = entry[1] + self.window - self.clock.seconds()
        if left <= 0:
            del self.peers[peer]
            return 0
        return left if entry[0] >= self.limit else 0

    def failed(self, peer):
        now = self.clock.seconds()
        entry = self.peers.get(peer)
        if entry is None or entry[1] + self.window <= now:
            self.peers.pop(peer, None)
            while len(self.peers) >= self.max_peers:
                self.peers.popitem(last=False)
            self.peers[peer] = entry = [0, now]
        entry[0] += 1


class AdminAuth:
    """The admin endpoint's logins: `identify` a request, `login` and `logout` sessions."""

    def __init__(self, security, token, clock, lifetime, failures, window):
        self.security = security
        self.token = b"Bearer " + token.encode() if token else None
        self.users = security is not None and security.enabled
        self.required = self.users or self.token is not None
        self.clock = clock
        self.lifetime = lifetime
        self.failures = Failures(clock, failures, window)
        self.sessions = OrderedDict()        # sha256 of the cookie value -> Session

    # -- who is asking ------------------------------------------------------------------------
    def identify(self, request):
        """The request's Identity, a Deferred of one (HTTP Basic: a password check), or
        ActionError 401 (no or bad credentials) / 403 / 429."""
        if not self.required:
            return OPEN
        header = request.getHeader(b"authorization") or b""
        scheme, _, value = header.partition(b" ")
        if scheme.lower() == b"bearer" and self.token is not None:
            if hmac.compare_digest(b"Bearer " + value.strip(), self.token):
                return TOKEN
            self.refused("login", request, "a wrong bearer token")
            raise ActionError(401, "wrong bearer token")
        if scheme.lower() == b"basic" and self.users:
            try:
                user, sep, password = base64.b64decode(value.strip(), validate=True) \
                    .decode("utf-8").partition(":")
            except (binascii.Error, UnicodeDecodeError):
                raise ActionError(400, "a malformed Basic authorization") from None
            if not sep:
                raise ActionError(400, "a malformed Basic authorization")
            return self.check_password(request, user, password).addCallback(
                lambda principal: Identity(principal.user, "basic", principal))
        cookie = request.getCookie(COOKIE)
        if cookie and self.users:
            return self.session(cookie)
        raise ActionError(401, "log in: a users-file account (Basic or the login form)"
                          if self.users else "a bearer token is required")

    def challenge(self, request):
        """The WWW-Authenticate header for a 401. A script's fetch (Sec-Fetch-Mode other
        than navigate: the dashboard) gets no Basic challenge, which would make the
        browser pop up its own password dialog over the login form."""
        fetch = request.getHeader(b"sec-fetch-mode")
        schemes = []
        if self.users and fetch in (None, b"navigate"):
            schemes.append(b'Basic realm="mqksbridge", charset="UTF-8"')
        if self.token is not None:
            schemes.append(b'Bearer realm="mqksbridge"')
        return b", ".join(schemes) or b'Session realm="mqksbridge"'

    def session(self, cookie):
        key = hashlib.sha256(cookie).digest()
        found = self.sessions.get(key)
        if found is None:
            raise ActionError(401, "no such session (log in again)")
        if found.expires <= self.clock.seconds():
            # kept (the next login sweeps it; MAX_SESSIONS bounds it): the page's parallel
            # requests must all say why, not the first "expired" and the rest "no such"
            raise ActionError(401, "the session expired (log in again)")
        return Identity(found.principal.user, "session", found.principal, found)

    def check_password(self, request, user, password):
        """A Deferred of the user's Principal: Security.login's check in a worker thread,
        after the peer's failure count, refusing users without a manage rule (403)."""
        peer = peer_of(request)
        wait = self.failures.blocked(peer)
        if wait:
            self.refused("limit", request, f"{self.failures.limit} failed logins")
            error = ActionError(429, "too many failed logins: try again later")
            error.retry_after = int(wait) + 1
            return defer.fail(error)

        def failed(failure):
            failure.trap(LoginFailed)
            if failure.value.reason == BUSY:         # not this peer's failure
                raise ActionError(503, "too many logins waiting: try again")
            self.failures.failed(peer)
            self.refused("login", request, failure.value.reason)
            raise ActionError(401, "wrong user or password")

        def admitted(principal):
            if not principal.rules.text[MANAGE]:
                self.refused("denied", request, f"{principal.user} has no manage rule")
                raise ActionError(403, f"{principal.user} may not use the admin API "
                                  "(it has no manage permission)")
            return principal
        return self.security.login(user, password).addCallbacks(admitted, failed)

    # -- sessions -----------------------------------------------------------------------------
    def login(self, request, user, password):
        """A Deferred of (cookie value, Session) for a good password; the cookie is set
        on `request` (HttpOnly, SameSite=Strict, Secure on a TLS listener)."""
        if not self.users:
            return defer.fail(ActionError(404, "there is no users file to log in with"))

        def made(principal):
            now = self.clock.seconds()
            for key, old in list(self.sessions.items()):
                if old.expires <= now:
                    del self.sessions[key]
            while len(self.sessions) >= MAX_SESSIONS:
                self.sessions.popitem(last=False)
            cookie = secrets.token_urlsafe(32).encode()
            session = Session(principal, secrets.token_urlsafe(24), now + self.lifetime)
            self.sessions[hashlib.sha256(cookie).digest()] = session
            request.addCookie(COOKIE, cookie, path=b"/", max_age=str(int(self.lifetime)),
                              httpOnly=True, sameSite="strict", secure=request.isSecure())
            return Identity(principal.user, "session", principal, session)
        return self.check_password(request, user, password).addCallback(made)

    def logout(self, request, identity):
        cookie = request.getCookie(COOKIE)
        if cookie:
            self.sessions.pop(hashlib.sha256(cookie).digest(), None)
        request.addCookie(COOKIE, b"", path=b"/", max_age="0", httpOnly=True,
                          sameSite="strict", secure=request.isSecure())
        return {"user": identity.user, "logged_out": identity.session is not None}

    # -- cross-site requests -------------------------------------------------------------------
    @staticmethod
    def same_origin(request, identity):
        """ActionError 403 for an action from another site: an `Origin` that is not this
        endpoint's own host, and for a cookie session a missing or wrong `X-CSRF-Token`
        (the dashboard has it from its login). SameSite=Strict already keeps the cookie
        off cross-site requests; this holds without it too."""
        origin = request.getHeader(b"origin")
        if origin is not None:
            host = request.getHeader(b"host") or b""
            netloc = origin.partition(b"://")[2]
            if origin == b"null" or not host or netloc.lower() != host.lower():
                raise ActionError(403, "a cross-site request (its Origin is not this host)")
        if identity is not None and identity.session is not None:
            token = (request.getHeader(b"x-csrf-token") or b"").decode("latin-1")
            if not hmac.compare_digest(token, identity.session.csrf):
                raise ActionError(403, "a session's actions need its X-CSRF-Token header")

    def refused(self, reason, request, detail):
        if self.security is not None:
            self.security.refused("admin", reason, peer_of(request), detail)


def peer_of(request):
    address = request.getClientAddress()
    return getattr(address, "host", None) or str(address)
