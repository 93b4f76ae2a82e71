"""Round trips over the Thrift wire: what an APPEND waits for (issue 16, docs/decisions/0001).

Over a real gateway each Thrift call costs a network round trip and, for a write, a WAL sync:
about 1.3 ms, against tens of microseconds of work on either side.  What decides an APPEND's
time is therefore how many calls it waits for *one after the other*.  These tests make every
call of the HBase backend 0.1 s slow (on the client side, so that they work against any
gateway) and count how many of an APPEND's (RFC 3501 6.3.11) calls are made one after the
other: the longest chain of calls each made after the one before it had returned.  Counted
from each call's start and end rather than from the APPEND's total time, so that a busy
machine (which stretches every call, and added more than the 0.07 s of slack a time bound
had) does not change the figure; the round trips of a call ``Backend.concurrently`` hands to
another thread are counted from when it was handed over, however late that thread starts.
"""

from __future__ import annotations

import threading
import time

import pytest

from mailstore.store import MailStore
from tests.mailgen import message

DELAY = 0.1
POOL_SIZE = 10  # the default: connections, and threads to overlap calls on (one fewer)


class Timeline:
    """The (start, end) of every backend call, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[tuple[float, float]] = []

    def record(self, start: float, end: float) -> None:
        with self._lock:
            self._calls.append((start, end))

    def calls_in_a_row(self, since: float) -> int:
        """The longest chain of calls started at or after ``since`` in which each call
        started after the one before it had ended: the round trips a caller waited for one
        after the other."""
        with self._lock:
            calls = sorted(c for c in self._calls if c[0] >= since)
        # Sorted by start, every call that ended before calls[i] started comes before it.
        ending: list[tuple[float, int]] = []  # (end, longest chain ending with that call)
        for start, end in calls:
            ending.append((end, 1 + max((n for e, n in ending if e <= start), default=0)))
        return max((n for _e, n in ending), default=0)


@pytest.fixture
def timeline():
    return Timeline()


@pytest.fixture
def slow_stores(hbase_store, monkeypatch, timeline):
    """``open(api, text_index=False, delay=DELAY)``: a store over ``api`` whose every call
    is ``delay`` seconds slow and recorded on ``timeline``, on a table prefix of its own,
    with a user ``alice``."""
    opened = []

    def open_store(api: str = "thrift1", text_index: bool | str = False,
                   delay: float = DELAY) -> MailStore:
        lease = hbase_store if not opened else hbase_store.another()
        backend = lease.backend(api, pool_size=POOL_SIZE)
        # Without the index by default: it adds its own calls (decision 0026).
        store = MailStore(backend, text_index=text_index)
        opened.append(store)
        store.create_user("alice", "pw", default_folders=False)
        real, real_concurrently = backend._run, backend.concurrently
        # A call that Backend.concurrently hands to another thread is counted as if that
        # thread had started it when it was handed over: on a busy machine the thread may be
        # scheduled late, by more than a DELAY (its call then looked made after the caller's
        # own, 8 in a row).  Its round trips are moved back by that lateness.  Calls the
        # backend runs one by one in the calling thread keep their own times.  No call waits
        # for a free thread (which the shift would hide): fewer are handed over at once than
        # the pool has.
        behind = threading.local()

        def concurrently(*calls):
            assert len(calls) <= POOL_SIZE, "a call would wait for a free thread"
            sent, caller = time.monotonic(), threading.get_ident()

            def handed_over(call):
                def run():
                    if threading.get_ident() == caller:
                        return call()
                    behind.by = time.monotonic() - sent
                    try:
                        return call()
                    finally:
                        behind.by = 0.0
                return run
            return real_concurrently(*(handed_over(call) for call in calls))

        def late(what, call):
            start = time.monotonic()
            time.sleep(delay)
            try:
                return real(what, call)
            finally:
                shift = getattr(behind, "by", 0.0)
                timeline.record(start - shift, time.monotonic() - shift)
        monkeypatch.setattr(backend, "_run", late)
        monkeypatch.setattr(backend, "concurrently", concurrently)
        return store
    yield open_store
    for store in opened:
        store.close()


@pytest.fixture
def slow_store(slow_stores):
    return slow_stores()


def test_append_waits_for_seven_round_trips_in_a_row_not_eight(slow_store, timeline):
    """An APPEND makes eight Thrift calls (the account read for the quota, the content put,
    the UID and MODSEQ increments, the counts with the row's counted marker in one
    ``incrementRows``, the message row's put, its commit check-and-put, the watermark's
    check-and-put).  The account read and the content put depend on neither and go out
    together; the MODSEQ increment follows the UID's (readers rely on that order), the counts
    follow both (they carry the row key, so that a writer killed before its commit leaves
    counts whoever gives its UID up takes back exactly: decision 0004), and the row, its
    commit and the watermark follow in the order decision 0001 requires: seven calls in a
    row.  Made one after the other (before), eight."""
    store = slow_store
    inbox = store.mailbox("alice", "INBOX")
    before = store.backend.round_trips()
    in_a_row = []
    for i in range(3):
        start = time.monotonic()
        store.append("alice", inbox, message(i, size=10_000))
        in_a_row.append(timeline.calls_in_a_row(start))
    after = store.backend.round_trips()
    assert sum(after.values()) - sum(before.values()) == 3 * 8
    assert in_a_row == [7, 7, 7], "round trips in a row, per APPEND"
    assert store.uids(store.mailbox("alice", "INBOX")) == [1, 2, 3]


def test_delivery_to_three_recipients_overlaps_them(slow_store, timeline):
    """LMTP delivery of one message to three recipients (RFC 2033 4.2: one reply each).  The
    recipients' rows are independent, so their round trips overlap: the content's put with
    every account and mailbox read, then the three rows at once.  One after the other
    (before) that was 24 calls in a row; now 7."""
    store = slow_store
    store.create_user("bob", "pw", default_folders=False)
    store.create_mailbox("alice", "Lists")
    recipients = [("alice", "INBOX"), ("alice", "Lists"), ("bob", "INBOX")]
    store.deliver(recipients, message(0))       # warm: mailbox ids, table families
    start = time.monotonic()
    results = store.deliver(recipients, message(1, size=10_000))
    in_a_row = timeline.calls_in_a_row(start)
    assert [(r.user, r.mailbox, r.uid, r.error) for r in results] == [
        ("alice", "INBOX", 2, None), ("alice", "Lists", 2, None), ("bob", "INBOX", 2, None)]
    assert in_a_row == 7, "round trips in a row"


def test_append_over_thrift2_waits_for_four_round_trips_in_a_row(slow_stores, timeline):
    """Over HBase's Thrift2 API (docs/decisions/0029) an APPEND makes five calls: the account
    read and the content put together, then one ``increment`` taking the UID, the MODSEQ and
    the counts at once (atomic for the mailbox row), one ``checkAndMutate`` putting the row,
    its counted marker and its commit record if absent, and the watermark's check-and-put
    (decision 0001's order).  Four in a row; counting in a call of its own and marking the
    row in another, as over Thrift1, would be six."""
    store = slow_stores("thrift2")
    inbox = store.mailbox("alice", "INBOX")
    before = store.backend.round_trips()
    in_a_row = []
    for i in range(3):
        start = time.monotonic()
        store.append("alice", inbox, message(i, size=10_000))
        in_a_row.append(timeline.calls_in_a_row(start))
    after = store.backend.round_trips()
    assert sum(after.values()) - sum(before.values()) == 3 * 5
    assert in_a_row == [4, 4, 4], "round trips in a row, per APPEND"
    inbox = store.mailbox("alice", "INBOX")
    assert store.uids(inbox) == [1, 2, 3] and inbox.messages == 3


def test_thrift2_append_queues_for_the_indexer_beside_its_commit(slow_stores, timeline):
    """``text_index = background`` over Thrift2: the queue cell has no counting call to ride
    in (the counts go with the UID), so it is one call more, overlapped with the commit's
    ``checkAndMutate``: still four in a row (RFC 3501 6.3.11's APPEND, decision 0026)."""
    store = slow_stores("thrift2", text_index="background")
    inbox = store.mailbox("alice", "INBOX")
    before = store.backend.round_trips()
    in_a_row = []
    for i in range(3):
        start = time.monotonic()
        store.append("alice", inbox, message(i, size=10_000))
        in_a_row.append(timeline.calls_in_a_row(start))
    after = store.backend.round_trips()
    assert sum(after.values()) - sum(before.values()) == 3 * 6
    assert in_a_row == [4, 4, 4], "round trips in a row, per APPEND"
    assert store.text.queue.count() == 3


@pytest.mark.parametrize("api", ["thrift1", "thrift2"])
def test_text_index_at_append_does_not_read_the_message_back(slow_stores, api):
    """The text index (decision 0026) of a message held whole at APPEND comes from the octets
    in hand: its posting rows and then its marker, two calls, and no read of the content
    just written (one more round trip of every APPEND, before)."""
    plain, indexed = slow_stores(api, delay=0), slow_stores(api, text_index=True, delay=0)
    counts = []
    for store in (plain, indexed):
        inbox = store.mailbox("alice", "INBOX")
        before = store.backend.round_trips()
        store.append("alice", inbox, message(1, size=10_000))
        after = store.backend.round_trips()
        counts.append(sum(after.values()) - sum(before.values()))
    assert counts[1] == counts[0] + 2, counts
    inbox = indexed.mailbox("alice", "INBOX")
    assert indexed.backend.text_index().markers(inbox.id) == {1: True}
