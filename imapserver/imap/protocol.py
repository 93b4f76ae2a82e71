"""The IMAP connection: receiving commands, running them one at a time, writing responses.

Receiving (RFC 3501 sections 2.2 and 7.5, RFC 7888): a command is lines and literals.  A line
that ends with ``{n}`` announces a synchronizing literal (we answer ``+`` and read n octets),
``{n+}`` a non-synchronizing one (LITERAL+), ``~{n}`` a literal8.  Literals may appear in any
argument.  Literals over ``max_literal_size`` are refused before they are read (synchronizing)
or read and discarded (LITERAL+).  A command holds at most ``SPOOL_ABOVE`` octets of literals
in memory; larger literals, and every literal after that much, are spooled to temporary files,
so a command of many literals cannot grow the process -- except the message of a plain APPEND,
which is stored as it arrives (literal_stream.py).  Lines over ``max_line_length`` are
answered with BAD (tagged, when the line began with a tag) and skipped.

Running: commands are parsed as soon as they arrive (clients pipeline), queued, and executed
strictly one after another: a command's Deferred runs to completion before the next starts, so
responses never interleave and state changes (SELECT, LOGOUT) apply in order.  Store calls run
in the reactor's thread pool.  All responses of a command are written in one call.  At most
``MAX_QUEUED`` commands wait behind the running one; beyond that the connection is not read
until the queue has drained to half, so a client pipelining without end behind a slow command
(a failed LOGIN waits seconds) cannot grow the process.

A line consumer (IDLE's DONE, AUTHENTICATE's SASL responses) takes whole lines instead of the
command parser while it is set.

COMPRESS=DEFLATE (RFC 4978, compress.py) sits between the transport and all of the above: input
is inflated in bounded steps before the parser sees it, each write call's output deflated and
sync-flushed.  Parsing stops after a COMPRESS line until that command has run, since what
follows it is compressed if it succeeds.
"""

from __future__ import annotations

import tempfile
import time
import zlib
from collections import deque

from twisted.internet import defer, protocol
from twisted.internet.interfaces import IPushProducer, ISSLTransport
from zope.interface import implementer

from ..observe import (
    COMMAND_SECONDS,
    COMMANDS,
    CONNECTIONS,
    RECEIVED_BYTES,
    SENT_BYTES,
    SESSIONS,
    Logger,
    command_label,
)
from . import wire
from .compress import Deflate
from .context import Bad, CommandContext, No, dispatch
from .literal_stream import StreamedLiteral, streamable

CRLF = b"\r\n"
SPOOL_ABOVE = 1024 * 1024
"""Literal octets one command may hold in memory; beyond this they go to temporary files."""
READ_SIZE = 64 * 1024
"""Octets read from the socket at a time (Twisted's default ``bufferSize``)..."""
BIG_READ = 1024 * 1024
"""... and while a literal of more than SPOOL_ABOVE octets arrives: a 50 MB APPEND is read in
50 reactor turns instead of 763 (each read's buffer is freed when the next is made)."""
MAX_QUEUED = 100
"""Commands parsed ahead of the running one before the connection stops being read."""
CLOSE_GRACE = 30.0
"""Seconds a closing connection has to deliver its last responses (and, over TLS, exchange
close_notify) before it is aborted: a client that stops reading cannot keep its slot."""


log = Logger("imap")
_SENT = SENT_BYTES.labels("imap")  # the children, looked up once: every write counts
_RECEIVED = RECEIVED_BYTES.labels("imap")


def no_delay(transport) -> None:
    """Turn Nagle's algorithm off (TCP_NODELAY).  Each command's responses go out in one write,
    so there are no tiny segments to coalesce; with Nagle on, the responses to pipelined
    commands (RFC 3501 5.5) after the first waited for the client's delayed ACK: +40 ms per
    command on Linux (bench/RESULTS.md, issue 14).  Over TLS the option is set on the TCP
    transport underneath; a transport without one (a test's) is left alone."""
    for candidate in (transport, getattr(transport, "transport", None)):
        setter = getattr(candidate, "setTcpNoDelay", None)
        if setter is not None:
            try:
                setter(True)
            except OSError:
                pass  # not a TCP socket after all (a UNIX one): nothing to do
            return


