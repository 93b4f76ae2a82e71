"""Logs and metrics: what operators see of a running server.

Logs are named events with fields, one line each: a delivery (``lmtp``/``smtp`` component,
``delivery`` event: queue id, sender, every recipient with its result and reply code, size,
duration), an IMAP session at its end (``imap``/``session``: user, remote address, commands,
seconds, octets in and out, how it ended), a login, a failed login, an error.  With ``[log]
format = json`` each line is one JSON object with the keys ``ts``, ``level``, ``component``
and ``event`` first, then the event's fields: JSON lines as journald, Vector, Loki or
Elasticsearch read them (no RFC 7464 record separators, no Twisted internals).  With ``text``
the same event is one readable line: ``ts level component event key=value ...``.
docs/logs.md lists the events and their fields.

Message content and passwords are never logged, at any level: no event carries them, and the
one aiosmtpd record that would (each line of DATA, at debug level) is dropped.  aiosmtpd's own
records (its logger ``mail.log``: every envelope command echoed, "connection lost" after every
QUIT) are chatter next to the delivery line and are written at debug level only.

Events go through ``twisted.logger`` (the stdlib ``logging`` records of libraries are forwarded
into it), so under ``twistd`` they still reach twistd's own log, as readable text.

Metrics are Prometheus counters and histograms (``prometheus_client``), served over HTTP on a
loopback port (``[metrics] port``; 0 disables it).
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
import threading
import time

import prometheus_client
from prometheus_client import Counter, Gauge, Histogram, start_http_server
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    formatEvent,
    globalLogBeginner,
)
from twisted.logger import Logger as _TwistedLogger

from mailstore.errors import BackendUnavailable, MailStoreError

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0)

# Prometheus naming (prometheus.io/docs/practices/naming): one prefix, the unit in the name,
# _total on counters, label values from fixed sets.  docs/metrics.md documents each one, and
# tests/test_metrics.py checks a running server's /metrics against it: change both together.
PREFIX = "hbaseimap_"
SESSIONS = Gauge(PREFIX + "imap_sessions", "IMAP connections open now")
CONNECTIONS = Counter(PREFIX + "imap_connections_total", "IMAP connections accepted")
LOGINS = Counter(PREFIX + "imap_logins_total", "IMAP authentication attempts by outcome",
                 ["outcome"])
COMMANDS = Counter(PREFIX + "imap_commands_total", "IMAP commands by name and outcome",
                   ["command", "outcome"])
COMMAND_SECONDS = Histogram(PREFIX + "imap_command_seconds", "IMAP command latency",
                            ["command"], buckets=LATENCY_BUCKETS)
RECEIVED_BYTES = Counter(PREFIX + "received_bytes_total",
                         "Octets received from clients (inside TLS), by protocol", ["protocol"])
SENT_BYTES = Counter(PREFIX + "sent_bytes_total",
                     "Octets sent to clients (inside TLS), by protocol", ["protocol"])
DELIVERIES = Counter(PREFIX + "deliveries_total",
                     "Recipients accepted at RCPT, by the outcome of their transaction",
                     ["protocol", "outcome"])
REJECTED_RECIPIENTS = Counter(PREFIX + "rejected_recipients_total",
                              "Recipients refused at RCPT, by reason", ["protocol", "reason"])
STORE_SECONDS = Histogram(PREFIX + "store_call_seconds", "Mail store call latency",
                          ["operation"], buckets=LATENCY_BUCKETS)
STORE_ERRORS = Counter(PREFIX + "store_errors_total",
                       "Mail store calls that failed in the backend, by operation",
                       ["operation", "error"])
MANAGESIEVE_SESSIONS = Gauge(PREFIX + "managesieve_sessions", "ManageSieve connections open now")
MANAGESIEVE_CONNECTIONS = Counter(PREFIX + "managesieve_connections_total",
                                  "ManageSieve connections accepted")
MANAGESIEVE_LOGINS = Counter(PREFIX + "managesieve_logins_total",
                             "ManageSieve authentication attempts by outcome", ["outcome"])
MANAGESIEVE_COMMANDS = Counter(PREFIX + "managesieve_commands_total",
                               "ManageSieve commands by name and outcome",
                               ["command", "outcome"])
MANAGESIEVE_COMMAND_SECONDS = Histogram(PREFIX + "managesieve_command_seconds",
                                        "ManageSieve command latency", ["command"],
                                        buckets=LATENCY_BUCKETS)
ERRORS = Counter(PREFIX + "errors_total", "Unexpected errors (bugs), by component",
                 ["component"])

STORE_OPERATIONS = (
    "authenticate", "open_mailbox", "refresh", "list_mailboxes", "mailbox_status",
    "create_mailbox", "delete_mailbox", "rename_mailbox", "subscribe", "unsubscribe",
    "append", "fetch", "read_content", "search", "store_flags", "expunge", "copy", "move",
    "replace", "resolve_recipient", "deliver", "quota", "sieve_scripts", "get_metadata",
    "set_metadata", "other")
"""The values of the ``operation`` label: what a store call does, not the function that
does it ("other" is a call nobody named yet: a bug to report)."""

_KNOWN_COMMANDS: set[str] = set()
UID_COMMANDS = ("COPY", "EXPUNGE", "FETCH", "MOVE", "REPLACE", "SEARCH", "SORT", "STORE",
                "THREAD")
"""UID's sub-commands (RFC 3501 6.4.8, RFC 4315, RFC 6851, RFC 5256): labelled "UID FETCH",
..."""

class Logger:
    """Emits named events with fields for one ``component`` (``imap``, ``lmtp``, ...).

    ``log.info("session", user="max", commands=3)`` is one line: the event name is a short
    stable word (docs/logs.md lists them), the fields are JSON values (strings, numbers,
    booleans, None, lists and dicts of those).  Never pass a password or message content.
    """

    def __init__(self, component: str):
        self.component = component
        self._log = _TwistedLogger(namespace=component)

    def emit(self, level: LogLevel, event: str, **fields) -> None:
        self._log.emit(level, _twisted_format(event, fields), event=event,
                       event_fields=tuple(fields), **fields)

    def debug(self, event: str, **fields) -> None:
        self.emit(LogLevel.debug, event, **fields)

    def info(self, event: str, **fields) -> None:
        self.emit(LogLevel.info, event, **fields)

    def warn(self, event: str, **fields) -> None:
        self.emit(LogLevel.warn, event, **fields)

    def error(self, event: str, **fields) -> None:
        self.emit(LogLevel.error, event, **fields)

    def failure(self, event: str, failure=None, **fields) -> None:
        """An unexpected error, with its traceback (``failure`` defaults to the exception
        being handled)."""
        from twisted.python.failure import Failure
        failure = failure if failure is not None else Failure()
        ERRORS.labels(self.component).inc()
        self._log.failure(_twisted_format(event, fields), failure, LogLevel.critical,
                          event=event, event_fields=tuple(fields), **fields)


def _twisted_format(event: str, fields: dict) -> str:
    """A twisted.logger format string for observers other than ours (twistd's own log), so
    that they write a readable line too; ours renders from the fields."""
    return " ".join([event, *(f"{key}={{{key}}}" for key in fields)])


def command_label(name: str, args=()) -> str:
    """Bound the label set: unknown command names (client garbage) share one label; UID
    commands are labelled with their sub-command (``UID FETCH``)."""
    if not _KNOWN_COMMANDS:
        from .imap.context import known_commands
        _KNOWN_COMMANDS.update(known_commands())
    if name == "UID" and args:
        sub = str(args[0]).upper()
        return f"UID {sub}" if sub in UID_COMMANDS else "unknown"
    return name if name in _KNOWN_COMMANDS else "unknown"


def timed_store_call(operation: str, fn, *args, **kwargs):
    """Run a store call (in a worker thread) and record its latency, and its failure if the
    backend failed (``BackendUnavailable``) or something unexpected was raised.  Domain errors
    (not found, over quota, ...) are answers, not failures.  ``operation`` is one of
    STORE_OPERATIONS."""
    if operation not in STORE_OPERATIONS:
        operation = "other"
    start = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    except BackendUnavailable:
        STORE_ERRORS.labels(operation, "unavailable").inc()
        raise
    except MailStoreError:
        raise
    except Exception:
        STORE_ERRORS.labels(operation, "internal").inc()
        raise
    finally:
        STORE_SECONDS.labels(operation).observe(time.perf_counter() - start)


_LEVEL_NAMES = {LogLevel.debug: "debug", LogLevel.info: "info", LogLevel.warn: "warn",
                LogLevel.error: "error", LogLevel.critical: "error"}
CHATTY_LOGGERS = ("mail.log",)
"""Stdlib loggers whose records are written at debug level whatever they say (aiosmtpd's
protocol trace), except errors."""
_SECRET_RECORDS = {("mail.log", "DATA readline: %s")}
"""(logger, message template) of records never written: aiosmtpd logs each line of a message
at debug level."""


class _ToTwisted(logging.Handler):
    """Forwards stdlib logging records into twisted.logger, as ``message`` events."""

    def emit(self, record: logging.LogRecord) -> None:
        if (record.name, record.msg) in _SECRET_RECORDS:
            return
        level = (LogLevel.error if record.levelno >= logging.ERROR else
                 LogLevel.debug if record.name in CHATTY_LOGGERS else
                 LogLevel.warn if record.levelno >= logging.WARNING else
                 LogLevel.info if record.levelno >= logging.INFO else LogLevel.debug)
        if record.name in CHATTY_LOGGERS and record.levelno >= logging.ERROR:
            # aiosmtpd's "SMTP session exception": an exception from our hooks, a bug.
            ERRORS.labels(_component(record.name)).inc()
        text = record.getMessage()
        if record.exc_info and record.exc_info[0] is not None:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        _TwistedLogger(namespace=_component(record.name)).emit(level, "{text}", text=text)


def _component(logger_name: str) -> str:
    return "aiosmtpd" if logger_name == "mail.log" else logger_name


WORKER: int | None = None
"""In a worker process (imapserver.workers): its number, added to every line as ``worker``."""


def log_record(event: dict) -> dict:
    """The fields of one line for a twisted.logger ``event``: ``ts``, ``level``,
    ``component``, ``event``, then the event's own fields.

    Events of our :class:`Logger` keep their name and fields.  Any other event (Twisted's
    own, a forwarded stdlib record) becomes a ``message`` event whose ``message`` is its
    text.  A failure adds ``error`` (type and message) and ``traceback``.
    """
    when = datetime.datetime.fromtimestamp(event.get("log_time", time.time()),
                                           datetime.UTC)
    namespace = event.get("log_namespace") or "-"
    record = {
        "ts": when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
        "level": _LEVEL_NAMES.get(event.get("log_level"), "info"),
        "component": "twisted" if namespace in ("log_legacy", "-") else namespace,
    }
    names = event.get("event_fields")
    if names is not None and "event" in event:
        record["event"] = event["event"]
        record.update((name, event.get(name)) for name in names)
    else:
        record["event"] = "message"
        record["message"] = (formatEvent(event) or "").strip()
    if WORKER is not None:
        record["worker"] = WORKER
    failure = event.get("log_failure")
    if failure is not None:
        record["error"] = f"{failure.type.__name__}: {failure.getErrorMessage()}"
        record["traceback"] = failure.getTraceback()
    return record


def json_line(record: dict) -> str:
    # ASCII only: anything else as \u escapes, which every JSON reader decodes, whatever the
    # stream's encoding, and a client's bytes that are not UTF-8 (lone surrogates) included.
    return json.dumps(record, default=str, separators=(",", ":")) + "\n"


def text_line(record: dict) -> str:
    """``ts level component event key=value ...``; a value with spaces, quotes or ``=`` is
    JSON-quoted, as are lists and dicts; a traceback follows on indented lines."""
    head = [record["ts"], record["level"], record["component"], record["event"]]
    if record["event"] == "message":
        head.append(record["message"])
    rest = [f"{key}={_text_value(value)}" for key, value in record.items()
            if key not in ("ts", "level", "component", "event", "message", "traceback")]
    line = " ".join(head + rest)
    if "traceback" in record:
        line += "\n" + "\n".join("    " + t for t in record["traceback"].rstrip().splitlines())
    return line + "\n"


def _text_value(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        if value and not any(c in value for c in ' "=\\') and value.isprintable():
            return value
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))


class LineObserver:
    """Writes each event as one line (JSON or text) to a stream, whole lines only: worker
    threads (delivery, store calls) log too.

    In text lines, what the stream's encoding cannot hold is written as backslash escapes: a
    client's bytes that are not UTF-8 (aiosmtpd hands them on as lone surrogates) must not
    cost the line.
    """

    def __init__(self, stream, render):
        self.stream = stream
        self.render = render
        self.encoding = getattr(stream, "encoding", None) or "utf-8"
        self._lock = threading.Lock()

    def __call__(self, event: dict) -> None:
        try:
            line = self.render(log_record(event))
        except Exception as exc:  # a field that will not render must not lose the event
            line = self.render({"ts": "", "level": "error", "component": "log",
                                "event": "unrenderable", "error": repr(exc)})
        line = line.encode(self.encoding, "backslashreplace").decode(self.encoding)
        with self._lock:
            self.stream.write(line)
            self.stream.flush()


_LOG_FILE: list = []
"""(path, LineObserver) of the log file being written, for reopen_log()."""


def start_logging(cfg, stream=None) -> None:
    """Begin logging as ``[log]`` says; call once, before the reactor runs."""
    section = cfg["log"]
    if stream is None:
        stream = sys.stderr if section["file"] == "-" else open(  # noqa: SIM115
            section["file"], "a", encoding="utf-8")
    observer = LineObserver(stream, json_line if section["format"] == "json" else text_line)
    if section["file"] != "-":
        _LOG_FILE[:] = [section["file"], observer]
    predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.levelWithName(
        section["level"]))
    globalLogBeginner.beginLoggingTo([FilteringLogObserver(observer, [predicate])],
                                     redirectStandardIO=False)
    root = logging.getLogger()
    root.addHandler(_ToTwisted())
    debug = section["level"] == "debug"
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    for name in CHATTY_LOGGERS:  # not even formatted unless written
        logging.getLogger(name).setLevel(logging.DEBUG if debug else logging.ERROR)


def reopen_log() -> None:
    """SIGHUP: write to ``[log] file`` anew (logrotate has moved the old one aside)."""
    if not _LOG_FILE:
        return
    path, observer = _LOG_FILE
    stream = open(path, "a", encoding="utf-8")  # noqa: SIM115
    with observer._lock:
        old, observer.stream = observer.stream, stream
    old.close()


def prepare_registry() -> None:
    # Counters' "_created" series double the output for a value nobody graphs, and
    # python_info's labels are version strings: neither is in docs/metrics.md.
    prometheus_client.disable_created_metrics()
    try:
        prometheus_client.REGISTRY.unregister(prometheus_client.PLATFORM_COLLECTOR)
    except KeyError:  # already (a second start in one process)
        pass


def serve_metrics(sock, registry=None):
    """Serve /metrics of ``registry`` (this process's by default) on the listening socket
    ``sock`` from a thread; the HTTP server, to ``shutdown()``."""
    from http.server import ThreadingHTTPServer

    from prometheus_client.exposition import MetricsHandler

    handler = MetricsHandler if registry is None else MetricsHandler.factory(registry)
    server = ThreadingHTTPServer(sock.getsockname()[:2], handler, bind_and_activate=False)
    server.daemon_threads = True
    server.socket.close()
    server.socket = sock
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def start_metrics(cfg, announce) -> object | None:
    """Serve /metrics on ``[metrics] host:port`` (a thread); None when disabled."""
    from .services import listen_port

    port = listen_port(cfg["metrics"]["port"])
    if port is None:
        return None
    prepare_registry()
    host = cfg["metrics"]["host"]
    server, _thread = start_http_server(port, addr=host)
    announce("metrics", host, server.server_port)
    return server
