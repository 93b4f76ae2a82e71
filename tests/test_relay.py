"""The relay sender (imapserver/delivery/relay.py) against a real local SMTP server.

The sink is aiosmtpd on a port the kernel chose (tests/smtpsink.py); the sender runs in the
delivery service of this process (``InProcess``) over a store the test holds, so an enqueue
wakes it as the Sieve executor's would.  RFC 5321 4.2.1 (reply classes), 4.5.4.1 (retries),
4.5.5 (null sender), 6.1 (responsibility); RFC 3207 (STARTTLS); RFC 4954 (AUTH); RFC 3464.
"""

from __future__ import annotations

import email
import time

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.deliveryserver import InProcess, config
from tests.smtpsink import Sink, reserve_port
from tests.tlscert import make_cert

# CRLF lines, a line that starts with a dot (dot-stuffed on the wire, RFC 5321 4.5.2), 8-bit
# UTF-8 in the body, trailing spaces: all must arrive as they were queued.
MESSAGE = ("From: alice@example.com\r\nTo: bob@example.net\r\nSubject: redirected\r\n"
           "Message-ID: <r1@example.com>\r\nMIME-Version: 1.0\r\n"
           "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
           "line one  \r\n.a line with a leading dot\r\n..two dots\r\nGrüße\r\n").encode()


