"""The outgoing queue's contract (mailstore/outbox.py), on both backends.

RFC 5321 4.5.4.1 (retry strategy, give up after days), 4.5.5 (no bounce of a null sender),
6.1 (the queue keeps a message until a relay has accepted it); RFC 3464 (the DSN format).
"""

from __future__ import annotations

import email
import threading

import pytest

from mailstore.errors import InvalidAddress, TooLarge
from mailstore.outbox import RetryPolicy
from mailstore.store import MailStore

MSG = (b"From: alice@example.org\r\nTo: bob@example.net\r\nSubject: away\r\n"
       b"Message-ID: <m1@example.org>\r\n\r\nI am away.\r\n")


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def open_store(backend, clock=None, **kw) -> MailStore:
    store = MailStore(backend, clock=clock or Clock(), chunk_size=64 * 1024, **kw)
    store.outbox.policy = RetryPolicy(backoff_base=60, backoff_max=3600, jitter=0.2,
                                      max_attempts=5, max_age=86400, lease=300)
    return store


def test_enqueue_is_listed_and_reads_back_byte_for_byte(backend):
    """An entry is there, whole, as soon as enqueue returns (RFC 5321 6.1: the queue takes
    responsibility); a message larger than a chunk comes back byte for byte too."""
    store = open_store(backend)
    small = store.outbox.enqueue("alice@example.org", ["bob@example.net"], MSG, "vacation")
    big_body = bytes(range(256)) * 1100          # 281,600 bytes: five 64 KiB chunks
    big = store.outbox.enqueue("", ["carol@example.com", "dave@example.com"],
                               MSG + big_body, "redirect")
    entries = store.outbox.entries()
    assert [e.id for e in entries] == [small, big]          # oldest first
    assert entries[0].mail_from == "alice@example.org" and entries[0].reason == "vacation"
    assert entries[1].pending == ["carol@example.com", "dave@example.com"]
    assert store.outbox.message(entries[0]) == MSG
    assert store.outbox.message(entries[1]) == MSG + big_body
    assert [e.id for e in store.outbox.due()] == [small, big]
    # Another process opening the same store sees the same queue.
    assert store.outbox.get(small).size == len(MSG)


def test_enqueue_refuses_injection_and_oversize(backend):
    """Envelope addresses go into MAIL FROM/RCPT TO lines (RFC 5321 4.1.2): CR, LF and angle
    brackets are refused, as is a message over the store's size limit; nothing is queued."""
    store = open_store(backend, max_message_size=1000)
    for bad_from, bad_to in [("a@b\r\nRCPT TO:<x@y>", ["b@c"]), ("a@b", ["b@c>"]),
                             ("a@b", []), ("a@b", [""]), ("<a@b>", ["b@c"])]:
        with pytest.raises(InvalidAddress):
            store.outbox.enqueue(bad_from, bad_to, MSG, "redirect")
    with pytest.raises(TooLarge):
        store.outbox.enqueue("a@b", ["b@c"], b"x" * 1001, "redirect")
    assert store.outbox.entries() == []


def test_claim_is_exclusive_across_connections(connect):
    """Two processes (two connections to one store) and many threads claiming one entry:
    exactly one claim succeeds (check-and-put), so no entry is sent twice at once."""
    stores = [open_store(connect()) for _ in range(2)]
    qid = stores[0].outbox.enqueue("a@example.org", ["b@example.net"], MSG, "redirect")
    won: list[str] = []
    barrier = threading.Barrier(8)

    def claim(i: int) -> None:
        barrier.wait()
        if stores[i % 2].outbox.claim(qid, f"worker{i}") is not None:
            won.append(f"worker{i}")

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert stores[1].outbox.get(qid).lease_owner == won[0]
    assert stores[0].outbox.due() == []                 # held: not due for anyone else


def test_expired_claim_is_taken_over_and_old_holder_is_lost(backend):
    """A sender that died holding an entry loses it when its lease ends; another takes it,
    and the first one's late result is refused instead of overwriting the second's."""
    clock = Clock()
    store = open_store(backend, clock)
    qid = store.outbox.enqueue("a@example.org", ["b@example.net"], MSG, "vacation")
    first = store.outbox.claim(qid, "dead")
    assert store.outbox.claim(qid, "other") is None
    clock.now += 301
    assert [e.id for e in store.outbox.due()] == [qid]
    second = store.outbox.claim(qid, "other")
    assert second is not None
    assert store.outbox.record(first, {"b@example.net": (250, "ok")}).state == "lost"
    assert store.outbox.record(second, {"b@example.net": (250, "ok")}).state == "sent"
    assert store.outbox.get(qid) is None


