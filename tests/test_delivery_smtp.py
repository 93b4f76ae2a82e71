"""SMTP delivery into the store, with stdlib ``smtplib`` against the listeners in this process.

Every test gets a fresh embedded store with the users alice and bob.
"""

from __future__ import annotations

import smtplib

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.messages import SUMMARY
from mailstore.store import MailStore
from tests.deliveryserver import InProcess, body_of, config, raw_session, stored
from tests.mailgen import message

LIMIT = 64 * 1024


@pytest.fixture
def store(tmp_path):
    store = MailStore(EmbeddedBackend(str(tmp_path / "store")), max_message_size=LIMIT)
    store.create_user("alice", None)
    store.create_user("bob", None)
    yield store
    store.close()


@pytest.fixture
def server(store):
    with InProcess(store) as server:
        yield server


@pytest.fixture
def smtp(server):
    with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as client:
        yield client


def test_one_recipient_is_visible_in_the_store_when_250_arrives(store, smtp):
    """RFC 5321 4.1.1.4: the 250 after DATA means the server took responsibility; here it
    means the message is committed, so the store shows it at once."""
    msg = message(1)
    assert smtp.sendmail("carol@example.org", ["alice@example.com"], msg) == {}
    (got,) = stored(store, "alice")
    assert body_of(got) == msg
    assert got.startswith(b"Return-Path: <carol@example.org>\r\n"
                          b"Delivered-To: alice@example.com\r\nReceived: from ")
    assert b"with ESMTP id " in got and b"for <alice@example.com>;" in got
    assert stored(store, "bob") == []


def test_several_recipients_share_one_content_with_their_own_rows(store, smtp):
    """RFC 5321 3.3: one message, several RCPTs; the store keeps the content once."""
    msg = message(2)
    assert smtp.sendmail("carol@example.org", ["alice@example.com", "bob@localhost"],
                         msg) == {}
    views = []
    for user in ("alice", "bob"):
        box = store.mailbox(user, "INBOX")
        (view,) = store.fetch(box, store.uids(box), SUMMARY)
        views.append(view)
        assert body_of(store.read_message(view)) == msg
        assert b"Delivered-To" not in store.read_message(view)
    assert views[0].record.content == views[1].record.content
    # Flags are per recipient.
    store.store_flags(store.mailbox("alice", "INBOX"), [views[0].uid], ["\\Seen"])
    bob_box = store.mailbox("bob", "INBOX")
    assert "\\Seen" not in store.fetch(bob_box, [views[1].uid])[0].flags.names


def test_unknown_user_is_refused_at_rcpt(store, smtp):
    """RFC 5321 4.2.2 / RFC 3463 5.1.1: 550 bad destination mailbox, before any DATA."""
    smtp.ehlo()
    smtp.mail("carol@example.org")
    code, text = smtp.rcpt("nobody@example.com")
    assert (code, text[:5]) == (550, b"5.1.1")
    assert smtp.rcpt("alice@example.com")[0] == 250
    assert smtp.data(message(3))[0] == 250
    assert len(stored(store, "alice")) == 1


def test_other_domains_and_malformed_addresses_are_refused(smtp):
    """RFC 5321 3.6.2: no relaying (550 5.1.2); 4.1.2 syntax: 501 5.1.3."""
    smtp.ehlo()
    smtp.mail("carol@example.org")
    assert smtp.rcpt("alice@elsewhere.org")[:1] == (550,)
    assert smtp.rcpt("alice@elsewhere.org")[1].startswith(b"5.1.2")
    assert smtp.rcpt("alice")[:1] == (501,)
    code, text = smtp.docmd("RCPT", "TO:<alice@@example..com>")
    assert (code, text[:5]) == (501, b"5.1.3")


def test_size_is_advertised_and_enforced(store, smtp):
    """RFC 1870: SIZE in EHLO; MAIL SIZE= over it and DATA over it get 552 5.3.4."""
    smtp.ehlo()
    assert smtp.has_extn("size") and int(smtp.esmtp_features["size"]) == LIMIT
    code, text = smtp.docmd("MAIL", f"FROM:<carol@example.org> SIZE={LIMIT + 1}")
    assert (code, text[:5]) == (552, b"5.3.4")
    with pytest.raises(smtplib.SMTPDataError) as refused:
        smtp.sendmail("carol@example.org", ["alice@example.com"], message(4, size=LIMIT + 10))
    assert refused.value.smtp_code == 552 and refused.value.smtp_error.startswith(b"5.3.4")
    assert stored(store, "alice") == []


