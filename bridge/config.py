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
    },
    "mqks": {
        "listen": ["tcp:25000"],
        "stream": "mqks",            # the core stream that carries MQKS events
        "max_line": 1 << 20,         # longer request lines: error reply, connection closed
        "high_water": 256 * 1024,    # pending output bytes before a consumer is paused
    },
    "malamute": {
        "listen": ["tcp://*:9999"],  # ZeroMQ endpoints (tcp://, ipc://), repeatable
    },
    "twino": {
        "listen": ["tcp:22200"],     # Twisted endpoint strings
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