def test_per_recipient_results_and_backoff(backend):
    """2xx removes a recipient, 4xx keeps it for a later attempt with exponential backoff and
    jitter, an unreached recipient stays pending (RFC 5321 4.2.1, 4.5.4.1)."""
    clock = Clock()
    store = open_store(backend, clock)
    qid = store.outbox.enqueue("a@example.org", ["b@x.net", "c@x.net", "d@x.net"], MSG,
                               "redirect")
    entry = store.outbox.claim(qid, "w")
    outcome = store.outbox.record(entry, {"b@x.net": (250, "ok"), "c@x.net": (451, "later")})
    assert outcome.state == "deferred"
    after = store.outbox.get(qid)
    assert after.pending == ["c@x.net", "d@x.net"] and after.sent == ["b@x.net"]
    assert after.lease_owner is None and after.attempts == 1
    assert 48 <= after.next_attempt - clock.now <= 72          # 60 s +- 20 %
    assert "451 later" in after.last_error
    assert store.outbox.due() == [] and store.outbox.claim(qid, "w") is None
    clock.now += 73
    entry = store.outbox.claim(qid, "w")
    store.outbox.record(entry, {}, "connection refused")
    after = store.outbox.get(qid)
    assert 96 <= after.next_attempt - clock.now <= 144         # doubled
    assert after.last_error == "connection refused"
    clock.now += 145
    entry = store.outbox.claim(qid, "w")
    assert store.outbox.record(entry, {"c@x.net": (250, "ok"),
                                       "d@x.net": (250, "ok")}).state == "sent"
    assert store.outbox.entries() == []


def test_permanent_failure_bounces_a_dsn_to_the_sender(backend):
    """A 5xx recipient is given up at once and a DSN goes to the envelope sender with the
    null reverse-path: multipart/report with message/delivery-status (RFC 3464 2.2, 2.3)."""
    store = open_store(backend)
    store.outbox.hostname = "mx.example.org"
    qid = store.outbox.enqueue("alice@example.org", ["bob@x.net", "carol@x.net"], MSG,
                               "redirect")
    entry = store.outbox.claim(qid, "w")
    outcome = store.outbox.record(entry, {"bob@x.net": (550, "5.1.1 no such user"),
                                          "carol@x.net": (250, "ok")})
    assert outcome.state == "bounced" and store.outbox.get(qid) is None
    [bounce] = store.outbox.entries()
    assert bounce.id == outcome.bounce_id
    assert bounce.mail_from == "" and bounce.rcpt_tos == ["alice@example.org"]
    assert bounce.reason == "bounce"
    parsed = email.message_from_bytes(store.outbox.message(bounce))
    assert parsed.get_content_type() == "multipart/report"
    assert parsed.get_param("report-type") == "delivery-status"
    assert parsed["Auto-Submitted"] == "auto-replied"
    text, status, headers = parsed.get_payload()
    assert "bob@x.net" in text.get_payload() and "carol@x.net" not in text.get_payload()
    assert status.get_content_type() == "message/delivery-status"
    blocks = status.get_payload()
    assert blocks[0]["Reporting-MTA"] == "dns; mx.example.org"
    assert blocks[1]["Final-Recipient"] == "rfc822; bob@x.net"
    assert blocks[1]["Action"] == "failed" and blocks[1]["Status"] == "5.1.1"
    assert blocks[1]["Diagnostic-Code"] == "smtp; 550 5.1.1 no such user"
    assert headers.get_content_type() == "text/rfc822-headers"
    assert b"Message-ID: <m1@example.org>" in store.outbox.message(bounce)


def test_null_sender_is_never_bounced(backend):
    """RFC 5321 4.5.5: a message with a null reverse-path (a bounce, a vacation reply) that
    fails is dropped, not bounced; the outcome says so for the log."""
    store = open_store(backend)
    qid = store.outbox.enqueue("", ["bob@x.net"], MSG, "vacation")
    outcome = store.outbox.record(store.outbox.claim(qid, "w"),
                                  {"bob@x.net": (554, "rejected")})
    assert outcome.state == "dropped" and outcome.failed == {"bob@x.net": [554, "rejected"]}
    assert store.outbox.entries() == []


def test_gives_up_after_max_age_with_expired_status(backend):
    """Past its maximum age an entry's pending recipients are bounced as expired, status
    4.4.7 (RFC 3463 3.5; RFC 5321 4.5.4.1: give up after some days)."""
    clock = Clock()
    store = open_store(backend, clock)
    qid = store.outbox.enqueue("alice@example.org", ["bob@x.net"], MSG, "redirect")
    entry = store.outbox.claim(qid, "w")
    assert store.outbox.expire(entry) is None                  # young: nothing to do
    clock.now += 86400
    outcome = store.outbox.record(entry, {"bob@x.net": (421, "busy")})
    assert outcome.state == "bounced"
    [bounce] = store.outbox.entries()
    status = email.message_from_bytes(store.outbox.message(bounce)).get_payload()[1]
    assert status.get_payload()[1]["Status"] == "4.4.7"
    assert "Diagnostic-Code" not in status.get_payload()[1]