class IMAPServerProtocol(protocol.Protocol):
    def __init__(self, server):
        self.server = server
        self.cfg = server.cfg
        self.session = server.new_session(self)
        self._buffer = bytearray()
        self._segments: list = []
        self._literal_left = 0
        self._literal_sink = None
        self._discard_literal = False
        self._skipping_line = False
        self._skipped_tag = b"*"
        self._input_paused = False
        self._literal_held = False  # reading paused for a streamed literal (hold_reading)
        self._output_paused = False
        self._writable_waiters: list[defer.Deferred] = []
        self._held = 0  # octets of the current command's literals held in memory
        self._command_octets = 0  # all literal octets of the command being received
        self._queue: deque = deque()
        self._running = False
        self.line_consumer = None
        self.closed = False
        self.logged_out = False
        self.closing = False
        self.streaming = False  # inside a streamed literal (FETCH): no line may be written
        self._timeout_call = None
        self._abort_call = None
        self._gate = None
        self.deflate: Deflate | None = None  # COMPRESS=DEFLATE once active (RFC 4978)
        self._compress_hold = False  # input held until a parsed COMPRESS has run
        self.bytes_in = self.bytes_out = 0  # octets of IMAP, after TLS: the session line's
        self.ended: str | None = None  # why close() was called (see connectionLost)

    # -- connection -------------------------------------------------------------------------

    def connectionMade(self) -> None:
        # The transport tells this producer when its write buffer is full; then no new command
        # starts (and FETCH waits between batches) until the client has read its responses.
        # Commands then queue up, and past MAX_QUEUED the connection stops being read: memory
        # stays bounded whatever the client does or fails to read.
        self._gate = _OutputGate(self)
        self.transport.registerProducer(self._gate, True)
        no_delay(self.transport)
        self.opened_at = time.monotonic()
        self.remote = getattr(self.transport.getPeer(), "host", "?")
        self.commands = 0
        CONNECTIONS.inc()
        SESSIONS.inc()
        log.debug("connect", remote=self.remote)
        self.server.connection_opened(self)
        if self.logged_out:
            return  # refused with BYE (too many connections): no greeting, no timer
        caps = " ".join(self.session.capabilities())
        self.write_lines([b"* OK [CAPABILITY " + caps.encode() + b"] IMAP4rev1 server ready"])
        self.reset_timeout()

    def connectionLost(self, reason=None) -> None:
        self.closed = True
        SESSIONS.dec()
        log.info("session", user=self.session.user, remote=getattr(self, "remote", None),
                 tls=bool(self.session.tls), commands=getattr(self, "commands", 0),
                 seconds=round(time.monotonic() - getattr(self, "opened_at", time.monotonic()),
                               3), bytes_in=self.bytes_in, bytes_out=self.bytes_out,
                 end=self.ended or "client_closed")
        for call in (self._timeout_call, self._abort_call):
            if call is not None and call.active():
                call.cancel()
        self._release_writers()
        self._clear_queue()
        self._forget_command()
        sink, self._literal_sink = self._literal_sink, None
        if hasattr(sink, "close"):
            sink.close()  # a client that vanished mid-literal leaves no temporary file open
        # A client may vanish mid-IDLE or mid-AUTHENTICATE: end the waiting command.
        consumer, self.line_consumer = self.line_consumer, None
        if consumer is not None:
            consumer.abort()
        self.session.close()
        self.server.connection_closed(self)

    def reset_timeout(self) -> None:
        """Autologout timer (RFC 3501 5.4: at least 30 minutes; IDLE clients re-issue IDLE)."""
        if self.closed or self.closing:
            return
        reactor = self.server.reactor
        seconds = self.cfg["imap"]["idle_timeout"]
        if self.line_consumer is not None and getattr(self.line_consumer, "idle", False):
            seconds = max(seconds, 29 * 60) * 2  # IDLE: longer, RFC 2177 suggests re-issuing
        if self._timeout_call is not None and self._timeout_call.active():
            self._timeout_call.reset(seconds)
        else:
            self._timeout_call = reactor.callLater(seconds, self._timed_out)

    def _timed_out(self) -> None:
        self.close(b"* BYE Autologout; idle for too long", "autologout")

    def close(self, bye: bytes | None = None, reason: str = "logout") -> None:
        """Close the connection once what was written has gone out: the one way the server
        ends a connection (LOGOUT, autologout, too many connections, shutdown, errors).

        ``bye`` (an untagged BYE line, RFC 3501 7.1.5) is written first, unless a streamed
        literal is half sent (a line there would become literal data).  Nothing is read or
        written afterwards (RFC 3501 6.1.3: the server closes the connection after LOGOUT's
        OK).  The output gate is unregistered first: Twisted's TLS layer sends close_notify
        and closes the socket only once no producer is registered, so over TLS (implicit or
        after STARTTLS) loseConnection alone would leave the connection open forever.  A
        client that does not read what is left is cut off after CLOSE_GRACE seconds.

        Over TLS the server sends its close_notify and closes without waiting for the
        client's (RFC 8446 6.1 allows it), as Dovecot does: a client that is silent, or that
        reads the close but never answers it, must not keep its connection slot.

        ``reason`` is how the session ended, for its log line (docs/logs.md).
        """
        if self.closed or self.closing:
            return
        self.ended = reason
        if bye is not None and not self.streaming:
            self.write_lines([bye])
        self.closing = True
        self.logged_out = True
        if self._timeout_call is not None and self._timeout_call.active():
            self._timeout_call.cancel()
        if self._gate is not None:
            self._gate = None
            self.transport.unregisterProducer()
        self._release_writers()
        self._close_tls_one_way()
        self.transport.loseConnection()
        self._abort_call = self.server.reactor.callLater(CLOSE_GRACE, self._abort)

    def _close_tls_one_way(self) -> None:
        """Let the TLS shutdown complete once our close_notify is sent (see close)."""
        if not ISSLTransport.providedBy(self.transport):
            return
        from OpenSSL import SSL
        handle = self.transport.getHandle()
        # Only after the handshake: before it, OpenSSL would take the flag for the client's
        # close and stop the handshake that must carry the BYE; that case waits (or aborts
        # after CLOSE_GRACE).
        if isinstance(handle, SSL.Connection) and handle.get_peer_finished() is not None:
            handle.set_shutdown(handle.get_shutdown() | SSL.RECEIVED_SHUTDOWN)

    def _abort(self) -> None:
        if not self.closed:
            log.info("close_timeout", remote=getattr(self, "remote", None))
            self.transport.abortConnection()

    def _release_writers(self) -> None:
        """Wake whatever waits for the client to read (they see the connection closing)."""
        self._output_paused = False
        waiters, self._writable_waiters = self._writable_waiters, []
        for d in waiters:
            d.callback(None)

    # -- output -----------------------------------------------------------------------------

    def write_lines(self, lines: list[bytes]) -> None:
        """Write whole response lines (each without CRLF) in one call."""
        if self.closed or self.closing or not lines:
            return
        # One joined buffer: the transport's writeSequence checks and copies each piece, which
        # for 100 FETCH lines cost more than the join (issue 14).
        self._send([CRLF.join(lines) + CRLF])

    def write_raw(self, data: list[bytes]) -> None:
        if not (self.closed or self.closing):
            self._send(data)

    def _send(self, data: list[bytes]) -> None:
        """Write, counting octets as they go to the transport (compressed once COMPRESS is
        active, as they are counted on input: inside TLS, docs/logs.md)."""
        if self.deflate is not None:
            # One flushed block per write call (RFC 4978 4): nothing waits in the compressor.
            data = [self.deflate.compress(data)]
        size = sum(map(len, data))
        self.bytes_out += size
        _SENT.inc(size)
        self.transport.writeSequence(data)

    def start_compression(self) -> None:
        """COMPRESS answered OK (RFC 4978 3): from here on both directions are DEFLATE.
        Octets the client sent after the COMPRESS line are already compressed; parsing was
        held at that line (see _enqueue), so they are still in the buffer, unparsed."""
        self.deflate = Deflate()
        raw, self._buffer = bytes(self._buffer), bytearray()
        self.deflate.feed(raw)

    def cut(self, reason: str) -> None:
        """Close a connection whose output can no longer be kept in step with what it
        announced (a literal cut short, RFC 3501 4.3): nothing more is written -- not even a
        tagged response, which the client would read as literal octets -- and nothing more is
        read.  The client sees the connection end inside the literal and cannot mistake what
        it got for the whole."""
        if self.closed or self.closing:
            return
        log.warn("connection_cut", user=self.session.user,
                 remote=getattr(self, "remote", None), reason=reason)
        self.streaming = True  # no BYE either: it would land inside the literal
        self.close(reason="cut")

    # -- input ------------------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self.logged_out:
            return  # nothing is read (or answered) after LOGOUT
        self.bytes_in += len(data)  # as received: compressed, once COMPRESS is active
        _RECEIVED.inc(len(data))
        self.reset_timeout()
        try:
            if self.deflate is None:
                if self._literal_left and not self._buffer and not self._input_paused:
                    data = self._literal_direct(data)
                self._buffer += data
                self._consume()
            else:
                self._consume_compressed(data)
        except zlib.error:
            self.close(b"* BYE Invalid compressed data", "error")
        except Exception:
            log.failure("input_failed")  # counted in errors_total
            self.close(b"* BYE Internal error", "error")

    def _literal_direct(self, data: bytes) -> bytes:
        """Hand the part of ``data`` that belongs to the literal being received straight to
        its sink, not through the line buffer (which copies it in, out and shifts it: three
        copies of each octet of a 50 MB APPEND); return the rest, for the parser."""
        take = min(self._literal_left, len(data))
        if not self._discard_literal:
            self._literal_sink.write(data if take == len(data) else data[:take])
        self._literal_left -= take
        if self._literal_left == 0:
            self._finish_literal()
        return data[take:] if take < len(data) else b""

    def _consume_compressed(self, data: bytes) -> None:
        """Inflate in bounded steps, parsing each before making the next (compress.py)."""
        self.deflate.feed(data)
        while not self.logged_out and not self._input_paused and not self._literal_held:
            # Held for a streamed literal: what is still compressed stays so (a read of 1 MiB
            # may inflate to far more), until the store has caught up (hold_reading).
            if self._buffer:
                self._consume()
                if self._input_paused or self.logged_out or self._literal_held:
                    return
            chunk = self.deflate.inflate()
            if not chunk:
                return
            self._buffer += chunk

    def _consume(self) -> None:
        max_line = self.cfg["imap"]["max_line_length"]
        while self._buffer and not self.logged_out and not self._input_paused \
                and not self._literal_held:
            if self._literal_left:
                take = min(self._literal_left, len(self._buffer))
                if not self._discard_literal:
                    self._literal_sink.write(bytes(self._buffer[:take]))
                del self._buffer[:take]
                self._literal_left -= take
                if self._literal_left == 0:
                    self._finish_literal()
                continue
            end = self._buffer.find(b"\n")
            if end < 0:
                if len(self._buffer) > max_line:
                    if not self._skipping_line:
                        # Keep the tag, so that the client waiting for it gets its BAD.
                        self._skipped_tag = bytes(self._buffer[:64]).split(b" ", 1)[0]
                    self._skipping_line = True
                    self._buffer.clear()
                return
            line = bytes(self._buffer[:end])
            del self._buffer[:end + 1]
            if line.endswith(b"\r"):
                line = line[:-1]
            if self._skipping_line or len(line) > max_line:
                if self._skipping_line:
                    tag = self._skipped_tag
                else:
                    tag = line.split(b" ", 1)[0] if line else b"*"
                if self._segments and isinstance(self._segments[0], bytes):
                    tag = self._segments[0].split(b" ", 1)[0]  # the line continued a command
                self._skipping_line = False
                self._forget_command()
                self._reject_line(tag, "line too long")
                continue
            if self.line_consumer is not None and not self._segments:
                self.line_consumer.line_received(line)
                continue
            self._line(line)

    def _line(self, line: bytes) -> None:
        literal = _literal_announcement(line)
        if literal is None:
            self._segments.append(line)
            segments, self._segments = self._segments, []
            self._held = 0
            self._command_octets = 0
            if self._discard_literal:
                self._discard_literal = False
                close_streams(segments)
                return  # the command was already refused when its literal was
            self._enqueue(segments)
            return
        size, sync, _binary = literal
        self._segments.append(line)
        limit = self.cfg["imap"]["max_literal_size"]
        total_limit = self.cfg["imap"]["max_command_size"]
        self._command_octets += size
        if size > limit or self._command_octets > total_limit:
            tag = self._segments[0].split(b" ", 1)[0]
            what = (b"Literal larger than %d octets" % limit if size > limit else
                    b"Command literals larger than %d octets in all" % total_limit)
            self.write_lines([tag + b" NO [TOOBIG] " + what])
            if sync:
                # The client will not send it; forget the command.
                self._forget_command()
                return
            self._discard_literal = True  # LITERAL+: it is coming anyway; swallow it
            self._literal_left = size
            if size == 0:
                self._finish_literal()
            return
        if self._held + size > SPOOL_ABOVE:
            if size > SPOOL_ABOVE and streamable(self, line, len(self._segments) == 1):
                self._literal_sink = StreamedLiteral(self, size)  # stored as it arrives
            else:
                self._literal_sink = tempfile.TemporaryFile()
            if size > SPOOL_ABOVE:
                self._read_size(BIG_READ)
        else:
            self._literal_sink = _Bytes()
            self._held += size
        self._literal_left = size
        if sync:
            self.write_lines([b"+ Ready for literal data"])
        if size == 0:
            self._finish_literal()

    def _read_size(self, size: int) -> None:
        """How many octets the socket is read by at a time (Twisted's ``bufferSize``; over
        TLS, that of the TCP transport underneath), as no_delay finds it."""
        for candidate in (self.transport, getattr(self.transport, "transport", None)):
            if isinstance(getattr(candidate, "bufferSize", None), int):
                candidate.bufferSize = size

    def _finish_literal(self) -> None:
        self._read_size(READ_SIZE)
        if self._discard_literal:
            self._segments.append(b"")
            return
        sink, self._literal_sink = self._literal_sink, None
        value = sink.getvalue() if isinstance(sink, _Bytes) else sink
        if isinstance(value, StreamedLiteral):
            value.end()
        elif not isinstance(value, bytes):
            value.seek(0)
        self._segments.append(value)

    def _forget_command(self) -> None:
        """Drop a partly received command (its spooled literals are closed)."""
        for segment in self._segments:
            if hasattr(segment, "close"):
                segment.close()
        self._segments = []
        self._held = 0
        self._command_octets = 0
        self._discard_literal = False

    def discard_pending_input(self) -> None:
        """Forget everything received but not yet run: buffered bytes, a partly received
        command, queued commands.  STARTTLS calls this (RFC 3501 6.2.1): commands that came
        in the clear before the TLS handshake must not run inside the TLS session."""
        self._buffer.clear()
        self._forget_command()
        self._clear_queue()

    def _clear_queue(self) -> None:
        """Drop the commands not run yet, removing what their streamed literals stored."""
        for tokens in self._queue:
            if isinstance(tokens, list):
                close_streams(tokens)
        self._queue.clear()

    def _reject_line(self, tag: bytes, reason: str) -> None:
        tag = tag if _valid_tag(tag) else b"*"
        self.write_lines([tag + b" BAD " + reason.encode()])

    # -- the command queue ------------------------------------------------------------------

    def _enqueue(self, segments: list) -> None:
        try:
            tokens = wire.tokenize(segments)
        except wire.ParseError as exc:
            close_streams(segments)
            head = segments[0].split(b" ", 1)[0] if segments and isinstance(segments[0], bytes) \
                else b"*"
            self._reject_line(head, f"Parse error: {exc}")
            return
        if not tokens:
            self._reject_line(b"*", "Empty command line")
            return
        self._queue.append(tokens)
        if self._is_compress(tokens):
            # What follows COMPRESS may be compressed (RFC 4978 3): parse nothing more until
            # it has run; _execute resumes reading after it.
            self._compress_hold = True
            if not self._input_paused:
                self._input_paused = True
                self.transport.pauseProducing()
        elif len(self._queue) >= MAX_QUEUED and not self._input_paused:
            self._input_paused = True  # _consume stops; the rest stays in the buffer
            self.transport.pauseProducing()
        if not self._running:
            self._run_next()

    def run_soon(self, job) -> None:
        """Run ``job()`` (it may return a Deferred) in the command queue: after the command
        running now, before those queued behind it, never in the middle of one's responses.
        NOTIFY (RFC 5465) delivers its unsolicited responses so."""
        if self.closed or self.closing:
            return
        self._queue.appendleft(job)
        if not self._running:
            self._run_next()

    def wait_writable(self) -> defer.Deferred:
        """A Deferred that fires once the client has read enough of what was written (at
        once when the connection is closing)."""
        if not self._output_paused or self.closed or self.closing:
            return defer.succeed(None)
        d = defer.Deferred()
        self._writable_waiters.append(d)
        return d

    def _output_resumed(self) -> None:
        self._release_writers()
        if not self._running and not self.closed:
            self._run_next()
            self._resume_input()

    def _run_next(self) -> None:
        while self._queue and not self.closed and not self.logged_out \
                and not self.server.stopping and not self._output_paused:
            tokens = self._queue.popleft()
            self._running = True
            d = defer.maybeDeferred(self._execute, tokens)
            if not d.called:
                d.addBoth(self._command_done)
                return
            d.addBoth(lambda _: None)
        self._running = False

    def _command_done(self, _result) -> None:
        self._running = False
        if not self.closed:
            self._run_next()
            self._resume_input()

    def hold_reading(self, held: bool) -> None:
        """Stop reading the connection (a streamed literal's store is behind), or read again
        unless the command queue still holds it (literal_stream.py)."""
        self._literal_held = held
        if self.closed:
            return
        if held:
            self.transport.pauseProducing()
        elif not self._input_paused:
            self.transport.resumeProducing()
            if self._buffer or (self.deflate is not None and self.deflate.pending):
                # Parsing stopped with input left (see _consume): go on, from the reactor,
                # not from inside the literal's write that let go.
                self.server.reactor.callLater(0, self._go_on)

    def _go_on(self) -> None:
        if not (self.closed or self._literal_held or self._input_paused):
            self.dataReceived(b"")

    def _resume_input(self) -> None:
        """Read again once the queue has drained to half (see MAX_QUEUED)."""
        if not self._input_paused or self.closed or self._compress_hold \
                or len(self._queue) >= MAX_QUEUED // 2:
            return
        self._input_paused = False
        if not self._literal_held:
            self.transport.resumeProducing()
        if self._buffer or (self.deflate is not None and self.deflate.pending):
            self.dataReceived(b"")  # what was left unparsed when reading stopped

    @defer.inlineCallbacks
    def _execute(self, tokens: list):
        if callable(tokens):  # a job from run_soon, not a command
            yield tokens()
            return
        try:
            yield self._execute_command(tokens)
        finally:
            # Whatever became of the command (BAD before its handler ran, say), a streamed
            # literal it did not give to the store is removed (literal_stream.py).
            close_streams(tokens)
            if self._compress_hold and self._is_compress(tokens):
                self._compress_hold = False  # held since its line was parsed (_enqueue)
                self._resume_input()

    @staticmethod
    def _is_compress(tokens: list) -> bool:
        name = tokens[1] if len(tokens) > 1 else None
        return isinstance(name, wire.Atom) and name.upper() == "COMPRESS"

    @defer.inlineCallbacks
    def _execute_command(self, tokens: list):
        tag = tokens[0]
        if not isinstance(tag, wire.Atom) or not _valid_tag(tag.encode()):
            self._reject_line(b"*", "Missing or invalid tag")
            return
        if len(tokens) < 2 or not isinstance(tokens[1], wire.Atom):
            self.write_lines([tag.encode() + b" BAD Missing command"])
            return
        ctx = CommandContext(self, tag, tokens[1].upper(), tokens[2:])
        label = command_label(ctx.name, ctx.args)  # before UID's handler consumes its arg
        self.commands += 1
        started = time.perf_counter()
        outcome = "OK"
        try:
            yield dispatch(ctx)
        except Bad as exc:
            outcome = "BAD"
            ctx.finish(b"BAD", exc.text, exc.code)
        except No as exc:
            outcome = "NO"
            ctx.finish(b"NO", exc.text, exc.code)
        except wire.ParseError as exc:  # an argument found malformed by its handler (as_text)
            outcome = "BAD"
            ctx.finish(b"BAD", str(exc))
        except Exception as exc:  # a bug or a store failure: answer, keep the session
            outcome = "NO"
            code, text = self.server.describe_error(exc)
            if code is None:
                log.failure("command_failed", command=ctx.name)
            elif code == "UNAVAILABLE":     # an outage: say where, once per failed command
                log.warn("store_unavailable", command=ctx.name, user=self.session.user,
                         error=str(exc))
            ctx.finish(b"NO", text, code)
        else:
            if not ctx.finished:
                ctx.finish(b"OK", f"{ctx.name} completed")
        COMMANDS.labels(label, outcome).inc()
        if label != "IDLE":  # IDLE lasts as long as the client wants; not a latency
            COMMAND_SECONDS.labels(label).observe(time.perf_counter() - started)


