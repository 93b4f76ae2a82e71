"""The background text indexer: ``[store] text_index = background`` (issue 14).

Indexing a message as it is appended made an APPEND cost 2.3x (embedded) to 4.7x (HBase) what
it cost without the index (bench/RESULTS.md), mostly per-transaction costs -- FTS5 flushes a
segment at every commit; HBase takes one row put per distinct trigram -- that a batch of
messages pays once.  So, as Dovecot's ``fts_autoindex`` hands indexing to its indexer-worker:

* An append or delivery records only *that* its message needs indexing: one counter cell
  ``q:<UID>`` in the mailbox's row of ``JAMES_TEXT_QUEUE``, added to the increments the
  append already makes in one call to count the message (Messages._count), so it costs no
  extra round trip and is durable before the message is committed.  A copy or move queues
  its new UIDs right after; one cut by a crash queues them when it is rolled forward
  (``Transfers.recovered_copies``).  A crash after its intent ended and before the queueing
  leaves them unqueued: scanned, and counted by fsck, whose ``--repair`` indexes them.
* :class:`BackgroundIndexer` (a thread of the server process; ``mailadmin index run`` for a
  store no server serves) reads the queue, indexes each mailbox's messages in batches --
  the text extracted outside any transaction, then one :meth:`TextIndex.put_many` -- and
  deletes the cells it has dealt with.
* SEARCH needs none of it to be right: a message without its index marker is scanned
  (:mod:`.textindex`), so a message appended a moment ago is found at once, and one whose
  process died before the indexer came is found too, then indexed when the indexer gets to
  its queue cell.

Races, each closed by an order of steps (docs/decisions/0026):

* A queued UID above the mailbox's visible watermark is an append still in flight: left
  queued.  At or below it and without a visible message (abandoned, expunged, moved away):
  its cell is deleted, nothing indexed.
* An expunge between the indexer's read and its write would leave an entry for a gone
  message: after writing, the indexer reads the batch's rows again and removes the entries
  of those no longer there (an expunge deletes rows before it removes index entries, so one
  of the two removals always comes after the write).
* A crash of the indexer between its index write and the queue deletion indexes the batch
  again next time (a put replaces an entry).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from .backends.base import Backend, encode_counter
from .errors import Expunged, MailStoreError
from .schema import TEXT_QUEUE

log = logging.getLogger(__name__)

BATCH = 32
"""Messages indexed per transaction.  On the embedded store a batch holds the write lock
while FTS5 takes its texts (0.4-1 ms per 10 KiB message on this 2-core machine under load):
32 keep an append that waits for it to ~30 ms, and still share FTS5's segment flush at each
commit.  A batch of 100 held the lock 100 ms and cost appends a fifth of their rate
(bench/RESULTS.md)."""

PASS_ROWS = 100
"""Queue rows (mailboxes) read per pass; the next pass goes on after the last one read."""

INTERVAL = 0.5
"""Seconds between passes: the indexer's lag behind appends, and what lets a batch gather
under load (one pass indexes what arrived during the last half second)."""

_FAMILY = b"q"


def _cell(uid: int) -> bytes:
    return b"q:" + uid.to_bytes(4, "big")


class TextQueue:
    """The messages waiting for the background indexer, per mailbox (``JAMES_TEXT_QUEUE``)."""

    def __init__(self, backend: Backend):
        self.table = backend.table(TEXT_QUEUE.name)
        self._cursor = b""

    def increments(self, mailbox_id: bytes, uid: int) -> list:
        """What an append adds to its counting call (Messages.count_also) to queue ``uid``."""
        return [(TEXT_QUEUE.name, mailbox_id, {_cell(uid): 1})]

    def add(self, mailbox_id: bytes, uids: Iterable[int]) -> None:
        """Queue messages stored otherwise than by an append (copies, moves)."""
        cells = {_cell(uid): encode_counter(1) for uid in uids}
        if cells:
            self.table.put(mailbox_id, cells)

    def pending(self, rows: int = PASS_ROWS) -> list[tuple[bytes, list[int]]]:
        """Up to ``rows`` mailboxes with queued messages, as (mailbox id, ascending UIDs),
        going round the table: each call starts after the last mailbox the previous one
        returned, so a mailbox that stays queued (an append in flight) starves no other."""
        found = list(self.table.scan(start=self._cursor, columns=[_FAMILY],
                                     limit=rows))
        if len(found) < rows and self._cursor:
            seen = {key for key, _ in found}
            found += [(k, c) for k, c in self.table.scan(start=b"", stop=self._cursor,
                                                         columns=[_FAMILY],
                                                         limit=rows - len(found))
                      if k not in seen]
        self._cursor = found[-1][0] + b"\x00" if len(found) >= rows else b""
        return [(key, sorted(int.from_bytes(col[2:], "big") for col in cells))
                for key, cells in found if cells]

    def done(self, mailbox_id: bytes, uids: Iterable[int]) -> None:
        cells = [_cell(uid) for uid in uids]
        if cells:
            self.table.delete(mailbox_id, cells)

    def drop(self, mailbox_id: bytes) -> None:
        """Forget a deleted mailbox's queue."""
        self.table.delete(mailbox_id)

    def count(self) -> int:
        """Messages queued in the whole store (``mailadmin index run``, tests)."""
        return sum(len(cells) for _key, cells in self.table.scan(start=b"",
                                                                columns=[_FAMILY]))


