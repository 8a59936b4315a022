"""Configuration: embedded defaults, then an optional TOML file, then command-line flags.

Every listener is a Twisted endpoint string (`tcp:25000`, `ssl:...`, `unix:...`), or a
ZeroMQ endpoint for the Malamute door. See docs/configuration.md for every key.
"""
import copy
import tomllib

DEFAULTS = {
    "data_dir": "./var",
    "broker": {
        "sweep_interval": 1.0,       # seconds between ack-timeout/expiry sweeps
        "gc_threshold": [50_000, 20, 100],  # gc.set_threshold at start; [] keeps Python's
        "flow_limit": 10_000,        # messages a queue with consumers holds before its
                                     # publishers stop being read (0: never; core.flow)
        "flow_max_hold": 1.0,        # seconds a publisher is held at most
    },
    "mqks": {
        "listen": ["tcp:25000"],
        "stream": "mqks",            # the core stream that carries MQKS events
        "max_line": 1 << 20,         # longer request lines: error reply, connection closed
        "high_water": 1024 * 1024,   # pending output bytes before a consumer is paused (see docs)
    },
    "malamute": {
        "listen": ["tcp://*:9999"],  # ZeroMQ endpoints (tcp://, ipc://), repeatable
        "timeout": 60.0,             # seconds without any frame before a session expires
        "check_interval": 1.0,       # one expiry sweep over every session this often
        "mailbox_size_limit": "max",  # content bytes kept per mailbox; "max" = unlimited
        "mailbox_size_warn": "max",   # log once when a mailbox holds more bytes than this
        "service_queue_size_limit": "max",  # content bytes queued per service it creates
        "high_water": 10000,         # stream copies held for a peer whose socket is full
        "max_message_size": 64 << 20,  # larger ZeroMQ messages: connection closed
        "credit": True,              # honour CREDIT from clients that send it (opt-in)
    },
    "twino": {
        "listen": ["tcp:22200"],     # Twisted endpoint strings
        "node": "mqksbridge",        # node name in events and the instance list
        "max_frame_size": 64 << 20,  # larger declared frames: connection closed, nothing buffered
        "high_water": 1024 * 1024,   # pending output bytes before a consumer is paused (see docs)
        "ping_interval": 120.0,      # idle seconds before the server PINGs a client
        "ping_timeout": 10.0,        # seconds a PINGed client has to show any traffic
        "handshake_timeout": 10.0,   # seconds to send protocol bytes and hello
        "check_interval": 1.0,       # one sweep over every connection for the three above
        "token": "",                 # when set, hellos must carry this Client-Token (else 401)
        "allow_admin": True,         # false: admin operations (604-663) answer 401
        "auto_create_channels": True,
        "auto_create_queues": True,
        "producer_ack": [],          # [[pattern, policy], ...] on "channel/queue-id", first wins
        "producer_ack_default": "relay",  # received | sent | relay (the consumer's ack)
    },
}


class ConfigError(ValueError):
    pass


def merge(base, extra, path=""):
    """Deep-merge `extra` into a copy of `base`, refusing keys the defaults do not know."""
    result = copy.deepcopy(base)
    for key, value in extra.items():
        if key not in result:
            raise ConfigError(f"unknown configuration key {path}{key}")
        if isinstance(result[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"{path}{key} must be a table")
            result[key] = merge(result[key], value, f"{path}{key}.")
        else:
            result[key] = value
    return result


def load(path=None, overrides=None):
    config = copy.deepcopy(DEFAULTS)
    if path:
        with open(path, "rb") as f:
            config = merge(config, tomllib.load(f))
    if overrides:
        config = merge(config, overrides)
    return config