def test_dot_stuffed_lines_are_unstuffed(store, smtp):
    """RFC 5321 4.5.2: a leading dot is doubled on the wire and removed by the receiver."""
    msg = message(5, body=b".\r\n..two\r\n.three\r\nend\r\n")
    smtp.sendmail("carol@example.org", ["alice@example.com"], msg)
    assert body_of(stored(store, "alice")[0]) == msg


def test_bare_lf_in_the_body_is_stored_as_crlf(store, server):
    """RFC 5321 2.3.8: only CRLF ends a line, so a bare LF cannot end DATA; the stored
    message has CRLF everywhere (RFC 5322 2.1)."""
    replies = raw_session(server.ports["smtp"], [
        b"EHLO client\r\n", b"MAIL FROM:<c@example.org>\r\n", b"RCPT TO:<alice@example.com>\r\n",
        b"DATA\r\n", b"Subject: lf\nX: 1\n\nline one\n.\nline two\r\n.\r\n", b"QUIT\r\n"])
    assert replies[-2].startswith(b"250 2.0.0"), replies
    assert body_of(stored(store, "alice")[0]) == (
        b"Subject: lf\r\nX: 1\r\n\r\nline one\r\n.\r\nline two\r\n")


def test_eight_bit_body_and_long_lines_are_kept_intact(store, smtp):
    """RFC 6152 8BITMIME: octets above 127 pass untouched; lines over RFC 5321's 1000
    octets (4.5.3.1.6) are kept rather than bounced."""
    body = "Grüße, déjà vu — 日本語\r\n".encode() + bytes(range(128, 256)) + b"\r\n" + \
        b"y" * 5000 + b"\r\n"
    msg = message(6, body=body).replace(b"us-ascii", b"utf-8")
    smtp.ehlo()
    assert smtp.has_extn("8bitmime")
    assert smtp.sendmail("carol@example.org", ["alice@example.com"], msg,
                         mail_options=["BODY=8BITMIME"]) == {}
    assert body_of(stored(store, "alice")[0]) == msg


def test_smtputf8_addresses(store, smtp):
    """RFC 6531: SMTPUTF8 is advertised; a UTF-8 reverse-path is accepted and recorded, and
    the Received field says UTF8SMTP (3.7.3)."""
    smtp.ehlo()
    assert smtp.has_extn("smtputf8")
    assert smtp.sendmail("jörg@exämple.org", ["alice@example.com"], message(7),
                         mail_options=["SMTPUTF8"]) == {}
    got = stored(store, "alice")[0]
    assert got.startswith("Return-Path: <jörg@exämple.org>\r\n".encode())
    assert b" with UTF8SMTP id " in got


def test_null_reverse_path_is_accepted(store, smtp):
    """RFC 5321 4.5.5: bounces come from <>; Return-Path: <> records it."""
    assert smtp.sendmail("<>", ["alice@example.com"], message(8)) == {}
    assert stored(store, "alice")[0].startswith(b"Return-Path: <>\r\n")


def test_over_quota_at_rcpt_and_at_data(store, smtp):
    """RFC 3463 4.2.2 (mailbox full): at RCPT when the user cannot take one more message, at
    the end of DATA when this message's size would take them over."""
    store.users.set_quota("alice", None, 0)
    smtp.ehlo()
    smtp.mail("carol@example.org")
    code, text = smtp.rcpt("alice@example.com")
    assert (code, text[:5]) == (452, b"4.2.2")
    smtp.rset()
    store.users.set_quota("alice", 1000, None)
    with pytest.raises(smtplib.SMTPDataError) as refused:
        smtp.sendmail("carol@example.org", ["alice@example.com"], message(9, size=2000))
    assert refused.value.smtp_code == 452 and refused.value.smtp_error.startswith(b"4.2.2")
    assert stored(store, "alice") == []


def test_over_quota_policy_552(store):
    """conf over_quota_code = 552: a permanent refusal (RFC 3463 5.2.2)."""
    store.users.set_quota("alice", None, 0)
    with InProcess(store, config(over_quota_code="552", max_message_size=LIMIT)) as server, \
            smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as smtp:
        smtp.ehlo()
        smtp.mail("carol@example.org")
        assert smtp.rcpt("alice@example.com")[:1] == (552,)


