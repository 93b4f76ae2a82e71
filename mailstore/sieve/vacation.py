"""vacation (RFC 5230): whether to reply, and the reply itself.

The decision follows RFC 5230 4.5 and RFC 3834 2: no reply to the null or a MAILER-DAEMON
sender, to mail that is itself automatic (``Auto-Submitted`` other than ``no``), to list or
bulk mail (``List-*`` fields, ``Precedence: bulk/list/junk``), to mail that does not name one
of the user's addresses in To/Cc/Bcc, nor twice to the same sender within ``:days`` for the
same ``:handle``.  Header values that come from the script (``:subject``, ``:from``) cannot
inject header fields: line breaks are removed and non-ASCII text is encoded (RFC 2047).
"""

from __future__ import annotations

import email.utils
import hashlib
import re
import time

from .actions import Envelope, Environment, Vacation
from .message import SieveMessage, addresses, encode_value

LIST_FIELDS = ("list-id", "list-help", "list-subscribe", "list-unsubscribe", "list-post",
               "list-owner", "list-archive")
RECIPIENT_FIELDS = ("to", "cc", "bcc", "resent-to", "resent-cc", "resent-bcc")


def decide(node, expand, message: SieveMessage, envelope: Envelope, env: Environment,
           required: set[str]) -> Vacation | str:
    """The reply to send, or why none is sent (a short text for the log)."""
    limits = env.limits
    tags = node.tags
    reason = expand(node.args[0])
    subject = expand(tags.get(":subject")) if ":subject" in tags else None
    sender_from = expand(tags.get(":from")) if ":from" in tags else None
    own = [a.lower() for a in (*env.user_addresses, envelope.rcpt_to) if a]
    if ":addresses" in tags:
        extra = expand(tags[":addresses"])
        own.extend(a.lower() for a in (extra if isinstance(extra, list) else [extra]))
    if ":seconds" in tags:
        seconds = max(int(tags[":seconds"]), 0)  # vacation-seconds (RFC 6131): 0 allowed
        seconds = min(seconds, limits.vacation_max_days * 86400)
    else:
        days = tags.get(":days", limits.vacation_default_days)
        days = min(max(days, limits.vacation_min_days), limits.vacation_max_days)
        seconds = days * 86400
    handle = expand(tags[":handle"]) if ":handle" in tags else _default_handle(
        reason, subject, sender_from, ":mime" in tags)

    sender = envelope.mail_from
    if not sender:
        return "null sender"
    low = sender.lower()
    local = low.rpartition("@")[0] or low
    if local == "mailer-daemon" or local.startswith("owner-") or local.endswith("-request") \
            or local in ("listserv", "majordomo"):
        return "sender is a list or system address"
    if low in own:
        return "sender is the user"
    auto = message.headers("auto-submitted")
    if any(v.strip().lower().split(";")[0].strip() != "no" for v in auto):
        return "message is Auto-Submitted"
    if any(message.has(name) for name in LIST_FIELDS):
        return "message is from a mailing list"
    precedence = [v.strip().lower() for v in message.headers("precedence")]
    if any(v in ("bulk", "list", "junk") for v in precedence):
        return "message has Precedence bulk/list/junk"
    if any(v.strip().lower() == "all" for v in message.headers("x-auto-response-suppress")):
        return "message asks for no automatic reply"
    named = set()
    for name in RECIPIENT_FIELDS:
        for value in message.headers(name):
            named.update(a.lower() for a in addresses(value))
    # A subaddress reaches the same user: compare without the detail (RFC 5233).
    own_plain = {_without_detail(a) for a in own}
    if not {_without_detail(a) for a in named} & own_plain:
        return "no address of the user in To/Cc/Bcc"
    key = f"{env.user}\0{low}\0{handle}"
    if env.vacation_replied(key):
        return "already replied within the period"

    original_subject = (message.headers("subject") or [""])[0]
    ids = _msg_ids(message, "message-id")
    message_id = ids[0] if ids else None
    references = " ".join(_msg_ids(message, "references") + ids[:1]) or None
    return Vacation(
        to=sender, from_=sender_from or envelope.rcpt_to or (own[0] if own else ""),
        subject=subject if subject is not None else f"Auto: {original_subject}".rstrip(),
        reason=reason, mime=":mime" in tags, track_key=key, seconds=seconds,
        in_reply_to=message_id, references=references)


_MSG_ID = re.compile(r"<[^<>\s]+>")


def _msg_ids(message: SieveMessage, name: str) -> list[str]:
    """The msg-ids of the first ``name`` field, raw (RFC 5322 3.6.4: nothing else belongs in
    Message-ID or References; not decoded, so an encoded word cannot smuggle text in)."""
    raw = (message.raw_headers(name) or [b""])[0].decode("utf-8", "replace")
    return _MSG_ID.findall(raw)


def _without_detail(address: str) -> str:
    local, at, domain = address.rpartition("@")
    return local.partition("+")[0] + at + domain if at else address


def _default_handle(reason: str, subject: str | None, sender_from: str | None,
                    mime: bool) -> str:
    """RFC 5230 4.2: without :handle, replies differing in these arguments are different
    responses."""
    text = "\0".join([reason, subject or "", sender_from or "", "mime" if mime else ""])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def build_reply(reply: Vacation, hostname: str, now: float | None = None) -> bytes:
    """The reply message (RFC 5230 5, RFC 3834 3), CRLF line ends; sent with a null
    reverse-path so that it cannot bounce back to the user."""
    now = time.time() if now is None else now
    lines = [
        b"From: " + encode_value(reply.from_),
        b"To: <" + encode_value(reply.to) + b">",
        b"Subject: " + encode_value(reply.subject),
        b"Date: " + email.utils.formatdate(now, localtime=False).encode("ascii"),
        b"Message-ID: " + email.utils.make_msgid("vacation", hostname).encode("ascii"),
        b"Auto-Submitted: auto-replied (vacation)",
        b"Precedence: bulk",
    ]
    if reply.in_reply_to:
        lines.append(b"In-Reply-To: " + encode_value(reply.in_reply_to))
    if reply.references:
        lines.append(b"References: " + encode_value(reply.references))
    lines.append(b"MIME-Version: 1.0")
    body = reply.reason.replace("\r\n", "\n").replace("\n", "\r\n").encode("utf-8")
    if reply.mime:
        # :mime: the reason is a MIME entity with its own header (RFC 5230 4.4).
        return b"\r\n".join(lines) + b"\r\n" + body
    if reply.reason.isascii():
        lines.append(b"Content-Type: text/plain; charset=us-ascii")
        lines.append(b"Content-Transfer-Encoding: 7bit")
    else:
        lines.append(b"Content-Type: text/plain; charset=utf-8")
        lines.append(b"Content-Transfer-Encoding: 8bit")
    if not body.endswith(b"\r\n"):
        body += b"\r\n"
    return b"\r\n".join(lines) + b"\r\n\r\n" + body