class BackgroundIndexer:
    """Indexes queued messages in batches: :meth:`run_once` for one pass, :meth:`start` for a
    thread that makes a pass every ``interval`` seconds until :meth:`stop`.

    ``store`` is the :class:`~.store.MailStore`, with its text index enabled; ``queue`` its
    queue (by default ``store.text.queue``, set by mode ``background``).  Any number of
    indexers may run against one store (several server processes, ``mailadmin index run``):
    they may index a message twice, never wrongly."""

    def __init__(self, store, batch: int = BATCH, interval: float = INTERVAL,
                 queue: TextQueue | None = None):
        queue = queue or store.text.queue
        if queue is None or not store.text.enabled:
            raise ValueError("the background indexer needs text_index = background")
        self.store = store
        self.text = store.text
        self.queue = queue
        self.batch = batch
        self.interval = interval
        self.polite = True
        self.indexed = 0
        """Messages indexed since this indexer was made (metrics, tests)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one pass -----------------------------------------------------------------------------

    def run_once(self) -> int:
        """Index what is queued now (up to PASS_ROWS mailboxes); return how many messages
        got an entry.  Raises MailStoreError if the store fails (queued work stays)."""
        done = 0
        for mailbox_id, uids in self.queue.pending():
            if self._stop.is_set():
                break   # stopping: what is left stays queued for the next start
            done += self.index_mailbox(mailbox_id, uids)
        self.indexed += done
        return done

    def run_until_empty(self, progress: Callable[[int], None] | None = None) -> int:
        """Passes until a pass finds nothing it can index (``mailadmin index run``)."""
        total = 0
        while True:
            done = self.run_once()
            total += done
            if progress is not None:
                progress(total)
            if not done:
                return total

    def index_mailbox(self, mailbox_id: bytes, uids: list[int]) -> int:
        store = self.store
        if store.mailboxes.load(mailbox_id) is None:  # deleted, or being deleted
            self.queue.drop(mailbox_id)
            return 0
        visible = store.messages.visible_uid(mailbox_id)
        ready = [uid for uid in uids if uid <= visible]  # above: an append in flight
        done = 0
        for start in range(0, len(ready), self.batch):
            if self._stop.is_set():
                # A pass may hold thousands of messages (a backlog after a burst of
                # deliveries); the server's shutdown waits for this thread, so it stops
                # after the batch in progress, not the pass.
                break
            done += self._index_batch(mailbox_id, ready[start:start + self.batch], visible)
        return done

    def _index_batch(self, mailbox_id: bytes, uids: list[int], visible: int) -> int:
        from .messages import BODY, HEADER, SUMMARY
        messages = self.store.messages
        views = messages.get(mailbox_id, uids, [*SUMMARY, HEADER, BODY], visible=visible)
        entries: dict[int, dict | None] = {}
        for view in views:
            # The text is read and extracted outside any transaction: the write lock is held
            # only for the index write below.
            try:
                # Let go of the GIL between messages: an append returning from its fsync
                # then waits for at most one message's extraction, not the whole batch's.
                time.sleep(0)
                entries[view.uid] = self.text.docs_of_view(view)
            except Expunged:
                continue  # expunged since it was listed: nothing to index, nothing to remove
            except MailStoreError:
                raise  # the store is failing: the batch stays queued
            except Exception as exc:  # noqa: BLE001 - unreadable text: scanned for good
                log.warning("text index: message %d not indexable: %s", view.uid, exc)
                entries[view.uid] = None
        if entries:
            started = time.monotonic()
            self.text.index.put_many(mailbox_id, entries)
            held = time.monotonic() - started
            # Expunged meanwhile?  Then this write may have come after the expunge's removal.
            present = {v.uid for v in messages.get(mailbox_id, list(entries), [])}
            gone = [uid for uid in entries if uid not in present]
            if gone:
                self.text.index.remove(mailbox_id, gone)
        self.queue.done(mailbox_id, uids)
        if entries and self.polite:
            # As long again without the write lock: a writer that found it taken polls for it
            # with SQLite's busy handler (sleeps of 1, 2, 5, 10, 15 ms ...), and must not find
            # it taken again by the next batch each time it looks.
            self._stop.wait(held)
        return sum(1 for docs in entries.values() if docs is not None)

    # -- the thread ---------------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="text-indexer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the batch in progress (queued work stays queued)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        wait = self.interval
        try:
            while not self._stop.wait(wait):
                try:
                    self.run_once()
                    wait = self.interval
                except Exception as exc:  # noqa: BLE001 - the store is failing: retry later
                    log.warning("text index: background pass failed: %s", exc)
                    wait = min(max(wait * 2, self.interval), 30.0)
        finally:
            release = getattr(self.store.backend, "release_thread", None)
            if release is not None:
                release()
