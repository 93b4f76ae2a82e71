"""Message content in numbered-column chunks, behind streaming file-like wrappers.

A message's bytes live in one row of ``JAMES_CONTENT``: cells ``c:1``, ``c:2``, ... of at most
``chunk_size`` bytes each, ``m:info`` (size, chunk count, chunk size) and ``r:refs`` (how many
message rows point here).  Apache James kept 1 KiB chunks and made one round trip per chunk, and
its reader returned byte 0xFF as end-of-stream; here a chunk is 64 KiB to 1 MiB (default 256 KiB,
see docs/decisions/0002-chunk-size.md), a read fetches every chunk it needs in one ``get``, and
the reader works on ``bytes`` objects, never on signed bytes.

Ordering: the chunks and ``m:info`` are written before any message row refers to the content,
so a message can never be seen without its content.  ``m:info`` is written last, with the final
chunk, so content without it was never finished (fsck removes it).

Release: when the last reference goes, the row is not deleted at once.  A session that read a
message row just before another session expunged it may still be reading the content (a FETCH
streaming a large body reads for as long as its client takes), so the content is *released*: a
release record is written, and the row is deleted once ``grace`` seconds have passed, by the
next release, by the IMAP server's periodic sweep or by fsck (docs/decisions/0011).  A reader
that still finds a chunk gone (past the grace period) raises :class:`~.errors.Expunged`.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable

import orjson

from . import keys
from .backends.base import Mutation, Table, decode_counter, encode_counter
from .errors import BackendUnavailable, Expunged
from .keys import new_id, new_ordered_id

MIN_CHUNK = 64 * 1024
MAX_CHUNK = 1024 * 1024
DEFAULT_CHUNK = 256 * 1024
INFO = b"m:info"
STARTED = b"m:t"
REFS = b"r:refs"
RELEASED = b"i:released"
"""The cell of a release record (JAMES_INTENTS): the content id, for people reading the table."""
DEFAULT_GRACE = 3600.0
"""Seconds released content stays readable: longer than any FETCH of one message should take,
even a 64 MiB body to a slow client (docs/decisions/0011)."""
SWEEP_BATCH = 500
"""Release records handled per sweep call (one scan, one multi-get, two batched deletes)."""
SWEEP_EVERY = 60.0
"""Seconds at least between the sweeps releases make (a scan over HBase is a few round trips:
not one per expunge)."""
RECLAIM_EVERY = 3600.0
"""Seconds at least between the server's walks over the files of large values for those no
content row refers to (Table.reclaim; decision 0028): a walk lists every such file."""


def chunk_column(index: int) -> bytes:
    """Column of chunk ``index`` (1-based, decimal, as Apache James named them)."""
    return b"c:%d" % index


def check_chunk_size(size: int) -> int:
    if not MIN_CHUNK <= size <= MAX_CHUNK:
        raise ValueError(f"chunk size must be between {MIN_CHUNK} and {MAX_CHUNK} bytes")
    return size


def _new_content_id(table: Table) -> bytes:
    # Ascending ids where the backend writes them cheaper (the embedded store's B-tree: a
    # random id costs an insert in the middle of a full page), random ones elsewhere.
    return new_ordered_id() if getattr(table, "ordered_keys", False) else new_id()


def _final_cells(size: int, chunks: int, chunk_size: int, refs: int) -> dict[bytes, bytes]:
    """The cells that finish a content row: its info (whose presence says it is complete)
    and its reference count."""
    return {INFO: orjson.dumps({"size": size, "chunks": chunks, "chunk_size": chunk_size}),
            REFS: encode_counter(refs)}


class ChunkWriter(io.RawIOBase):
    """Write a message's bytes; full chunks are put as the buffer fills.

    Call :meth:`commit` to finish and obtain the content id; until then nothing refers to the
    row.  :meth:`abort` removes what was written.  Memory use is at most one chunk.
    """

    def __init__(self, table: Table, chunk_size: int, refs: int, clock: Callable[[], float]):
        super().__init__()
        self.table = table
        self.chunk_size = chunk_size
        self.refs = refs
        self.content_id = _new_content_id(table)
        self.size = 0
        self._clock = clock
        self._buffer = bytearray()
        self._full: bytes | None = None  # a complete chunk held back for commit
        self._chunks = 0
        self._committed = False

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        if self._committed:
            raise ValueError("write to committed content")
        view = memoryview(data).cast("B")
        size = len(view)
        self.size += size
        pos = 0
        # Fill the buffer from a view of ``data`` up to one chunk at a time, never appending a
        # whole piece first: memory stays at the caller's piece + one partial + one new chunk.
        while pos < size:
            need = self.chunk_size - len(self._buffer)
            if not self._buffer and size - pos >= self.chunk_size:
                if pos == 0 and size == self.chunk_size and isinstance(data, bytes):
                    chunk = data  # the streaming case: reads of exactly one chunk, no copy
                else:
                    self._release_held()
                    chunk = bytes(view[pos:pos + self.chunk_size])
                pos += self.chunk_size
                self._hold(chunk)
                continue
            take = view[pos:pos + need]
            self._buffer += take
            pos += len(take)
            if len(self._buffer) == self.chunk_size:
                self._release_held()
                chunk = bytes(self._buffer)
                self._buffer = bytearray()
                self._hold(chunk)
        if self._buffer:  # more follows the held chunk: it is not the last one
            self._release_held()
        return size

    def _release_held(self) -> None:
        if self._full is not None:
            held, self._full = self._full, None
            self._put_chunk(held)

    def _hold(self, chunk: bytes) -> None:
        """Hold the newest full chunk back: if nothing follows it, commit puts it together with
        m:info (one round trip for most messages)."""
        self._release_held()
        self._full = chunk

    def _put_chunk(self, data: bytes, extra: dict[bytes, bytes] | None = None) -> None:
        self._chunks += 1
        cells = {chunk_column(self._chunks): data}
        if self._chunks == 1:
            cells[STARTED] = encode_counter(int(self._clock()))
        if extra:
            cells.update(extra)
            self.table.put(self.content_id, cells)  # completes the content
        else:
            self.table.put_large(self.content_id, cells)

    def commit(self) -> bytes:
        """Write the last chunk with the content's info and reference count; return its id."""
        if self._committed:
            return self.content_id
        if self._full is not None and self._buffer:
            self._put_chunk(self._full)
            self._full = None
        last = self._full if self._full is not None else bytes(self._buffer)
        self._full = None
        chunks = self._chunks + (1 if last else 0)
        extra = _final_cells(self.size, chunks, self.chunk_size, self.refs)
        if last:
            self._put_chunk(last, extra)
        elif self._chunks == 0:  # empty content: no chunk at all
            self.table.put(self.content_id, {STARTED: encode_counter(int(self._clock())), **extra})
        else:
            self.table.put(self.content_id, extra)
        self._buffer = bytearray()
        self._committed = True
        return self.content_id

    def abort(self) -> None:
        """Forget the content: remove every chunk written so far."""
        self._buffer = bytearray()
        self._full = None
        if self._chunks or self._committed:
            self.table.delete(self.content_id)
        self._committed = True


