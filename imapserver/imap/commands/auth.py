"""Authentication.

    starttls     = "STARTTLS"                                       ; RFC 3501 6.2.1
    authenticate = "AUTHENTICATE" SP auth-type [SP initial-resp]    ; 6.2.2, RFC 4959 (SASL-IR)
    login        = "LOGIN" SP userid SP password                    ; 6.2.3
    unauthenticate = "UNAUTHENTICATE"                               ; RFC 8437 3

Failed logins wait ``auth_failure_delay`` seconds and say the same whether the user exists or
not, or the name is not even a valid user name.  Logins and failed logins are logged (events
``login`` and ``login_failed``: user, mechanism, remote address; never the password,
docs/logs.md) and counted (``hbaseimap_imap_logins_total``, docs/metrics.md).  Password
checks (scrypt) run in the thread pool; a login the store's auth cache vouches for
(docs/decisions/0030-auth-cache.md) is answered in the reactor's thread when the store's reads
are local, without queueing behind other sessions' writes in the pool.
"""

from __future__ import annotations

import base64
import binascii

from twisted.internet import defer, task

from mailstore.errors import InvalidName

from ...observe import LOGINS, Logger
from ...sasl import MalformedResponse, ProxyRefused, parse_plain
from ..context import AUTH, NOT_AUTH, SELECTED, Bad, No, command
from ..wire import as_text

log = Logger("imap")


@command("STARTTLS", NOT_AUTH)
def starttls(ctx):
    ctx.expect_args(0)
    if ctx.server.tls_context is None:
        raise Bad("TLS is not configured")
    if ctx.session.tls:
        raise Bad("TLS is already active")
    if ctx.conn.deflate is not None:
        # Reachable after UNAUTHENTICATE: TLS must go below compression (RFC 4978 4).
        raise Bad("STARTTLS is not allowed once COMPRESS is active")
    ctx.finish(b"OK", "Begin TLS negotiation now")
    # RFC 3501 6.2.1, RFC 2595 3.1: commands pipelined in the clear behind STARTTLS (injected
    # by a man in the middle, as in CVE-2011-0411) must not run in the TLS session, whether
    # still buffered or already queued.
    ctx.conn.discard_pending_input()
    ctx.conn.transport.startTLS(ctx.server.tls_context)
    ctx.session.tls = True


def _authenticate(store, user: str, password: str) -> str | None:
    """The canonical user name, or None; a malformed user name fails like a wrong password."""
    try:
        return store.authenticate(user, password)
    except InvalidName:
        return None


def _authenticate_cached(store, user: str, password: str) -> str | None:
    """The canonical user name if the auth cache vouches for the password, else None (not a
    refusal: then :func:`_authenticate` decides)."""
    try:
        return store.authenticate_cached(user, password)
    except InvalidName:
        return None


def _verify(ctx, user: str, password: str):
    """A Deferred firing with the canonical user name or None.  On a store with local reads
    the cache is asked in this thread first (one read of a cell and an HMAC: ~10 us), since
    under load the pool's queue holds other sessions' writes and their fsyncs, which a LOGIN
    would wait behind (p50 8.9 x tuned Dovecot's under 200 clients: bench/RESULTS.md, issue
    14); only a miss -- a first login, a changed or a wrong password -- goes to scrypt in the
    pool.  Elsewhere (HBase: the read is a network round trip) one pool call does both."""
    if not ctx.store.backend.local_reads:
        return ctx.call(_authenticate, ctx.store, user, password)
    d = ctx.call_local(_authenticate_cached, ctx.store, user, password)
    d.addCallback(lambda who: who if who is not None
                  else ctx.call(_authenticate, ctx.store, user, password))
    return d


def _check_plaintext(ctx):
    if not ctx.session.plaintext_allowed():
        raise No("Plaintext authentication is disabled until TLS is active",
                 "PRIVACYREQUIRED")


