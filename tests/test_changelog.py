"""The per-mailbox change log (mailstore/changelog.py, docs/decisions/0009), over every backend.

What it must guarantee: every change number up to the watermark has a settled entry, so the
UIDs between two marks are exactly what a reader must re-read; a writer that dies or stalls
never holds the watermark back for good, and never gets a change past a reader unlogged.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailstore import keys
from mailstore.changelog import (
    CLOSED,
    ENTRY,
    PENDING,
    SETTLED,
    VOID,
    ChangeLog,
    decode_entry,
    encode_entry,
    pack_uids,
    unpack_uids,
)
from mailstore.store import MailStore


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(backend, clock):
    s = MailStore(backend, clock=clock, abandon_after=10.0)
    s.create_user("ann", "pw", default_folders=False)
    return s


@pytest.fixture
def inbox(store):
    return store.mailbox("ann", "INBOX")


def entry(store, mailbox_id, seq):
    value = store.changes.table.row(keys.change_key(mailbox_id, seq), [ENTRY]).get(ENTRY)
    return decode_entry(value) if value is not None else None


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(min_value=1, max_value=2**63 - 1), max_size=300))
def test_uid_lists_pack_and_unpack(uids):
    assert list(unpack_uids(pack_uids(uids))) == sorted(uids)


def test_a_recorded_change_is_pending_during_and_closed_after(store, inbox):
    with store.changes.recording(inbox.id, [5, 3, 3]):
        state, _at, uids = entry(store, inbox.id, 1)
        assert state == PENDING and list(uids) == [3, 5]
        assert store.changes.marks(inbox.id) == (1, 0)   # readers do not see it yet
    state, _at, uids = entry(store, inbox.id, 1)
    assert state == CLOSED
    assert store.changes.marks(inbox.id) == (1, 1)
    assert store.changes.changed_uids(inbox.id, 0, 1) == {3, 5}


def test_flag_changes_and_expunges_are_logged(store, inbox):
    uids = [store.append("ann", "INBOX", b"Subject: x\r\n\r\nbody\r\n")[1] for _ in range(4)]
    store.store_flags(inbox, uids[:2], ["\\Seen"])
    store.expunge(inbox, [uids[3]])
    top, mark = store.changes.marks(inbox.id)
    assert top == mark == 2
    assert store.changes.changed_uids(inbox.id, 0, 1) == set(uids[:2])
    assert store.changes.changed_uids(inbox.id, 1, 2) == {uids[3]}


def test_the_watermark_waits_for_an_earlier_writer_still_at_work(store, inbox):
    log = store.changes
    first = log.recording(inbox.id, [1])
    first.__enter__()
    with log.recording(inbox.id, [2]):
        pass
    # Number 2 is closed, but number 1 is still pending: a reader may not pass it.
    assert log.marks(inbox.id) == (2, 0)
    first.__exit__(None, None, None)
    assert log.marks(inbox.id) == (2, 2)
    assert log.changed_uids(inbox.id, 0, 2) == {1, 2}


def test_a_dead_writers_entry_is_settled_after_abandon_after(store, inbox, clock):
    log = store.changes
    dead = log.recording(inbox.id, [7])
    dead.__enter__()                       # and never closed: the process died
    with log.recording(inbox.id, [8]):
        pass
    assert log.marks(inbox.id) == (2, 0)
    store.marks([inbox.id])                # a reader notices the watermark is stuck ...
    clock.now += 5
    store.marks([inbox.id])
    assert log.marks(inbox.id) == (2, 0)   # ... but not for long enough
    clock.now += 6
    store.marks([inbox.id])
    assert log.marks(inbox.id) == (2, 2)
    assert entry(store, inbox.id, 1)[0] == SETTLED
    assert log.changed_uids(inbox.id, 0, 2) == {7, 8}


def test_a_slow_writer_settled_meanwhile_logs_its_change_again(store, inbox, clock):
    """Whatever the slow writer changed after its entry was settled must not get past a
    reader that already moved beyond that entry."""
    log = store.changes
    slow = log.recording(inbox.id, [9])
    slow.__enter__()
    clock.now += 11
    log.advance(inbox.id)                  # a reader settles it
    assert log.marks(inbox.id) == (1, 1)
    reader_mark = 1
    slow.__exit__(None, None, None)        # the writer wakes up and finishes
    top, mark = log.marks(inbox.id)
    assert (top, mark) == (2, 2)
    assert log.changed_uids(inbox.id, reader_mark, mark) == {9}


def test_a_number_allocated_without_entry_is_voided_and_the_writer_retries(store, inbox, clock):
    log = store.changes
    log.rows.increment(inbox.id, b"c:logseq", 1)   # a writer that died right after allocating
    with log.recording(inbox.id, [4]):
        pass
    assert log.marks(inbox.id) == (2, 0)
    log.advance(inbox.id)                  # first sighting of the gap starts its clock
    clock.now += 11
    assert log.advance(inbox.id) == 2
    assert entry(store, inbox.id, 1)[0] == VOID
    assert log.changed_uids(inbox.id, 0, 2) == {4}


def test_a_writer_whose_number_was_voided_takes_another(store, inbox, clock):
    log = store.changes
    # Void number 1 before its writer puts the entry (it stalled after the increment).
    log.table.check_and_put(keys.change_key(inbox.id, 1), ENTRY, None, ENTRY, VOID + bytes(8))
    with log.recording(inbox.id, [6]):
        assert entry(store, inbox.id, 2)[0] == PENDING
    assert log.marks(inbox.id) == (2, 2)
    assert log.changed_uids(inbox.id, 0, 2) == {6}


def test_trimmed_entries_are_reported_as_unknown(store, inbox):
    log = store.changes
    for uid in range(1, 6):
        with log.recording(inbox.id, [uid]):
            pass
    assert log.trim(inbox.id, 3) == 2
    assert log.changed_uids(inbox.id, 0, 5) is None      # cannot tell what 1 and 2 touched
    assert log.changed_uids(inbox.id, 2, 5) == {3, 4, 5}


def test_concurrent_writers_leave_a_complete_log(store, inbox):
    """Several threads logging at once, closing in any order: every number is settled and the
    log names every UID exactly where it was logged."""
    import threading

    log = store.changes
    logged = []
    lock = threading.Lock()

    def work(seed):
        rng = random.Random(seed)
        for _ in range(15):
            uids = rng.sample(range(1, 1000), 3)
            with log.recording(inbox.id, uids):
                pass
            with lock:
                logged.extend(uids)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    top, mark = log.marks(inbox.id)
    assert top == mark == 60
    assert log.changed_uids(inbox.id, 0, mark) == set(logged)


def test_deleting_a_mailbox_drops_its_log(store):
    store.create_mailbox("ann", "Work")
    work = store.mailbox("ann", "Work")
    uid = store.append("ann", "Work", b"Subject: w\r\n\r\nx\r\n")[1]
    store.store_flags(work, [uid], ["\\Flagged"])
    store.open_index(work)
    store.indexes.save_checkpoint(work.id, store.open_index(work))
    assert list(store.changes.table.scan(prefix=work.id))
    store.delete_mailbox("ann", "Work")
    assert list(store.changes.table.scan(prefix=work.id)) == []


def test_a_change_log_of_its_own_per_mailbox(store, inbox):
    """Entries are keyed under their mailbox: another mailbox's log is never read."""
    store.create_mailbox("ann", "Other")
    other = store.mailbox("ann", "Other")
    with store.changes.recording(other.id, [1, 2]):
        pass
    assert store.changes.marks(inbox.id) == (0, 0)
    assert store.changes.changed_uids(inbox.id, 0, 0) == set()
    assert isinstance(store.changes, ChangeLog)