class ChunkReader(io.RawIOBase):
    """A seekable reader over one content row that fetches only the chunks a read needs.

    ``read_ahead`` chunks are fetched per round trip when reading sequentially; a partial read
    at an offset fetches just the chunks that overlap it.  At most ``read_ahead`` chunks are held
    in memory.
    """

    def __init__(self, table: Table, content_id: bytes, size: int, chunk_size: int,
                 read_ahead: int = 2, released: Callable[[bytes], bool] | None = None):
        super().__init__()
        self.table = table
        self.content_id = content_id
        # Asked when a chunk is missing: was the content released (its messages expunged) and
        # deleted, rather than damaged?  Then the read raises Expunged instead of OSError.
        self._released = released
        self.size = size
        self.chunk_size = chunk_size
        self.read_ahead = max(1, read_ahead)
        self._pos = 0
        self._cache: dict[int, bytes] = {}
        self._last_end = -1

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self.size + offset
        else:
            raise ValueError(f"bad whence {whence}")
        if pos < 0:
            raise ValueError("negative seek position")
        self._pos = pos
        return pos

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        memoryview(buffer).cast("B")[:len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        pieces = self.read_pieces(size)
        # One copy at most: a read of exactly one stored chunk returns that chunk itself.
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def read_pieces(self, size: int = -1) -> list[bytes]:
        """Up to ``size`` octets from the current position (all that is left if negative), as
        a list of pieces in order: whole stored chunks where the read covers them (no copy),
        slices of the first and last otherwise.  Empty at the end of the content.

        For streaming a big body (FETCH): the pieces go to the socket as they are, without
        being joined into one more copy."""
        if self._pos >= self.size:
            return []
        end = self.size if size is None or size < 0 else min(self.size, self._pos + size)
        if end <= self._pos:
            return []
        first = self._pos // self.chunk_size + 1
        last = (end - 1) // self.chunk_size + 1
        self._fetch(first, last, sequential=(self._pos == self._last_end))
        out = []
        for index in range(first, last + 1):
            chunk = self._cache[index]
            base = (index - 1) * self.chunk_size
            lo, hi = max(self._pos, base) - base, min(end, base + len(chunk)) - base
            out.append(chunk if lo == 0 and hi == len(chunk) else chunk[lo:hi])
        self._pos = end
        self._last_end = end
        return out

    def readall(self) -> bytes:
        return self.read(-1)

    def _fetch(self, first: int, last: int, sequential: bool) -> None:
        missing = [i for i in range(first, last + 1) if i not in self._cache]
        if not missing:
            return
        total = (self.size + self.chunk_size - 1) // self.chunk_size
        want = list(range(missing[0], last + 1))
        if sequential and len(want) < self.read_ahead:
            want = list(range(missing[0], min(total, missing[0] + self.read_ahead - 1) + 1))
        # Drop what this read does not need, so memory stays at a few chunks.
        self._cache = {i: c for i, c in self._cache.items() if first <= i <= last}
        # Content of several chunks is read as large cells (the embedded store maps its file
        # for them); most mail is one chunk, read as an ordinary row without that set-up.
        get = self.table.large_cells if self.size > self.chunk_size else self.table.row
        cells = get(self.content_id, [chunk_column(i) for i in want])
        for i in want:
            chunk = cells.get(chunk_column(i))
            if chunk is None:
                if self._released is not None and self._released(self.content_id):
                    raise Expunged("message expunged meanwhile: its content was released "
                                   f"({self.content_id.hex()})")
                raise OSError(f"content {self.content_id.hex()} lacks chunk {i}")
            self._cache[i] = chunk


class ContentStore:
    """Writes, reads, reference-counts and releases content rows.

    ``releases`` is the table release records go to (JAMES_INTENTS); without it, or with a
    ``grace`` of 0, content is deleted as soon as its last reference goes (and a reader that
    loses the race gets :class:`~.errors.Expunged`).
    """

    def __init__(self, table: Table, chunk_size: int = DEFAULT_CHUNK, read_ahead: int = 2,
                 clock: Callable[[], float] = time.time, releases: Table | None = None,
                 grace: float = DEFAULT_GRACE):
        self.table = table
        self.chunk_size = check_chunk_size(chunk_size)
        self.read_ahead = read_ahead
        self.clock = clock
        self.releases = releases
        self.grace = grace
        self._next_sweep = 0.0
        self._next_reclaim = 0.0
        # Reference drops the backend refused before they reached it (HBase down while a
        # failed APPEND or delivery gave its reference back): replayed by this process when
        # the backend answers again, so the content does not outlive its last message.  Only
        # drops known unsent are kept: replaying one that may have been applied could free
        # content still referenced.  Lost if the process dies first: fsck then reports it.
        self._undone: dict[bytes, int] = {}
        self._undone_lock = threading.Lock()
        # What a failed APPEND or delivery still owes the store when the store failed again
        # under its clean-up (a gateway outage, issue 16): references to give back, each with
        # a marker of its own so that a replay never drops one twice, and content no row ever
        # referred to, to delete (idempotent).  Replayed by :meth:`retry_owed`, whatever the
        # failure was; lost only if this process dies first.
        self._owed_drops: list[tuple[bytes, int, bytes]] = []
        self._owed_deletes: set[bytes] = set()

    def writer(self, refs: int = 1) -> ChunkWriter:
        """A writer for new content that ``refs`` message rows will point to."""
        self.retry_undone()
        return ChunkWriter(self.table, self.chunk_size, refs, self.clock)

    def retry_undone(self) -> None:
        """Replay reference drops that failed unsent (see __init__); keep those that fail
        unsent again.  Never raises: the caller's own work decides its outcome."""
        self.retry_owed()
        with self._undone_lock:
            if not self._undone:
                return
            undone, self._undone = self._undone, {}
        for content_id, count in undone.items():
            try:
                self._drop(content_id, count)
            except Exception:   # still down (kept again if unsent), or a bug: not the caller's
                pass

    def store(self, data: bytes, refs: int = 1) -> bytes:
        """Store content of at most one chunk in one put; return its id.

        The same row a :class:`ChunkWriter` leaves (``c:1`` unless empty, ``m:t``,
        ``m:info``, ``r:refs``), without its buffering: most messages are this small.
        """
        self.retry_undone()
        if len(data) > self.chunk_size:
            raise ValueError("content larger than a chunk: use a writer")
        content_id = _new_content_id(self.table)
        cells = {STARTED: encode_counter(int(self.clock())),
                 **_final_cells(len(data), 1 if data else 0, self.chunk_size, refs)}
        if data:
            cells[chunk_column(1)] = data
        try:
            self.table.put(content_id, cells)
        except BaseException:
            # A put that failed may still have been applied (a timeout over HBase): leave
            # nothing behind, as ChunkWriter.abort does (again later if the store is down).
            self.discard(content_id)
            raise
        return content_id

    def open(self, content_id: bytes, size: int, chunk_size: int) -> ChunkReader:
        """A reader; it raises :class:`~.errors.Expunged` if the content is deleted under it
        (released more than ``grace`` seconds before the read)."""
        return ChunkReader(self.table, content_id, size, chunk_size, self.read_ahead,
                           self.released)

    def info(self, content_id: bytes) -> dict | None:
        raw = self.table.row(content_id, [INFO]).get(INFO)
        return orjson.loads(raw) if raw else None

    def released(self, content_id: bytes) -> bool:
        """Whether the content has no reference left (its row gone, or going): every message
        that referred to it was expunged.  A row with references is never released."""
        row = self.table.row(content_id, [INFO, REFS])
        return INFO not in row or decode_counter(row.get(REFS)) <= 0

    def incref(self, content_id: bytes) -> bool:
        """Add a reference for a new copy.  False if the content was already being freed.

        A result of 1 means the count had reached 0 (the last message was expunged and the row
        is released): the copy must not go ahead.  The reference just taken is dropped again.
        """
        if self.table.increment(content_id, REFS, 1) > 1:
            return True
        self.decref(content_id)
        return False

    def discard(self, content_id: bytes) -> None:
        """Delete content that no message row ever referred to (its message was refused
        before its row was written), at once: no reader can have reached it, so it needs no
        grace period.  Never raises: a delete the store did not confirm is made again by
        :meth:`retry_owed` (deleting twice is harmless)."""
        try:
            self.table.delete(content_id)
        except Exception:  # the store is failing: owed, replayed when it answers
            with self._undone_lock:
                self._owed_deletes.add(content_id)

    def give_back(self, content_id: bytes, count: int = 1) -> None:
        """Drop ``count`` references that a failed APPEND or delivery took for rows it never
        committed: exactly once, whatever the store answers.  The drop carries a marker cell
        of its own (:meth:`decref_once`), so a drop whose outcome is unknown (the gateway died
        with the call) is replayed by :meth:`retry_owed` until the store confirms it, and the
        replay skips it if it was applied; the marker is removed afterwards.  Never raises.
        (A plain decref could only be replayed when known unsent: one cut off mid-call left
        the references too high, issue 16's gateway-fault loop.)"""
        if count > 0:
            self._give_back(content_id, count,
                            b"r:~" + new_id().hex().encode() + b".give-back")

    def _give_back(self, content_id: bytes, count: int, marker: bytes) -> None:
        try:
            # Content that is not there was never written, or its writes were rolled back
            # with the failed unit of work (the embedded store's group): nothing to give back,
            # and an increment would make a row of it.  Content that is there cannot go
            # meanwhile: the references given back here hold it.
            if INFO not in self.table.row(content_id, [INFO]):
                return
            self.decref_once({content_id: count}, marker)
            self.table.delete(content_id, [marker])
        except Exception:  # the store is failing: owed, replayed when it answers
            with self._undone_lock:
                self._owed_drops.append((content_id, count, marker))

    def owes(self) -> bool:
        """Whether this process still owes the store a give-back or a delete."""
        return bool(self._owed_drops or self._owed_deletes)

    def retry_owed(self) -> None:
        """Replay what :meth:`give_back` and :meth:`discard` could not finish; what fails
        again stays owed.  Never raises."""
        with self._undone_lock:
            if not (self._owed_drops or self._owed_deletes):
                return
            drops, self._owed_drops = self._owed_drops, []
            deletes, self._owed_deletes = self._owed_deletes, set()
        for content_id in deletes:
            self.discard(content_id)
        for content_id, count, marker in drops:
            self._give_back(content_id, count, marker)

    def decref(self, content_id: bytes, count: int = 1) -> int:
        """Drop references; release the content when none is left.  Returns the remaining
        count.  A drop the backend refused unsent is also kept and replayed later."""
        self.retry_undone()
        return self._drop(content_id, count)

    def _drop(self, content_id: bytes, count: int) -> int:
        try:
            left = self.table.increment(content_id, REFS, -count)
        except BackendUnavailable as exc:
            if exc.unsent:
                with self._undone_lock:
                    self._undone[content_id] = self._undone.get(content_id, 0) + count
            raise
        if left <= 0:
            self.release([content_id])
        return left

    def decref_many(self, counts: dict[bytes, int]) -> list[bytes]:
        """Drop ``counts[content_id]`` references of each content; release, in one batch,
        those left with none.  Returns the ids released."""
        freed = [cid for cid, count in counts.items()
                 if self.table.increment(cid, REFS, -count) <= 0]
        self.release(freed)
        return freed

    def decref_once(self, counts: dict[bytes, int], marker: bytes) -> list[bytes]:
        """:meth:`decref_many` as one step of an intent, exactly once per content row.

        ``marker`` is the step's marker cell (``mailboxes.step_column``).  Each row's
        references and its marker change in one call, and rows whose marker is already there
        are skipped, so an intent rolled forward after a crash never drops a reference twice.
        The remaining counts are read afterwards (a value returned by the increment would cost
        a call of its own over HBase, apart from the marker); content left with none is
        released, again if a crash came before the release record (releasing twice is
        harmless: decision 0011).  Returns the ids released.
        """
        ids = list(counts)
        done = {cid for cid, _ in self.table.rows(ids, [marker])}
        for cid in ids:
            if cid not in done:
                # The marker first: HBase applies a batch of increments cell by cell, and a
                # call cut between the two then leaves references too high, never too low.
                self.table.increment_many(cid, {marker: 1, REFS: -counts[cid]})
        freed = [cid for cid, row in self.table.rows(ids, [REFS])
                 if decode_counter(row.get(REFS)) <= 0]
        self.release(freed)
        return freed

    def incref_once(self, counts: dict[bytes, int], marker: bytes) -> None:
        """Add ``counts[content_id]`` references to each content, as one step of an intent:
        exactly once per row, as :meth:`decref_once` drops them."""
        ids = list(counts)
        done = {cid for cid, _ in self.table.rows(ids, [marker])}
        for cid in ids:
            if cid not in done:
                self.table.increment_many(cid, {REFS: counts[cid], marker: 1})

    def forget_steps(self, content_ids: list[bytes], markers: list[bytes]) -> None:
        """Remove an intent's marker cells once the intent itself is gone."""
        if content_ids:
            self.table.retire([Mutation(cid, deletes=markers) for cid in content_ids])

    def release(self, content_ids: list[bytes]) -> None:
        """Content whose last reference is gone: delete it once the grace period is over.

        A release record per content (one batched write), then, at most every
        ``SWEEP_EVERY`` seconds, a sweep of the records whose grace period has ended, so a
        store with expunges keeps itself clean.
        """
        if not content_ids:
            return
        if self.releases is None or self.grace <= 0:
            self.table.mutate_rows([Mutation(cid, delete_row=True) for cid in content_ids])
            return
        now = self.clock()
        self.releases.mutate_rows([Mutation(keys.release_key(int(now), cid),
                                            puts={RELEASED: cid}) for cid in content_ids])
        if now >= self._next_sweep:
            self._next_sweep = now + min(self.grace, SWEEP_EVERY)
            self.sweep()

    def sweep(self, limit: int = SWEEP_BATCH) -> int:
        """Delete content released more than ``grace`` seconds ago; return how many release
        records were handled (at most ``limit``: call again while it returns ``limit``).

        A content row that holds references again (fsck gave it back those of messages that
        still point to it) is kept; its release record goes either way.  Deleting twice (two
        sweepers at once) is harmless.
        """
        self.retry_undone()
        if self.releases is None:
            return 0
        start, stop = keys.release_range(int(self.clock() - self.grace))
        records = [key for key, _ in self.releases.scan(start=start, stop=stop,
                                                        columns=[RELEASED], limit=limit)]
        if not records:
            return 0
        ids = list(dict.fromkeys(keys.release_key_parts(key)[1] for key in records))
        doomed = [cid for cid, row in self.table.rows(ids, [REFS])
                  if decode_counter(row.get(REFS)) <= 0]
        if doomed:
            self.table.mutate_rows([Mutation(cid, delete_row=True) for cid in doomed])
        self.releases.mutate_rows([Mutation(key, delete_row=True) for key in records])
        return len(records)

    def reclaim(self, remove: bool = True) -> int:
        """Free large values no content row refers to any more (Table.reclaim: files a kill
        or a delete inside a grouped transaction left); return how many (would have) gone."""
        return self.table.reclaim(remove=remove)

    def reclaim_now_and_then(self) -> int:
        """:meth:`reclaim`, if RECLAIM_EVERY seconds have passed since this store's last."""
        now = self.clock()
        if now < self._next_reclaim:
            return 0
        self._next_reclaim = now + RECLAIM_EVERY
        return self.reclaim()

    def pending_releases(self) -> dict[bytes, int]:
        """Content released and not yet deleted: content id -> time of its latest release."""
        if self.releases is None:
            return {}
        start, stop = keys.release_range(2**63 - 1)
        out: dict[bytes, int] = {}
        for key, _ in self.releases.scan(start=start, stop=stop, columns=[RELEASED]):
            at, cid = keys.release_key_parts(key)
            out[cid] = max(at, out.get(cid, 0))
        return out

    def refs(self, content_id: bytes) -> int:
        return decode_counter(self.table.row(content_id, [REFS]).get(REFS))
