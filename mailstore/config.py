"""Configuration: one INI file (conf/imapserver.conf), every key declared and checked here.

A wrong or unknown setting stops start-up with a message naming it: a typo in a config file
must never silently fall back to a default.  Command-line flags override the file.
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from typing import Any

from .content import DEFAULT_CHUNK, check_chunk_size
from .schema import Layout
from .sievescripts import ScriptLimits


class ConfigError(ValueError):
    """A setting that is unknown or has a bad value; the message names it."""


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "yes", "true", "on"):
        return True
    if low in ("0", "no", "false", "off"):
        return False
    raise ValueError("expected yes or no")


def _choice(*allowed: str):
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}")
        return text
    return parse


def _workers(text: str) -> int | str:
    """``auto`` (one per core) or a number of worker processes, at least 1."""
    if text.strip() == "auto":
        return "auto"
    value = int(text)
    if value < 1:
        raise ValueError("expected auto or a number of processes, at least 1")
    return value


def _int_range(low: int, high: int):
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"expected {low} to {high}")
        return value
    return parse


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError("expected a number of seconds above 0")
    return value


# [hbase] keys that describe the tables' layout, not the connection.
LAYOUT_KEYS = ("regions_per_table", "compression", "mob", "user_buckets")


@dataclass(frozen=True)
class Key:
    parse: Any
    default: Any


# section -> key -> Key.  conf/imapserver.conf documents each one; a test checks they agree.
SCHEMA: dict[str, dict[str, Key]] = {
    "server": {
        "workers": Key(_workers, "auto"),
    },
    "store": {
        "backend": Key(_choice("embedded", "hbase"), "embedded"),
        "data_dir": Key(str, "data"),
        "synchronous": Key(_choice("FULL", "NORMAL"), "FULL"),
        "allow_shared_permissions": Key(_bool, False),
        "chunk_size": Key(lambda t: check_chunk_size(int(t)), DEFAULT_CHUNK),
        "read_ahead": Key(int, 2),
        "max_message_size": Key(int, 64 * 1024 * 1024),
        "abandon_after": Key(float, 10.0),
        "intent_timeout": Key(float, 60.0),
        "release_grace": Key(float, 3600.0),
        "text_index": Key(_choice("background", "yes", "lazy", "no"), "background"),
        # Verified logins remembered per process (docs/decisions/0030-auth-cache.md).
        "auth_cache_size": Key(_int_range(0, 10_000_000), 10000),
        "auth_cache_ttl": Key(_int_range(0, 7 * 86400), 3600),
    },
    "imap": {
        "host": Key(str, "127.0.0.1"),
        "port": Key(int, 1143),
        "imaps_port": Key(int, 1993),
        "tls_cert": Key(str, ""),
        "tls_key": Key(str, ""),
        "plaintext_auth": Key(_choice("yes", "no", "loopback"), "loopback"),
        "max_line_length": Key(int, 65536),
        "max_literal_size": Key(int, 64 * 1024 * 1024),
        "max_command_size": Key(int, 1024 * 1024 * 1024),
        "max_connections": Key(int, 5000),
        "listen_backlog": Key(int, 1024),
        "max_connections_per_user": Key(int, 50),
        "idle_timeout": Key(int, 1800),
        "auth_failure_delay": Key(float, 2.0),
        # METADATA (RFC 5464; mailstore/metadata.py Policy, docs/metadata.md).
        "metadata_max_value_size": Key(_int_range(1, 16 * 1024 * 1024), 65536),
        "metadata_max_entries": Key(_int_range(1, 100000), 100),
        "metadata_max_user_size": Key(_int_range(1, 2**40), 1024 * 1024),
        "metadata_admin": Key(str, ""),
        "urlauth_submit_users": Key(lambda t: [u.strip().lower() for u in t.split(",")
                                               if u.strip()], []),
    },
    "delivery": {
        "host": Key(str, "127.0.0.1"),
        "smtp_port": Key(int, 2525),
        "lmtp_port": Key(int, 2424),
        "hostname": Key(str, "localhost"),
        "domains": Key(lambda t: [d.strip().lower() for d in t.split(",") if d.strip()],
                       ["localhost"]),
        "plus_addressing": Key(_bool, True),
        "over_quota_code": Key(_choice("452", "552"), "452"),
        "smtp_require_starttls": Key(_bool, False),
        # The relay for outgoing mail (Sieve redirect/vacation, bounces): docs/relay.md.
        "relay_host": Key(str, ""),
        "relay_port": Key(_int_range(1, 65535), 25),
        "relay_starttls": Key(_choice("no", "opportunistic", "required"), "opportunistic"),
        "relay_ca_file": Key(str, ""),
        "relay_username": Key(str, ""),
        "relay_password": Key(str, ""),
        "relay_helo": Key(str, ""),
        "relay_timeout": Key(_positive, 60.0),
        "relay_claim_timeout": Key(_positive, 600.0),
        "relay_max_attempts": Key(_int_range(1, 1000), 30),
        "relay_max_age": Key(_positive, 5 * 86400.0),
        "relay_backoff_base": Key(_positive, 60.0),
        "relay_backoff_max": Key(_positive, 3600.0),
        "relay_poll_interval": Key(_positive, 30.0),
    },
    "managesieve": {
        "host": Key(str, "127.0.0.1"),
        "port": Key(int, 4190),
        "max_scripts": Key(_int_range(1, 10000), 20),
        "max_script_size": Key(_int_range(1, 16 * 1024 * 1024), 64 * 1024),
        "max_total_size": Key(_int_range(1, 1024 * 1024 * 1024), 1024 * 1024),
        "max_line_length": Key(_int_range(512, 1024 * 1024), 8192),
        "idle_timeout": Key(int, 1800),
        # Sessions one user may have logged in at once, per process (0: no limit); the next
        # login is refused NO (TRYLATER) (RFC 5804 1.3), as [imap] max_connections_per_user.
        "max_connections_per_user": Key(_int_range(0, 100000), 10),
    },
    "sieve": {
        "enabled": Key(_bool, True),
        "max_actions": Key(_int_range(1, 1000), 32),
        "max_redirects": Key(_int_range(0, 100), 4),
        "max_steps": Key(_int_range(100, 100_000_000), 100_000),
        "max_include_depth": Key(_int_range(1, 100), 10),
        "vacation_min_days": Key(_int_range(0, 365), 1),
        "vacation_max_days": Key(_int_range(1, 3650), 60),
        "vacation_default_days": Key(_int_range(1, 3650), 7),
        "duplicate_max_seconds": Key(_int_range(1, 365 * 86400), 7 * 86400),
        "global_scripts_user": Key(str, ""),
    },
    "log": {
        "format": Key(_choice("text", "json"), "text"),
        "file": Key(str, "-"),
        "level": Key(_choice("debug", "info", "warn", "error"), "info"),
    },
    "metrics": {
        "host": Key(str, "127.0.0.1"),
        "port": Key(int, 0),
    },
    "hbase": {
        "host": Key(str, "localhost"),
        "port": Key(int, 9090),
        # The gateway's API: thrift1 (hbase thrift) or thrift2 (hbase thrift2; decision 0029).
        "api": Key(_choice("thrift1", "thrift2"), "thrift1"),
        "transport": Key(_choice("buffered", "framed"), "buffered"),
        "protocol": Key(_choice("binary", "compact"), "binary"),
        "table_prefix": Key(str, ""),
        "pool_size": Key(int, 10),
        "timeout_ms": Key(int, 10000),
        # The region layout (mailstore/schema.py Layout; docs/decisions/0015).
        "regions_per_table": Key(_int_range(1, 4096), 16),
        "compression": Key(_choice("snappy", "zstd", "gz", "none"), "snappy"),
        "mob": Key(_bool, False),
        # Salt buckets of the user-name-keyed tables in a new store (docs/decisions/0027).
        "user_buckets": Key(_int_range(1, 32), 16),
    },
}


class Config:
    """Parsed settings: ``config["store"]["backend"]``."""

    def __init__(self, values: dict[str, dict[str, Any]]):
        self.values = values

    def __getitem__(self, section: str) -> dict[str, Any]:
        return self.values[section]

    def backend_options(self) -> tuple[str, dict[str, Any]]:
        store = self.values["store"]
        if store["backend"] == "embedded":
            return "embedded", {"data_dir": store["data_dir"],
                                "synchronous": store["synchronous"],
                                "allow_shared_permissions": store["allow_shared_permissions"]}
        return "hbase", {k: v for k, v in self.values["hbase"].items() if k not in LAYOUT_KEYS}

    def store_options(self) -> dict[str, Any]:
        store = self.values["store"]
        options = {k: store[k] for k in ("chunk_size", "read_ahead", "max_message_size",
                                         "abandon_after", "intent_timeout", "release_grace",
                                         "text_index", "auth_cache_size", "auth_cache_ttl")}
        sieve = self.values["managesieve"]
        limits = ScriptLimits(sieve["max_scripts"], sieve["max_script_size"],
                              sieve["max_total_size"])
        return {"layout": Layout.from_config(self), "sieve_limits": limits, **options}


def load(path: str | None = None, overrides: dict[str, dict[str, Any]] | None = None) -> Config:
    """Read ``path`` (if given), apply ``overrides`` (already typed), check every key."""
    values = {section: {k: key.default for k, key in keys.items()}
              for section, keys in SCHEMA.items()}
    if path is not None:
        if not os.path.exists(path):
            raise ConfigError(f"config file not found: {path}")
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path, encoding="utf-8")
        except configparser.Error as exc:
            raise ConfigError(f"{path}: {exc}") from exc
        for section in parser.sections():
            if section not in SCHEMA:
                raise ConfigError(f"{path}: unknown section [{section}]")
            for name, text in parser.items(section):
                if name not in SCHEMA[section]:
                    raise ConfigError(f"{path}: unknown setting {section}.{name}")
                try:
                    values[section][name] = SCHEMA[section][name].parse(text)
                except ValueError as exc:
                    raise ConfigError(f"{path}: bad value for {section}.{name}: {text!r} "
                                      f"({exc})") from exc
    for section, items in (overrides or {}).items():
        for name, value in items.items():
            if value is not None:
                values[section][name] = value
    return Config(values)
