"""Configuration: embedded defaults, then an optional TOML file, then command-line flags.

Every listener is a Twisted endpoint string (`tcp:25000`, `ssl:...`, `unix:...`), or a
ZeroMQ endpoint for the Malamute door. Every key is a row of bridge.settings.TABLE: its
default makes DEFAULTS, its check makes `validate` refuse anything else at start-up with
the key and the value in the message, and its doc makes the reference in
docs/configuration.md (`python -m mqksbridge.bridge.config docs/configuration.md`
rewrites it; a test fails while the page and the table disagree).
"""
import copy
import difflib
import json
import sys
import tomllib

from mqksbridge.bridge.settings import SECTIONS, SETTINGS, TABLE, amqp_url


class ConfigError(ValueError):
    pass


def size_limit(value):
    """A byte limit as the core takes it: an int, or "max" (the original Malamute's
    spelling of unlimited) as None; a list of [pattern, limit] rules keeps its order."""
    if isinstance(value, (list, tuple)):
        return [(str(pattern), size_limit(limit)) for pattern, limit in value]
    return None if value in ("max", None) else int(value)


def _tree(rows):
    """The nested dict of the rows' defaults: {"data_dir": ..., "broker": {...}, ...}."""
    tree = {}
    for setting in rows:
        section = tree.setdefault(setting.section, {}) if setting.section else tree
        section[setting.name] = setting.default
    return tree


DEFAULTS = _tree(TABLE)
MOVED = {"malamute.mailbox_size_limit": "broker.mailbox_size_limit",       # limits belong to
         "malamute.service_queue_size_limit": "broker.queue_size_limit"}  # the object now
# Tables whose keys are the user's (names), checked as one value by their rule.
OPEN_TABLES = {setting.key for setting in TABLE if setting.open_table}


def merge(base, extra, path=""):
    """Deep-merge `extra` into a copy of `base`, refusing keys the defaults do not know."""
    result = copy.deepcopy(base)
    for key, value in extra.items():
        if f"{path}{key}" in MOVED:
            raise ConfigError(f"configuration key {path}{key} = {show(value)}: now "
                              f"{MOVED[path + key]} (docs/delivery.md)")
        if f"{path}{key}" in OPEN_TABLES:
            both = isinstance(value, dict) and isinstance(result.get(key), dict)
            result[key] = {**result[key], **value} if both else value
            continue
        if key not in result:
            raise ConfigError(unknown(result, path, key, value))
        if isinstance(result[key], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"configuration key {path}{key} = {show(value)}: "
                                  "must be a table")
            result[key] = merge(result[key], value, f"{path}{key}.")
        else:
            result[key] = value
    return result


def unknown(known, path, key, value):
    """One line for a key (or a whole section) the defaults do not have: the name and
    value as given, and the nearest known name."""
    names = [name for name in known if isinstance(known[name], dict) == isinstance(value, dict)]
    guess = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if isinstance(value, dict):
        hint = f"did you mean [{path}{guess[0]}]?" if guess else \
            "sections: " + ", ".join(f"[{path}{n}]" for n in names)
        return f"unknown configuration section [{path}{key}]: {hint}"
    hint = f"did you mean {path}{guess[0]}?" if guess else \
        "every key is in docs/configuration.md"
    return f"unknown configuration key {path}{key} = {show(value)}: {hint}"


def load(path=None, overrides=None):
    """Defaults, then the TOML file, then `overrides`; validated (ConfigError)."""
    config = copy.deepcopy(DEFAULTS)
    if path:
        with open(path, "rb") as f:
            try:
                config = merge(config, tomllib.load(f))
            except (tomllib.TOMLDecodeError, ConfigError) as exc:
                raise ConfigError(f"{path}: {exc}") from None
    if overrides:
        config = merge(config, overrides)
    validate(config)
    return config


def parse_setting(assignment):
    """`section.key=value` (the --set flag) as an overrides dict; the value is read as
    TOML (`10`, `1.5`, `true`, `["tcp:1"]`, `"text"`), else taken as a plain string."""
    key, sep, text = assignment.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set wants section.key=value, got {assignment!r}")
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    if key in SETTINGS and isinstance(SETTINGS[key].default, str) \
            and not isinstance(value, str):
        value = text                     # a string key keeps `--twino-token 123` as text
    result = node = {}
    *sections, last = key.split(".")
    for section in sections:
        node = node.setdefault(section, {})
    node[last] = value
    return result