def wait_for(condition, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def relay_config(port: int, **more):
    values = dict(relay_host="127.0.0.1", relay_port=port, relay_starttls="no",
                  relay_backoff_base=0.3, relay_backoff_max=1.0, relay_poll_interval=0.2,
                  relay_timeout=5.0, relay_claim_timeout=30.0, hostname="mx.test")
    values.update(more)
    return config(**values)


@pytest.fixture
def store(tmp_path):
    s = MailStore(EmbeddedBackend(str(tmp_path / "store")))
    yield s
    s.close()


def test_queued_message_arrives_byte_for_byte(backend):
    """The relay receives the queued bytes exactly, with the queued envelope, sent at once
    on the enqueue (not at a later scan); the entry is gone once the relay said 250 (RFC 5321
    6.1)."""
    store = MailStore(backend)
    # No periodic scan after the first one: what arrives was sent on the enqueue's wake-up.
    with Sink() as sink, InProcess(store, relay_config(sink.port, relay_poll_interval=3600)):
        for n in (1, 2):
            qid = store.outbox.enqueue("alice@example.com",
                                       ["bob@example.net", "carol@example.net"], MESSAGE,
                                       "redirect")
            wait_for(lambda n=n: len(sink.messages()) == n, what="the message at the sink")
            wait_for(lambda q=qid: store.outbox.get(q) is None, what="the entry removed")
    for got in sink.messages():
        assert got.data == MESSAGE
        assert got.mail_from == "alice@example.com"
        assert got.rcpt_tos == ["bob@example.net", "carol@example.net"]


def test_relay_down_at_first_then_up_delivers_once(store):
    """A relay that refuses connections defers the entry (kept, retried with backoff); once
    it listens on that port the message arrives after the retry, exactly once."""
    sock = reserve_port()          # bound, not listening: connections are refused
    with InProcess(store, relay_config(sock.getsockname()[1])):
        qid = store.outbox.enqueue("alice@example.com", ["bob@example.net"], MESSAGE,
                                   "vacation")
        entry = wait_for(lambda: (e := store.outbox.get(qid)) and e.attempts >= 1 and e,
                         what="a failed attempt")
        assert entry.pending == ["bob@example.net"] and "refused" in entry.last_error.lower()
        with Sink(sock) as sink:
            wait_for(sink.messages, what="the message after the retry")
            wait_for(lambda: store.outbox.entries() == [], what="the queue to empty")
            # Several more polls: nothing is sent again.
            time.sleep(1.0)
            assert [m.data for m in sink.messages()] == [MESSAGE]


def test_4xx_then_2xx(store):
    """A 4xx at RCPT is temporary (RFC 5321 4.2.1): retried, then accepted once."""
    with Sink() as sink, InProcess(store, relay_config(sink.port)):
        sink.rcpt_replies = ["451 4.3.0 try again later"]
        qid = store.outbox.enqueue("alice@example.com", ["bob@example.net"], MESSAGE,
                                   "redirect")
        wait_for(sink.messages, what="the message after a 451")
        wait_for(lambda: store.outbox.get(qid) is None, what="the entry removed")
        time.sleep(0.5)
        assert len(sink.messages()) == 1


def test_4xx_at_data_is_retried_too(store):
    """A 4xx to the end of DATA leaves every recipient pending for the next attempt."""
    with Sink() as sink, InProcess(store, relay_config(sink.port)):
        sink.data_replies = ["452 4.3.1 insufficient storage"]
        store.outbox.enqueue("alice@example.com", ["bob@example.net"], MESSAGE, "redirect")
        [got] = wait_for(sink.messages, what="the message after a 452 at DATA")
        assert got.data == MESSAGE


def test_5xx_bounces_a_dsn_to_the_sender(store):
    """A 5xx recipient is given up at once; the others are delivered, and a DSN (RFC 3464)
    goes to the envelope sender from the null reverse-path (RFC 5321 4.5.5) via the relay."""
    with Sink() as sink, InProcess(store, relay_config(sink.port)):
        sink.rcpt_replies = ["550 5.1.1 <bob@example.net>: no such user", "250 OK"]
        store.outbox.enqueue("alice@example.com", ["bob@example.net", "carol@example.net"],
                             MESSAGE, "redirect")
        original, dsn = wait_for(lambda: len(sink.messages()) >= 2 and sink.messages(),
                                 what="the message and the DSN")
        wait_for(lambda: store.outbox.entries() == [], what="the queue to empty")
    assert original.rcpt_tos == ["carol@example.net"] and original.data == MESSAGE
    assert dsn.mail_from == "<>" and dsn.rcpt_tos == ["alice@example.com"]
    report = email.message_from_bytes(dsn.data)
    assert report.get_content_type() == "multipart/report"
    status = report.get_payload()[1].get_payload()
    assert status[0]["Reporting-MTA"] == "dns; mx.test"
    assert status[1]["Final-Recipient"] == "rfc822; bob@example.net"
    assert status[1]["Status"] == "5.1.1" and status[1]["Action"] == "failed"
    assert b"Message-ID: <r1@example.com>" in dsn.data


def test_null_sender_failure_is_dropped_not_bounced(store):
    """A vacation reply (null sender) refused for good is dropped with a log line; no DSN
    (RFC 5321 4.5.5, RFC 3834 3.3)."""
    with Sink() as sink, InProcess(store, relay_config(sink.port)):
        sink.rcpt_replies = ["550 5.1.1 no such user"]
        store.outbox.enqueue("", ["bob@example.net"], MESSAGE, "vacation")
        wait_for(lambda: store.outbox.entries() == [], what="the entry dropped")
        time.sleep(0.5)
        assert sink.messages() == []


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_cert(str(tmp_path_factory.mktemp("relaycert")))


def test_starttls_required_with_auth(store, certs):
    """relay_starttls = required against a relay that insists on TLS and AUTH: STARTTLS
    (RFC 3207) with the certificate verified against the test CA, then AUTH (RFC 4954)."""
    with Sink(certs=certs, require_starttls=True, users={"relayuser": "relay-pw"}) as sink, \
            InProcess(store, relay_config(sink.port, relay_starttls="required",
                                          relay_ca_file=certs[0], relay_username="relayuser",
                                          relay_password="relay-pw")):
        store.outbox.enqueue("alice@example.com", ["bob@example.net"], MESSAGE, "redirect")
        [got] = wait_for(sink.messages, what="the message over TLS")
    assert got.tls and got.login == "relayuser" and got.data == MESSAGE


def test_starttls_required_refuses_a_relay_without_it_or_unverified(store, certs, tmp_path):
    """Nothing goes out in clear when TLS is required: a relay without STARTTLS, or whose
    certificate does not verify, defers the entry; neither gets the message."""
    other = make_cert(str(tmp_path))     # a CA that did not sign the sink's certificate
    with Sink() as plain, Sink(certs=certs) as tls:
        for sink, ca in ((plain, certs[0]), (tls, other[0])):
            with InProcess(store, relay_config(sink.port, relay_starttls="required",
                                               relay_ca_file=ca)):
                qid = store.outbox.enqueue("alice@example.com", ["bob@example.net"], MESSAGE,
                                           "redirect")
                entry = wait_for(lambda q=qid: (e := store.outbox.get(q)) and e.attempts and e,
                                 what="a failed attempt")
            assert sink.messages() == []
            assert ("STARTTLS" in entry.last_error if sink is plain
                    else "CERTIFICATE_VERIFY_FAILED" in entry.last_error), entry.last_error
            store.outbox.delete(qid)


def test_auth_is_never_sent_in_clear(store):
    """relay_username with opportunistic TLS and a relay that offers no STARTTLS: the attempt
    stops before AUTH (RFC 4954 4: no plain password over an unprotected link); the entry
    waits."""
    with Sink(users={"u": "p"}) as sink, \
            InProcess(store, relay_config(sink.port, relay_username="u", relay_password="p",
                                          relay_starttls="opportunistic")):
        qid = store.outbox.enqueue("alice@example.com", ["bob@example.net"], MESSAGE, "redirect")
        entry = wait_for(lambda: (e := store.outbox.get(qid)) and e.attempts and e,
                         what="a failed attempt")
    assert "AUTH only over TLS" in entry.last_error and sink.messages() == []


def test_no_relay_keeps_entries_queued(store):
    """Without relay_host nothing is sent and nothing is lost: the entry stays queued for
    `mailadmin queue` (a warning is logged once)."""
    with InProcess(store, relay_config(1, relay_host="")):
        qid = store.outbox.enqueue("alice@example.com", ["bob@example.net"], MESSAGE, "redirect")
        time.sleep(0.6)
    entry = store.outbox.get(qid)
    assert entry is not None and entry.attempts == 0 and entry.pending == ["bob@example.net"]
