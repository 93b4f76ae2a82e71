"""Delivery Status Notifications (RFC 3464) for mail the outgoing queue could not hand over.

A DSN is a ``multipart/report; report-type=delivery-status`` message (RFC 6522): a readable
part, a ``message/delivery-status`` part with one block of per-message fields and one block per
failed recipient (RFC 3464 2.2, 2.3), and the original's header block as
``text/rfc822-headers`` (the body is not returned: it may be large, and RFC 3464 leaves the
choice to the MTA).  It is sent with the null reverse-path (RFC 5321 4.5.5) so that it is never
bounced itself.  Pure: bytes in, bytes out.
"""

from __future__ import annotations

import email.utils
import re
import uuid
from collections.abc import Sequence

_ENHANCED = re.compile(r"^([245])\.(\d{1,3})\.(\d{1,3})\b")
EXPIRED_STATUS = "4.4.7"
"""RFC 3463 3.5: delivery time expired (the queue gave up on a recipient it could not reach)."""


def _clean(text: str, limit: int = 900) -> str:
    """One header-safe line: no CR/LF (a relay's reply text must not inject fields)."""
    text = " ".join(str(text).split())
    return text.encode("ascii", "replace").decode("ascii")[:limit]


def status_of(code: int, text: str) -> str:
    """The RFC 3463 status of a refusal: the enhanced code the relay gave (RFC 2034), else
    ``5.0.0`` for a 5xx reply, else ``4.4.7`` (never refused, only expired)."""
    found = _ENHANCED.match(text or "")
    if found and found.group(1) == "5" and 500 <= code < 600:
        return found.group(0)
    if 500 <= code < 600:
        return "5.0.0"
    return EXPIRED_STATUS


def delivery_status_notification(*, reporting_mta: str, recipient: str, arrival: float,
                                 failed: Sequence[tuple[str, int, str]],
                                 original_headers: bytes, now: float) -> bytes:
    """A DSN to ``recipient`` (the original's envelope sender) that every address of
    ``failed`` (address, SMTP reply code or 0 if it expired, reply text) could not be
    delivered to.  ``arrival`` and ``now`` are Unix times."""
    host = _clean(reporting_mta, 200) or "localhost"
    boundary = f"=_dsn_{uuid.uuid4().hex}"
    date = email.utils.formatdate(now)
    lines = [
        f"From: Mail Delivery System <MAILER-DAEMON@{host}>",
        f"To: <{_clean(recipient, 300)}>",
        "Subject: Undelivered Mail Returned to Sender",
        f"Date: {date}",
        f"Message-ID: <{uuid.uuid4().hex}@{host}>",
        # RFC 3834 5: an automatic message; clients and vacation responders leave it alone.
        "Auto-Submitted: auto-replied",
        "MIME-Version: 1.0",
        f'Content-Type: multipart/report; report-type=delivery-status; boundary="{boundary}"',
        "",
        "This is a MIME-encapsulated message.",
        "",
        f"--{boundary}",
        "Content-Type: text/plain; charset=us-ascii",
        "",
        f"This is the mail system at host {host}.",
        "",
        "Your message could not be delivered to the following recipients:",
        "",
    ]
    for rcpt, code, text in failed:
        reason = f"{code} {_clean(text)}" if code else _clean(text)
        lines.append(f"<{_clean(rcpt, 300)}>: {reason}")
    lines += ["", f"--{boundary}", "Content-Type: message/delivery-status", "",
              f"Reporting-MTA: dns; {host}",
              f"Arrival-Date: {email.utils.formatdate(arrival)}"]
    for rcpt, code, text in failed:
        lines += ["", f"Final-Recipient: rfc822; {_clean(rcpt, 300)}", "Action: failed",
                  f"Status: {status_of(code, text)}"]
        if code:
            lines.append(f"Diagnostic-Code: smtp; {code} {_clean(text)}")
        lines.append(f"Last-Attempt-Date: {date}")
    lines += ["", f"--{boundary}", "Content-Type: text/rfc822-headers", ""]
    body = "\r\n".join(lines).encode("ascii") + b"\r\n"
    headers = original_headers.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    if headers and not headers.endswith(b"\r\n"):
        headers += b"\r\n"
    return body + headers + f"\r\n--{boundary}--\r\n".encode("ascii")
