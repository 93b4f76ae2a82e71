"""The one log line of a mail transaction: who sent what to whom, and what each recipient got.

A transaction runs from MAIL to the reply to DATA (RFC 5321 3.3), or ends without a message
(RSET, a new HELO/EHLO, QUIT, a lost connection, or a DATA that aiosmtpd refused).  It is
logged once, as the ``delivery`` event, if it named any recipient: accepted and refused
recipients alike, so that "why did alice not get it" has an answer in the log whether the
refusal came at RCPT or after DATA.  Recipient results:

``delivered``
    stored and acknowledged with a 2xx after DATA;
``rejected``
    refused at RCPT (the reply code says whether the sender will retry: 4xx, or bounce: 5xx);
``failed``
    accepted at RCPT, refused after DATA (over quota, store failure, message too large);
``abandoned``
    accepted at RCPT, but the client ended the transaction before the reply to DATA.

Only envelope data and the reply codes go in the line; never message content.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from mailstore import errors

from ..observe import DELIVERIES, REJECTED_RECIPIENTS, Logger
from . import replies


@dataclass
class Recipient:
    address: str | None  # None: an address aiosmtpd could not parse (refused before us)
    result: str  # "accepted" until the transaction ends, then one of the results above
    code: str | None = None  # "250 2.0.0": basic and enhanced status code of the reply
    user: str | None = None
    mailbox: str | None = None
    error: str | None = None  # the store error's class name, for a failure after DATA
    reason: str | None = None  # why it was refused: the metrics' label (not logged)

    def fields(self) -> dict:
        out = {"address": self.address, "result": self.result, "code": self.code}
        if self.user is not None:
            out["user"], out["mailbox"] = self.user, self.mailbox
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass
class Transaction:
    """What one envelope's log line says; attached to the aiosmtpd envelope."""

    started: float = field(default_factory=time.monotonic)
    recipients: list[Recipient] = field(default_factory=list)
    queue_id: str | None = None
    size: int | None = None
    in_data: bool = False  # the handler's DATA is running: it logs the line itself
    logged: bool = False

    def reject(self, address: str | None, reply: str) -> None:
        self.recipients.append(Recipient(address, "rejected", reply_code(reply),
                                         reason=replies.reason(reply)))

    def accept(self, address: str, user: str, mailbox: str) -> None:
        self.recipients.append(Recipient(address, "accepted", user=user, mailbox=mailbox))

    def accepted(self) -> list[Recipient]:
        """The recipients accepted at RCPT, in RCPT order (that of ``envelope.rcpt_tos``)."""
        return [r for r in self.recipients if r.result == "accepted"]

    def refuse_data(self, reply: str) -> None:
        """The message was refused as a whole after DATA (too large, a line too long)."""
        for recipient in self.accepted():
            recipient.result, recipient.code = "failed", reply_code(reply)
            recipient.reason = replies.reason(reply)


def transaction(envelope) -> Transaction:
    """The :class:`Transaction` of an aiosmtpd envelope, created on first use."""
    found = getattr(envelope, "transaction", None)
    if found is None:
        found = envelope.transaction = Transaction()
    return found


def log_transaction(log: Logger, protocol: str, session, envelope) -> None:
    """Write the ``delivery`` line of ``envelope``'s transaction, once, if it named anyone,
    and count its recipients (``protocol`` is the metrics' label: smtp or lmtp).

    Called when the transaction ends, however it ends; recipients still ``accepted`` then
    never got a reply to DATA and are logged ``abandoned``.
    """
    record = getattr(envelope, "transaction", None)
    if record is None or record.logged or record.in_data or not record.recipients:
        return
    record.logged = True
    for recipient in record.accepted():
        recipient.result = recipient.reason = "abandoned"
    for recipient in record.recipients:
        if recipient.result == "rejected":
            REJECTED_RECIPIENTS.labels(protocol, recipient.reason).inc()
        else:
            DELIVERIES.labels(protocol, recipient.reason or "delivered").inc()
    failed = any(r.result == "failed" for r in record.recipients)
    peer = session.peer if session is not None else None
    (log.warn if failed else log.info)(
        "delivery",
        queue_id=record.queue_id,
        remote=peer[0] if isinstance(peer, tuple) and peer else None,
        helo=getattr(session, "host_name", None),
        tls=getattr(session, "ssl", None) is not None,
        sender=envelope.mail_from,
        recipients=[r.fields() for r in record.recipients],
        size=record.size,
        seconds=round(time.monotonic() - record.started, 3))


def failure_reason(error: BaseException) -> str:
    """The ``outcome`` label of a recipient whose delivery failed after DATA with ``error``."""
    for cls, reason in ((errors.OverQuota, "over_quota"), (errors.TooLarge, "too_large"),
                        ((errors.NotFound, errors.InvalidName), "unknown_user"),
                        (errors.Conflict, "withdrawn"), (errors.Rejected, "sieve_reject"),
                        (errors.BackendUnavailable, "unavailable")):
        if isinstance(error, cls):
            return reason
    return "error"


def reply_code(reply: str) -> str:
    """``"550 5.1.1"`` of ``"550 5.1.1 <a@b> User unknown"``: the basic code, and the
    enhanced one (RFC 3463) when the reply has it."""
    parts = reply.split(" ", 2)
    if len(parts) > 1 and parts[1][:1].isdigit() and parts[1].count(".") == 2:
        return f"{parts[0]} {parts[1]}"
    return parts[0]
