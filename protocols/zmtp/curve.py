"""ZMTP CURVE (RFC 26, CurveZMQ) for the accepting end of one connection, sans-IO.

CURVE encrypts a connection with the server's long-term key pair, which its clients know
the public half of (libzmq's `curve_serverkey`): a client with another server key cannot
open the first box of the handshake and gets no session. The boxes are libsodium's
crypto_box (PyNaCl), as libzmq makes them:

    C: HELLO     version 1.0, 72 bytes of padding, C', a short nonce, Box[64 zeros](C'->S)
    S: WELCOME   a long nonce, Box[S' + cookie](S->C'); the cookie is Box[C' + s'](K)
    C: INITIATE  the cookie, a short nonce, Box[C + vouch + metadata](C'->S'), where the
                 vouch is a long nonce and Box[C' + S](C->S')
    S: READY     a short nonce, Box[metadata](S'->C')
    then every frame either way: MESSAGE, a short nonce, Box[flags + body](S'<->C'), its
    flags byte carrying MORE (1) and COMMAND (2), as one frame of its own on the wire.

Short nonces must grow (a replayed or reordered MESSAGE is refused). After the handshake
the decrypted frames are ordinary ZMTP frames and go through an inner
codec.Connection in its traffic state, so message limits, PING and ERROR work as on a
NULL connection. `seal(data)` encrypts what the caller writes (whole frames) the same way.
Errors are codec.ZmtpError, as for NULL and PLAIN.
"""
import hmac
import os
from dataclasses import dataclass

from nacl.bindings import (crypto_box_beforenm, crypto_box_easy, crypto_box_easy_afternm,
                           crypto_box_keypair, crypto_box_open_easy,
                           crypto_box_open_easy_afternm, crypto_secretbox,
                           crypto_secretbox_open, crypto_scalarmult_base)
from nacl.exceptions import CryptoError

from mqksbridge.protocols.zmtp.codec import (COMMAND, DEFAULT_MAX_FRAMES, DEFAULT_MAX_MESSAGE,
                                             GREETING, GREETING_SIZE, LONG, MORE, Connection,
                                             PeerError, Reason, ZmtpError, _U64, check_greeting,
                                             command, frame, metadata)

CURVE = b"CURVE"
CURVE_GREETING = GREETING[:12] + CURVE.ljust(20, b"\x00") + b"\x01" + b"\x00" * 31
KEY = 32
MAC = 16
HELLO_SIZE = 200                          # the whole HELLO command body
MESSAGE = b"\x07MESSAGE"
OVERHEAD = len(MESSAGE) + 8 + MAC + 1     # what CURVE adds to each frame's body
MAX_COMMAND = 0xFFFF + 256                # handshake commands (INITIATE's metadata) at most


@dataclass(frozen=True)
class Reply:
    """Handshake bytes for the caller to write now (WELCOME)."""
    data: bytes


def public_key(secret):
    """The public half of a 32-byte CURVE secret key."""
    return crypto_scalarmult_base(secret)


def _open(box, nonce, pk, sk, what):
    try:
        return crypto_box_open_easy(box, nonce, pk, sk)
    except CryptoError:
        raise ZmtpError(Reason.CURVE, f"CURVE {what}: the box does not open") from None


