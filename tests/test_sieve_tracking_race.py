"""Sieve's tracking under concurrency (mailstore/sieve/tracking.py, decision 0025): two
deliveries racing -- two processes over one store -- send one vacation reply and see one
duplicate; a delivery withdrawn after its mail was queued leaves nothing queued or claimed,
so the sender's retry sends each reply once.  RFC 5230 4.2, RFC 7352 3."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from imapserver.delivery.sieving import deliver_with_sieve, make_plans
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.errors import BackendUnavailable
from mailstore.sieve.executor import SieveSettings
from mailstore.store import MailStore
from tests.deliveryserver import InProcess
from tests.test_sieve_delivery import activate, lmtp, messages, msg, outgoing

VACATION = 'require "vacation";\nvacation :days 1 "I am away.";\n'
SETTINGS = SieveSettings(domains=("example.com",))


def open_store(backend) -> MailStore:
    store = MailStore(backend, max_message_size=1 << 20)
    store.create_user("alice", None)
    return store


def deliver(store, source: bytes, marker: bytes, plans=None):
    plans = plans or make_plans(store, [("alice@example.com", "alice", "INBOX")], source,
                                "sender@example.org", SETTINGS, lmtp=True)
    return deliver_with_sieve(store, plans, source, marker, all_or_nothing=False)


def test_vacation_race_between_two_deliveries_sends_one_reply(backend):
    """RFC 5230 4.2: "a response is sent only once per period" -- two deliveries of the same
    sender both run the script before either records the reply (both decide to reply); the
    check-and-put claim taken before queuing lets one through."""
    store = open_store(backend)
    activate(store, "alice", VACATION)
    one, two = msg(message_id="<a@example.org>"), msg(message_id="<b@example.org>")
    plans_one = make_plans(store, [("alice@example.com", "alice", "INBOX")], one,
                           "sender@example.org", SETTINGS, lmtp=True)
    plans_two = make_plans(store, [("alice@example.com", "alice", "INBOX")], two,
                           "sender@example.org", SETTINGS, lmtp=True)
    assert plans_one[0].outgoing and plans_two[0].outgoing  # both decided to reply
    assert [d.error for d in deliver(store, one, b"q1", plans_one)] == [None]
    assert [d.error for d in deliver(store, two, b"q2", plans_two)] == [None]
    assert [reason for _, _, reason, _ in outgoing(store)] == ["vacation"]
    assert len(messages(store, "alice", "INBOX")) == 2  # both messages delivered
    assert any("concurrent delivery" in n for n in plans_two[0].notes)


def test_duplicate_race_between_two_deliveries_sees_one_new(backend):
    """RFC 7352 3: of two deliveries of the same Message-ID racing, one is the first and the
    other a duplicate: the test claims the id atomically when it runs."""
    store = open_store(backend)
    activate(store, "alice", 'require ["duplicate", "fileinto"];\n'
             'if duplicate { fileinto "Dups"; }\n')
    store.create_mailbox("alice", "Dups")
    one = msg(message_id="<same@example.org>")
    plans_one = make_plans(store, [("alice@example.com", "alice", "INBOX")], one,
                           "sender@example.org", SETTINGS, lmtp=True)
    plans_two = make_plans(store, [("alice@example.com", "alice", "INBOX")], one,
                           "sender@example.org", SETTINGS, lmtp=True)
    deliver(store, one, b"q1", plans_one)
    deliver(store, one, b"q2", plans_two)
    assert len(messages(store, "alice", "INBOX")) == 1
    assert len(messages(store, "alice", "Dups")) == 1


def test_refused_delivery_gives_its_duplicate_claim_back(backend):
    """RFC 7352 3: only a delivered message is tracked -- a recipient whose script claims
    the id and then rejects (LMTP 550) leaves the id free for the next delivery."""
    store = open_store(backend)
    activate(store, "alice", 'require ["duplicate", "reject"];\n'
             'if not duplicate { reject "not now"; }\n')
    source = msg(message_id="<r@example.org>")
    [result] = deliver(store, source, b"q1")
    assert result.error is not None  # rejected
    [plan] = make_plans(store, [("alice@example.com", "alice", "INBOX")], source,
                        "sender@example.org", SETTINGS, lmtp=True)
    assert plan.reject == "not now"  # not a duplicate: the first claim was given back


RACER = textwrap.dedent('''
    import sys, time, pathlib
    from mailstore.backends.embedded import EmbeddedBackend
    from mailstore.store import MailStore
    from mailstore.sieve.executor import SieveSettings
    from imapserver.delivery.sieving import deliver_with_sieve, make_plans
    path, name, barrier = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    store = MailStore(EmbeddedBackend(path), max_message_size=1 << 20)
    source = (b"From: <sender@example.org>\\r\\nTo: alice@example.com\\r\\nSubject: hi\\r\\n"
              b"Message-ID: <" + name.encode() + b"@example.org>\\r\\n\\r\\nbody\\r\\n")
    plans = make_plans(store, [("alice@example.com", "alice", "INBOX")], source,
                       "sender@example.org", SieveSettings(domains=("example.com",)), True)
    assert plans[0].outgoing, "the script decided to reply"
    (barrier.parent / name).touch()          # planned: both decided before either stored
    deadline = time.monotonic() + 20
    while not barrier.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    results = deliver_with_sieve(store, plans, source, name.encode(), False)
    assert results[0].error is None, results
    store.close()
''')


def test_two_processes_racing_send_one_vacation_reply(tmp_path):
    """RFC 5230 4.2 across processes (two workers, two machines over one store): each
    process runs the script and decides to reply, then both store and queue at once; the
    tracking claim is atomic in the store, so one reply is queued."""
    path = str(tmp_path / "store")
    store = open_store(EmbeddedBackend(path))
    activate(store, "alice", VACATION)
    barrier = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", RACER, path, name, str(barrier)],
                              stderr=subprocess.PIPE)
             for name in ("p1", "p2")]
    deadline = time.monotonic() + 30
    while not all((tmp_path / n).exists() for n in ("p1", "p2")):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            [p.stderr.read() for p in procs if p.poll() is not None]
        time.sleep(0.01)
    barrier.touch()
    for p in procs:
        assert p.wait(timeout=30) == 0, p.stderr.read()
        p.stderr.close()
    assert len(messages(store, "alice", "INBOX")) == 2
    assert [reason for _, _, reason, _ in outgoing(store)] == ["vacation"]
    store.close()


@pytest.mark.parametrize("protocol", ["lmtp", "smtp"])
def test_withdrawn_delivery_leaves_no_reply_queued_and_the_retry_sends_one(tmp_path,
                                                                           monkeypatch,
                                                                           protocol):
    """RFC 5230 4.2 with RFC 5321 4.2.5/6.1: a delivery answered 451 keeps nothing -- not
    the vacation reply queued before a later enqueue (the redirect) failed -- and gives its
    tracking claim back; the sender's retry then queues the reply and the redirect once."""
    import smtplib

    store = open_store(EmbeddedBackend(str(tmp_path / "store")))
    activate(store, "alice", 'require ["vacation", "copy"];\n'
             'vacation :days 1 "I am away.";\nredirect :copy "elsewhere@example.net";\n')
    real = store.outbox.enqueue
    calls = []

    def flaky(mail_from, rcpt_tos, message, reason, **kwargs):
        calls.append(reason)
        if reason == "redirect" and calls.count("redirect") == 1:
            raise BackendUnavailable("outbox down for a moment")
        return real(mail_from, rcpt_tos, message, reason, **kwargs)

    monkeypatch.setattr(store.outbox, "enqueue", flaky)
    with InProcess(store) as server:
        for attempt in (1, 2):
            if protocol == "lmtp":
                _, answers = lmtp(server, ["alice@example.com"], msg())
                codes = [code for code, _ in answers]
            else:
                with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as client:
                    try:
                        client.sendmail("sender@example.org", ["alice@example.com"], msg())
                        codes = [250]
                    except smtplib.SMTPDataError as exc:
                        codes = [exc.smtp_code]
            assert codes == ([451] if attempt == 1 else [250])
            if attempt == 1:
                assert outgoing(store) == []  # the reply queued before the failure is gone
                assert messages(store, "alice", "INBOX") == []
    assert calls == ["vacation", "redirect", "vacation", "redirect"]
    assert sorted(reason for _, _, reason, _ in outgoing(store)) == ["redirect", "vacation"]
    assert len(messages(store, "alice", "INBOX")) == 1
    store.close()


def test_a_new_period_sends_a_new_reply(backend):
    """RFC 5230 4.2 ("a response is sent only once per period", ":days" the period): a second
    message from the same sender inside :days gets no reply; once the period has passed (the
    store's clock moved a day and a second on), the next one gets a reply again."""
    store = open_store(backend)
    activate(store, "alice", VACATION)
    start = time.time()
    now = [start]
    store.clock = lambda: now[0]
    deliver(store, msg(message_id="<p1@example.org>"), b"q1")
    deliver(store, msg(message_id="<p2@example.org>"), b"q2")
    assert [reason for _, _, reason, _ in outgoing(store)] == ["vacation"]
    now[0] = start + 86400 - 1  # still inside the day
    deliver(store, msg(message_id="<p3@example.org>"), b"q3")
    assert len(outgoing(store)) == 1
    now[0] = start + 86400 + 1
    deliver(store, msg(message_id="<p4@example.org>"), b"q4")
    assert [reason for _, _, reason, _ in outgoing(store)] == ["vacation", "vacation"]