def deep_update(base, extra):
    """Merge nested override dicts (several --set flags for one section)."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_update(base[key], value)
        else:
            base[key] = value
    return base


def lookup(config, dotted):
    for part in dotted.split("."):
        config = config[part]
    return config


def validate(config):
    """Check every key against its setting's check, in table order, then what keys say
    of each other; the first bad one raises ConfigError naming the key and the value."""
    for setting in TABLE:
        value = lookup(config, setting.key)
        problem = setting.check(value)
        if problem:
            raise ConfigError(f"configuration key {setting.key} = "
                              f"{show(setting.shown(value))}: {problem}")
    for endpoint in config["mqks"]["listen_users"]:
        if endpoint not in config["mqks"]["listen"]:
            raise ConfigError(f"configuration key mqks.listen_users: {show(endpoint)} is not "
                              "one of mqks.listen")
    for endpoint in config["malamute"]["curve"]:
        if endpoint not in config["malamute"]["listen"]:
            raise ConfigError(f"configuration key malamute.curve: {show(endpoint)} is not "
                              "one of malamute.listen")
    for endpoint in config["mqks"]["auth"]:
        if endpoint not in config["mqks"]["listen"]:
            raise ConfigError(f"configuration key mqks.auth: {show(endpoint)} is not one of "
                              "mqks.listen")
    if config["mqks"]["auth"] and not config["security"]["users"]:
        raise ConfigError("configuration key mqks.auth: logins are checked against users: "
                          "set security.users")
    if config["malamute"]["mechanism"] == "plain" and not config["security"]["users"]:
        raise ConfigError("configuration key malamute.mechanism = \"plain\": PLAIN logins "
                          "are checked against users: set security.users")
    validate_cluster(config)
    if config["security"]["users"] and config["twino"]["token"]:
        raise ConfigError("configuration keys twino.token and security.users: with a users "
                          "file, Twino clients log in as users (Client-Token USER:PASSWORD); "
                          "leave twino.token empty")


def validate_cluster(config):
    """[cluster] keys together: a gateway needs nodes, one vhost, and no journal of its own."""
    cluster = config["cluster"]
    if cluster["engine"] == "embedded":
        if cluster["urls"]:
            raise ConfigError('configuration key cluster.urls: set, but cluster.engine = '
                              '"embedded" does not use it; set cluster.engine = "rabbitmq"')
        return
    if not cluster["urls"]:
        raise ConfigError('configuration key cluster.engine = "rabbitmq": set cluster.urls, '
                          'e.g. ["amqp://user:password@127.0.0.1:5672/vhost"]')
    if cluster["vhost"]:
        for url in cluster["urls"]:
            vhost = amqp_url(url)[3]
            if vhost and vhost != cluster["vhost"]:
                raise ConfigError(f"configuration key cluster.vhost = {show(cluster['vhost'])}"
                                  f": a URL names vhost {show(vhost)}")
    for key in ("queues", "mailboxes"):
        if config["durability"][key]:
            raise ConfigError(f"configuration key durability.{key}: with cluster.engine = "
                              '"rabbitmq" every queue is a quorum queue the cluster keeps; '
                              "leave it empty (docs/cluster.md)")


def show(value):
    """A value as it is written in TOML, for messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)     # a valid TOML basic string
    return repr(value)


def toml_value(value):
    """A value as TOML; an open table inline: { "key" = value, ... }."""
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{show(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    return show(value)


def dump(config):
    """The configuration as TOML (what --check-config prints; loadable with --config)."""
    top = [f"{k} = {toml_value(v)}" for k, v in config.items() if not isinstance(v, dict)]
    lines = top + [""] if top else []
    for section, table in config.items():
        if isinstance(table, dict):
            lines.append(f"[{section}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
            lines.append("")
    return "\n".join(lines)


# -- the reference in docs/configuration.md -----------------------------------------------
COMMENT_COLUMN = 30
BEGIN = ("<!-- The block below is made from bridge/settings.py (edit the table there, then run "
         "`python -m mqksbridge.bridge.config docs/configuration.md`). -->")
END = "<!-- End of the block made from bridge/settings.py. -->"


def _commented(text, doc):
    """`text`, its doc as a comment from COMMENT_COLUMN on, one line per line of doc."""
    if not doc:
        return [text]
    first, *more = doc.split("\n")
    return [f"{text.ljust(COMMENT_COLUMN - 2)}  # {first}"] + [
        f"{' ' * COMMENT_COLUMN}# {line}" for line in more]


def reference():
    """Every key at its default with its doc, as commented TOML (a loadable file)."""
    lines, section = [], ""
    for setting in TABLE:
        if setting.section != section:
            section = setting.section
            lines += ["", *_commented(f"[{section}]", SECTIONS[section])]
        lines += _commented(f"{setting.name} = {toml_value(setting.default)}", setting.doc)
    return "\n".join(lines) + "\n"


def reference_block():
    """What stands between BEGIN and END in docs/configuration.md."""
    return f"<!-- example: config -->\n```toml\n{reference()}```\n"


def with_reference(page):
    """The page's text with its block between BEGIN and END made anew."""
    head, begin, rest = page.partition(BEGIN + "\n")
    _, end, tail = rest.partition(END)
    if not (begin and end):
        raise ValueError("the page has no BEGIN ... END markers for the reference")
    return head + begin + reference_block() + end + tail


if __name__ == "__main__":        # python -m mqksbridge.bridge.config docs/configuration.md
    for path in sys.argv[1:]:
        with open(path, encoding="utf-8") as f:
            page = f.read()
        with open(path, "w", encoding="utf-8") as f:
            f.write(with_reference(page))