class CurveConnection:
    """One CURVE connection, server side (the broker's ROUTER). The interface is
    codec.Connection's: `preamble()`, `receive_data()` (messages; events in `events`,
    a `Reply` among them during the handshake), `ready_reply()`, `state`; plus `seal()`
    for everything written once READY is out, and `client_key`, the client's long-term
    public key once INITIATE proved it."""

    __slots__ = ("secret", "public", "socket_type", "mechanism", "state", "events",
                 "client_key", "inner", "_buf", "_need", "_max_frame", "_transient",
                 "_server_transient", "_cookie_key", "_k", "_nonce", "_peer_nonce")

    def __init__(self, secret, socket_type="ROUTER", max_message=DEFAULT_MAX_MESSAGE,
                 max_frames=DEFAULT_MAX_FRAMES):
        self.secret, self.public = secret, public_key(secret)
        self.socket_type = socket_type
        self.mechanism = CURVE
        self.state = "greeting"          # -> hello -> initiate -> traffic (-> closed)
        self.events = []
        self.client_key = None
        self.inner = Connection(socket_type, max_message, max_frames)
        self.inner.state, self.inner._need = "traffic", 2     # past any greeting: frames
        self._buf = bytearray()
        self._need = GREETING_SIZE
        self._max_frame = max_message + OVERHEAD + 9
        self._transient = None           # C'
        self._server_transient = None    # (S', s')
        self._cookie_key = None          # K, for this connection's one cookie
        self._k = None                   # crypto_box_beforenm(C', s')
        self._nonce = 0                  # our short nonces (READY, then each frame)
        self._peer_nonce = 0             # the client's last short nonce

    def preamble(self):
        return CURVE_GREETING

    # -- input -----------------------------------------------------------------------------
    def receive_data(self, data):
        buf = self._buf
        buf += data
        if len(buf) < self._need:
            if self.state == "greeting":
                check_greeting(buf, CURVE)
            return []
        try:
            return self._receive()
        except ZmtpError:
            if self.state != "greeting":
                self.state = "closed"
            raise

    def _receive(self):
        buf = self._buf
        src = bytes(buf)
        buf.clear()
        pos = 0
        if self.state == "greeting":
            check_greeting(src[:GREETING_SIZE], CURVE)
            self.state = "hello"
            pos = GREETING_SIZE
        plain = []
        end = len(src)
        need = 2
        try:
            while end - pos >= 2 and self.state != "closed":
                flags = src[pos]
                if flags & 0xF8:
                    raise ZmtpError(Reason.FRAME, f"reserved frame flags set ({flags:#04x})")
                if flags & LONG:
                    if end - pos < 9:
                        need = 9
                        break
                    n, start = _U64.unpack_from(src, pos + 1)[0], pos + 9
                else:
                    n, start = src[pos + 1], pos + 2
                if n > self._max_frame or (n > MAX_COMMAND and self.state != "traffic"):
                    raise ZmtpError(Reason.LIMIT, f"frame over the {self._max_frame} byte limit"
                                    if n > self._max_frame else "handshake command too large")
                if start + n > end:
                    need = start + n - pos
                    break
                body, pos = src[start:start + n], start + n
                if self.state == "traffic":
                    plain.append(self._unseal(body))
                elif not flags & COMMAND:
                    raise ZmtpError(Reason.HANDSHAKE, "message before the handshake completed")
                else:
                    self._handshake(body)
        except ZmtpError as exc:         # the messages sealed before it still count
            exc.done = self._messages(plain)
            raise
        if pos < end:
            buf += src[pos:]
        self._need = need if buf else 2
        return self._messages(plain)

    def _messages(self, plain):
        """The messages the opened frames `plain` complete (their events to `events`)."""
        if not plain:
            return []
        messages = self.inner.receive_data(b"".join(plain))
        if self.inner.events:
            self.events += self.inner.events
            self.inner.events = []
        return messages

    def _handshake(self, body):
        if not body or len(body) < 1 + body[0]:
            raise ZmtpError(Reason.FRAME, "malformed command frame")
        name, data = body[1:1 + body[0]], body[1 + body[0]:]
        if name == b"ERROR":
            n = data[0] if data else 0
            self.events.append(PeerError(data[1:1 + n].decode("utf-8", "replace")))
        elif self.state == "hello" and name == b"HELLO":
            self.events.append(Reply(self._welcome(body)))
            self.state = "initiate"
        elif self.state == "initiate" and name == b"INITIATE":
            self.events.append(self._initiate(data))
            self.state = "traffic"
        else:
            raise ZmtpError(Reason.CURVE, f"CURVE: unexpected {name!r} during the handshake")

    def _welcome(self, body):
        """HELLO in, WELCOME out: the client knows our public key, or this fails."""
        if len(body) != HELLO_SIZE or body[6:8] != b"\x01\x00":
            raise ZmtpError(Reason.CURVE, "CURVE HELLO: malformed or not version 1.0")
        transient, nonce, box = body[80:112], body[112:120], body[120:200]
        zeros = _open(box, b"CurveZMQHELLO---" + nonce, transient, self.secret,
                      "HELLO (is the client's server key ours?)")
        if zeros != bytes(64):
            raise ZmtpError(Reason.CURVE, "CURVE HELLO: the signature box is not zeros")
        self._transient = transient
        self._peer_nonce = int.from_bytes(nonce, "big")
        server_public, server_secret = crypto_box_keypair()
        self._server_transient = (server_public, server_secret)
        self._cookie_key = os.urandom(KEY)
        cookie_nonce = os.urandom(16)
        cookie = cookie_nonce + crypto_secretbox(transient + server_secret,
                                                 b"COOKIE--" + cookie_nonce, self._cookie_key)
        welcome_nonce = os.urandom(16)
        return command(b"WELCOME", welcome_nonce + crypto_box_easy(
            server_public + cookie, b"WELCOME-" + welcome_nonce, transient, self.secret))

    def _initiate(self, data):
        """INITIATE: our cookie back, the client's long-term key vouching for its
        transient one, and its metadata (socket type, identity). Returns Ready."""
        if len(data) < 96 + 8 + MAC + KEY + 96:
            raise ZmtpError(Reason.CURVE, "CURVE INITIATE: too short")
        cookie, nonce, box = data[:96], data[96:104], data[104:]
        try:
            inside = crypto_secretbox_open(cookie[16:], b"COOKIE--" + cookie[:16],
                                           self._cookie_key)
        except CryptoError:
            raise ZmtpError(Reason.CURVE, "CURVE INITIATE: not our cookie") from None
        server_public, server_secret = self._server_transient
        if not hmac.compare_digest(inside, self._transient + server_secret):
            raise ZmtpError(Reason.CURVE, "CURVE INITIATE: not our cookie")
        self._check_nonce(nonce)
        self._k = crypto_box_beforenm(self._transient, server_secret)
        try:
            plain = crypto_box_open_easy_afternm(box, b"CurveZMQINITIATE" + nonce, self._k)
        except CryptoError:
            raise ZmtpError(Reason.CURVE, "CURVE INITIATE: the box does not open") from None
        client, vouch_nonce, vouch = plain[:KEY], plain[KEY:KEY + 16], plain[KEY + 16:KEY + 96]
        vouched = _open(vouch, b"VOUCH---" + vouch_nonce, client, server_secret, "vouch")
        if not hmac.compare_digest(vouched, self._transient + self.public):
            raise ZmtpError(Reason.CURVE, "CURVE INITIATE: the vouch names other keys")
        self.client_key = client
        self._server_transient = self._cookie_key = None
        return self.inner._ready(plain[KEY + 96:])

    def ready_reply(self):
        """READY, boxed: write it, then `seal` everything after it."""
        props = metadata([(b"Socket-Type", self.socket_type.encode("ascii")),
                          (b"Identity", b"")])
        nonce = self._next_nonce()
        return command(b"READY", nonce + crypto_box_easy_afternm(
            props, b"CurveZMQREADY---" + nonce, self._k))

    # -- traffic -----------------------------------------------------------------------------
    def _check_nonce(self, nonce):
        value = int.from_bytes(nonce, "big")
        if value <= self._peer_nonce:
            raise ZmtpError(Reason.CURVE, "CURVE: a short nonce did not grow (replayed?)")
        self._peer_nonce = value

    def _next_nonce(self):
        self._nonce += 1
        return self._nonce.to_bytes(8, "big")

    def _unseal(self, body):
        """One MESSAGE frame's body -> the plaintext ZMTP frame it carries."""
        if len(body) < OVERHEAD or body[:8] != MESSAGE:
            raise ZmtpError(Reason.CURVE, "CURVE: a frame that is not a MESSAGE")
        nonce = body[8:16]
        self._check_nonce(nonce)
        try:
            plain = crypto_box_open_easy_afternm(body[16:], b"CurveZMQMESSAGEC" + nonce, self._k)
        except CryptoError:
            raise ZmtpError(Reason.CURVE, "CURVE: a MESSAGE box does not open") from None
        flags = plain[0]
        if flags > 3:
            raise ZmtpError(Reason.CURVE, f"CURVE: MESSAGE flags {flags:#04x}")
        return frame(plain[1:], (flags & 1) | (COMMAND if flags & 2 else 0))

    def seal(self, data):
        """Whole plaintext ZMTP frames (what the caller writes) -> MESSAGE frames."""
        out = []
        pos, end = 0, len(data)
        while pos < end:
            flags = data[pos]
            if flags & LONG:
                n, start = _U64.unpack_from(data, pos + 1)[0], pos + 9
            else:
                n, start = data[pos + 1], pos + 2
            inner = bytes(((flags & MORE) | (2 if flags & COMMAND else 0),))
            nonce = self._next_nonce()
            box = crypto_box_easy_afternm(inner + data[start:start + n],
                                          b"CurveZMQMESSAGES" + nonce, self._k)
            out.append(frame(MESSAGE + nonce + box))
            pos = start + n
        return b"".join(out)

