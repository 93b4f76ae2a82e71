"""Authentication and TLS.

    starttls       = "STARTTLS" CRLF                                    ; RFC 5804 2.2
    authenticate   = "AUTHENTICATE" SP auth-type [SP string] CRLF       ; 2.1 (SASL-IR)
                     *(string CRLF)                                     ; client responses
    unauthenticate = "UNAUTHENTICATE" CRLF                              ; 2.14.1

Mechanisms PLAIN (RFC 4616) and LOGIN, both only where ``[imap] plaintext_auth`` allows
cleartext passwords (otherwise after STARTTLS; the capability then lists no mechanism).  A
client response of ``"*"`` cancels (RFC 5804 2.1: NO).  Failed logins wait
``[imap] auth_failure_delay`` seconds and say the same whether the user exists or not; logins
are logged (``login``, ``login_failed``) and counted like IMAP's, without the password.
"""

from __future__ import annotations

import base64
import binascii

from twisted.internet import defer, task

from mailstore.errors import InvalidName

from ...observe import MANAGESIEVE_LOGINS, Logger
from ...sasl import parse_plain
from .. import wire
from ..context import AUTH, NOT_AUTH, No, command
from .basic import capability_lines

log = Logger("managesieve")


@command("STARTTLS", NOT_AUTH)
def starttls(ctx):
    """RFC 5804 2.2: OK, the TLS handshake, then the capabilities again and OK."""
    ctx.expect_args(0)
    if ctx.server.tls_context is None:
        raise No("TLS is not configured")
    if ctx.session.tls:
        raise No("TLS is already active")
    ctx.finish(b"OK", "Begin TLS negotiation now")
    # Commands pipelined in the clear behind STARTTLS (a man in the middle's, RFC 2595 3.1)
    # must not run inside TLS.
    ctx.conn.discard_pending_input()
    ctx.conn.transport.startTLS(ctx.server.tls_context)
    ctx.session.tls = True
    # Written now, sent inside TLS once the handshake is done.
    ctx.conn.write_lines([*capability_lines(ctx.session),
                          wire.response(b"OK", "TLS negotiation successful")])


def _authenticate(store, user: str, password: str) -> str | None:
    try:
        return store.authenticate(user, password)
    except InvalidName:
        return None


@command("AUTHENTICATE", NOT_AUTH)
@defer.inlineCallbacks
def authenticate(ctx):
    ctx.expect_args(1, 2)
    mechanism = ctx.text(0, "mechanism").upper()
    if mechanism not in ("PLAIN", "LOGIN"):
        raise No(f"Unsupported authentication mechanism {mechanism}")
    if not ctx.session.plaintext_allowed():
        raise No("Plaintext authentication is disallowed without TLS", "ENCRYPT-NEEDED")
    initial = _b64(ctx.args[1].data) if len(ctx.args) == 2 else None
    if mechanism == "PLAIN":
        data = initial if initial is not None else (yield _challenge(ctx, b""))
        try:
            user, password = parse_plain(data)
        except ValueError as exc:  # malformed, or a proxy login (RFC 4616)
            raise No(str(exc)) from None
    else:
        user_b = initial if initial is not None else (yield _challenge(ctx, b"Username:"))
        password_b = yield _challenge(ctx, b"Password:")
        user, password = user_b.decode("utf-8", "replace"), password_b.decode("utf-8", "replace")
    remote = getattr(ctx.conn.transport.getPeer(), "host", None)
    who = yield ctx.call(_authenticate, ctx.store, user, password, operation="authenticate")
    if who is None:
        MANAGESIEVE_LOGINS.labels("failed").inc()
        log.warn("login_failed", user=user, mechanism=mechanism, remote=remote)
        yield task.deferLater(ctx.server.reactor, ctx.server.cfg["imap"]["auth_failure_delay"],
                              lambda: None)
        raise No("Authentication failed")
    limit = ctx.server.cfg["managesieve"]["max_connections_per_user"]
    if limit and ctx.server.sessions_of(who) >= limit:
        # Counted per process, as [imap] max_connections (Dovecot's
        # mail_max_userip_connections is also counted where the sessions run).
        MANAGESIEVE_LOGINS.labels("limited").inc()
        log.warn("login_limited", user=who, remote=remote, limit=limit)
        raise No(f"Too many ManageSieve connections for this user (at most {limit})",
                 "TRYLATER")
    ctx.session.user = who
    MANAGESIEVE_LOGINS.labels("ok").inc()
    log.info("login", user=who, mechanism=mechanism, remote=remote)
    ctx.finish(b"OK", "Logged in")


@command("UNAUTHENTICATE", AUTH)
def unauthenticate(ctx):
    """RFC 5804 2.14.1: back to the non-authenticated state; TLS stays."""
    ctx.expect_args(0)
    log.info("unauthenticate", user=ctx.session.user,
             remote=getattr(ctx.conn.transport.getPeer(), "host", None))
    ctx.session.user = None
    ctx.finish(b"OK", "Unauthenticate completed")


class _Response:
    """Takes the client's next string for a SASL exchange (the protocol hands it over)."""

    def __init__(self, conn):
        self.conn = conn
        self.deferred = defer.Deferred()

    def received(self, segments) -> None:
        self.conn.line_consumer = None
        try:
            self.deferred.callback(wire.lone_string(segments))
        except wire.SyntaxFault as exc:
            self.deferred.errback(No(f"Bad SASL response: {exc}"))

    def abort(self) -> None:
        if not self.deferred.called:
            self.deferred.errback(No("Connection closed during authentication"))


@defer.inlineCallbacks
def _challenge(ctx, prompt: bytes):
    ctx.flush()
    consumer = _Response(ctx.conn)
    ctx.conn.line_consumer = consumer
    ctx.conn.write_lines([wire.string(base64.b64encode(prompt))])
    data = yield consumer.deferred
    if data == b"*":
        raise No("Authentication cancelled")
    return _b64(data)


def _b64(data: bytes) -> bytes:
    try:
        return base64.b64decode(data.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise No("Invalid base64 in authentication response") from None
