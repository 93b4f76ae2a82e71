"""Round trips over the Thrift wire: what an APPEND waits for (issue 16, docs/decisions/0001).

Over a real gateway each Thrift call costs a network round trip and, for a write, a WAL sync:
about 1.3 ms, against tens of microseconds of work on either side.  What decides an APPEND's
time is therefore how many calls it waits for *one after the other*.  These tests make every
call of the HBase backend 0.1 s slow (on the client side, so that they work against any
gateway) and time an APPEND (RFC 3501 6.3.11) of a small message into a selected mailbox.
"""

from __future__ import annotations

import time

import pytest

from mailstore.store import MailStore
from tests.mailgen import message

DELAY = 0.1


@pytest.fixture
def slow_store(hbase_store, monkeypatch):
    backend = hbase_store.backend()
    store = MailStore(backend, text_index=False)  # the index adds its own calls (0026)
    store.create_user("alice", "pw", default_folders=False)
    real = backend._run

    def late(what, call):
        time.sleep(DELAY)
        return real(what, call)
    monkeypatch.setattr(backend, "_run", late)
    yield store
    store.close()


def _fastest_append(store: MailStore, mailbox, tries: int = 3) -> float:
    best = float("inf")
    for i in range(tries):
        start = time.perf_counter()
        store.append("alice", mailbox, message(i, size=10_000))
        best = min(best, time.perf_counter() - start)
    return best


def test_append_waits_for_seven_round_trips_in_a_row_not_eight(slow_store):
    """An APPEND makes eight Thrift calls (the account read for the quota, the content put,
    the UID and MODSEQ increments, the counts with the row's counted marker in one
    ``incrementRows``, the message row's put, its commit check-and-put, the watermark's
    check-and-put).  The account read and the content put depend on neither and go out
    together; the MODSEQ increment follows the UID's (readers rely on that order), the counts
    follow both (they carry the row key, so that a writer killed before its commit leaves
    counts whoever gives its UID up takes back exactly: decision 0004), and the row, its
    commit and the watermark follow in the order decision 0001 requires: seven calls in a
    row.  Made one after the other (before), eight: 0.8 s here."""
    store = slow_store
    inbox = store.mailbox("alice", "INBOX")
    before = store.backend.round_trips()
    took = _fastest_append(store, inbox)
    after = store.backend.round_trips()
    assert sum(after.values()) - sum(before.values()) == 3 * 8
    assert took < 7.7 * DELAY, f"APPEND took {took:.2f} s: more than seven round trips in a row"
    assert store.uids(store.mailbox("alice", "INBOX")) == [1, 2, 3]


def test_delivery_to_three_recipients_overlaps_them(slow_store):
    """LMTP delivery of one message to three recipients (RFC 2033 4.2: one reply each).  The
    recipients' rows are independent, so their round trips overlap: the content's put with
    every account and mailbox read, then the three rows at once.  One after the other
    (before) that was 25 calls, 2.5 s here; now 7 in a row, plus scheduling slack."""
    store = slow_store
    store.create_user("bob", "pw", default_folders=False)
    store.create_mailbox("alice", "Lists")
    recipients = [("alice", "INBOX"), ("alice", "Lists"), ("bob", "INBOX")]
    store.deliver(recipients, message(0))       # warm: mailbox ids, table families
    start = time.perf_counter()
    results = store.deliver(recipients, message(1, size=10_000))
    took = time.perf_counter() - start
    assert [(r.user, r.mailbox, r.uid, r.error) for r in results] == [
        ("alice", "INBOX", 2, None), ("alice", "Lists", 2, None), ("bob", "INBOX", 2, None)]
    assert took < 10 * DELAY, f"delivery took {took:.2f} s: recipients one after the other"