@defer.inlineCallbacks
def _login(ctx, user: str, password: str, mechanism: str):
    peer = ctx.conn.transport.getPeer()
    who = yield _verify(ctx, user, password)
    if who is None:
        LOGINS.labels("failed").inc()
        log.warn("login_failed", user=user, mechanism=mechanism,
                 remote=getattr(peer, "host", None))
        yield task.deferLater(ctx.server.reactor, ctx.server.cfg["imap"]["auth_failure_delay"],
                              lambda: None)
        raise No("Authentication failed", "AUTHENTICATIONFAILED")
    if not ctx.server.user_logged_in(who):
        raise No("Too many connections for this user", "LIMIT")
    ctx.session.user = who
    LOGINS.labels("ok").inc()
    log.info("login", user=who, mechanism=mechanism, remote=getattr(peer, "host", None))
    caps = " ".join(ctx.session.capabilities())
    ctx.finish(b"OK", f"{mechanism} completed", f"CAPABILITY {caps}")


@command("LOGIN", NOT_AUTH)
def login(ctx):
    ctx.expect_args(2)
    _check_plaintext(ctx)
    return _login(ctx, as_text(ctx.args[0], "user name"), as_text(ctx.args[1], "password"),
                  "LOGIN")


@command("AUTHENTICATE", NOT_AUTH)
@defer.inlineCallbacks
def authenticate(ctx):
    ctx.expect_args(1, 2)
    mechanism = str(ctx.args[0]).upper()
    if mechanism not in ("PLAIN", "LOGIN"):
        raise No(f"Unsupported authentication mechanism {mechanism}", "CANNOT")
    _check_plaintext(ctx)
    initial = ctx.args[1] if len(ctx.args) == 2 else None
    if initial is not None:
        initial = b"" if str(initial) == "=" else _b64(str(initial).encode())
    if mechanism == "PLAIN":
        data = initial if initial is not None else (yield _challenge(ctx, b""))
        try:
            user, password = parse_plain(data)
        except MalformedResponse as exc:
            raise Bad(str(exc)) from None
        except ProxyRefused as exc:
            raise No(str(exc), "AUTHORIZATIONFAILED") from None
    else:
        user_b = initial if initial is not None else (yield _challenge(ctx, b"Username:"))
        password_b = yield _challenge(ctx, b"Password:")
        user, password = user_b.decode("utf-8", "replace"), password_b.decode("utf-8", "replace")
    yield _login(ctx, user, password, mechanism)


@command("UNAUTHENTICATE", AUTH, SELECTED)
def unauthenticate(ctx):
    """RFC 8437 3: everything but TLS is reset -- the selected mailbox closed without an
    expunge, IDLE's watch and ENABLEd extensions dropped -- and a new LOGIN or AUTHENTICATE
    may follow, pipelined too (commands run in order).  Never NO (the RFC forbids it)."""
    ctx.expect_args(0)
    log.info("unauthenticate", user=ctx.session.user,
             remote=getattr(ctx.conn.transport.getPeer(), "host", None))
    ctx.session.unauthenticate()


class _Continuation:
    """Takes the client's next line for a SASL exchange (RFC 3501 6.2.2)."""

    def __init__(self, conn):
        self.conn = conn
        self.deferred = defer.Deferred()

    def line_received(self, line: bytes) -> None:
        self.conn.line_consumer = None
        self.deferred.callback(line)

    def abort(self) -> None:
        if not self.deferred.called:
            self.deferred.errback(Bad("Connection closed during authentication"))


@defer.inlineCallbacks
def _challenge(ctx, prompt: bytes):
    ctx.flush()
    consumer = _Continuation(ctx.conn)
    ctx.conn.line_consumer = consumer
    ctx.conn.write_lines([b"+ " + base64.b64encode(prompt)])
    line = yield consumer.deferred
    if line.strip() == b"*":
        raise Bad("Authentication cancelled")
    return _b64(line.strip())


def _b64(data: bytes) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise Bad("Invalid base64 in authentication response") from None
