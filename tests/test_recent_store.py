"""The \\Recent claim (RFC 3501 2.3.2, docs/decisions/0010-recent.md) as a storage contract.

RFC 3501 2.3.2: a message is \\Recent in the session "that is the first session to have been
notified about this message"; no other session sees it recent.  The store keeps one watermark
per mailbox, moved by check-and-put, and these tests hold it to that on both backends
(embedded, and HBase over Thrift): each UID range goes to exactly one claimer, also when many
claim at once through their own store connections; a stale guess, a row written before the
cell existed and a mailbox deleted meanwhile are handled; STATUS RECENT (6.3.10) counts what
nobody claimed.
"""

from __future__ import annotations

import threading

import pytest

from mailstore.mailboxes import RECENT
from mailstore.schema import MAILBOXES
from mailstore.store import MailStore


def msg(n: int) -> bytes:
    return f"From: a@example.com\r\nSubject: s{n}\r\n\r\nbody {n}\r\n".encode()


@pytest.fixture
def store(backend):
    store = MailStore(backend)
    store.create_user("ann", "pw", default_folders=False)
    store.create_mailbox("ann", "Box")
    return store


def fill(store: MailStore, count: int, start: int = 0):
    for i in range(count):
        store.append("ann", "Box", msg(start + i))
    return store.mailbox("ann", "Box")


def test_each_range_is_claimed_once(store):
    """2.3.2: the first claimer gets every UID up to what it has seen; the next gets none of
    them, only what arrived since."""
    box = fill(store, 3)
    assert box.recent_uid == 0
    assert store.claim_recent(box, box.visible_uid) == (0, 3)
    assert store.claim_recent(box, box.visible_uid) == (3, 3)  # its guess (0) was stale
    box = fill(store, 2, start=3)
    assert box.recent_uid == 3
    assert store.claim_recent(box, 4) == (3, 4)      # only up to what the claimer has seen
    assert store.claim_recent(box, 5, guess=3) == (4, 5)
    assert store.claim_recent(box, 5, guess=5) == (5, 5)
    assert store.recent_watermark(box) == 5
    # Nothing moves backwards: a claim below the watermark takes nothing and changes nothing.
    assert store.claim_recent(box, 2, guess=0) == (5, 5)
    assert store.recent_watermark(box) == 5


def test_a_mailbox_row_without_the_cell_claims_from_zero(store, backend):
    """Mailboxes created before the watermark existed have no cell: everything in them is
    unclaimed (2.3.2 says SHOULD be considered recent when in doubt), claimed once."""
    box = fill(store, 2)
    backend.table(MAILBOXES.name).delete(box.id, [RECENT])
    box = store.mailbox("ann", "Box")
    assert store.unclaimed_recent(box) == 2
    assert store.claim_recent(box, box.visible_uid) == (0, 2)
    assert store.claim_recent(box, box.visible_uid, guess=0) == (2, 2)


def test_a_deleted_mailbox_is_not_claimed_in_nor_brought_back(store, backend):
    box = fill(store, 2)
    store.delete_mailbox("ann", "Box")
    assert store.claim_recent(box, 2) == (0, 0)
    assert backend.table(MAILBOXES.name).row(box.id) == {}


def test_rename_keeps_the_watermark_and_recreate_starts_afresh(store):
    """The watermark lives in the mailbox row, which rename keeps (UIDs go on), and a new
    mailbox of the same name is a new row (a new UIDVALIDITY, nothing claimed)."""
    box = fill(store, 2)
    store.claim_recent(box, 2)
    store.rename_mailbox("ann", "Box", "Moved")
    assert store.mailbox("ann", "Moved").recent_uid == 2
    store.delete_mailbox("ann", "Moved")
    store.create_mailbox("ann", "Box")
    assert store.mailbox("ann", "Box").recent_uid == 0


def test_unclaimed_recent_counts_visible_messages_above_the_watermark(store):
    """6.3.10 STATUS RECENT: the messages no session has been told of yet."""
    box = fill(store, 4)
    assert store.unclaimed_recent(box) == 4          # none claimed: the counter answers
    store.claim_recent(box, 2)
    box = store.mailbox("ann", "Box")
    assert store.unclaimed_recent(box) == 2
    assert store.unclaimed_recent(box, above=3) == 1
    store.expunge(box, [4])
    box = store.mailbox("ann", "Box")
    assert store.unclaimed_recent(box) == 1          # expunged messages are not counted
    store.claim_recent(box, box.visible_uid)
    assert store.unclaimed_recent(store.mailbox("ann", "Box")) == 0


THREADS, ROUNDS = 4, 12


def test_concurrent_claimers_each_get_disjoint_ranges_covering_every_uid(connect):
    """2.3.2 across processes: claimers with their own store connections, some appending
    meanwhile, claim at once (a barrier lines them up each round).  Every UID ends up in
    exactly one claimer's range, and the ranges meet without gaps."""
    setup = MailStore(connect())
    setup.create_user("ann", "pw", default_folders=False)
    setup.create_mailbox("ann", "Box")
    fill(setup, 3)
    barrier = threading.Barrier(THREADS)
    claims: list[list[tuple[int, int]]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []

    def claimer(n: int) -> None:
        store = MailStore(connect(), create_tables=False)
        guess = 0
        try:
            for step in range(ROUNDS):
                if n % 2 and step % 3 == 0:
                    store.append("ann", "Box", msg(1000 * n + step))
                box = store.mailbox("ann", "Box")
                barrier.wait(timeout=30)
                low, high = store.claim_recent(box, box.visible_uid, guess)
                assert low <= high
                guess = high
                if high > low:
                    claims[n].append((low, high))
        except BaseException as exc:  # reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    box = setup.mailbox("ann", "Box")
    last = setup.claim_recent(box, box.visible_uid, 0)
    ranges = sorted(r for got in claims for r in got) + ([last] if last[1] > last[0] else [])
    covered = 0
    for low, high in ranges:
        assert low == covered, f"gap or overlap at {covered}: {ranges}"
        covered = high
    assert covered == box.visible_uid == 3 + THREADS // 2 * len(range(0, ROUNDS, 3))
