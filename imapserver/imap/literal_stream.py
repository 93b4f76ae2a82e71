"""An APPEND's message literal stored as it arrives, instead of spooled first (issue 14).

A literal over ``SPOOL_ABOVE`` octets used to go to a temporary file, read back once the
command was whole: a 50 MB APPEND wrote the message twice and read it once, and did not start
storing it before its last octet had arrived.  When the literal is the message of a plain
``APPEND mailbox [flags] [date-time] {n}`` (RFC 3501 6.3.11; not CATENATE, UTF8 or a second
MULTIAPPEND message, which keep the spool) of an authenticated session, its octets go instead
to the store's :meth:`~mailstore.store.MailStore.ingestion`, a thread-pool call per
``HAND_OFF`` octets, one call at a time, in order.  Reading the socket stops while more than
``QUEUE_LIMIT`` octets wait for the store, so memory stays bounded whatever the two speeds.

The command then runs as usual; APPEND waits for the content (:meth:`ready`) and gives it to
``MailStore.append``, which owns it from then on (:meth:`take`).  Anything else that becomes
of the literal -- NO or BAD (no such mailbox, over quota, too large, a bad flag), a client
that disconnects mid-literal, a command never run -- ends in :meth:`close`, which removes
what was written (never referenced: no grace period is needed).  A server killed meanwhile
leaves content without its info row, which ``mailadmin fsck --repair`` removes (as for a
spooled APPEND killed while storing).
"""

from __future__ import annotations

import re

from twisted.internet import defer, threads

from ..observe import Logger

HAND_OFF = 1024 * 1024
"""Octets handed to the store per thread-pool call (four 256 KiB chunks)."""
QUEUE_LIMIT = 2 * 1024 * 1024
"""Octets received and not yet stored beyond which the connection is not read."""

_PLAIN_APPEND = re.compile(rb"[^ ]+ APPEND [^{}~]*\{[0-9]+\+?\}", re.IGNORECASE)

log = Logger("imap")


def streamable(conn, line: bytes, first_literal: bool) -> bool:
    """Whether the literal ``line`` announces is the message of a plain APPEND that can be
    stored as it arrives: the command's first literal, no CATENATE (its parts are not the
    message), no ``UTF8 (~{n})``, and a session that has logged in (nothing is written to the
    store for a client that has not)."""
    return (first_literal and conn.session.user is not None
            and _PLAIN_APPEND.fullmatch(line) is not None and b"CATENATE" not in line.upper())


class StreamedLiteral:
    """The sink of one streamed literal (the protocol writes to it, then calls :meth:`end`),
    and afterwards the command argument standing for the message."""

    def __init__(self, conn, size: int):
        self.conn = conn
        self.size = size
        self._store = conn.server.store
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._busy = False          # a store call is running
        self._ended = False         # the literal's last octet has arrived
        self._ingestion = None      # made by the first store call
        self._stored = None         # the StoredContent once finished
        self._failed = False
        self._claimed = False       # MailStore.append owns the content
        self._closed = False
        self._held = False          # reading the connection is paused for us
        self._done: defer.Deferred = defer.Deferred()

    # -- the protocol's side (reactor thread) --------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._failed or self._closed:
            return  # the rest of the literal is read and dropped
        self._pending.append(data)
        self._pending_size += len(data)
        if self._pending_size > QUEUE_LIMIT and not self._held:
            self._held = True
            self.conn.hold_reading(True)
        self._next()

    def end(self) -> None:
        """The literal's last octet has arrived."""
        self._ended = True
        self._next()

    def _next(self) -> None:
        if self._busy or self._failed or self._closed or self._stored is not None:
            return
        if self._pending_size < HAND_OFF and not self._ended:
            self._release()
            return
        # At most HAND_OFF octets (and whole pieces) per call: the store holds no more.
        taken = 0
        count = 0
        for piece in self._pending:
            count += 1
            taken += len(piece)
            if taken >= HAND_OFF:
                break
        pieces, self._pending = self._pending[:count], self._pending[count:]
        self._pending_size -= taken
        last = self._ended and not self._pending
        self._busy = True
        d = threads.deferToThreadPool(self.conn.server.reactor, self.conn.server.threadpool,
                                      self._feed, pieces, last)
        d.addCallbacks(self._fed, self._ingest_failed)
        self._release()

    def _release(self) -> None:
        if self._held and (self._pending_size < QUEUE_LIMIT // 2 or self._failed
                           or self._closed):
            self._held = False
            self.conn.hold_reading(False)

    def _fed(self, stored) -> None:
        self._busy = False
        if stored is not None:
            self._stored = stored
        if self._closed:  # while the call ran: clean up after it
            if self._stored is not None:
                self._discard()
            else:
                self._abort()
        elif stored is None:
            self._next()
        else:
            self._done.callback(None)

    def _ingest_failed(self, failure) -> None:
        self._busy = False
        self._failed = True
        self._pending, self._pending_size = [], 0
        self._release()
        self._abort()
        if not self._closed:
            self._done.errback(failure)

    # -- the store's side (thread pool) --------------------------------------------------------

    def _feed(self, pieces: list[bytes], last: bool):
        if self._ingestion is None:
            self._ingestion = self._store.ingestion()
        for piece in pieces:
            self._ingestion.feed(piece)
        return self._ingestion.finish() if last else None

    # -- the command's side --------------------------------------------------------------------

    def ready(self) -> defer.Deferred:
        """Fires once the message is stored (then :meth:`take` it), or fails as the store did
        (TooLarge, BackendUnavailable)."""
        return self._done

    def take(self):
        """The StoredContent, for ``MailStore.append``, which owns it from now on."""
        self._claimed = True
        return self._stored

    def close(self) -> None:
        """The command is over (or will never run): remove the content unless taken."""
        if self._closed:
            return
        self._closed = True
        self._pending, self._pending_size = [], 0
        self._release()
        if not self._done.called:
            self._done.addErrback(lambda _: None)  # nobody waits for it any more
        elif self._failed:
            self._done.addErrback(lambda _: None)
        if self._busy or self._claimed:
            return  # the running call's end cleans up (_fed, _ingest_failed)
        if self._stored is not None:
            self._discard()
        elif not self._failed:
            self._abort()

    def _discard(self) -> None:
        stored, self._stored = self._stored, None
        if stored is not None and not self._claimed:
            self._in_pool(self._store.discard_ingested, stored)

    def _abort(self) -> None:
        ingestion, self._ingestion = self._ingestion, None
        if ingestion is not None:
            self._in_pool(ingestion.abort)

    def _in_pool(self, call, *args) -> None:
        d = threads.deferToThreadPool(self.conn.server.reactor, self.conn.server.threadpool,
                                      call, *args)
        # What a failing store leaves, fsck finds (content never finished, or unreferenced).
        d.addErrback(lambda f: log.warn("streamed_literal_cleanup_failed",
                                        error=f.getErrorMessage()))
