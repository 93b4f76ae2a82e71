"""SMTP/LMTP replies: the one place where store errors become reply codes.

Basic codes from RFC 5321 4.2; enhanced status codes from RFC 3463 (registry of RFC 5248).  A
4xx tells the sender to keep the message and try again later; a 5xx makes it bounce.
"""

from __future__ import annotations

import re

from mailstore.errors import InvalidName, NotFound, OverQuota, Rejected, TooLarge

RCPT_OK = "250 2.1.5 <{}> OK"
DELIVERED = "250 2.0.0 <{}> delivered as {}"  # LMTP, per recipient (RFC 2033 4.2)
ACCEPTED = "250 2.0.0 Delivered as {}"  # SMTP, once for the message
MALFORMED_RCPT = "501 5.1.3 Bad recipient address syntax"
MALFORMED_SENDER = "501 5.1.7 Bad sender address syntax"
UNKNOWN_USER = "550 5.1.1 <{}> User unknown"
FOREIGN_DOMAIN = "550 5.1.2 <{}> Domain not handled here (relaying denied)"
TOO_MANY_RCPTS = "452 4.5.3 Too many recipients"
TOO_LARGE = "552 5.3.4 Message too big for system"
LINE_TOO_LONG = "500 5.5.6 Line too long"
TRY_AGAIN = "451 4.3.0 Temporary storage failure, try again later"
# STARTTLS (RFC 3207 4, enhanced codes as Dovecot and Postfix send them).
TLS_FIRST = "530 5.7.0 Must issue a STARTTLS command first"
TLS_UNAVAILABLE = "502 5.5.1 TLS is not available"
TLS_ACTIVE = "502 5.5.1 TLS is already active"
STARTTLS_SYNTAX = "501 5.5.4 Syntax: STARTTLS"
TLS_FAILED = "421 4.7.0 TLS handshake failed"


# Why a recipient was refused, by the enhanced status code of the reply: the ``reason`` label
# of the rejected-recipients metric (docs/metrics.md).
REASONS = {
    "5.1.1": "unknown_user", "5.1.2": "foreign_domain", "5.1.3": "malformed",
    "4.5.3": "too_many_recipients", "4.2.2": "over_quota", "5.2.2": "over_quota",
    "5.3.4": "too_large", "5.5.6": "line_too_long", "4.3.0": "unavailable",
}


def reason(reply: str) -> str:
    """The REASONS entry of ``reply`` ("other" for a reply not listed there)."""
    parts = reply.split(" ", 2)
    return REASONS.get(parts[1] if len(parts) > 1 else "", "other")


def over_quota(address: str, code: str) -> str:
    """Over quota: ``code`` is the configured policy, 452 (retry) or 552 (bounce)."""
    if code == "552":
        return f"552 5.2.2 <{address}> Mailbox full"
    return f"452 4.2.2 <{address}> Mailbox full"


def sieve_reject(address: str, reason: str) -> str:
    """A Sieve reject at DATA (RFC 5429 2.1, 5321 4.2.2): the script's text on one line,
    control characters removed so it cannot end the reply early, and bounded in length
    (RFC 5321 4.5.3.1.5: a reply line is at most 512 octets)."""
    text = re.sub(r"[\x00-\x1f\x7f]+", " ", reason).strip() or "Rejected"
    prefix = f"550 5.7.1 <{address}> "
    room = 500 - len(prefix.encode("utf-8"))
    data = text.encode("utf-8")
    if len(data) > room:
        text = data[:room].decode("utf-8", "ignore")
    return prefix + text


def for_error(exc: BaseException, address: str, over_quota_code: str) -> str:
    """The reply for a recipient whose delivery failed with ``exc``.

    Anything unexpected is answered 451: the sender keeps the message and retries, which is
    safe because nothing was kept for a recipient that is told to retry -- except a message
    the store committed but could not make visible (``errors.Unpublished``): the retry may
    deliver that one twice, never lose it.
    """
    if isinstance(exc, Rejected):
        return sieve_reject(address, exc.reason)
    if isinstance(exc, OverQuota):
        return over_quota(address, over_quota_code)
    if isinstance(exc, TooLarge):
        return TOO_LARGE
    if isinstance(exc, (NotFound, InvalidName)):
        # The user (or their INBOX) went away between RCPT and the end of DATA.
        return UNKNOWN_USER.format(address)
    # BackendUnavailable, Conflict (withdrawn because another recipient failed), a bug: 451.
    return TRY_AGAIN


def is_temporary(reply: str) -> bool:
    return reply.startswith("4")
