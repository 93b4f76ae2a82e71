"""LMTP delivery (RFC 2033) with stdlib ``smtplib.LMTP``, over each storage backend."""

from __future__ import annotations

import smtplib

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.messages import SUMMARY
from mailstore.store import MailStore
from tests.deliveryserver import InProcess, body_of, lmtp_send, raw_session, stored
from tests.mailgen import message

LIMIT = 64 * 1024


def open_store(backend) -> MailStore:
    store = MailStore(backend, max_message_size=LIMIT)
    for user in ("alice", "bob", "carol"):
        store.create_user(user, None)
    return store


@pytest.fixture
def store(tmp_path):
    store = open_store(EmbeddedBackend(str(tmp_path / "store")))
    yield store
    store.close()


@pytest.fixture
def server(store):
    with InProcess(store) as server:
        yield server


@pytest.fixture
def lmtp(server):
    with smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=10) as client:
        yield client


def test_lmtp_into_each_backend_stores_content_once(backend):
    """RFC 2033 4.2: after DATA, one reply per accepted RCPT, in order; the store (embedded,
    and HBase through its Thrift gateway) holds one content for all of them."""
    store = open_store(backend)
    msg = message(1, size=3000)
    with InProcess(store) as server, \
            smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=10) as lmtp:
        rcpt, answers = lmtp_send(lmtp, "d@example.org",
                                  ["alice@example.com", "bob@example.com", "carol@example.com"],
                                  msg)
    assert [code for code, _ in rcpt] == [250, 250, 250]
    assert [code for code, _ in answers] == [250, 250, 250]
    assert [text.split()[1] for _, text in answers] == [
        b"<alice@example.com>", b"<bob@example.com>", b"<carol@example.com>"]
    contents = set()
    for user in ("alice", "bob", "carol"):
        box = store.mailbox(user, "INBOX")
        (view,) = store.fetch(box, store.uids(box), SUMMARY)
        contents.add(view.record.content)
        assert body_of(store.read_message(view)) == msg
    assert len(contents) == 1


def test_each_recipient_gets_its_own_reply(store, lmtp):
    """RFC 2033 4.2: a recipient that cannot take the message fails alone; the others
    succeed.  Refused RCPTs get no DATA reply."""
    store.users.set_quota("bob", 1000, None)
    rcpt, answers = lmtp_send(lmtp, "d@example.org",
                              ["alice@example.com", "nobody@example.com", "bob@example.com",
                               "carol@example.com"], message(2, size=2000))
    assert [code for code, _ in rcpt] == [250, 550, 250, 250]
    assert [(code, text[:5]) for code, text in answers] == [
        (250, b"2.0.0"), (452, b"4.2.2"), (250, b"2.0.0")]
    assert len(stored(store, "alice")) == 1 and len(stored(store, "carol")) == 1
    assert stored(store, "bob") == []


def test_too_large_data_gets_a_reply_per_recipient(store, lmtp):
    """RFC 2033 4.2 with RFC 1870: a DATA refused for size is refused for each recipient
    (552 5.3.4), so the client is not left waiting for replies."""
    rcpt, answers = lmtp_send(lmtp, "d@example.org", ["alice@example.com", "bob@example.com"],
                              message(3, size=LIMIT + 100))
    assert [(code, text[:5]) for code, text in answers] == [(552, b"5.3.4")] * 2
    assert lmtp.noop()[0] == 250  # still in step with the server
    assert stored(store, "alice") == [] and stored(store, "bob") == []


def test_same_recipient_twice_is_delivered_once(store, lmtp):
    """RFC 2033 4.2 asks a reply per successful RCPT; the mailbox gets one copy."""
    _, answers = lmtp_send(lmtp, "d@example.org", ["alice@example.com", "Alice@example.com"],
                           message(4))
    assert [code for code, _ in answers] == [250, 250]
    assert len(stored(store, "alice")) == 1


def test_lhlo_is_the_greeting(server):
    """RFC 2033 4.1: LHLO replaces HELO/EHLO, which an LMTP server refuses."""
    replies = raw_session(server.ports["lmtp"], [b"EHLO x\r\n", b"HELO x\r\n", b"LHLO x\r\n",
                                                 b"QUIT\r\n"])
    assert replies[0].startswith(b"220 ") and b"LMTP" in replies[0]
    assert replies[1].startswith(b"500") and replies[2].startswith(b"500")
    features = {r[4:].strip().upper() for r in replies[3:-1]}
    assert {b"PIPELINING", b"8BITMIME", b"SMTPUTF8"} <= features
    assert any(f.startswith(b"SIZE ") for f in features)


def test_pipelined_transaction(store, server):
    """RFC 2920 with RFC 2033: the commands sent in one go are answered in order."""
    replies = raw_session(server.ports["lmtp"], [
        b"LHLO x\r\n",
        b"MAIL FROM:<d@example.org>\r\nRCPT TO:<alice@example.com>\r\n"
        b"RCPT TO:<bob@example.com>\r\nDATA\r\n", 3,
        b"Subject: p\r\n\r\npipelined\r\n.\r\n", 1, b"QUIT\r\n"])
    codes = [r[:3] for r in replies]
    assert codes[-7:] == [b"250", b"250", b"250", b"354", b"250", b"250", b"221"], replies
    assert body_of(stored(store, "bob")[0]) == b"Subject: p\r\n\r\npipelined\r\n"


def test_message_with_one_recipient_names_it_in_the_trace_fields(store, lmtp):
    lmtp_send(lmtp, "d@example.org", ["carol+Junk@localhost"], message(5))
    got = stored(store, "carol", "Junk")[0]
    assert got.startswith(b"Return-Path: <d@example.org>\r\n"
                          b"Delivered-To: carol+Junk@localhost\r\nReceived: from ")
    assert b" with LMTP id " in got and b"\tfor <carol+Junk@localhost>; " in got