def test_gaps_noted_while_a_writer_was_slow_are_forgotten_once_passed(store, inbox, clock):
    """Found in review: a number noted as allocated-without-entry stayed in memory for good
    when its writer then wrote the entry."""
    log = store.changes
    log.rows.increment(inbox.id, b"c:logseq", 1)    # a writer between increment and entry
    log.advance(inbox.id)
    assert (inbox.id, 1) in log._gaps
    log.table.check_and_put(keys.change_key(inbox.id, 1), ENTRY, None, ENTRY,
                            encode_entry(CLOSED, clock(), [5]))
    assert log.advance(inbox.id) == 1
    with log.recording(inbox.id, [6]):
        pass
    assert log._gaps == {}
    assert log.changed_uids(inbox.id, 0, 2) == {5, 6}


def test_a_walk_stops_reading_at_the_first_entry_still_pending(store, inbox):
    """Found in review: every walk read every entry behind a stuck one, so the cost grew with
    the backlog while a dead writer held the watermark."""
    log = store.changes
    stuck = log.recording(inbox.id, [1])
    stuck.__enter__()
    for uid in range(2, 40):
        with log.recording(inbox.id, [uid]):
            pass
    read = []
    real_scan = log.table.scan

    def counting_scan(*args, **kwargs):
        for item in real_scan(*args, **kwargs):
            read.append(item[0])
            yield item
    log.table.scan = counting_scan
    try:
        assert log.advance(inbox.id) == 0
    finally:
        log.table.scan = real_scan
    assert [keys.change_key_seq(k) for k in read] == [1]   # not the 39 behind it
    stuck.__exit__(None, None, None)
    assert log.marks(inbox.id) == (39, 39)


def test_a_store_logs_only_what_it_changes_in_batches(store, inbox, monkeypatch):
    """Found in review: a STORE logged every UID it named, so a no-op STORE 1:* sent FETCH
    FLAGS for every message to every session; and one long STORE was one pending entry that
    readers would settle (and a crash then lose) before it ended."""
    monkeypatch.setattr("mailstore.store.FLAG_BATCH", 3)
    uids = [store.append("ann", "INBOX", b"Subject: x\r\n\r\nbody\r\n",
                         ["\\Seen"] if i % 2 else [])[1] for i in range(8)]
    changed, _ = store.store_flags(inbox, uids, ["\\Seen"])
    assert [u for u, _ in changed] == uids[0::2]
    top, mark = store.changes.marks(inbox.id)
    assert top == mark == 3                        # batches of 3 UIDs: 3, 3, 2 -> 3 entries
    assert store.changes.changed_uids(inbox.id, 0, 3) == set(uids[0::2])
    assert store.store_flags(inbox, uids, ["\\Seen"]) == ([], [])
    assert store.changes.marks(inbox.id) == (3, 3)  # a no-op logs nothing


def test_a_flag_change_makes_progress_whatever_form_the_flags_cell_has(store, inbox):
    """A flags cell missing, or written in a form that does not re-encode to the same bytes,
    must not make STORE's check-and-put loop for ever: it compares with the bytes read."""
    from mailstore.messages import FLAGS

    uid = store.append("ann", "INBOX", b"Subject: x\r\n\r\nbody\r\n")[1]
    key = keys.message_key(inbox.id, uid)
    store.messages.table.delete(key, [FLAGS])
    changed, _ = store.store_flags(inbox, [uid], ["\\Flagged"])
    assert [(u, set(f.names)) for u, f in changed] == [(uid, {"\\Flagged"})]
