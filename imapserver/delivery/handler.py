"""The aiosmtpd handler: recipients checked at RCPT, the message stored at the end of DATA.

One handler serves SMTP and one LMTP; they differ in how DATA is answered.  SMTP gives one
reply for the message (RFC 5321 4.1.1.4), so it is delivered to all its recipients or to none.
LMTP gives one reply per accepted recipient, in RCPT order (RFC 2033 4.2), so each recipient
succeeds or fails on its own.  Either way a 2xx is sent only after the store has committed the
message (and synced it) for that recipient.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from mailstore.errors import Conflict, InvalidName, MailStoreError, NotFound
from mailstore.sieve.executor import SieveSettings
from mailstore.store import Delivery, MailStore

from ..observe import Logger, timed_store_call
from . import replies, trace
from .addresses import BadAddress, ForeignDomain, parse_recipient
from .journal import failure_reason, log_transaction, reply_code, transaction
from .sieving import deliver_with_sieve, make_plans
from .transaction import deliver_message

MAX_RECIPIENTS = 1000
"""Recipients accepted per message (RFC 5321 4.5.3.1.8 asks for at least 100)."""


@dataclass(frozen=True)
class Settings:
    """The ``[delivery]`` options a handler needs (see conf/imapserver.conf)."""

    hostname: str
    domains: list[str]
    plus_addressing: bool
    over_quota_code: str
    sieve: SieveSettings = field(default_factory=SieveSettings)


class DeliveryHandler:
    """aiosmtpd hooks over a :class:`MailStore`.  ``lmtp`` selects per-recipient DATA replies."""

    def __init__(self, store: MailStore, settings: Settings, lmtp: bool):
        self.store = store
        self.settings = settings
        self.lmtp = lmtp
        self.protocol = "lmtp" if lmtp else "smtp"
        self.log = Logger(self.protocol)

    async def handle_EHLO(self, server, session, envelope, hostname, responses):
        # Commands are read one after another from the stream, so pipelined ones are safe
        # (RFC 2920); an MTA such as Postfix only pipelines when it sees this.
        # AUTH is left out: aiosmtpd offers it after STARTTLS, but nobody can log in here.
        session.host_name = hostname
        offered = [r for r in responses[:-1] if not r.startswith("250-AUTH")]
        return [*offered, "250-PIPELINING", responses[-1]]

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        """Refuse a reverse-path holding bytes that are not UTF-8 (RFC 5321 4.1.2, RFC 6531)."""
        if not _is_utf8(address):
            return replies.MALFORMED_SENDER
        # What aiosmtpd does without this hook, and the start of the transaction's clock.
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        transaction(envelope)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        """Accept ``address`` only if it names a local user who can take one more message."""
        if len(_targets(envelope)) >= MAX_RECIPIENTS:
            reply, target = replies.TOO_MANY_RCPTS, None
        else:
            reply, target = await self._check_recipient(address)
        if target is None:
            transaction(envelope).reject(address, reply)
            return reply
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        _targets(envelope).append(target)
        transaction(envelope).accept(address, *target)
        return reply

    async def _check_recipient(self, address: str) -> tuple[str, tuple[str, str] | None]:
        """The reply to RCPT ``address``, and its (user, mailbox) if it is accepted."""
        if not _is_utf8(address):  # RFC 5321 4.1.2, RFC 6531: ASCII or UTF-8
            return replies.MALFORMED_RCPT, None
        try:
            parsed = parse_recipient(address, self.settings.domains,
                                     self.settings.plus_addressing)
        except BadAddress:
            return replies.MALFORMED_RCPT, None
        except ForeignDomain:
            return replies.FOREIGN_DOMAIN.format(address), None
        try:
            target = await asyncio.to_thread(timed_store_call, "resolve_recipient",
                                             self._resolve, parsed)
        except (NotFound, InvalidName):
            return replies.UNKNOWN_USER.format(address), None
        except MailStoreError as exc:
            return replies.for_error(exc, address, self.settings.over_quota_code), None
        except Exception:  # a bug must not look like a permanent refusal: 451, logged
            self.log.failure("rcpt_failed", address=address)
            return replies.TRY_AGAIN, None
        return replies.RCPT_OK.format(address), target

    def _resolve(self, parsed) -> tuple[str, str]:
        """(user, mailbox) for an address; raises NotFound or OverQuota.  In a worker thread.

        ``check_quota`` reads the user's row, so it is also the existence check (one read per
        RCPT).  A user whose name holds a ``+`` is found before a plus-address: the whole
        local part is tried first.
        """
        store = self.store
        try:
            store.check_quota(parsed.local, 0, 1)
            return parsed.local, "INBOX"
        except (NotFound, InvalidName):
            if parsed.detail is None:
                raise
        store.check_quota(parsed.user, 0, 1)
        try:
            return parsed.user, store.mailbox(parsed.user, parsed.detail, recover=False).name
        except (NotFound, InvalidName):
            return parsed.user, "INBOX"  # no such folder: plain INBOX delivery

    async def handle_DATA(self, server, session, envelope):
        record = transaction(envelope)
        record.in_data = True  # the line is written here, once the replies are known
        try:
            return await self._deliver(session, envelope, record)
        finally:
            # Also when the client went away while the store worked (the task is cancelled):
            # recipients without a result are then logged "abandoned".
            record.in_data = False
            log_transaction(self.log, self.protocol, session, envelope)

    async def _deliver(self, session, envelope, record) -> str:
        targets = _targets(envelope)
        delivery = trace.delivery_id()
        record.queue_id = delivery
        record.size = len(envelope.original_content)
        header = trace.trace_fields(
            sender=envelope.mail_from or "<>",
            recipients=list(dict.fromkeys(envelope.rcpt_tos)),
            helo=session.host_name, peer=_peer_ip(session), hostname=self.settings.hostname,
            protocol=trace.protocol_keyword(self.lmtp, session.extended_smtp,
                                            envelope.smtp_utf8, session.ssl is not None),
            delivery=delivery, tls=trace.tls_comment(session.ssl))
        source = header + trace.crlf(envelope.original_content)
        try:
            results = await asyncio.to_thread(timed_store_call, "deliver", self._store,
                                              envelope, targets, source, delivery.encode(),
                                              len(header))
        except Exception as exc:  # the store failed as a whole: every recipient retries
            if not isinstance(exc, MailStoreError):  # a bug: keep its traceback
                self.log.failure("deliver_failed", queue_id=delivery)
            results = [Delivery(user, name, None, exc) for user, name in targets]
        answers = [self._answer(result, address, delivery)
                   for result, address in zip(results, envelope.rcpt_tos, strict=True)]
        if self.lmtp:
            reply = "\r\n".join(answers)
        elif all(r.error is None for r in results):
            reply = replies.ACCEPTED.format(delivery)
        else:
            reply = _smtp_refusal(results, answers)
        for recipient, result, answer in zip(record.accepted(), results, answers,
                                             strict=True):
            recipient.result = "delivered" if result.error is None else "failed"
            # What the client was told for this recipient: its own reply in LMTP, the
            # message's in SMTP (the store error says why, when it is another's failure).
            recipient.code = reply_code(answer if self.lmtp else reply)
            recipient.mailbox = result.mailbox  # INBOX if its folder went away since RCPT
            if result.error is not None:
                recipient.error = type(result.error).__name__
                recipient.reason = failure_reason(result.error)
        return reply

    def _store(self, envelope, targets: list[tuple[str, str]], source: bytes,
               marker: bytes, trace_length: int) -> list[Delivery]:
        """Run each recipient's Sieve script, then store (in a worker thread).  Without any
        active script this is exactly the delivery without Sieve.  ``trace_length``: the
        bytes of trace fields this delivery put before the message."""
        recipients = [(address, user, mailbox) for address, (user, mailbox)
                      in zip(envelope.rcpt_tos, targets, strict=True)]
        plans = make_plans(self.store, recipients, source, envelope.mail_from or "",
                           self.settings.sieve, self.lmtp, trace_length)
        if all(p.script is None for p in plans):
            return deliver_message(self.store, targets, source, marker, not self.lmtp)
        return deliver_with_sieve(self.store, plans, source, marker, not self.lmtp)

    def end_transaction(self, session, envelope) -> None:
        """The protocol calls this when ``envelope``'s transaction ends without a reply to
        DATA from here (RSET, HELO, QUIT, a lost connection, DATA refused by aiosmtpd)."""
        log_transaction(self.log, self.protocol, session, envelope)

    def _answer(self, result: Delivery, address: str, delivery: str) -> str:
        if result.error is None:
            return replies.DELIVERED.format(address, delivery)
        return replies.for_error(result.error, address, self.settings.over_quota_code)


def _smtp_refusal(results: list[Delivery], answers: list[str]) -> str:
    """The one SMTP reply for a message that was not delivered to everyone (so to no one).

    The first recipient's own failure is the reply, unless it is permanent while others were
    withdrawn only because of it: a 5xx would bounce the message for them too, so the sender
    is told to retry instead, and the retry refuses the failing recipient at RCPT.
    """
    withdrawn = [isinstance(r.error, Conflict) for r in results]
    cause = next((a for a, w, r in zip(answers, withdrawn, results, strict=True)
                  if r.error is not None and not w), answers[0])
    if any(withdrawn) and not replies.is_temporary(cause):
        return replies.TRY_AGAIN
    return cause


def _targets(envelope) -> list[tuple[str, str]]:
    """The (user, mailbox) resolved for each of ``envelope.rcpt_tos``, in the same order."""
    targets = getattr(envelope, "delivery_targets", None)
    if targets is None:
        targets = envelope.delivery_targets = []
    return targets


def _is_utf8(text: str) -> bool:
    """False for text holding bytes that are not UTF-8: aiosmtpd decodes a command's argument
    with ``surrogateescape``, and a reply echoing such an address cannot be encoded."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _peer_ip(session) -> str | None:
    peer = session.peer
    return peer[0] if isinstance(peer, tuple) and peer else None
