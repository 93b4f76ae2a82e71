"""The background text indexer (``text_index = background``, mailstore/indexer.py, issue 14):
appends only queue their messages, a batch indexes them later, and SEARCH's text keys
(RFC 3501 6.4.4: case-insensitive substring of the decoded text) give the scan's answers at
every moment -- before the batch ran, after a crash between the append and the batch, after
expunges racing with it -- on every backend."""

from __future__ import annotations

import imaplib
import json
import random
import threading
import time

import pytest

from imapserver.imap.search import evaluate
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.fsck import Fsck
from mailstore.indexer import BackgroundIndexer, TextQueue
from mailstore.store import MailStore
from tests import textgen
from tests.admincli import run
from tests.crashing import Clock, Crash, DieAt, DyingBackend
from tests.imapproc import ServerProcess, make_users
from tests.mailgen import message
from tests.test_text_index import ScanOnly, differential, docs_texts, program


def _found(store, box, key: bytes, needle: str) -> list[int]:
    """SEARCH through the index, checked against the scan (RFC 3501 6.4.4)."""
    uids = store.uids(box)
    got = evaluate(program(key, needle), store, box, uids)
    assert got == evaluate(program(key, needle), ScanOnly(store), box, uids)
    return got


def test_appended_message_found_before_and_after_the_batch(backend):
    """An APPEND answered OK is searchable at once (RFC 3501 6.4.4): the message is queued,
    not indexed, so SEARCH scans it; the batch then indexes every queued message in one go,
    after which the index alone answers -- the same UIDs either way."""
    store = MailStore(backend, text_index="background")
    user = store.create_user("ann", "pw")
    for n in range(5):
        store.append(user, "INBOX", message(n, body=b"ordinary words %d\r\n" % n))
    store.append(user, "INBOX", message(9, subject="quarterly zebrafish",
                                        body=b"the zebrafish needle\r\n"))
    box = store.mailbox(user, "INBOX")
    uids = store.uids(box)
    assert store.text.check(box.id, uids)[0] == uids  # nothing indexed at append
    assert store.text.queue.count() == 6
    assert _found(store, box, b"BODY", "ZEBRAFISH") == [uids[-1]]  # before the batch

    indexer = BackgroundIndexer(store)
    assert indexer.run_once() == 6
    assert store.text.check(box.id, uids) == ([], [])
    assert store.text.queue.count() == 0
    found = store.text_candidates(box, {"k": (("body",), "zebrafish", True)}, uids)["k"]
    assert uids[-1] in found.matches and not found.unindexed
    assert _found(store, box, b"BODY", "ZEBRAFISH") == [uids[-1]]
    assert _found(store, box, b"SUBJECT", "quarterly") == [uids[-1]]
    assert indexer.run_once() == 0  # nothing left


def test_differential_through_copies_moves_and_a_deleted_mailbox(backend):
    """Random messages and needles (tests/textgen.py), indexed by batches between the
    steps: answers equal the scan's throughout; a COPY or MOVE queues the new messages in
    the target; a deleted mailbox's queue goes with it (RFC 3501 6.4.4, 6.4.7; RFC 6851)."""
    rng = random.Random(140)
    store = MailStore(backend, text_index="background")
    user = store.create_user("bea", "pw")
    store.create_mailbox(user, "Keep")
    store.create_mailbox(user, "Gone")
    datas = [textgen.message(rng, n) for n in range(10 if backend.name == "hbase" else 16)]
    texts = [docs_texts(d) for d in datas]
    for data in datas:
        store.append(user, "INBOX", data)
    store.append(user, "Gone", datas[0])
    indexer = BackgroundIndexer(store, batch=4)  # several batches per mailbox
    box = store.mailbox(user, "INBOX")
    differential(store, box, rng, texts, 20)  # nothing indexed yet: all scanned
    store.delete_mailbox(user, "Gone")
    assert indexer.run_once() == len(datas)
    assert store.text.queue.count() == 0
    uids = store.uids(box)
    store.copy(box, uids[:3], store.mailbox(user, "Keep"))
    store.move(box, uids[3:6], store.mailbox(user, "Keep"))
    keep = store.mailbox(user, "Keep")
    assert store.text.check(keep.id, store.uids(keep))[0] == store.uids(keep)  # queued
    differential(store, keep, rng, texts, 20)
    assert indexer.run_once() == 6
    assert store.text.check(keep.id, store.uids(keep)) == ([], [])
    assert store.text.check(box.id, store.uids(box)) == ([], [])  # moved: entries gone
    for name in ("INBOX", "Keep"):
        differential(store, store.mailbox(user, name), rng, texts, 30)


