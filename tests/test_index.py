"""Mailbox indexes (mailstore/index.py): SELECT without reading every message row.

Issue 3: "SELECT of such a mailbox does not read every message row."  A process that never
opened a mailbox starts from the stored checkpoint and the change log; what it gets must equal
what a full read of the rows gives, whatever happened meanwhile in other processes.
"""

from __future__ import annotations

import random

import pytest

from mailstore import keys
from mailstore.index import MailboxIndex, Marks
from mailstore.records import Flags
from mailstore.store import MailStore


def msg(n: int) -> bytes:
    return f"From: a@example.com\r\nSubject: m{n}\r\n\r\nbody {n}\r\n".encode()


class CountingTable:
    """Counts the message rows a store reads, by scan or by get."""

    def __init__(self, table):
        self.table = table
        self.rows_read = 0

    def scan(self, *args, **kwargs):
        for item in self.table.scan(*args, **kwargs):
            self.rows_read += 1
            yield item

    def rows(self, keys_, *args, **kwargs):
        found = self.table.rows(keys_, *args, **kwargs)
        self.rows_read += len(found)
        return found

    def __getattr__(self, name):
        return getattr(self.table, name)


@pytest.fixture
def store(backend):
    s = MailStore(backend)
    s.create_user("ann", "pw", default_folders=False)
    return s


def fresh_process(backend) -> MailStore:
    """Another server process: same store, nothing cached."""
    return MailStore(backend, create_tables=False)


def truth(store: MailStore, mailbox) -> MailboxIndex:
    """The index read the slow way, from every row."""
    now = store.marks([mailbox.id])[mailbox.id]
    return store.indexes.build(mailbox, now)


def tagged(index: MailboxIndex) -> dict[str, list[int]]:
    return {kw: list(uids) for kw, uids in index.tagged.items() if uids}


def same(a: MailboxIndex, b: MailboxIndex) -> bool:
    """Same UIDs, MODSEQs, unseen, system-flag and keyword sets; keywords are never forgotten
    once used (as in Dovecot: a FLAGS response may list a keyword no message has any more),
    so ``a`` may have more in use than a fresh read ``b``."""
    return (list(a.uids), list(a.modseqs), a.unseen, a.flagged, tagged(a)) \
        == (list(b.uids), list(b.modseqs), b.unseen, b.flagged, tagged(b)) \
        and a.keywords >= b.keywords


def fill(store, n, seen_every=3):
    inbox = store.mailbox("ann", "INBOX")
    for i in range(n):
        flags = ["\\Seen"] if i % seen_every else []
        store.append("ann", "INBOX", msg(i), flags)
    return inbox


def test_first_select_in_a_new_process_reads_the_checkpoint_not_the_rows(backend, store):
    inbox = fill(store, 300)
    store.indexes.checkpoint_after = 100
    first = store.open_index(inbox)            # builds from the rows, writes a checkpoint
    assert len(first.uids) == 300
    other = fresh_process(backend)
    counting = CountingTable(other.messages.table)
    other.messages.table = counting
    other.indexes.messages = other.messages
    index = other.open_index(inbox)
    assert counting.rows_read == 0
    assert same(index, first)
    assert index.first_unseen == 1 and len(index.unseen) == 100


def test_a_new_process_catches_up_from_the_checkpoint_by_the_change_only(backend, store):
    inbox = fill(store, 300)
    store.indexes.checkpoint_after = 100
    store.open_index(inbox)
    # Changes after the checkpoint: 3 new messages, 2 flag changes, 1 expunge.
    for i in range(3):
        store.append("ann", "INBOX", msg(1000 + i))
    uids = store.uids(inbox)
    store.store_flags(inbox, [uids[0], uids[5]], ["\\Seen", "$Work"])
    store.expunge(inbox, [uids[7]])
    other = fresh_process(backend)
    counting = CountingTable(other.messages.table)
    other.messages.table = counting
    other.indexes.messages = other.messages
    index = other.open_index(inbox)
    assert counting.rows_read <= 3 + 3     # the new rows and the logged UIDs, nothing more
    assert same(index, truth(other, inbox))
    assert "$Work" in index.keywords and uids[7] not in index.uids


def test_a_second_open_in_the_same_process_reads_no_row_when_nothing_changed(store):
    inbox = fill(store, 50)
    store.open_index(inbox)
    counting = CountingTable(store.messages.table)
    store.messages.table = counting
    store.indexes.messages = store.messages
    again = store.open_index(inbox)
    assert counting.rows_read == 0 and len(again.uids) == 50
    again.uids.append(10**6)                 # the caller's copy, not the cache
    assert len(store.open_index(inbox).uids) == 50