@implementer(IPushProducer)
class _OutputGate:
    """The connection as the producer of its responses (see connectionMade)."""

    def __init__(self, conn):
        self.conn = conn

    def pauseProducing(self) -> None:
        self.conn._output_paused = True

    def resumeProducing(self) -> None:
        self.conn._output_paused = False
        self.conn._output_resumed()

    def stopProducing(self) -> None:
        self.conn._release_writers()


class _Bytes:
    """An in-memory literal sink with the file methods the receiver uses."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.parts.append(data)

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


def close_streams(items: list) -> None:
    """Close the streamed literals among a command's segments or tokens (lists included)."""
    for item in items:
        if isinstance(item, list):
            close_streams(item)
        elif isinstance(item, StreamedLiteral):
            item.close()


def _literal_announcement(line: bytes) -> tuple[int, bool, bool] | None:
    """(size, synchronizing, literal8) if the line ends with a literal announcement."""
    if not line.endswith(b"}"):
        return None
    start = line.rfind(b"{")
    if start < 0:
        return None
    body = line[start + 1:-1]
    sync = not body.endswith(b"+")
    if not sync:
        body = body[:-1]
    if not body.isdigit() or len(body) > 18:
        return None
    binary = start > 0 and line[start - 1:start] == b"~"
    return int(body), sync, binary


def _valid_tag(tag: bytes) -> bool:
    return bool(tag) and tag != b"*" and all(
        33 <= c < 127 and c not in b'(){%*"\\+' for c in tag)
