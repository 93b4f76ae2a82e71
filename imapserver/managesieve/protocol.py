"""The ManageSieve connection: reading commands, running them one at a time, writing responses.

Receiving (RFC 5804 4): a command is a line, or lines joined by literals.  A line that ends
with ``{n+}`` (literal-c2s) announces n octets that follow at once.  ``{n}`` is accepted the
same way: ManageSieve has no continuation response, so a client sending it sends the octets
at once too (Dovecot accepts both).  A literal over the limit (``[managesieve]
max_script_size``; a command's literals together at most that plus ``max_line_length``) is
read and thrown away and the command answered NO (``QUOTA/MAXSIZE`` for PUTSCRIPT and
CHECKSCRIPT, RFC 5804 2.6); a line over ``max_line_length`` gets ``BYE`` and the connection
is closed, as nothing after it could be parsed with confidence.

Running: commands are queued as they arrive and run strictly in order, each to its final
OK/NO before the next starts; store calls run in the server's thread pool.  At most
MAX_QUEUED commands wait; beyond that the connection is not read until the queue drains, and
no command starts while the client is not reading its responses (the output gate), so memory
stays bounded whatever the client does.

A line consumer (AUTHENTICATE's SASL responses) takes the next whole line instead of the
command queue while it is set.
"""

from __future__ import annotations

import re
import time
from collections import deque

from twisted.internet import defer, protocol
from twisted.internet.interfaces import IPushProducer, ISSLTransport
from zope.interface import implementer

from mailstore.errors import MailStoreError

from ..observe import (
    MANAGESIEVE_COMMAND_SECONDS,
    MANAGESIEVE_COMMANDS,
    MANAGESIEVE_CONNECTIONS,
    MANAGESIEVE_SESSIONS,
    RECEIVED_BYTES,
    SENT_BYTES,
    Logger,
)
from . import (
    commands,  # noqa: F401  (registers every command)
    wire,
)
from .commands.basic import capability_lines
from .context import NOT_AUTH, CommandContext, No, lookup

CRLF = b"\r\n"
MAX_QUEUED = 50
"""Commands parsed ahead of the running one before the connection stops being read."""
MAX_INVALID_BEFORE_LOGIN = 3
"""Refused commands before authentication after which the connection is closed."""
DISCARD_AT_MOST = 16 * 1024 * 1024
"""An oversize literal is read and dropped (the command answered NO) up to this size, or 16
times the script size limit; a larger one ends the connection with BYE."""
CLOSE_GRACE = 30.0
"""Seconds a closing connection has to take its last responses before it is aborted."""

_LITERAL = re.compile(rb"\{([0-9]{1,10})(\+?)\}$")

log = Logger("managesieve")
_SENT = SENT_BYTES.labels("managesieve")
_RECEIVED = RECEIVED_BYTES.labels("managesieve")


