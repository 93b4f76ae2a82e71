"""Logs and metrics: what operators see of a running server.

Logs go through ``twisted.logger``: one structured event per session event (connection,
login, failed login with the remote address, logout, errors), written as one text line each or
as JSON lines (``[log] format``).  Message content and passwords are never logged.  The stdlib
``logging`` records of other parts (aiosmtpd, the delivery handlers) are forwarded into the
same stream.

Metrics are Prometheus counters and histograms (``prometheus_client``), served over HTTP on a
loopback port (``[metrics] port``; 0 disables it).
"""

from __future__ import annotations

import logging
import sys
import time

from prometheus_client import Counter, Gauge, Histogram, start_http_server
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    jsonFileLogObserver,
    textFileLogObserver,
)
from twisted.logger import Logger as _Logger

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0)

SESSIONS = Gauge("imap_sessions", "IMAP connections open now")
CONNECTIONS = Counter("imap_connections_total", "IMAP connections accepted")
LOGINS = Counter("imap_logins_total", "IMAP authentication attempts", ["outcome"])
COMMANDS = Counter("imap_commands_total", "IMAP commands by name and outcome",
                   ["command", "outcome"])
COMMAND_SECONDS = Histogram("imap_command_seconds", "IMAP command latency",
                            ["command"], buckets=LATENCY_BUCKETS)
STORE_SECONDS = Histogram("store_call_seconds", "Mail store call latency",
                          ["operation"], buckets=LATENCY_BUCKETS)
DELIVERIES = Counter("deliveries_total", "Messages delivered, per recipient",
                     ["protocol", "outcome"])
ERRORS = Counter("errors_total", "Unexpected errors", ["component"])

_KNOWN_COMMANDS: set[str] = set()


def Logger(namespace: str) -> _Logger:  # noqa: N802 - reads like the class it returns
    return _Logger(namespace=namespace)


def command_label(name: str) -> str:
    """Bound the label set: unknown command names (client garbage) share one label."""
    if not _KNOWN_COMMANDS:
        from .imap.context import known_commands
        _KNOWN_COMMANDS.update(known_commands())
    return name if name in _KNOWN_COMMANDS else "unknown"


def timed_store_call(operation: str, fn, *args, **kwargs):
    """Run a store call (in a worker thread) and record its latency."""
    start = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    finally:
        STORE_SECONDS.labels(operation).observe(time.perf_counter() - start)


class _ToTwisted(logging.Handler):
    """Forwards stdlib logging records into twisted.logger."""

    def emit(self, record: logging.LogRecord) -> None:
        level = (LogLevel.error if record.levelno >= logging.ERROR else
                 LogLevel.warn if record.levelno >= logging.WARNING else
                 LogLevel.info if record.levelno >= logging.INFO else LogLevel.debug)
        _Logger(namespace=record.name).emit(level, "{text}", text=record.getMessage())


def start_logging(cfg, stream=None) -> None:
    """Begin logging as ``[log]`` says; call once, before the reactor runs."""
    section = cfg["log"]
    if stream is None:
        stream = sys.stderr if section["file"] == "-" else open(  # noqa: SIM115
            section["file"], "a", encoding="utf-8")
    observer = (jsonFileLogObserver(stream) if section["format"] == "json"
                else textFileLogObserver(stream))
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.levelWithName(
        section["level"]))
    globalLogBeginner.beginLoggingTo([FilteringLogObserver(observer, [predicate])],
                                     redirectStandardIO=False)
    root = logging.getLogger()
    root.addHandler(_ToTwisted())
    root.setLevel(logging.DEBUG if section["level"] == "debug" else logging.INFO)


def start_metrics(cfg, announce) -> object | None:
    """Serve /metrics on ``[metrics] host:port`` (a thread); None when disabled."""
    from .services import listen_port

    port = listen_port(cfg["metrics"]["port"])
    if port is None:
        return None
    host = cfg["metrics"]["host"]
    server, _thread = start_http_server(port, addr=host)
    announce("metrics", host, server.server_port)
    return server