def test_expunge_removes_entries_even_racing_with_the_batch(backend, monkeypatch):
    """EXPUNGE (RFC 3501 6.4.3) removes index entries whenever it comes: after the batch
    (the entries go), before it (the queue cell is dropped, nothing indexed), or between the
    batch's read and its write (the batch reads again and removes what it wrote)."""
    store = MailStore(backend, text_index="background")
    user = store.create_user("cid", "pw")
    for n in range(6):
        store.append(user, "INBOX", message(n, body=b"needle words\r\n"))
    box = store.mailbox(user, "INBOX")
    uids = store.uids(box)
    store.expunge(box, uids[:2])  # before the batch
    indexer = BackgroundIndexer(store)
    real = store.text.docs_of_view

    def racing(view):
        if view.uid == uids[2]:  # an expunge by another session while the batch reads
            store.expunge(box, [uids[2]])
        return real(view)
    monkeypatch.setattr(store.text, "docs_of_view", racing)
    indexer.run_once()
    assert store.text.index.markers(box.id) == dict.fromkeys(uids[3:], True)
    assert store.text.queue.count() == 0
    store.expunge(box, [uids[3]])  # after the batch
    assert store.text.index.markers(box.id) == dict.fromkeys(uids[4:], True)
    assert _found(store, box, b"BODY", "NEEDLE") == uids[4:]


def test_content_released_under_the_batch_skips_that_message_only(backend, monkeypatch):
    """A message expunged by another session after the batch listed it, whose content is
    already released (no grace: ``Expunged``, RFC 3501 6.4.3), is skipped: the pass goes on
    with the others and its queue is drained (it failed whole, and was retried forever)."""
    from mailstore.errors import Expunged
    store = MailStore(backend, text_index="background")
    user = store.create_user("dee", "pw")
    for n in range(4):
        store.append(user, "INBOX", message(n, body=b"needle words\r\n"))
    box = store.mailbox(user, "INBOX")
    uids = store.uids(box)
    real = store.text.docs_of_view

    def released(view):
        if view.uid == uids[1]:
            store.expunge(box, [uids[1]])
            raise Expunged("message expunged meanwhile: its content was released")
        return real(view)
    monkeypatch.setattr(store.text, "docs_of_view", released)
    assert BackgroundIndexer(store).run_once() == 3
    assert store.text.queue.count() == 0
    assert store.text.index.markers(box.id) == {uid: True for uid in uids if uid != uids[1]}
    assert _found(store, box, b"BODY", "NEEDLE") == [uid for uid in uids if uid != uids[1]]


@pytest.mark.parametrize("death", ["index-write", "queue-delete"])
def test_crash_between_append_and_indexing(backend, death):
    """A process that dies after acknowledging APPENDs and before, or while, indexing them:
    the messages are found by SEARCH all along (scanned; RFC 3501 6.4.4), stay queued, and
    the next indexer indexes them.  Dying after the index write and before the queue
    deletion indexes them again, harmlessly."""
    store = MailStore(backend, text_index="background")
    user = store.create_user("dan", "pw")
    for n in range(4):
        store.append(user, "INBOX", message(n, body=b"the zebrafish %d\r\n" % n))
    when = {"index-write": lambda table, method, args: table in ("text_index",
                                                                 "JAMES_TEXT_INDEX"),
            "queue-delete": lambda table, method, args: table == "JAMES_TEXT_QUEUE"
            and method == "delete"}[death]
    dying = MailStore(DyingBackend(backend, DieAt(when)), create_tables=False,
                      text_index="background")
    with pytest.raises(Crash):
        BackgroundIndexer(dying).run_once()

    after = MailStore(backend, create_tables=False, text_index="background")
    box = after.mailbox(user, "INBOX")
    uids = after.uids(box)
    assert _found(after, box, b"BODY", "ZEBRAFISH") == uids
    assert after.text.queue.count() == 4  # still queued
    assert BackgroundIndexer(after).run_once() == 4
    assert after.text.check(box.id, uids) == ([], [])
    assert after.text.queue.count() == 0
    assert _found(after, box, b"BODY", "ZEBRAFISH 2") == [uids[2]]