def test_a_trimmed_log_falls_back_to_reading_the_rows(backend, store):
    inbox = fill(store, 20)
    old = store.open_index(inbox)
    uids = store.uids(inbox)
    for uid in uids[:5]:
        store.store_flags(inbox, [uid], ["\\Flagged"])
    store.changes.trim(inbox.id, 4)
    assert store.changes_since(inbox, old.marks) is None
    other = fresh_process(backend)
    other.indexes.save_checkpoint(inbox.id, old)   # an old checkpoint the log no longer reaches
    assert same(other.open_index(inbox), truth(other, inbox))


def test_a_checkpoint_that_does_not_decode_is_ignored(backend, store):
    inbox = fill(store, 10)
    store.changes.table.put(keys.checkpoint_key(inbox.id), {b"k:meta": b"{not json"})
    assert same(fresh_process(backend).open_index(inbox), truth(store, inbox))


def test_writing_a_checkpoint_trims_the_log_behind_it(store):
    inbox = fill(store, 10)
    store.indexes.keep_log = 3
    uids = store.uids(inbox)
    for uid in uids:
        store.store_flags(inbox, [uid], ["\\Answered"])
    store.indexes.save_checkpoint(inbox.id, store.open_index(inbox))
    entries = list(store.changes.table.scan(start=keys.change_key(inbox.id, 1),
                                            stop=keys.change_key(inbox.id, 10**6)))
    assert [keys.change_key_seq(k) for k, _ in entries] == [8, 9, 10]


def test_an_older_checkpoint_never_replaces_a_newer_one(store):
    inbox = fill(store, 5)
    new = store.open_index(inbox)
    store.indexes.save_checkpoint(inbox.id, new)
    stale = MailboxIndex(Marks(0, 1, 0))
    store.indexes.save_checkpoint(inbox.id, stale)
    assert store.indexes.load_checkpoint(inbox.id).marks == new.marks


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_indexes_match_the_rows_after_random_changes_from_other_processes(backend, store, seed):
    """Random appends, flag changes, expunges and moves by one process; a second process that
    opens the mailbox now and then (from its cache, from checkpoints, through the log) must
    always see exactly what the rows say."""
    rng = random.Random(seed)
    store.create_mailbox("ann", "Archive")
    inbox = fill(store, 30)
    archive = store.mailbox("ann", "Archive")
    other = fresh_process(backend)
    other.indexes.checkpoint_after = 7
    third = fresh_process(backend)
    for step in range(40):
        uids = store.uids(inbox)
        op = rng.choice(["append", "flags", "flags", "expunge", "move"])
        if op == "append" or not uids:
            store.append("ann", "INBOX", msg(step), rng.choice([[], ["\\Seen"], ["$x"]]))
        elif op == "flags":
            chosen = rng.sample(uids, min(len(uids), rng.randint(1, 4)))
            store.store_flags(inbox, chosen, rng.choice([["\\Seen"], ["\\Deleted"], ["$y"],
                                                         ["\\Flagged", "\\Draft"]]),
                              rng.choice(["add", "remove", "replace"]))
        elif op == "expunge":
            store.expunge(inbox, rng.sample(uids, 1))
        else:
            store.move(inbox, rng.sample(uids, 1), archive)
        if step % 3 == 0:
            assert same(other.open_index(inbox), truth(store, inbox)), step
            assert as_fetched(other.open_index(inbox)) == rows_fetched(store, inbox), step
        if step % 11 == 0:
            assert same(third.open_index(inbox), truth(store, inbox)), step
            third = fresh_process(backend)      # a restart: from the checkpoint next time
    assert same(other.open_index(archive), truth(store, archive))
    assert as_fetched(other.open_index(archive)) == rows_fetched(store, archive)


def as_fetched(index: MailboxIndex) -> list[tuple[int, frozenset[str], int]]:
    """What FETCH 1:* (UID FLAGS MODSEQ) shows, answered from the index."""
    return [(uid, names, modseq) for _seq, uid, names, modseq in index.flags_of(index.uids)]


def rows_fetched(store: MailStore, mailbox) -> list[tuple[int, frozenset[str], int]]:
    """The same read from the message rows (a message's MODSEQ there is the larger of its
    record's and its flag cell's, RFC 7162 3.1.4.2: copies and moves included)."""
    return [(v.uid, v.flags.names, v.modseq) for v in store.fetch(mailbox, store.uids(mailbox))]


