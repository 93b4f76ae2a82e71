"""The ManageSieve service: the connection factory, its thread pool, limits and error mapping."""

from __future__ import annotations

from twisted.internet import protocol, task, threads
from twisted.python.threadpool import ThreadPool

from mailstore import errors
from mailstore.sievescripts import ScriptActive, TooManyScripts

from .protocol import ManageSieveProtocol
from .session import Session

# Domain errors become NO with a response code (RFC 5804 1.3); the first class that matches
# wins (TooManyScripts is an OverQuota).  InvalidName has no code of its own.
_ERROR_CODES: dict[type, str | None] = {
    TooManyScripts: "QUOTA/MAXSCRIPTS",
    errors.TooLarge: "QUOTA/MAXSIZE",
    errors.OverQuota: "QUOTA",
    errors.NotFound: "NONEXISTENT",
    errors.AlreadyExists: "ALREADYEXISTS",
    ScriptActive: "ACTIVE",
    errors.InvalidName: None,
    errors.Conflict: "TRYLATER",
}


class ManageSieveServer(protocol.ServerFactory):
    noisy = False

    def __init__(self, store, cfg, reactor, tls_context=None, threads: int = 4):
        self.store = store
        self.cfg = cfg
        self.reactor = reactor
        self.tls_context = tls_context
        self.threadpool = ThreadPool(minthreads=1, maxthreads=threads, name="managesieve-store")
        self.threadpool.start()
        self.connections: set = set()
        self.stopping = False
        from ..delivery import sieve_settings
        self.sieve_limits = sieve_settings(cfg).limits
        """[sieve]'s limits, for the WARNINGS of PUTSCRIPT/CHECKSCRIPT (vacation :days)."""

    def buildProtocol(self, addr):
        conn = ManageSieveProtocol(self)
        conn.factory = self
        return conn

    def new_session(self, conn) -> Session:
        return Session(self, conn)

    def connection_opened(self, conn) -> bool:
        """Count a connection; False when over ``[imap] max_connections`` (the same budget
        as IMAP's: both are per process) or stopping."""
        self.connections.add(conn)
        return not self.stopping and len(self.connections) <= self.cfg["imap"]["max_connections"]

    def sessions_of(self, user: str) -> int:
        """How many connections of this process are logged in as ``user``."""
        return sum(1 for c in self.connections
                   if getattr(getattr(c, "session", None), "user", None) == user)

    def connection_closed(self, conn) -> None:
        self.connections.discard(conn)

    @staticmethod
    def describe_error(exc: Exception) -> tuple[str | None, str]:
        """The response code and text of a command that failed with a store error.  A backend
        failure is TRYLATER (RFC 5804 1.3) with a fixed text: the detail is for the log."""
        if isinstance(exc, errors.BackendUnavailable):
            return "TRYLATER", "Mail store temporarily unavailable, try again later"
        for cls, code in _ERROR_CODES.items():
            if isinstance(exc, cls):
                return code, str(exc) or cls.__name__
        return None, "Internal server error"

    def stop(self, grace: float = 30.0):
        """Graceful shutdown: running commands finish (up to ``grace`` seconds), then every
        session gets BYE; the thread pool stops last."""
        self.stopping = True
        deadline = self.reactor.seconds() + grace

        def finish():
            busy = [c for c in self.connections if c.busy]
            if busy and self.reactor.seconds() < deadline:
                return task.deferLater(self.reactor, 0.05, finish)
            from . import wire
            for conn in list(self.connections):
                conn.close(wire.response(b"BYE", "Server shutting down"), "shutdown")
            return threads.deferToThreadPool(self.reactor, self.threadpool, lambda: None)

        d = finish()
        d.addBoth(lambda _: self.threadpool.stop())
        return d
