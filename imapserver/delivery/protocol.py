"""aiosmtpd's SMTP and LMTP servers, adjusted where a mail store needs other replies.

aiosmtpd answers a few conditions itself, before any handler hook runs: a message over the size
limit, an unparseable address, an over-long line.  Its texts carry no enhanced status code, and
in LMTP it answers a refused DATA once where the client waits for one reply per recipient
(RFC 2033 4.2).  :meth:`push` rewrites exactly those replies; everything else passes through.

STARTTLS (RFC 3207) is aiosmtpd's: it offers it in EHLO/LHLO only with a certificate and
before TLS, and after the handshake starts a new session (4.2: the client must EHLO again, the
envelope is gone) and drops whatever the client had sent in the clear behind STARTTLS (the
command injection of CVE-2011-0411).  Here STARTTLS is refused once TLS is up, and the replies
for "no TLS" and "TLS first" get enhanced status codes.

A transaction that ends without the handler's reply to DATA (RSET, HELO/EHLO, a lost
connection, a DATA refused here) is handed to the handler's ``end_transaction`` for its log
line (``journal``).
"""

from __future__ import annotations

from aiosmtpd.lmtp import LMTP
from aiosmtpd.smtp import SMTP, TLSSetupException, syntax

from ..observe import RECEIVED_BYTES, SENT_BYTES
from . import replies
from .journal import transaction

# aiosmtpd 1.4's own texts -> ours.
_MAIL_SIZE = "552 Error: message size exceeds fixed maximum message size"
_DATA_REFUSALS = {
    "552 Error: Too much mail data": replies.TOO_LARGE,
    "500 Line too long (see RFC5321 4.5.3.1.6)": replies.LINE_TOO_LONG,
}
_MALFORMED = "553 5.1.3 Error: malformed address"
_TLS_FIRST = "530 Must issue a STARTTLS command first"


class _StoreReplies:
    """Mixed into SMTP and LMTP.

    ``line_length_limit`` bounds a line of DATA.  RFC 5321 4.5.3.1.6 allows 1000 octets, but
    mail with longer lines, or with bare LFs (which are not line ends, RFC 5321 2.3.8), is
    common and a store keeps it rather than bounce it; the size limit is what bounds memory.
    ``connections`` is a set the open connections enter and leave, for a clean shutdown.
    """

    per_recipient_data_replies = False
    metrics_label = "smtp"
    in_data = False  # from DATA until its reply is sent: a stop waits for it

    def __init__(self, handler, *, line_length_limit: int, connections: set, **options):
        self.line_length_limit = line_length_limit  # read by SMTP.__init__ for its reader
        self.connections = connections
        super().__init__(handler, **options)
        # aiosmtpd offers AUTH once TLS is up, with a callback that refuses everyone.  The
        # store takes mail for its own users only (no relaying) and needs no AUTH: the command
        # is neither offered (see the handler's EHLO) nor recognised.
        self._smtp_methods.pop("AUTH", None)

    def connection_made(self, transport):
        super().connection_made(transport)
        self.connections.add(self)

    def data_received(self, data):
        RECEIVED_BYTES.labels(self.metrics_label).inc(len(data))
        super().data_received(data)

    def connection_lost(self, error):
        self.connections.discard(self)
        self._end_transaction()
        super().connection_lost(error)

    def _set_post_data_state(self):
        # aiosmtpd's one place where an envelope is replaced by a new one (after DATA, RSET,
        # HELO/EHLO, at connection): the old one's transaction is over.
        self._end_transaction()
        super()._set_post_data_state()

    def _end_transaction(self) -> None:
        if getattr(self, "envelope", None) is not None:
            self.event_handler.end_transaction(self.session, self.envelope)

    def _getaddr(self, arg):
        # aiosmtpd lets the stdlib address parser fail only with HeaderParseError, but
        # ``MAIL FROM:< `` makes it raise IndexError, which aiosmtpd answers "500 Error:
        # (IndexError)" and logs as a session exception.  (None, None) is its "malformed" answer.
        try:
            return super()._getaddr(arg)
        except (IndexError, ValueError):
            return None, None

    async def handle_exception(self, error):
        if isinstance(error, TLSSetupException):
            # The client left during the handshake or spoke no TLS (error.__cause__ says which):
            # aiosmtpd closes the connection; it is the client's failure, not a bug to trace.
            peer = self.session.peer if self.session is not None else None
            self.event_handler.log.info(
                "tls_failed", remote=peer[0] if isinstance(peer, tuple) and peer else None,
                error=repr(error.__cause__))
            return replies.TLS_FAILED  # not sent: the connection is closed
        return await super().handle_exception(error)

    @syntax("STARTTLS", when="tls_context")
    async def smtp_STARTTLS(self, arg):
        # aiosmtpd answers "454 TLS not available" without a certificate (a temporary
        # failure, though nothing will change), and would start a second TLS layer inside
        # the first.  Dovecot answers both cases 502 5.5.1.
        if arg:
            await self.push(replies.STARTTLS_SYNTAX)
        elif self.tls_context is None:
            await self.push(replies.TLS_UNAVAILABLE)
        elif self._tls_protocol is not None:
            await self.push(replies.TLS_ACTIVE)
        else:
            await super().smtp_STARTTLS(arg)

    @syntax("DATA")
    async def smtp_DATA(self, arg):
        self.in_data = True
        try:
            await super().smtp_DATA(arg)
        finally:
            self.in_data = False

    async def push(self, status):
        if isinstance(status, str):
            if status == _MALFORMED:
                in_rcpt = self.envelope is not None and self.envelope.mail_from is not None
                status = replies.MALFORMED_RCPT if in_rcpt else replies.MALFORMED_SENDER
                if in_rcpt:
                    transaction(self.envelope).reject(None, status)
            elif status in _DATA_REFUSALS:
                status = _DATA_REFUSALS[status]
                transaction(self.envelope).refuse_data(status)
                if self.per_recipient_data_replies and self.envelope.rcpt_tos:
                    status = "\r\n".join([status] * len(self.envelope.rcpt_tos))
            elif status == _MAIL_SIZE:
                status = replies.TOO_LARGE
            elif status == _TLS_FIRST:
                status = replies.TLS_FIRST
        octets = (status.encode("utf-8", "surrogateescape") if isinstance(status, str)
                  else status)
        SENT_BYTES.labels(self.metrics_label).inc(len(octets) + 2)
        await super().push(status)


class StoreSMTP(_StoreReplies, SMTP):
    pass


class StoreLMTP(_StoreReplies, LMTP):
    per_recipient_data_replies = True
    metrics_label = "lmtp"