def test_fsck_repair_indexes_queued_messages(backend):
    """fsck counts queued messages as unindexed (derived data, not a problem) and --repair
    indexes them and drains their queue cells, so the indexer does not index them a second
    time (over HBase that added posting cells again).  SEARCH (RFC 3501 6.4.4) answers as
    the scan does throughout.  Before, the cells stayed and the indexer indexed all three
    again."""
    store = MailStore(backend, text_index="background")
    user = store.create_user("eve", "pw")
    for n in range(3):
        store.append(user, "INBOX", message(n, body=b"the zebrafish %d\r\n" % n))
    assert Fsck(store).run().checked["unindexed messages"] == 3
    report = Fsck(store, repair=True).run()
    assert report.ok and report.checked["messages indexed now"] == 3
    box = store.mailbox(user, "INBOX")
    assert store.text.check(box.id, store.uids(box)) == ([], [])
    assert store.text.queue.count() == 0
    assert BackgroundIndexer(store).run_once() == 0  # nothing indexed twice
    assert _found(store, box, b"BODY", "zebrafish 1") == [store.uids(box)[1]]
    assert "unindexed messages" not in Fsck(store).run().checked


@pytest.mark.parametrize("mode", ["background", "yes"])
@pytest.mark.parametrize("cut", ["first-copy", "intent-end"])
@pytest.mark.parametrize("op", ["copy", "move"])
def test_rolled_forward_copy_or_move_indexes_its_copies(backend, op, cut, mode):
    """A COPY or MOVE cut by a crash and rolled forward when its mailbox is next opened
    (RFC 3501 6.4.7, RFC 6851; decision 0003) gives its copies in the target to the text
    index as an uncut one does: queued for the indexer (``background``) or indexed at once
    (``yes``).  Cut at the first copy written (the roll forward writes them) or at the
    intent's deletion (all written, none queued yet).  Before, they stayed unindexed --
    scanned by every SEARCH (RFC 3501 6.4.4) -- until ``fsck --repair``."""
    clock = Clock()

    def open_store(on, **kwargs):
        return MailStore(on, clock=clock.time, sleep=clock.sleep, intent_timeout=30.0,
                         text_index=mode, **kwargs)
    store = open_store(backend)
    user = store.create_user("fay", "pw")
    store.create_mailbox(user, "Work")
    for n in range(3):
        store.append(user, "INBOX", message(n, body=b"the zebrafish %d\r\n" % n))
    if mode == "background":
        assert BackgroundIndexer(store).run_once() == 3   # the sources: queue empty
    when = {"first-copy": lambda table, method, args: table == "JAMES_MESSAGES"
            and method in ("put", "put_then_check_and_put"),
            "intent-end": lambda table, method, args: table == "JAMES_INTENTS"
            and method in ("retire", "delete")}[cut]
    dying = open_store(DyingBackend(backend, DieAt(when)), create_tables=False)
    with pytest.raises(Crash):
        getattr(dying, op)(dying.mailbox(user, "INBOX"), [1, 2, 3],
                           dying.mailbox(user, "Work"))
    clock.sleep(31)    # past the intent timeout
    after = open_store(backend, create_tables=False)
    after.mailbox(user, "INBOX")   # rolls a move forward (its intent is the source's)
    work = after.mailbox(user, "Work")   # and a copy (the target's)
    copies = after.uids(work)
    assert len(copies) == 3
    if mode == "background":
        assert after.text.queue.count() == 3
        assert BackgroundIndexer(after).run_once() == 3
    assert after.text.check(work.id, copies) == ([], [])
    assert _found(after, work, b"BODY", "zebrafish 1") == [copies[1]]


def test_pending_goes_round_the_queue(tmp_path):
    """Each pass of the queue starts after the last mailbox the previous one read, so a
    mailbox that stays queued (an append in flight) never starves the others."""
    store = MailStore(EmbeddedBackend(str(tmp_path / "s")), text_index="background")
    queue = TextQueue(store.backend)
    for n in range(5):
        queue.add(bytes([n]) * 16, [1])
    seen = [[key[0] for key, _ in queue.pending(rows=2)] for _ in range(3)]
    assert seen == [[0, 1], [2, 3], [4, 0]]


