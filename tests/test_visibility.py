"""Visibility: UID order as readers see it (RFC 3501 2.3.1.1), abandoned UIDs, recovery, fsck.

These tests stage the in-between states that crashes and slow writers leave, by doing half of
an operation through the same tables the store uses.
"""

from __future__ import annotations

import json
import threading

import pytest

from mailstore import keys
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.errors import BackendUnavailable
from mailstore.fsck import Fsck
from mailstore.mailboxes import COUNT, MODSEQ, UID
from mailstore.messages import STATE
from mailstore.records import MOVING, Flags, MessageRecord, with_state
from mailstore.store import MailStore
from tests.conftest import open_store
from tests.mailgen import message


class FakeClock:
    """An injectable clock whose sleep advances time instead of waiting."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0
        self.lock = threading.Lock()

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


@pytest.fixture(params=["embedded", "hbase", "hbase-thrift2"])
def backend(request, tmp_path):
    """Every backend, and HBase over both Thrift APIs: over Thrift2 an append counts its
    message with its UID and marks the row in its commit (Backend.counts_at_allocation,
    docs/decisions/0029), so the races and failures around the commit are checked there too."""
    store = open_store(request, tmp_path, request.param)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def store(backend, clock):
    return MailStore(backend, clock=clock.time, sleep=clock.sleep, abandon_after=5.0,
                     intent_timeout=30.0)


def test_a_message_committed_ahead_of_a_lower_uid_waits_for_it(store, clock):
    """A reader must never see UID 2 before UID 1 when 2 commits first."""
    user = store.create_user("u", "pw")
    inbox = store.mailbox(user, "INBOX")
    # A slow writer has allocated UID 1 but not committed it yet.
    assert store.mailboxes.rows.increment(inbox.id, UID, 1) == 1
    stored = store.ingest(message(1))
    slow_record = None

    def commit_slow_writer_while_waiting(seconds: float) -> None:
        nonlocal slow_record
        clock.sleep(seconds)
        if slow_record is None:
            # Meanwhile the reader sees nothing: UID 2 is committed but above the watermark.
            assert store.uids(inbox) == []
            from mailstore.records import MessageRecord
            slow_record = MessageRecord(uid=1, content=stored.content_id, size=stored.size,
                                        internal_date=clock.time(), modseq=99,
                                        chunk_size=stored.chunk_size)
            key = keys.message_key(inbox.id, 1)
            store.messages.table.put(key, {b"f:v": (99).to_bytes(8, "big")})
            assert store.messages.table.check_and_put(key, STATE, None, STATE,
                                                      slow_record.encode())

    store.messages.sleep = commit_slow_writer_while_waiting
    _, uid = store.append(user, "INBOX", message(2))
    assert uid == 2
    assert store.uids(inbox) == [1, 2]


def test_an_append_waiting_for_a_slower_writer_lets_it_commit(backend):
    """Another process's writer holds UID 1 uncommitted while an append takes UID 2.  The
    append must wait for it (RFC 3501 2.3.1.1) without blocking it: on the embedded store the
    append runs as one transaction, which it commits before waiting (Backend.flush_group).
    Real threads, real time: a blocked writer would only get in once UID 1 was abandoned."""
    store = MailStore(backend, abandon_after=60.0)
    user = store.create_user("u", "pw")
    inbox = store.mailbox(user, "INBOX")
    stored = store.ingest(message(1))
    allocated, appender_waits, slow_done = (threading.Event() for _ in range(3))
    errors = []

    def slow_writer():
        try:
            uid, modseq = store.messages.boxes.allocate(inbox.id, stored.size)
            allocated.set()
            assert appender_waits.wait(20)
            record = MessageRecord(uid=uid, content=stored.content_id, size=stored.size,
                                   internal_date=1.0, modseq=modseq,
                                   chunk_size=stored.chunk_size)
            assert store.messages.table.put_then_check_and_put(
                keys.message_key(inbox.id, uid),
                store.messages._pending_cells(stored, Flags(modseq)), STATE,
                record.encode())
            store.messages.publish(inbox.id, uid, uid)
            slow_done.set()
        except BaseException as exc:  # reported in the test's thread
            errors.append(exc)
            allocated.set()

    real_sleep = store.messages.sleep

    def waiting(seconds):
        appender_waits.set()
        real_sleep(seconds)

    store.messages.sleep = waiting
    thread = threading.Thread(target=slow_writer)
    thread.start()
    assert allocated.wait(20)
    _, uid = store.append(user, "INBOX", message(2))
    thread.join(30)
    assert not errors, errors
    assert slow_done.is_set() and uid == 2
    assert store.uids(inbox) == [1, 2]


@pytest.mark.parametrize("how", ["append", "deliver"])
def test_a_message_committed_but_not_published_keeps_its_content(store, clock, how):
    """The backend fails after the message row is committed, before the watermark moves.
    Over HBase the row stays (later appends make it visible), so its content must stay
    too: the failed call may not give back the reference the row holds.  The embedded store
    runs the whole append as one transaction, which the failure rolls back."""
    user = store.create_user("u", "pw")
    inbox = store.mailbox(user, "INBOX")
    real_publish = store.messages.publish
    failures = [BackendUnavailable("injected")]

    def publish(*args):
        if failures:
            raise failures.pop()
        return real_publish(*args)

    store.messages.publish = publish
    with pytest.raises(BackendUnavailable):
        if how == "append":
            store.append(user, "INBOX", message(1))
        else:
            store.deliver([(user, "INBOX")], message(1))
    store.append(user, "INBOX", message(2))
    bodies = [store.open_message(v).read() for v in store.newest(inbox, 10)]
    if isinstance(store.backend, EmbeddedBackend):
        assert bodies == [message(2)]
    else:
        # Stored, and visible once UID 2 is (a delivery's withdrawal cannot expunge what is
        # not visible yet): a retry may store it twice, nothing loses it.
        assert bodies == [message(2), message(1)]
    assert Fsck(store).run(user).ok


def test_a_uid_whose_writer_died_is_abandoned_after_the_timeout(store, clock):
    user = store.create_user("u", "pw")
    inbox = store.mailbox(user, "INBOX")
    store.mailboxes.rows.increment(inbox.id, UID, 1)  # allocated, writer then died
    start = clock.time()
    _, uid = store.append(user, "INBOX", message(2))
    assert uid == 2 and clock.time() - start >= 5.0
    assert store.uids(inbox) == [2]
    # The dead writer comes back: its commit loses, so it can never appear below UID 2.
    key = keys.message_key(inbox.id, 1)
    assert not store.messages.table.check_and_put(key, STATE, None, STATE, b"C{}")
    assert Fsck(store).run(user).ok


def test_a_writer_that_lost_its_uid_takes_a_new_one(store, clock):
    user = store.create_user("u", "pw")
    inbox = store.mailbox(user, "INBOX")
    original_commit = store.messages.table.put_then_check_and_put
    calls = []

    def lose_the_race_once(key, cells, column, value):
        if not calls:
            # A reader gives the UID up just before the writer's commit.
            calls.append(key)
            store.messages.table.check_and_put(key, STATE, None, STATE, b"X")
        return original_commit(key, cells, column, value)

    store.messages.table.put_then_check_and_put = lose_the_race_once
    _, uid = store.append(user, "INBOX", message(1))
    assert uid == 2
    assert store.uids(inbox) == [2]
    assert store.messages.table.row(calls[0]) == {b"m:s": b"X"}
    # The message was counted once, whatever the number of UIDs it took.
    assert store.mailbox(user, "INBOX").messages == 1
    assert Fsck(store).run(user).ok


def test_a_writer_that_fails_gives_up_its_uid_and_its_counts_at_once(store, clock):
    """The counters are taken when the UID is: a writer whose commit fails gives both back,
    so nothing waits for the UID and fsck finds the counters exact."""
    user = store.create_user("u", "pw")
    store.append(user, "INBOX", message(1), flags=["\\Seen"])

    def fail(key, cells, column, value):
        raise BackendUnavailable("injected")

    store.messages.table.put_then_check_and_put = fail
    start = clock.time()
    with pytest.raises(BackendUnavailable):
        store.append(user, "INBOX", message(2))
    del store.messages.table.put_then_check_and_put
    inbox = store.mailbox(user, "INBOX")
    if isinstance(store.backend, EmbeddedBackend):
        # The append ran as one transaction (Backend.grouped): its failure took everything
        # back, the UID included, which nobody can have seen.
        assert (inbox.messages, inbox.unseen, inbox.last_uid) == (1, 0, 1)
        assert store.messages.table.row(keys.message_key(inbox.id, 2)) == {}
    else:
        assert (inbox.messages, inbox.unseen, inbox.last_uid) == (1, 0, 2)
        assert store.messages.table.row(keys.message_key(inbox.id, 2)) == {b"m:s": b"X"}
    _, uid = store.append(user, "INBOX", message(3))
    assert clock.time() == start   # no wait for the abandoned UID
    assert store.uids(inbox) == [1, uid] and uid == inbox.last_uid + 1
    inbox = store.mailbox(user, "INBOX")
    assert (inbox.messages, inbox.unseen) == (2, 1)
    assert Fsck(store).run(user).ok


def test_interrupted_move_is_rolled_forward_on_open(store, clock):
    user = store.create_user("u", "pw")
    for i in range(3):
        store.append(user, "INBOX", message(i))
    inbox, archive = store.mailbox(user, "INBOX"), store.mailbox(user, "Archive")
    # Replay the first steps of a move of UIDs 1-3, then "crash": target UIDs allocated,
    # intent written, two sources claimed, one target row written and committed.
    store.mailboxes.rows.increment(archive.id, UID, 3)
    store.mailboxes.rows.increment(archive.id, MODSEQ, 3)
    store.transfers._begin(inbox.id, {"op": "move", "target": archive.id.hex(),
                                      "pairs": [[1, 1], [2, 2], [3, 3]]})
    views = store.fetch(inbox, [1, 2, 3], None)
    for view in views[:2]:
        key = keys.message_key(inbox.id, view.uid)
        claimed = with_state(view.state_raw, MOVING)
        assert store.messages.table.check_and_put(key, STATE, view.state_raw, STATE, claimed)
        view.state_raw = claimed
    store.transfers._place(archive, views[0], 1, 1)
    # Before the timeout the intent is left to its (possibly live) owner.
    assert store.mailbox(user, "INBOX").id == inbox.id
    assert store.transfers.pending(inbox.id)
    clock.sleep(31)
    store.mailbox(user, "INBOX")  # opening the mailbox recovers it
    assert store.transfers.pending(inbox.id) == []
    assert store.uids(store.mailbox(user, "INBOX")) == []
    assert store.uids(store.mailbox(user, "Archive")) == [1, 2, 3]
    bodies = sorted(store.read_message(v)
                    for v in store.fetch(store.mailbox(user, "Archive"), [1, 2, 3]))
    assert bodies == sorted(message(i) for i in range(3))
    Fsck(store, repair=True).run()
    assert Fsck(store).run().ok


def test_an_interrupted_move_whose_target_was_deleted_is_undone(store, clock):
    """Found in review: recovery raised NotFound for good when the target was deleted after
    the crash, so the source mailbox could no longer be opened."""
    user = store.create_user("u", "pw")
    for i in range(2):
        store.append(user, "INBOX", message(i))
    inbox, archive = store.mailbox(user, "INBOX"), store.mailbox(user, "Archive")
    store.transfers._begin(inbox.id, {"op": "move", "target": archive.id.hex(),
                                      "pairs": [[1, 1], [2, 2]]})
    view = store.fetch(inbox, [1], None)[0]
    assert store.messages.table.check_and_put(keys.message_key(inbox.id, 1), STATE,
                                              view.state_raw, STATE,
                                              with_state(view.state_raw, MOVING))
    store.delete_mailbox(user, "Archive")
    clock.sleep(61)
    assert store.mailbox(user, "INBOX").id == inbox.id     # opens, recovering
    assert store.transfers.pending(inbox.id) == []
    assert store.uids(inbox) == [1, 2]
    assert store.expunge(inbox, [1]) == [1]    # committed again: no longer claimed by a move
    assert Fsck(store).run().ok


def test_interrupted_expunge_is_finished_by_fsck(store, clock):
    user = store.create_user("u", "pw")
    for i in range(3):
        store.append(user, "INBOX", message(i))
    inbox = store.mailbox(user, "INBOX")
    store.transfers._begin(inbox.id, {"op": "expunge", "uids": [1, 2]})
    view = store.fetch(inbox, [1])[0]
    store.messages.table.check_and_put(keys.message_key(inbox.id, 1), STATE, view.state_raw,
                                       STATE, with_state(view.state_raw, b"D"))
    # Claimed messages vanish at once; the rest of the set follows on recovery.
    assert store.uids(inbox) == [2, 3]
    report = Fsck(store, repair=True).run()
    assert any(p.kind == "intent" for p in report.problems)
    assert store.uids(store.mailbox(user, "INBOX")) == [3]
    assert Fsck(store).run().ok
    # The two expunged messages' content is released: deleted once its grace period is over
    # (docs/decisions/0011), by the server's sweep or, as here, fsck --repair.
    clock.now += store.content.grace + 1
    assert Fsck(store, repair=True).run().ok
    assert len(list(store.content.table.scan(start=b"", stop=b"\xff" * 17))) == 1


def test_fsck_finds_and_repairs_injected_damage(store, clock):
    user = store.create_user("u", "pw")
    for i in range(4):
        store.append(user, "INBOX", message(i, size=2000))
    inbox = store.mailbox(user, "INBOX")
    store.mailboxes.rows.increment(inbox.id, COUNT, 7)            # counter off by some
    orphan = store.content.writer()                               # orphaned content
    orphan.write(b"lost")
    orphan.commit()
    view = store.fetch(inbox, [2])[0]                             # a refcount too low
    store.content.table.increment(view.record.content, b"r:refs", 2)
    store.mailboxes.index.put(store.user_keys.index_key(user, "Ghost"), {b"i:id": b"\x01" * 16})
    report = Fsck(store).run()
    kinds = sorted(p.kind for p in report.problems)
    assert kinds == ["content", "content", "counter", "index"], report.problems
    assert not any(p.repaired for p in report.problems)
    Fsck(store, repair=True).run()
    assert Fsck(store).run().ok, Fsck(store).run().problems
    assert store.mailbox(user, "INBOX").messages == 4
    assert store.content.refs(view.record.content) == 1


def test_intent_records_are_json_with_the_planned_uids(store, clock):
    user = store.create_user("u", "pw")
    store.append(user, "INBOX", message(1))
    inbox = store.mailbox(user, "INBOX")
    key = store.transfers._begin(inbox.id, {"op": "move", "target": "00" * 16, "pairs": [[1, 5]]})
    assert json.loads(store.transfers.intents.row(key)[b"i:op"])["pairs"] == [[1, 5]]


def test_fsck_gives_up_a_dead_writers_uid_and_strips_what_it_wrote(store, clock):
    """A writer killed between its pending put and its commit leaves cells under a UID above
    the watermark; repair abandons the UID and removes the cells (a second fsck is clean)."""
    user = store.create_user("u", "pw")
    store.append(user, "INBOX", message(1))
    inbox = store.mailbox(user, "INBOX")
    uid = store.mailboxes.rows.increment(inbox.id, UID, 1)
    store.messages.table.put(keys.message_key(inbox.id, uid),
                             {b"m:env": b"{}", b"f:v": (1).to_bytes(8, "big")})
    report = Fsck(store, repair=True).run()
    assert any("watermark" in p.detail for p in report.problems)
    assert store.messages.table.row(keys.message_key(inbox.id, uid)) == {b"m:s": b"X"}
    assert Fsck(store).run().ok
    assert store.uids(store.mailbox(user, "INBOX")) == [1]