def test_flags_from_the_index_are_what_the_rows_say():
    """FETCH FLAGS/MODSEQ answered from an index (RFC 3501 7.4.2, RFC 7162 3.1.4.2): every
    stored flag, keywords included, and each message's MODSEQ, for few and for many UIDs."""
    index = MailboxIndex(Marks(9, 6, 0))
    for uid, names in [(1, ()), (2, ("\\Seen", "$a")), (4, ("\\Deleted",)),
                       (5, ("\\Seen", "\\Answered", "\\Draft", "\\Flagged", "$a", "$b"))]:
        index.add(uid, Flags(uid + 3, frozenset(names)))
    index.note_flags(2, Flags(20, frozenset({"$b"})))
    want = [(1, 1, frozenset(), 4), (2, 2, frozenset({"$b"}), 20),
            (4, 5, frozenset({"\\Seen", "\\Answered", "\\Draft", "\\Flagged", "$a", "$b"}), 8)]
    assert index.flags_of([1, 2, 3, 5]) == want
    assert index.flags_of([5]) == want[2:]              # one of many: looked up by bisection
    index.remove({2})
    assert index.flags_of([1, 2, 4]) == [(1, 1, frozenset(), 4),
                                         (2, 4, frozenset({"\\Deleted"}), 7)]
    back = MailboxIndex.decode(index.encode())
    assert back.flags_of(back.uids) == index.flags_of(index.uids)
    assert back.keywords == {"$a", "$b"}


def test_a_change_to_many_messages_is_read_back_by_one_scan(backend, store):
    """STORE 1:* on a big mailbox: the delta re-reads the rows by one bounded scan, and
    still reports exactly what changed (``SCAN_ABOVE`` lowered to exercise the path)."""
    import mailstore.index as index_module

    inbox = fill(store, 60)
    old = store.open_index(inbox)
    uids = store.uids(inbox)
    store.store_flags(inbox, uids, ["\\Flagged"])
    store.expunge(inbox, uids[10:12])
    saved = index_module.SCAN_ABOVE
    index_module.SCAN_ABOVE = 20
    try:
        delta = store.changes_since(inbox, old.marks)
    finally:
        index_module.SCAN_ABOVE = saved
    assert delta.gone == set(uids[10:12])
    assert sorted(u for u, _ in delta.changed) == uids[:10] + uids[12:]
    assert all("\\Flagged" in f.names for _, f in delta.changed)
    old.apply(delta)
    assert same(old, truth(store, inbox))


def test_delivery_keeps_a_checkpoint_close_behind_a_mailbox_nobody_opens(backend, store,
                                                                        monkeypatch):
    """A mailbox filled only by delivery still gets a checkpoint every CHECKPOINT_EVERY UIDs,
    so its first SELECT reads at most that many rows."""
    monkeypatch.setattr("mailstore.store.CHECKPOINT_EVERY", 10)
    inbox = store.mailbox("ann", "INBOX")
    for i in range(25):
        store.append("ann", "INBOX", msg(i))
    checkpoint = store.indexes.load_checkpoint(inbox.id)
    assert checkpoint is not None and len(checkpoint.uids) == 20
    assert store.indexes._cache == {}          # the delivering process caches nothing
    other = fresh_process(backend)
    counting = CountingTable(other.messages.table)
    other.messages.table = counting
    other.indexes.messages = other.messages
    assert same(other.open_index(inbox), truth(store, inbox))
    assert counting.rows_read == 5


def test_a_cached_index_older_than_the_log_starts_again_from_the_checkpoint(backend, store):
    inbox = fill(store, 30)
    other = fresh_process(backend)
    other.open_index(inbox)                       # cached in the other process
    uids = store.uids(inbox)
    for uid in uids[:6]:
        store.store_flags(inbox, [uid], ["\\Answered"])
    store.indexes.keep_log = 2
    store.indexes.save_checkpoint(inbox.id, store.open_index(inbox))   # trims the log
    counting = CountingTable(other.messages.table)
    other.messages.table = counting
    other.indexes.messages = other.messages
    assert same(other.open_index(inbox), truth(store, inbox))
    assert counting.rows_read == 0                # from the checkpoint, not from the rows


