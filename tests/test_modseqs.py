"""MODSEQs for CONDSTORE/QRESYNC in the store (mailstore/modseqs.py, docs/decisions/0014).

RFC 7162 3.1.2.1: HIGHESTMODSEQ must be such that no change with a lower MODSEQ appears later;
3.2.5: a resync from a MODSEQ reports the flag changes and the expunges since, also after the
message rows are gone, and from another store handle (another process) than the one that
reported the MODSEQ.
"""

from __future__ import annotations

from mailstore.changelog import LOGSEQ
from mailstore.mailboxes import UID
from mailstore.store import MailStore


def msg(n: int) -> bytes:
    return f"From: a@example.com\r\nSubject: m{n}\r\n\r\nbody {n}\r\n".encode()


def _setup(backend, count=10):
    store = MailStore(backend)
    store.create_user("alice", "pw")
    box = store.mailbox("alice", "INBOX")
    uids = [store.append("alice", "INBOX", msg(i))[1] for i in range(count)]
    return store, box, uids


def test_modseqs_strictly_increase_and_expunge_takes_one(backend):
    """RFC 7162 3.1: each change takes a higher MODSEQ; an expunge moves HIGHESTMODSEQ too
    (3.2.10's VANISHED needs one)."""
    store, box, uids = _setup(backend, 3)
    first = store.highest_modseq(box)
    changed, _ = store.store_flags(box, uids[:1], ["\\Seen"])
    assert changed[0][1].modseq > first
    after_store = store.highest_modseq(box)
    assert after_store == changed[0][1].modseq
    store.expunge(box, uids[1:2])
    assert store.highest_modseq(box) > after_store


def test_highestmodseq_waits_for_changes_in_flight(backend):
    """RFC 7162 3.1.2.1: a MODSEQ is taken before its change commits (0001), so while a change
    number or a UID is taken and not yet settled, HIGHESTMODSEQ stays at the last quiet point."""
    store, box, uids = _setup(backend, 2)
    quiet = store.highest_modseq(box)
    rows = backend.table("JAMES_MAILBOXES")
    # A writer took a change number and a MODSEQ, and has not closed its entry yet.
    rows.increment_many(box.id, {LOGSEQ: 1, b"c:modseq": 1})
    assert store.highest_modseq(box) == quiet
    # A message being appended: UID and MODSEQ taken, watermark behind.
    # A process that never saw it quiet, with no stored point: 1, the safe floor.
    other = MailStore(backend, create_tables=False)
    assert other.highest_modseq(box) == 1
    # Once a point went to a client (stored), other processes start from it.
    store.highest_modseq(box, store.open_index(box).marks, keep=True)
    assert MailStore(backend, create_tables=False).highest_modseq(box) == quiet
    rows.increment_many(box.id, {UID: 1, b"c:modseq": 1})
    assert store.highest_modseq(box) == quiet


def test_since_modseq_across_store_handles(backend):
    """RFC 7162 3.2.5.2: resync from the HIGHESTMODSEQ one handle reported, through another
    handle (another process), after flag changes and expunges made by a third: exactly those
    flag changes, and the expunged UIDs."""
    store, box, uids = _setup(backend, 10)
    view = store.open_index(box)
    reported = store.highest_modseq(box, view.marks, keep=True)
    writer = MailStore(backend, create_tables=False)
    writer.store_flags(box, uids[2:4], ["\\Flagged"])
    writer.expunge(box, [uids[5], uids[7]])
    writer.store_flags(box, [uids[3]], ["$Work"])
    new_uid = writer.append("alice", "INBOX", msg(99))[1]
    reader = MailStore(backend, create_tables=False)
    now = reader.open_index(box)
    got = reader.since_modseq(box, reported, now)
    assert [u for u, _ in got.changed] == [uids[2], uids[3], new_uid]
    assert got.vanished == [uids[5], uids[7]]
    assert all(f.modseq > reported for _, f in got.changed)
    # Nothing since the newest value: nothing reported.
    top = reader.highest_modseq(box, now.marks)
    nothing = reader.since_modseq(box, top, now)
    assert nothing.changed == [] and nothing.vanished == []


def test_since_modseq_without_a_point_reads_everything(backend):
    """A MODSEQ no process noted (a client's own, or from before a restart): the answer is
    still right, from every row's flags and the whole log."""
    store, box, uids = _setup(backend, 6)
    store.store_flags(box, uids[:1], ["\\Seen"])
    base = store.fetch(box, uids[:1])[0].flags.modseq
    store.store_flags(box, uids[4:5], ["\\Seen"])
    store.expunge(box, uids[5:6])
    fresh = MailStore(backend, create_tables=False)
    got = fresh.since_modseq(box, base, fresh.open_index(box))
    assert [u for u, _ in got.changed] == [uids[4]]
    assert got.vanished == [uids[5]]


def test_since_modseq_past_the_log(backend):
    """Past the change log's reach (entries trimmed), VANISHED cannot be told exactly: None,
    for the caller to answer with a superset (RFC 7162 3.2.5.2); flag changes still exact."""
    store, box, uids = _setup(backend, 4)
    view = store.open_index(box)
    reported = store.highest_modseq(box, view.marks, keep=True)
    store.store_flags(box, uids[:1], ["\\Seen"])
    store.expunge(box, uids[1:2])
    store.changes.trim(box.id, 10)
    fresh = MailStore(backend, create_tables=False)
    got = fresh.since_modseq(box, reported, fresh.open_index(box))
    assert got.vanished is None
    assert [u for u, _ in got.changed] == [uids[0]]


def test_entries_written_before_modseqs_count_as_late(backend):
    """Log entries written before they carried a MODSEQ (and entries settled for a dead
    writer) count as later than any MODSEQ: their expunged UIDs are always reported."""
    store, box, uids = _setup(backend, 3)
    table = backend.table("JAMES_CHANGES")
    from mailstore import keys
    from mailstore.changelog import CLOSED, ENTRY, encode_entry
    store.expunge(box, uids[:1])
    seq = store.changes.marks(box.id)[1]
    expunged_at = store.highest_modseq(box)
    store.store_flags(box, uids[1:2], ["\\Seen"])
    fresh = MailStore(backend, create_tables=False)  # knows no point at or below expunged_at
    got = fresh.since_modseq(box, expunged_at, fresh.open_index(box))
    assert got.vanished == [] and [u for u, _ in got.changed] == uids[1:2]
    # The same entry without its MODSEQ (as written before entries carried one).
    table.put(keys.change_key(box.id, seq), {ENTRY: encode_entry(CLOSED, 0, uids[:1])})
    fresh = MailStore(backend, create_tables=False)
    got = fresh.since_modseq(box, expunged_at, fresh.open_index(box))
    assert got.vanished == uids[:1]