def test_expire_without_a_relay(backend):
    """With no relay an old entry still ends: bounced after max age without an attempt."""
    clock = Clock()
    store = open_store(backend, clock)
    qid = store.outbox.enqueue("alice@example.org", ["bob@x.net"], MSG, "redirect")
    clock.now += 86401
    entry = store.outbox.claim(qid, "w")
    assert store.outbox.expire(entry).state == "bounced"
    assert store.outbox.get(qid) is None


def test_retry_and_delete(backend):
    """The operator's `mailadmin queue retry` makes an entry due now; `delete` removes it,
    and a sender still holding it then finds it gone (its result is `lost`)."""
    clock = Clock()
    store = open_store(backend, clock)
    qid = store.outbox.enqueue("a@example.org", ["b@x.net"], MSG, "redirect")
    store.outbox.record(store.outbox.claim(qid, "w"), {}, "refused")
    assert store.outbox.due() == []
    assert store.outbox.retry(qid) is True
    assert [e.id for e in store.outbox.due()] == [qid]
    held = store.outbox.claim(qid, "w")
    assert store.outbox.retry(qid) is True                       # leaves the claim alone
    assert store.outbox.get(qid).lease_owner == "w"
    assert store.outbox.delete(qid) is True
    assert store.outbox.record(held, {"b@x.net": (250, "ok")}).state == "lost"
    assert store.outbox.delete(qid) is False and store.outbox.retry(qid) is False
    assert store.outbox.retry("not-an-id") is False and store.outbox.get("zz") is None


def test_sweep_finishes_what_a_crash_left(backend):
    """An entry marked done whose removal was cut off is removed (its bounce queued exactly
    once); chunks of an enqueue cut off before its state are removed after an hour."""
    from mailstore.outbox import ENVELOPE, STATE, _state, chunk_column

    clock = Clock()
    store = open_store(backend, clock)
    table = store.outbox.table
    qid = store.outbox.enqueue("alice@example.org", ["bob@x.net"], MSG, "redirect")
    entry = store.outbox.claim(qid, "w")
    entry.failed = {"bob@x.net": [550, "no"]}
    entry.pending, entry.done = [], True
    table.put(bytes.fromhex(qid), {STATE: _state(entry)})        # crash after the done mark
    from mailstore.backends.base import encode_counter
    orphan = b"\x01" * 16
    table.put(orphan, {chunk_column(1): b"half", b"q:t": encode_counter(int(clock.now))})
    assert [e.id for e in store.outbox.entries()] == []
    assert store.outbox.sweep() == 1
    assert store.outbox.sweep() == 0                             # the bounce is not doubled
    assert len(store.outbox.entries()) == 1
    clock.now += 3601
    assert store.outbox.sweep() == 1
    assert table.row(orphan) == {} and ENVELOPE not in table.row(bytes.fromhex(qid))


def test_dsn_carries_no_header_injected_by_a_reply_text(backend):
    """A relay's reply text goes into the DSN's fields (RFC 3464 2.3.6 Diagnostic-Code) as one
    line: CR/LF in it cannot start a header field of its own."""
    store = open_store(backend)
    qid = store.outbox.enqueue("alice@example.org", ["bob@x.net"], MSG, "redirect")
    store.outbox.record(store.outbox.claim(qid, "w"),
                        {"bob@x.net": (550, "5.7.1 no\r\nBcc: victim@example.com\r\n\r\nx")})
    [bounce] = store.outbox.entries()
    data = store.outbox.message(bounce)
    assert b"\r\nBcc:" not in data
    status = email.message_from_bytes(data).get_payload()[1].get_payload()[1]
    assert status["Diagnostic-Code"] == "smtp; 550 5.7.1 no Bcc: victim@example.com x"
    assert status["Status"] == "5.7.1"


def test_held_entry_waits_for_release_and_is_dropped_if_never_released(backend):
    """An entry queued by a delivery not yet answered (RFC 5321 6.1: responsibility is
    taken with the 2xx) is durable but nobody sends it: not due, not claimable even by
    force, until released; deleted when the delivery is withdrawn; dropped by sweep when
    its delivery never came back (the client, unanswered, sends the message again)."""
    clock = Clock()
    store = open_store(backend, clock)
    woken = []
    store.outbox.on_enqueue(woken.append)
    held = store.outbox.enqueue("", ["bob@example.net"], MSG, "vacation", hold=True)
    assert woken == [] and store.outbox.get(held).held
    assert store.outbox.due() == []
    assert store.outbox.claim(held, "w1", force=True) is None
    assert store.outbox.release(held) and woken == [held]
    assert [e.id for e in store.outbox.due()] == [held]
    assert store.outbox.claim(held, "w1") is not None
    stale = store.outbox.enqueue("", ["carol@example.net"], MSG, "vacation", hold=True)
    assert store.outbox.sweep() == 0            # young: its delivery may still answer
    clock.now += 3601
    assert store.outbox.sweep() == 1
    assert store.outbox.get(stale) is None and store.outbox.get(held) is not None