def test_smtp_delivers_to_all_recipients_or_to_none(store, smtp):
    """RFC 5321 4.1.1.4: one reply for the whole message, so a recipient that cannot take
    it at DATA fails the message for all (4xx: the sender retries), and no one has it."""
    store.users.set_quota("bob", 1000, None)
    with pytest.raises(smtplib.SMTPDataError) as refused:
        smtp.sendmail("carol@example.org", ["alice@example.com", "bob@example.com"],
                      message(10, size=2000))
    assert refused.value.smtp_code == 452
    assert stored(store, "alice") == [] and stored(store, "bob") == []


def test_plus_address_delivers_into_an_existing_folder(store, smtp):
    """user+folder@domain: into that folder if it exists, else INBOX."""
    smtp.sendmail("c@example.org", ["alice+Archive@example.com"], message(11))
    smtp.sendmail("c@example.org", ["alice+nosuch@example.com"], message(12))
    assert [body_of(m) for m in stored(store, "alice", "Archive")] == [message(11)]
    assert [body_of(m) for m in stored(store, "alice", "INBOX")] == [message(12)]
    assert stored(store, "alice", "Archive")[0].startswith(
        b"Return-Path: <c@example.org>\r\nDelivered-To: alice+Archive@example.com\r\n")


def test_plus_addressing_off_makes_plus_part_of_the_user_name(store):
    with InProcess(store, config(plus_addressing=False, max_message_size=LIMIT)) as server, \
            smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as smtp:
        smtp.ehlo()
        smtp.mail("c@example.org")
        assert smtp.rcpt("alice+Archive@example.com")[0] == 550


def test_rset_forgets_the_recipients(store, smtp):
    """RFC 5321 4.1.1.5: RSET aborts the transaction and its recipients."""
    smtp.ehlo()
    smtp.mail("c@example.org")
    smtp.rcpt("bob@example.com")
    smtp.rset()
    smtp.sendmail("c@example.org", ["alice@example.com"], message(13))
    assert len(stored(store, "alice")) == 1 and stored(store, "bob") == []


def test_unterminated_angle_address_is_refused_as_malformed(store, server):
    """RFC 5321 4.1.2: a Path is "<" ... ">"; ``MAIL FROM:< `` (found by tests/test_fuzz.py)
    is a syntax error, 501 (4.2.2), not a 500 naming a Python exception."""
    replies = raw_session(server.ports["smtp"], [
        b"EHLO client\r\n", b"MAIL FROM:< \r\n", b"MAIL FROM:<c@example.org>\r\n",
        b"RCPT TO:<\r\n", b"RCPT TO:< \r\n", b"QUIT\r\n"])
    assert [r[:9] for r in replies[-5:]] == [
        b"501 5.1.7", b"250 OK\r\n", b"501 5.1.3", b"501 5.1.3", b"221 Bye\r\n"], replies


def test_addresses_and_helo_that_are_not_utf8(store, server):
    """RFC 5321 4.1.2 (addresses are ASCII) and RFC 6531 3.3 (or UTF-8): an address holding
    other 8-bit bytes is refused as malformed, 501, instead of a 500 naming a Python exception
    (found by tests/test_fuzz.py).  A HELO name of such bytes is written into the Received
    field (RFC 5321 4.4) with them escaped, and the message is delivered."""
    replies = raw_session(server.ports["smtp"], [
        b"HELO \xff\r\n", b"MAIL FROM:<\xf2@example.org>\r\n", b"MAIL FROM:<c@example.org>\r\n",
        b"RCPT TO:<\xf2@example.com>\r\n", b"RCPT TO:<alice@example.com>\r\n", b"DATA\r\n",
        b"Subject: x\r\n\r\nbody\r\n.\r\n", b"QUIT\r\n"])
    assert [r[:9] for r in replies[2:8]] == [
        b"501 5.1.7", b"250 OK\r\n", b"501 5.1.3", b"250 2.1.5", b"354 End d", b"250 2.0.0"
    ], replies
    (got,) = stored(store, "alice")
    assert b"Received: from \\xff ([127.0.0.1])" in got
