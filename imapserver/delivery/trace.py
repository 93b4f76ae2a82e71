"""What a delivery adds to a message: line-ending repair and the trace header fields.

The fields follow RFC 5321 4.4 (``Return-Path``, ``Received``) and the ``Delivered-To`` that
Postfix and Dovecot add.  All of them are written into the content that every recipient of the
message shares, so none may name one recipient of several: ``Delivered-To`` and the ``for``
clause of ``Received`` appear only when the message has exactly one recipient
(docs/decisions/0008-delivery-headers.md).
"""

from __future__ import annotations

import datetime
import email.utils
import re
import secrets

_BARE_LF = re.compile(rb"(?<!\r)\n")


def crlf(data: bytes) -> bytes:
    """``data`` with every bare LF made CRLF (RFC 5322 2.1: lines end in CRLF).

    Other bytes, 8-bit ones and lone CRs included, are kept as they came.
    """
    if data.count(b"\n") == data.count(b"\r\n"):
        return data  # the usual case: one pass to count, no copy
    return _BARE_LF.sub(b"\r\n", data)


def delivery_id() -> str:
    """A short unique id for one delivery, logged and written into its ``Received`` field."""
    return secrets.token_hex(8).upper()


def protocol_keyword(lmtp: bool, extended: bool, utf8: bool, tls: bool = False) -> str:
    """The ``with`` keyword of ``Received`` (RFC 3848, RFC 6531 3.7.3): an ``S`` at the end
    when the message came over TLS after STARTTLS (``ESMTPS``, ``LMTPS``, ``UTF8SMTPS``)."""
    if lmtp:
        keyword = "UTF8LMTP" if utf8 else "LMTP"
    elif utf8:
        keyword = "UTF8SMTP"
    elif extended or tls:  # STARTTLS is an extension: a TLS session began with EHLO
        keyword = "ESMTP"
    else:
        return "SMTP"
    return keyword + "S" if tls else keyword


def tls_comment(ssl_info: dict | None) -> str | None:
    """What ``Received`` says of the TLS session, in Postfix's words (``using TLSv1.3 with
    cipher TLS_AES_256_GCM_SHA384 (256/256 bits)``), or None without TLS.

    ``ssl_info`` is aiosmtpd's ``session.ssl``: the TLS transport's extra info (``cipher`` is
    the stdlib's (name, protocol, secret bits) triple).
    """
    if not ssl_info:
        return None
    cipher = ssl_info.get("cipher")
    if not cipher:
        return "using TLS"
    name, version, bits = cipher
    return f"using {version} with cipher {name} ({bits}/{bits} bits)"


def _printable(name: str) -> str:
    """A client-given name with the bytes that are not UTF-8 (kept by aiosmtpd as surrogates)
    written as ``\\xNN``: the HELO name is recorded as sent, not refused (RFC 5321 4.1.4)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def trace_fields(*, sender: str, recipients: list[str], helo: str | None, peer: str | None,
                 hostname: str, protocol: str, delivery: str, tls: str | None = None,
                 when: datetime.datetime | None = None) -> bytes:
    """The header fields to put before a delivered message, CRLF-terminated.

    ``sender`` is the envelope sender as received (``<>`` or empty for the null path);
    ``recipients`` the envelope recipients of the message, naming one only if there is one.
    ``peer`` is the client's IP address; ``tls`` the :func:`tls_comment` of the session, put
    in parentheses after the source as Postfix and Dovecot do.  UTF-8 in addresses (SMTPUTF8)
    is written as UTF-8 (RFC 6532).
    """
    when = when or datetime.datetime.now(datetime.UTC)
    path = sender if sender.startswith("<") else f"<{sender}>"
    lines = [f"Return-Path: {path}"]
    single = recipients[0] if len(recipients) == 1 else None
    if single:
        lines.append(f"Delivered-To: {single}")
    source = f"from {_printable(helo) if helo else 'unknown'}"
    if peer:
        source += f" ([{peer}])" if ":" not in peer else f" ([IPv6:{peer}])"
    if tls:
        source += f"\r\n\t({tls})"
    received = f"Received: {source}\r\n\tby {hostname} with {protocol} id {delivery}"
    if single:
        received += f"\r\n\tfor <{single}>"
    lines.append(f"{received}; {email.utils.format_datetime(when)}")
    return ("\r\n".join(lines) + "\r\n").encode("utf-8")
