"""The delivery package's pure parts: recipient addresses, line endings, trace fields."""

from __future__ import annotations

import datetime

import pytest

from imapserver.delivery import replies, trace
from imapserver.delivery.addresses import BadAddress, ForeignDomain, parse_recipient
from mailstore.errors import BackendUnavailable, Conflict, NotFound, OverQuota, TooLarge

DOMAINS = ["example.com", "localhost"]


def test_recipient_local_part_is_folded_and_domain_checked():
    """RFC 5321 2.4: the domain is case-insensitive; our user names are too."""
    addr = parse_recipient("Alice@Example.COM", DOMAINS, True)
    assert (addr.local, addr.domain, addr.user, addr.detail) == ("alice", "example.com",
                                                                 "alice", None)
    with pytest.raises(ForeignDomain):
        parse_recipient("alice@elsewhere.org", DOMAINS, True)


@pytest.mark.parametrize("text", ["alice", "@example.com", "alice@", '"a b"@example.com'])
def test_recipient_without_local_part_or_domain_is_malformed(text):
    """RFC 5321 4.1.2: Mailbox = Local-part "@" ( Domain / address-literal )."""
    with pytest.raises(BadAddress):
        parse_recipient(text, DOMAINS, True)


def test_plus_address_splits_at_the_first_plus_and_keeps_the_folder_case():
    addr = parse_recipient("bob+Lists+x@example.com", DOMAINS, True)
    assert (addr.local, addr.user, addr.detail) == ("bob+lists+x", "bob", "Lists+x")
    assert parse_recipient("bob+Lists@example.com", DOMAINS, False).detail is None
    assert parse_recipient("+x@example.com", DOMAINS, True).detail is None


def test_bare_lf_becomes_crlf_and_everything_else_is_kept():
    """RFC 5322 2.1 / RFC 5321 2.3.8: CRLF ends a line; 8-bit bytes and lone CRs stay."""
    assert trace.crlf(b"a\r\nb\nc\n") == b"a\r\nb\r\nc\r\n"
    assert trace.crlf(b"\xe9\r\n\xff\rz\r\n") == b"\xe9\r\n\xff\rz\r\n"
    data = b"x\r\n" * 3
    assert trace.crlf(data) is data


def test_trace_fields_for_one_recipient_name_it():
    """RFC 5321 4.4: Return-Path holds the reverse-path, Received the for clause."""
    when = datetime.datetime(2026, 11, 21, 12, 0, tzinfo=datetime.UTC)
    fields = trace.trace_fields(sender="a@b.example", recipients=["bob@example.com"],
                                helo="mx.b.example", peer="192.0.2.1", hostname="store",
                                protocol="LMTP", delivery="ID1", when=when)
    assert fields == (b"Return-Path: <a@b.example>\r\n"
                      b"Delivered-To: bob@example.com\r\n"
                      b"Received: from mx.b.example ([192.0.2.1])\r\n"
                      b"\tby store with LMTP id ID1\r\n"
                      b"\tfor <bob@example.com>; Sat, 21 Nov 2026 12:00:00 +0000\r\n")


def test_trace_fields_shared_by_several_recipients_name_none():
    """Content shared by recipients must not disclose one to another (Bcc), RFC 5321 7.2."""
    fields = trace.trace_fields(sender="<>", recipients=["a@example.com", "b@example.com"],
                                helo=None, peer="::1", hostname="store", protocol="ESMTP",
                                delivery="ID2")
    assert fields.startswith(b"Return-Path: <>\r\nReceived: from unknown ([IPv6:::1])\r\n")
    assert b"a@example.com" not in fields and b"Delivered-To" not in fields


def test_protocol_keywords():
    """RFC 3848 (SMTP, ESMTP, LMTP) and RFC 6531 3.7.3 (UTF8SMTP, UTF8LMTP)."""
    assert trace.protocol_keyword(True, True, False) == "LMTP"
    assert trace.protocol_keyword(True, True, True) == "UTF8LMTP"
    assert trace.protocol_keyword(False, True, False) == "ESMTP"
    assert trace.protocol_keyword(False, False, False) == "SMTP"
    assert trace.protocol_keyword(False, True, True) == "UTF8SMTP"


def test_protocol_keywords_after_starttls():
    """RFC 3848 (ESMTPS, LMTPS) and RFC 6531 3.7.3 (UTF8SMTPS, UTF8LMTPS): S for STARTTLS,
    which is an ESMTP extension, so a TLS session is ESMTPS even if HELO followed it."""
    assert trace.protocol_keyword(True, True, False, True) == "LMTPS"
    assert trace.protocol_keyword(True, True, True, True) == "UTF8LMTPS"
    assert trace.protocol_keyword(False, True, False, True) == "ESMTPS"
    assert trace.protocol_keyword(False, False, False, True) == "ESMTPS"
    assert trace.protocol_keyword(False, True, True, True) == "UTF8SMTPS"


def test_trace_fields_after_starttls_name_the_cipher():
    """RFC 5321 4.4 allows comments in Received; the TLS version and cipher are written as
    Postfix writes them, from the session's TLS information."""
    tls = trace.tls_comment({"cipher": ("TLS_AES_256_GCM_SHA384", "TLSv1.3", 256)})
    assert tls == "using TLSv1.3 with cipher TLS_AES_256_GCM_SHA384 (256/256 bits)"
    assert trace.tls_comment(None) is None
    fields = trace.trace_fields(sender="<>", recipients=["a@example.com", "b@example.com"],
                                helo="mx", peer="192.0.2.1", hostname="store",
                                protocol="ESMTPS", delivery="ID3", tls=tls)
    assert fields.startswith(b"Return-Path: <>\r\nReceived: from mx ([192.0.2.1])\r\n"
                             b"\t(using TLSv1.3 with cipher TLS_AES_256_GCM_SHA384 "
                             b"(256/256 bits))\r\n\tby store with ESMTPS id ID3; ")


def test_store_errors_map_to_reply_codes():
    """RFC 3463: 4.2.2/5.2.2 mailbox full, 5.3.4 too big, 5.1.1 bad mailbox, 4.3.0 system."""
    def code(exc, policy="452"):
        return replies.for_error(exc, "a@example.com", policy)[:9]

    assert code(OverQuota("x")) == "452 4.2.2"
    assert code(OverQuota("x"), "552") == "552 5.2.2"
    assert code(TooLarge("x")) == "552 5.3.4"
    assert code(NotFound("x")) == "550 5.1.1"
    assert code(BackendUnavailable("x")) == "451 4.3.0"
    assert code(Conflict("x")) == "451 4.3.0"
    assert code(RuntimeError("bug")) == "451 4.3.0"