def test_uid_sets_behave_as_sets():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from mailstore.index import UidSet

    ops = st.lists(st.tuples(st.sampled_from(["add", "discard", "drop"]),
                             st.integers(min_value=1, max_value=60)), max_size=80)

    @settings(max_examples=80, deadline=None)
    @given(st.sets(st.integers(min_value=1, max_value=60)), ops)
    def check(start, steps):
        ours, theirs = UidSet(start), set(start)
        for op, uid in steps:
            if op == "add":
                ours.add(uid)
                theirs.add(uid)
            elif op == "discard":
                ours.discard(uid)
                theirs.discard(uid)
            else:
                ours.difference_update({uid, uid + 1})
                theirs -= {uid, uid + 1}
            assert list(ours) == sorted(theirs) and ours == theirs and len(ours) == len(theirs)
            assert all((u in ours) == (u in theirs) for u in range(0, 62))
        if theirs:
            assert ours.first() == min(theirs)
        copy = ours.copy()
        copy.add(99)
        assert 99 not in ours
    check()


def _open_with_stale_marks(store, mailbox, stale):
    """Open ``mailbox`` as a SELECT does, but having read its marks *before* someone wrote a
    newer checkpoint (the race this guards against)."""
    real = store.indexes.marks
    calls = []

    def first_stale(ids):
        calls.append(ids)
        return stale if len(calls) == 1 else real(ids)
    store.indexes.marks = first_stale
    try:
        return store.open_index(mailbox)
    finally:
        store.indexes.marks = real


def test_marks_read_before_a_newer_checkpoint_do_not_hide_later_changes(backend, store):
    """Found in review: an index started from a checkpoint newer than the marks read first
    kept the older marks, so a later expunge of a message in between was never seen."""
    inbox = fill(store, 10)
    other = fresh_process(backend)
    stale = store.indexes.marks([inbox.id])
    other.append("ann", "INBOX", msg(10))
    other.indexes.refresh_checkpoint(inbox)          # a checkpoint that already has UID 11
    index = _open_with_stale_marks(store, inbox, stale)
    assert 11 in index.uids and index.marks.visible >= 11
    other.expunge(inbox, [11])
    delta = store.changes_since(inbox, index.marks)
    assert delta.gone == {11}
    store.indexes.checkpoint_after = 1
    store.append("ann", "INBOX", msg(11))
    assert same(store.open_index(inbox), truth(store, inbox))
    assert same(fresh_process(backend).open_index(inbox), truth(store, inbox))


def test_a_mailbox_opened_often_still_gets_fresh_checkpoints(store):
    """Found in review: a checkpoint was written only when one catch-up read 1,000 rows, so
    a mailbox SELECTed often never got one and its log grew without end."""
    inbox = fill(store, 5)
    store.indexes.checkpoint_after = 10
    store.indexes.keep_log = 4
    store.open_index(inbox)
    uid = store.uids(inbox)[0]
    for i in range(30):
        store.store_flags(inbox, [uid], ["\\Flagged"], "add" if i % 2 else "remove")
        store.open_index(inbox)                      # small catch-ups, one at a time
    stored = store.indexes.load_checkpoint(inbox.id)
    assert stored.marks.logmark >= 20
    first = next(iter(store.changes.table.scan(start=keys.change_key(inbox.id, 1),
                                               stop=keys.change_key(inbox.id, 10**6))))
    assert keys.change_key_seq(first[0]) > 10        # old entries trimmed


def test_a_session_whose_mark_the_log_no_longer_reaches_rescans_and_reports_all(store):
    """RFC 3501 7.4.1: after missing more than the log keeps, a session's refresh reads the
    mailbox once and still reports every expunge, new message and flag change."""
    from imapserver.imap.selected import SelectedMailbox

    inbox = fill(store, 8, seen_every=1)           # all unseen
    session = SelectedMailbox(store, inbox, readonly=False)
    session.load()
    uids = list(session.uids)
    store.store_flags(inbox, [uids[1]], ["\\Seen"])
    store.store_flags(inbox, [uids[2]], ["$Later"])
    store.expunge(inbox, [uids[4]])
    new_uid = store.append("ann", "INBOX", msg(99))[1]
    store.changes.trim(inbox.id, store.changes.marks(inbox.id)[1] + 1)   # all of it gone
    assert store.changes_since(inbox, session.index.marks) is None
    changes = session.refresh()
    assert changes.expunged_seqs == [5]
    assert changes.exists == 8
    assert sorted((seq, uid) for seq, uid, _names, _m in changes.flags) == \
        [(2, uids[1]), (3, uids[2])]
    assert list(session.uids) == uids[:4] + uids[5:] + [new_uid]
    assert same(session.index, truth(store, inbox))
