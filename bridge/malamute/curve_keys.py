"""CURVE server key files for the Malamute door (docs/security.md, "Malamute CURVE").

A key file is a ZeroMQ certificate in ZPL (what czmq's `zcert_save_secret` and pyzmq's
`zmq.auth.create_certificates` write as `NAME.key_secret`): a `curve` section
with `public-key` and `secret-key`, each 40 characters of Z85. pyzmq reads it (it is the
package's ZeroMQ library already); we check that the two halves belong together.
"""
import zmq.auth
from zmq.utils import z85

from mqksbridge.protocols.zmtp.curve import public_key


class CurveKeyError(ValueError):
    """A key file that cannot serve (start-up refuses it, naming the file)."""


def load(path):
    """The 32-byte secret key of a server key file; CurveKeyError when unusable."""
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise CurveKeyError(f"CURVE key file {path}: {exc}") from None
    if secret is None:
        raise CurveKeyError(f"CURVE key file {path}: no secret-key (a public certificate?)")
    try:
        secret, public = z85.decode(secret), z85.decode(public)
    except (ValueError, KeyError, TypeError):
        raise CurveKeyError(f"CURVE key file {path}: keys are not 40 characters of Z85") \
            from None
    if len(secret) != 32 or public_key(secret) != public:
        raise CurveKeyError(f"CURVE key file {path}: the public-key is not the secret-key's")
    return secret