class ManageSieveProtocol(protocol.Protocol):
    def __init__(self, server):
        self.server = server
        self.cfg = server.cfg["managesieve"]
        self.session = server.new_session(self)
        self._buffer = bytearray()
        self._segments: list = []
        self._literal_left = 0
        self._literal: bytearray | None = None      # None while discarding an oversize one
        self._oversize = False
        self._command_octets = 0
        self._queue: deque = deque()
        self._running = False
        self._input_paused = False
        self._output_paused = False
        self._gate = None
        self._timeout_call = None
        self._abort_call = None
        self.line_consumer = None
        self.closed = self.closing = False
        self.bytes_in = self.bytes_out = 0
        self.commands = 0
        self._invalid = 0
        self.ended: str | None = None

    # -- connection -------------------------------------------------------------------------

    def connectionMade(self) -> None:
        self._gate = _OutputGate(self)
        self.transport.registerProducer(self._gate, True)
        self.opened_at = time.monotonic()
        self.remote = getattr(self.transport.getPeer(), "host", "?")
        MANAGESIEVE_CONNECTIONS.inc()
        MANAGESIEVE_SESSIONS.inc()
        log.debug("connect", remote=self.remote)
        if not self.server.connection_opened(self):
            self.close(wire.response(b"BYE", "Too many connections, try again later"),
                       "too_many_connections")
            return
        # RFC 5804 1.7: the greeting is the capability listing and an OK.
        self.write_lines([*capability_lines(self.session),
                          wire.response(b"OK", "ManageSieve server ready")])
        self.reset_timeout()

    def connectionLost(self, reason=None) -> None:
        self.closed = True
        MANAGESIEVE_SESSIONS.dec()
        log.info("session", user=self.session.user, remote=getattr(self, "remote", None),
                 tls=self.session.tls, commands=self.commands,
                 seconds=round(time.monotonic() - getattr(self, "opened_at", time.monotonic()),
                               3), bytes_in=self.bytes_in, bytes_out=self.bytes_out,
                 end=self.ended or "client_closed")
        for call in (self._timeout_call, self._abort_call):
            if call is not None and call.active():
                call.cancel()
        self._queue.clear()
        consumer, self.line_consumer = self.line_consumer, None
        if consumer is not None:
            consumer.abort()
        self.server.connection_closed(self)

    def reset_timeout(self) -> None:
        """RFC 5804 does not fix a time; ``[managesieve] idle_timeout`` (default 30 min)."""
        if self.closed or self.closing:
            return
        seconds = self.cfg["idle_timeout"]
        if self._timeout_call is not None and self._timeout_call.active():
            self._timeout_call.reset(seconds)
        else:
            self._timeout_call = self.server.reactor.callLater(seconds, self._timed_out)

    def _timed_out(self) -> None:
        self.close(wire.response(b"BYE", "Disconnected for inactivity"), "autologout")

    def close(self, bye: bytes | None = None, reason: str = "logout") -> None:
        """Close once what was written has gone out; ``bye`` (a BYE response, RFC 5804 1.3)
        is written first.  The output gate is unregistered first, else Twisted's TLS layer
        never sends close_notify; the client's close_notify is not waited for (RFC 8446 6.1),
        and a client that does not read is cut off after CLOSE_GRACE seconds."""
        if self.closed or self.closing:
            return
        self.ended = reason
        if bye is not None:
            self.write_lines([bye])
        self.closing = True
        if self._timeout_call is not None and self._timeout_call.active():
            self._timeout_call.cancel()
        if self._gate is not None:
            self._gate = None
            self.transport.unregisterProducer()
        if ISSLTransport.providedBy(self.transport):
            from OpenSSL import SSL
            handle = self.transport.getHandle()
            if isinstance(handle, SSL.Connection) and handle.get_peer_finished() is not None:
                handle.set_shutdown(handle.get_shutdown() | SSL.RECEIVED_SHUTDOWN)
        self.transport.loseConnection()
        self._abort_call = self.server.reactor.callLater(CLOSE_GRACE, self._abort)

    def _abort(self) -> None:
        if not self.closed:
            self.transport.abortConnection()

    # -- output -----------------------------------------------------------------------------

    def write_lines(self, lines: list[bytes]) -> None:
        """Write whole response lines (each without its final CRLF) in one call."""
        if self.closed or self.closing or not lines:
            return
        data = []
        for line in lines:
            data += [line, CRLF]
        size = sum(map(len, data))
        self.bytes_out += size
        _SENT.inc(size)
        self.transport.writeSequence(data)

    # -- input ------------------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self.closing or self.closed:
            return
        self.bytes_in += len(data)
        _RECEIVED.inc(len(data))
        self.reset_timeout()
        self._buffer += data
        self._consume_safely()

    def _consume_safely(self) -> None:
        try:
            self._consume()
        except Exception:
            log.failure("input_failed")
            self.close(wire.response(b"BYE", "Internal error"), "error")

    def _consume(self) -> None:
        max_line = self.cfg["max_line_length"]
        while self._buffer and not self._input_paused and not self.closing:
            if self._literal_left:
                take = min(self._literal_left, len(self._buffer))
                if self._literal is not None:
                    self._literal += self._buffer[:take]
                del self._buffer[:take]
                self._literal_left -= take
                if not self._literal_left:
                    self._end_literal()
                continue
            end = self._buffer.find(b"\n")
            if end < 0:
                if len(self._buffer) > max_line:
                    self._line_too_long()
                return
            line = bytes(self._buffer[:end])
            del self._buffer[:end + 1]
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > max_line:
                self._line_too_long()
                return
            announced = _LITERAL.search(line)
            if announced is None:
                self._segments.append(line)
                self._command_complete()
                continue
            self._segments.append(line[:announced.start()])
            self._start_literal(int(announced.group(1)))

    def _line_too_long(self) -> None:
        self.close(wire.response(b"BYE", f"Line longer than {self.cfg['max_line_length']} "
                                 "octets"), "line_too_long")

    def _start_literal(self, size: int) -> None:
        limit = self.cfg["max_script_size"]
        if size > max(DISCARD_AT_MOST, 16 * limit):
            # Reading that much only to throw it away serves no client: close instead.
            self.close(wire.response(b"BYE", f"Literal of {size} octets is far over the "
                                     f"limit of {limit}"), "literal_too_large")
            return
        self._command_octets += size
        if size > limit or self._command_octets > limit + self.cfg["max_line_length"]:
            self._oversize = True
            self._literal = None    # read and dropped: the octets are on their way anyway
        else:
            self._literal = bytearray()
        self._literal_left = size
        if size == 0:
            self._end_literal()

    def _end_literal(self) -> None:
        if self._literal is not None:
            self._segments.append(wire.Literal(bytes(self._literal)))
        self._literal = None

    def _command_complete(self) -> None:
        segments, oversize = self._segments, self._oversize
        self._segments, self._oversize, self._command_octets = [], False, 0
        if self.line_consumer is not None:
            if oversize:
                segments = []   # refused as "not one string"
            self.line_consumer.received(segments)
            return
        self._queue.append((segments, oversize))
        if len(self._queue) >= MAX_QUEUED:
            self._input_paused = True
            self.transport.pauseProducing()
        self._run_next()

    def discard_pending_input(self) -> None:
        """Forget what the client sent after the current command (see STARTTLS)."""
        self._buffer.clear()
        self._queue.clear()
        self._segments, self._oversize, self._command_octets = [], False, 0
        self._literal_left, self._literal = 0, None

    # -- running ----------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """A command is running (graceful shutdown waits for it)."""
        return self._running and not self.closed

    def _run_next(self) -> None:
        if self._running or self._output_paused or not self._queue or self.closing:
            return
        segments, oversize = self._queue.popleft()
        self._running = True
        self.commands += 1
        d = self._execute(segments, oversize)
        d.addBoth(self._command_done)

    def _command_done(self, _result) -> None:
        self._running = False
        if self._input_paused and len(self._queue) <= MAX_QUEUED // 2 and not self.closing:
            self._input_paused = False
            self.transport.resumeProducing()
            self._consume_safely()
        self._run_next()

    def output_paused(self, paused: bool) -> None:
        self._output_paused = paused
        if not paused:
            self._run_next()

    def _execute(self, segments: list, oversize: bool) -> defer.Deferred:
        started = time.monotonic()
        label = "unknown"
        try:
            name, args = wire.tokenize(segments)
        except wire.SyntaxFault as exc:
            return self._answered(label, started, b"NO", str(exc))
        entry = lookup(name)
        if entry is None:
            return self._answered(label, started, b"NO", f"Unknown command {name[:40]}")
        label = name
        if oversize:
            code = "QUOTA/MAXSIZE" if name in ("PUTSCRIPT", "CHECKSCRIPT") else None
            return self._answered(label, started, b"NO", "Argument too large "
                                  f"(at most {self.cfg['max_script_size']} octets)", code)
        handler, states = entry
        if self.session.state not in states:
            return self._answered(label, started, b"NO", "Authenticate first"
                                  if self.session.state == NOT_AUTH else "Already authenticated")
        ctx = CommandContext(self, name, args)
        d = defer.maybeDeferred(handler, ctx)
        d.addErrback(self._failed, ctx)
        d.addCallback(lambda _: self._count(label, ctx.status, started))
        return d

    def _answered(self, label: str, started: float, status: bytes, text: str,
                  code: str | None = None) -> defer.Deferred:
        """A command refused before it ran (unparseable, unknown, wrong state)."""
        if self.session.state == NOT_AUTH:
            # Before login, a client that keeps sending what cannot run is not a ManageSieve
            # client (a port scanner, a confused protocol): the third such command ends the
            # connection, as Dovecot's managesieve-login does.
            self._invalid += 1
            if self._invalid >= MAX_INVALID_BEFORE_LOGIN:
                self._count(label, b"BYE", started)
                self.close(wire.response(b"BYE", "Too many invalid commands"),
                           "too_many_errors")
                return defer.succeed(None)
        self.write_lines([wire.response(status, text, code)])
        self._count(label, status, started)
        return defer.succeed(None)

    def _count(self, label: str, status: bytes | None, started: float) -> None:
        outcome = (status or b"NO").decode()
        MANAGESIEVE_COMMANDS.labels(label, outcome).inc()
        MANAGESIEVE_COMMAND_SECONDS.labels(label).observe(time.monotonic() - started)

    def _failed(self, failure, ctx: CommandContext) -> None:
        exc = failure.value
        ctx.lines = []      # a half-built answer is not sent before the NO
        if isinstance(exc, No):
            ctx.finish(b"NO", exc.text, exc.code)
        elif isinstance(exc, MailStoreError):
            code, text = self.server.describe_error(exc)
            ctx.finish(b"NO", text, code)
        else:
            log.failure("command_failed", failure, command=ctx.name)
            ctx.finish(b"NO", "Internal server error")


@implementer(IPushProducer)
class _OutputGate:
    """Told by the transport when its write buffer fills and drains: no command starts while
    the client is not reading its responses."""

    def __init__(self, conn: ManageSieveProtocol):
        self.conn = conn

    def pauseProducing(self) -> None:
        self.conn.output_paused(True)

    def resumeProducing(self) -> None:
        self.conn.output_paused(False)

    def stopProducing(self) -> None:
        pass
