"""The IMAP service: listeners, shared resources, limits and error mapping."""

from __future__ import annotations

from twisted.internet import protocol, task, threads
from twisted.python.threadpool import ThreadPool

from mailstore import errors

from ..observe import Logger
from .notify import Watchers
from .protocol import IMAPServerProtocol
from .session import Session

SWEEP_INTERVAL = 60.0
"""Seconds between sweeps of content released by expunges whose grace period is over
(MailStore.sweep_released; docs/decisions/0011).  Expunges sweep too: this is for a store
that has gone quiet."""

log = Logger("imap")

# Domain errors become NO with a response code (RFC 5530); the text names what was wrong.
# The first class that matches wins: Expunged is a NotFound (RFC 9051 7.1 EXPUNGEISSUED).
_ERROR_CODES = {
    errors.Expunged: "EXPUNGEISSUED",
    errors.NotFound: "NONEXISTENT",
    errors.AlreadyExists: "ALREADYEXISTS",
    errors.InvalidName: "CANNOT",
    errors.PermissionDenied: "NOPERM",  # RFC 5530 3, RFC 4314
    errors.OverQuota: "OVERQUOTA",
    errors.TooLarge: "TOOBIG",
    errors.Conflict: "INUSE",
    errors.BackendUnavailable: "UNAVAILABLE",
}


class IMAPServer(protocol.ServerFactory):
    noisy = False  # our own log lines say what happens; Twisted's factory chatter does not
    def __init__(self, store, cfg, reactor, tls_context=None, threads: int = 20):
        self.store = store
        self.cfg = cfg
        self.reactor = reactor
        self.tls_context = tls_context
        self.threadpool = ThreadPool(minthreads=1, maxthreads=threads, name="imap-store")
        self.threadpool.start()
        self.connections: set = set()
        self.per_user: dict[str, int] = {}
        self.watchers = Watchers(self)
        self.stopping = False
        self._sweeper: task.LoopingCall | None = None

    def start_sweeping(self, interval: float = SWEEP_INTERVAL) -> None:
        """Now and then, delete content whose grace period after its last expunge is over."""
        self._sweeper = task.LoopingCall(self._sweep)
        self._sweeper.clock = self.reactor
        self._sweeper.start(interval, now=False)

    def _sweep(self):
        d = threads.deferToThreadPool(self.reactor, self.threadpool, self.store.sweep_released)
        # A failing backend is tried again at the next sweep; the loop must not stop.
        d.addErrback(lambda failure: log.warn("sweep_failed", error=failure.getErrorMessage()))
        return d

    def buildProtocol(self, addr):
        conn = IMAPServerProtocol(self)
        conn.factory = self
        return conn

    def new_session(self, conn) -> Session:
        return Session(self, conn)

    def connection_opened(self, conn) -> None:
        self.connections.add(conn)
        if len(self.connections) > self.cfg["imap"]["max_connections"]:
            conn.close(b"* BYE Too many connections, try again later", "too_many_connections")

    def connection_closed(self, conn) -> None:
        self.connections.discard(conn)

    def user_logged_in(self, user: str) -> bool:
        """Count a session for ``user``; False (and nothing counted) when over the limit."""
        if self.per_user.get(user, 0) >= self.cfg["imap"]["max_connections_per_user"]:
            return False
        self.per_user[user] = self.per_user.get(user, 0) + 1
        return True

    def user_logged_out(self, user: str) -> None:
        left = self.per_user.get(user, 1) - 1
        if left > 0:
            self.per_user[user] = left
        else:
            self.per_user.pop(user, None)

    def describe_error(self, exc: Exception) -> tuple[str | None, str]:
        """The response code and text for a command that failed with ``exc``.

        A backend failure is RFC 5530 3's UNAVAILABLE with a fixed text: the detail (the
        Thrift server's address, HBase's exception) is for the operator's log, not the client.
        """
        if isinstance(exc, errors.BackendUnavailable):
            return "UNAVAILABLE", "Mail store temporarily unavailable, try again later"
        for cls, code in _ERROR_CODES.items():
            if isinstance(exc, cls):
                return code, str(exc) or cls.__name__
        return None, "Internal server error"

    def stop(self, grace: float = 30.0):
        """Graceful shutdown: no new commands; commands in progress finish and are answered
        (for up to ``grace`` seconds); then every session gets BYE and is closed.  The thread
        pool is stopped last, so no store call is cut off halfway."""
        self.stopping = True
        self.watchers.stop()
        if self._sweeper is not None and self._sweeper.running:
            self._sweeper.stop()
        deadline = self.reactor.seconds() + grace

        def busy():
            return [c for c in self.connections if c._running and not c.closed
                    and not getattr(c.line_consumer, "idle", False)]

        def finish():
            if busy() and self.reactor.seconds() < deadline:
                return task.deferLater(self.reactor, 0.05, finish)
            for conn in list(self.connections):
                conn.close(b"* BYE Server shutting down", "shutdown")
            return threads.deferToThreadPool(self.reactor, self.threadpool, lambda: None)

        d = finish()
        d.addBoth(lambda _: self.threadpool.stop())
        return d