def test_mailadmin_index_run(tmp_path):
    """``mailadmin index run`` indexes what a store with no running server queued."""
    data_dir = str(tmp_path / "store")
    store = MailStore(EmbeddedBackend(data_dir), text_index="background")
    store.create_user("fay", "pw")
    for n in range(7):
        store.append("fay", "INBOX", message(n))
    store.close()
    out = run("index", "run", "--json", data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"queued": 7, "indexed": 7, "left": 0}
    out = run("index", "status", "fay", "--json", data_dir=data_dir)
    rows = {r["mailbox"]: r for r in json.loads(out.stdout)["mailboxes"]}
    assert rows["INBOX"]["indexed"] == 7 and rows["INBOX"]["missing"] == 0


def test_server_indexes_in_the_background(tmp_path):
    """The server (default configuration: text_index = background) answers SEARCH BODY for
    a message it has just stored (RFC 3501 6.4.4), and its indexer thread indexes it within
    seconds."""
    data_dir = str(tmp_path / "srv")
    make_users(data_dir, ("gus", "pw"))
    with ServerProcess(data_dir) as server:
        imap = imaplib.IMAP4("127.0.0.1", server.ports["imap"])
        imap.login("gus", "pw")
        imap.append("INBOX", None, None, message(1, body=b"a lonely zebrafish\r\n"))
        imap.select("INBOX")
        assert imap.uid("SEARCH", "BODY", "zebrafish") == ("OK", [b"1"])
        reader = MailStore(EmbeddedBackend(data_dir), create_tables=False)
        box = reader.mailbox("gus", "INBOX")
        deadline = time.monotonic() + 20
        while reader.text.check(box.id, [1])[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reader.text.check(box.id, [1]) == ([], [])
        assert imap.uid("SEARCH", "BODY", "zebrafish") == ("OK", [b"1"])
        imap.logout()
        reader.close()


def test_queueing_costs_an_append_no_round_trip(hbase_store):
    """Over Thrift an APPEND (RFC 3501 6.3.11) makes eight calls with the index off
    (tests/test_hbase_round_trips.py); queueing its message for the background indexer rides
    in the counting ``incrementRows`` and adds none, where indexing at append added a batch
    of posting-row puts and the marker's."""
    calls = {}
    for mode in ("no", "background", "yes"):
        backend = hbase_store.another().backend()
        store = MailStore(backend, text_index=mode)
        store.create_user("hal", "pw", default_folders=False)
        inbox = store.mailbox("hal", "INBOX")
        store.append("hal", inbox, message(0, size=2000))  # warm
        before = sum(backend.round_trips().values())
        store.append("hal", inbox, message(1, size=2000))
        calls[mode] = sum(backend.round_trips().values()) - before
        store.close()
    assert calls["background"] == calls["no"] == 8 < calls["yes"]


def test_put_many_contract(backend):
    """TextIndex.put_many, the indexer's batch write, on both engines: what a put of each
    would give; and two batches of different UIDs starting at the same one (two indexers)
    both stay findable -- on posting rows, one cell per batch, named by its UIDs."""
    MailStore(backend)  # creates the tables
    index = backend.text_index()
    box = b"\x03" * 16
    index.put_many(box, {5: {"subject": "lunch on friday", "body": "straße text"},
                         6: {"subject": "friday report", "body": "other"}, 7: None})
    assert index.markers(box) == {5: True, 6: True, 7: False}
    assert index.match(box, "subject", "friday") >= {5, 6}
    assert 6 not in index.match(box, "body", "aße t")
    assert 5 in index.match(box, "body", "aße t")
    index.put_many(box, {5: {"subject": "lunch on friday", "body": "straße text"},
                         8: {"subject": "friday again", "body": "more"}})
    assert index.match(box, "subject", "friday") >= {5, 6, 8}
    assert index.match(box, "subject", "again") >= {8}
    index.remove(box, [6])
    assert index.markers(box) == {5: True, 7: False, 8: True}


def test_embedded_groups_queue_on_the_process_lock_and_always_release_it(tmp_path):
    """The embedded backend's groups of one process take a lock of the process around their
    transaction (so an append behind the indexer's batch wakes at its commit instead of
    sleeping in SQLite's busy handler).  It is released however a group ends -- committed,
    rolled back by an error, flushed early, nested -- or the next group of another thread
    would wait forever; and a group waiting for another one gets in right after it."""
    import threading

    backend = EmbeddedBackend(str(tmp_path / "g"), busy_timeout=2.0)
    backend.create_table("T", {"f": {}})
    table = backend.table("T")

    def other_thread_group() -> float:
        took: list[float] = []

        def run():
            start = time.monotonic()
            with backend.grouped():
                table.put(b"r", {b"f:x": b"2"})
            took.append(time.monotonic() - start)
            backend.release_thread()
        worker = threading.Thread(target=run)
        worker.start()
        worker.join(10)
        assert took, "the other thread's group never ran"
        return took[0]

    with backend.grouped():
        table.put(b"r", {b"f:x": b"1"})
    assert other_thread_group() < 1.0
    with pytest.raises(RuntimeError), backend.grouped():
        table.put(b"r", {b"f:x": b"1"})
        raise RuntimeError("a failing call inside the group")
    assert other_thread_group() < 1.0
    with backend.grouped():
        with backend.grouped():
            table.put(b"r", {b"f:x": b"1"})
        backend.flush_group()
        table.put(b"r", {b"f:y": b"1"})
    assert other_thread_group() < 1.0

    released = threading.Event()

    def hold():
        with backend.grouped():
            table.put(b"r", {b"f:z": b"1"})
            released.wait(5)
            time.sleep(0.2)  # still holding when the other thread asks
        backend.release_thread()
    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(0.05)
    released.set()
    waited = other_thread_group()  # waits for the holder's commit, then goes at once
    holder.join(5)
    assert 0.1 < waited < 1.5
    assert table.row(b"r") == {b"f:x": b"2", b"f:y": b"1", b"f:z": b"1"}
    backend.close()


def test_thrift2_appends_queue_their_messages(hbase_store):
    """Over Thrift2 an append counts with its UID (decision 0029) and so makes no counting
    call for the queue cell to ride in: it is written beside the commit instead.  Before,
    no APPEND over Thrift2 was ever queued, so the background indexer never indexed one and
    every SEARCH of a text key (RFC 3501 6.4.4) scanned every message for good."""
    store = MailStore(hbase_store.backend("thrift2"), text_index="background")
    try:
        store.create_user("hal", "pw", default_folders=False)
        for n in range(3):
            store.append("hal", "INBOX", message(n, body=b"plain words %d\r\n" % n))
        store.append("hal", "INBOX", message(3, body=b"the zebrafish needle\r\n"))
        box = store.mailbox("hal", "INBOX")
        assert store.text.queue.count() == 4
        assert BackgroundIndexer(store).run_once() == 4
        assert store.text.check(box.id, store.uids(box)) == ([], [])
        assert _found(store, box, b"BODY", "zebrafish") == [4]
    finally:
        store.close()


def test_stop_comes_after_the_batch_in_progress_not_the_pass(tmp_path, monkeypatch):
    """A server's shutdown waits for the indexer thread (imapserver/services.py): ``stop``
    lets the batch in progress finish and leaves the rest queued, even when one pass holds
    many batches (a backlog).  Before, the thread went on to the end of the pass -- here 3 s,
    after a backlog of deliveries minutes -- and a shutdown past ``stop``'s join timeout
    closed the store under it.  What stays queued is scanned meanwhile (RFC 3501 6.4.4)."""
    store = MailStore(EmbeddedBackend(str(tmp_path / "s")), text_index="background")
    store.create_user("ann", "pw")
    for n in range(60):
        store.append("ann", "INBOX", message(n, body=b"words %d\r\n" % n))
    started = threading.Event()
    real = store.text.docs_of_view

    def slow(view):
        started.set()
        time.sleep(0.05)
        return real(view)
    monkeypatch.setattr(store.text, "docs_of_view", slow)
    indexer = BackgroundIndexer(store, batch=2, interval=0.01)
    indexer.start()
    try:
        assert started.wait(10)
    finally:
        begun = time.monotonic()
        indexer.stop()
        took = time.monotonic() - begun
    assert took < 1.0, f"stop took {took:.2f} s"
    assert 0 < store.text.queue.count() < 60
    store.close()
