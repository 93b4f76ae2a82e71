"""The per-mailbox change log: which messages a flag change or an expunge touched, in order.

Sessions with a mailbox selected must learn of other sessions' flag changes and expunges
(RFC 3501 7.4.1, 7.2.5); a mailbox's first SELECT in a process must not read every message row.
Both need the changes since some point, in an order every reader agrees on, without scanning
the mailbox.  HBase has no multi-row transactions, so the log is kept the way the UID watermark
is (docs/decisions/0001 and 0009):

* An operation takes a change number from the mailbox row's ``c:logseq`` (an increment) and
  puts its entry *before* it changes any message: state ``P`` (pending), the time, and the UIDs
  it may touch, by check-and-put on absence.
* When done it closes the entry, ``P`` -> ``C``, by check-and-put, then moves the mailbox's
  ``c:logmark`` watermark over every closed entry (check-and-put, as for ``c:visible``).
* Readers read entries only up to ``c:logmark``, and re-read the rows of the UIDs named there:
  the message rows stay the truth, an entry only says where to look.
* A writer that dies leaves its entry pending, or a number with no entry at all.  Once either is
  ``abandon_after`` seconds old, whoever walks the watermark settles it: ``P`` -> ``S`` (readers
  re-read those UIDs, seeing whatever the dead writer did) or absent -> ``X`` (void).  The slow
  writer's own check-and-put on the same cell then fails, and it logs its UIDs again under a new
  number, so nothing it changed after the settling can be missed.

Every number up to the watermark therefore has an entry, and the entries between two marks are
exactly the changes a reader must look at; a gap means old entries were trimmed (after a newer
checkpoint, see index.py), and the reader falls back to a full read.

An entry also carries the MODSEQ its operation took with its change number (a STORE's highest,
an expunge's one), so that QRESYNC (RFC 7162 3.2.5) can tell which expunges came after a
client's MODSEQ; entries written before that, and those settled for a dead writer that took
none, carry none and count as later than any (docs/decisions/0014).
"""

from __future__ import annotations

import itertools
import struct
import threading
import time
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

from . import keys
from .backends.base import Backend, decode_counter, delete_rows, encode_counter
from .errors import Conflict
from .mailboxes import MODSEQ
from .schema import CHANGES, MAILBOXES

LOGSEQ = b"c:logseq"    # last change number allocated (increments only)
LOGMARK = b"c:logmark"  # watermark: every change number <= it has a closed, settled or void entry
ENTRY = b"l:e"

PENDING, CLOSED, SETTLED, VOID = b"P", b"C", b"S", b"X"
_HEAD = struct.Struct(">cQ")


# -- packing UID lists (shared with the checkpoint) --------------------------------------------

def pack_uids(uids: Iterable[int]) -> bytes:
    """Ascending UIDs as zlib of their 8-byte deltas: 100,000 UIDs take ~50 KB."""
    values = array("Q", sorted(set(uids)))
    if not values:
        return b""
    deltas = array("Q", [values[0]])
    deltas.extend(b - a for a, b in zip(values, values[1:], strict=False))
    return zlib.compress(deltas.tobytes(), 1)


def unpack_uids(data: bytes) -> array:
    """The ascending UIDs packed by :func:`pack_uids`, as an ``array('Q')``."""
    if not data:
        return array("Q")
    deltas = array("Q")
    deltas.frombytes(zlib.decompress(data))
    return array("Q", itertools.accumulate(deltas))


_MODSEQ_TAG = b"\x00"
"""Marks a MODSEQ after the head: packed UIDs are zlib data, which never starts with 0."""
_MODSEQ = struct.Struct(">Q")


def encode_entry(state: bytes, at: float, uids: Iterable[int], modseq: int = 0) -> bytes:
    head = _HEAD.pack(state, int(at * 1000))
    if modseq:
        head += _MODSEQ_TAG + _MODSEQ.pack(modseq)
    return head + pack_uids(uids)


def _body(value: bytes) -> tuple[int, bytes]:
    """(MODSEQ or 0, packed UIDs) of an entry after its head."""
    if value[_HEAD.size:_HEAD.size + 1] == _MODSEQ_TAG:
        at = _HEAD.size + 1
        return _MODSEQ.unpack_from(value, at)[0], value[at + _MODSEQ.size:]
    return 0, value[_HEAD.size:]


def decode_entry(value: bytes) -> tuple[bytes, float, array]:
    """(state, time in seconds, UIDs) of a log entry."""
    state, millis = _HEAD.unpack_from(value)
    return state, millis / 1000, unpack_uids(_body(value)[1])


def entry_modseq(value: bytes) -> int:
    """The MODSEQ an entry's operation took with its number; 0 when it carries none."""
    return _body(value)[0]


class ChangeLog:
    def __init__(self, backend: Backend, clock: Callable[[], float] = time.time,
                 abandon_after: float = 10.0):
        self.table = backend.table(CHANGES.name)
        self.rows = backend.table(MAILBOXES.name)
        self.clock = clock
        self.abandon_after = abandon_after
        # Change numbers seen allocated but without an entry: (mailbox, number) -> first seen.
        # And watermarks seen stuck behind the last allocated number: mailbox -> (mark, since).
        self._gaps: dict[tuple[bytes, int], float] = {}
        self._stuck: dict[bytes, tuple[int, float]] = {}
        self._lock = threading.Lock()

    # -- writing ----------------------------------------------------------------------------

    @contextmanager
    def recording(self, mailbox_id: bytes, uids: Iterable[int],
                  also: Mapping[bytes, int] | None = None) -> Iterator[dict[bytes, int]]:
        """Log a change to ``uids`` of a mailbox around the block that makes it.

        The entry is pending before the block runs and closed after it, also when the block
        fails half-way (readers then re-read the rows and see whatever was done).  ``also``:
        other counters of the mailbox row to add to in the same step as the change number is
        taken (a STORE's MODSEQs: one statement on the embedded store); the block gets their
        new values.
        """
        uids = sorted(set(uids))
        if not uids:
            yield (self.rows.increment_many(mailbox_id, also, returning=tuple(also))
                   if also else {})
            return
        seq, pending, values = self._put_entry(mailbox_id, PENDING, uids, also)
        modseq = values.get(MODSEQ, 0)
        try:
            yield values
        finally:
            closed = encode_entry(CLOSED, self.clock(), uids, modseq)
            if not self.table.check_and_put(keys.change_key(mailbox_id, seq), ENTRY, pending,
                                            ENTRY, closed):
                # A reader settled our entry while we were slow: whatever we changed after
                # that must be logged again, or readers past that number would never see it.
                # (Under a later number with an earlier MODSEQ: QRESYNC's one blind spot,
                # docs/decisions/0014.)
                seq, _, _ = self._put_entry(mailbox_id, CLOSED, uids, modseq=modseq)
            self.advance(mailbox_id, seq)

    def _put_entry(self, mailbox_id: bytes, state: bytes, uids: list[int],
                   also: Mapping[bytes, int] | None = None, modseq: int = 0
                   ) -> tuple[int, bytes, dict[bytes, int]]:
        values: dict[bytes, int] = {}
        for attempt in range(5):
            if also and not attempt:
                # The change number first: from then on the mailbox row shows a change in
                # flight, until the entry is closed (index.py relies on it for HIGHESTMODSEQ).
                values = self.rows.increment_many(mailbox_id, {LOGSEQ: 1, **also},
                                                  returning=(LOGSEQ, *also))
                seq = values.pop(LOGSEQ)
                modseq = values.get(MODSEQ, modseq)
            else:
                seq = self.rows.increment(mailbox_id, LOGSEQ, 1)
            value = encode_entry(state, self.clock(), uids, modseq)
            if self.table.check_and_put(keys.change_key(mailbox_id, seq), ENTRY, None, ENTRY,
                                        value):
                return seq, value, values
            # Voided by a reader because we stalled between the increment and here.
        raise Conflict("could not log the change: change numbers kept being voided")

    # -- the watermark ------------------------------------------------------------------------

    def marks(self, mailbox_id: bytes) -> tuple[int, int]:
        """(last allocated change number, watermark) of a mailbox."""
        row = self.rows.row(mailbox_id, [LOGSEQ, LOGMARK])
        return decode_counter(row.get(LOGSEQ)), decode_counter(row.get(LOGMARK))

    def advance(self, mailbox_id: bytes, target: int | None = None) -> int:
        """Move the watermark over every settled entry it can; return where it stands.

        Never waits: an entry still pending (and younger than ``abandon_after``) stops the walk,
        and its writer moves the watermark on when it closes it.  With ``target`` (the number a
        writer just closed), the common case of no concurrent writer is one check-and-put.
        """
        while True:
            row = self.rows.row(mailbox_id, [LOGSEQ, LOGMARK])
            top, raw_mark = decode_counter(row.get(LOGSEQ)), row.get(LOGMARK)
            mark = decode_counter(raw_mark)
            if mark >= top:
                return mark
            if target is not None and target == mark + 1 == top:
                reach = target
            else:
                reach = self._settled_run(mailbox_id, mark, top)
            if reach == mark:
                return mark
            if self.rows.check_and_put(mailbox_id, LOGMARK, raw_mark, LOGMARK,
                                       encode_counter(reach)):
                if self._gaps:
                    self._forget_gaps(mailbox_id, reach)
                if reach >= top:
                    return reach
                target = None  # more was allocated meanwhile: walk on
            # else someone else moved it: read again

    def _settled_run(self, mailbox_id: bytes, mark: int, top: int) -> int:
        """The highest number n such that every entry in mark+1..n is settled, settling
        entries abandoned by dead writers on the way."""
        start, stop = keys.change_range(mailbox_id, mark + 1, top)
        now = self.clock()
        reach = mark
        self._forget_gaps(mailbox_id, mark)
        # Read lazily and stop at the first entry not settled: while a dead writer holds the
        # watermark back, each walk reads up to it, not the whole growing range behind it.
        entries = self.table.scan(start=start, stop=stop, columns=[ENTRY], batch_size=100)
        for key, row in entries:
            seq = keys.change_key_seq(key)
            while seq > reach + 1:   # numbers allocated without an entry before this one
                if not self._void_gap(mailbox_id, reach + 1, now):
                    return reach
                reach += 1
            value = row[ENTRY]
            if value[:1] == PENDING:
                state, at, uids = decode_entry(value)
                if now - at < self.abandon_after:
                    return reach
                if not self.table.check_and_put(key, ENTRY, value, ENTRY,
                                                encode_entry(SETTLED, at, uids,
                                                             entry_modseq(value))):
                    return reach
            reach = seq
        while reach < top and self._void_gap(mailbox_id, reach + 1, now):
            reach += 1
        return reach

    def _void_gap(self, mailbox_id: bytes, seq: int, now: float) -> bool:
        """A number allocated without an entry: void it once it is ``abandon_after`` old
        (as this process has seen it); True if it is void now."""
        with self._lock:
            since = self._gaps.setdefault((mailbox_id, seq), now)
        if now - since < self.abandon_after:
            return False
        if not self.table.check_and_put(keys.change_key(mailbox_id, seq), ENTRY, None, ENTRY,
                                        encode_entry(VOID, now, ())):
            return False  # the writer got there first: look again next time
        with self._lock:
            self._gaps.pop((mailbox_id, seq), None)
        return True

    def _forget_gaps(self, mailbox_id: bytes, mark: int) -> None:
        """Drop the gaps noted for numbers the watermark has passed (their writers filled
        them), so that the record stays as small as what is in flight."""
        with self._lock:
            for gap in [g for g in self._gaps if g[0] == mailbox_id and g[1] <= mark]:
                del self._gaps[gap]

    def nudge(self, mailbox_id: bytes, top: int, mark: int) -> None:
        """Called by readers with the marks they just read: when the watermark has been stuck
        behind allocated numbers for ``abandon_after`` seconds, walk it (settling what a dead
        writer left).  Costs nothing while it moves."""
        if mark >= top:
            with self._lock:
                self._stuck.pop(mailbox_id, None)
            return
        now = self.clock()
        with self._lock:
            seen = self._stuck.get(mailbox_id)
            if seen is None or seen[0] != mark:
                self._stuck[mailbox_id] = (mark, now)
                return
            if now - seen[1] < self.abandon_after:
                return
            self._stuck[mailbox_id] = (mark, now)
        self.advance(mailbox_id)

    # -- reading ------------------------------------------------------------------------------

    def changed_uids(self, mailbox_id: bytes, after: int, upto: int) -> set[int] | None:
        """The UIDs touched by changes ``after+1..upto`` (all at or below the watermark), or
        None when some of those entries were trimmed away."""
        if upto <= after:
            return set()
        start, stop = keys.change_range(mailbox_id, after + 1, upto)
        touched: set[int] = set()
        count = 0
        for _key, row in self.table.scan(start=start, stop=stop, columns=[ENTRY],
                                         batch_size=1000):
            count += 1
            state, _at, uids = decode_entry(row[ENTRY])
            if state != VOID:
                touched.update(uids)
        return touched if count == upto - after else None

    def entries(self, mailbox_id: bytes, after: int, upto: int
                ) -> list[tuple[int, array]] | None:
        """(MODSEQ or 0, UIDs) of the entries ``after+1..upto`` (all at or below the
        watermark) but void ones, or None when some of them were trimmed away."""
        if upto <= after:
            return []
        start, stop = keys.change_range(mailbox_id, after + 1, upto)
        out = []
        count = 0
        for _key, row in self.table.scan(start=start, stop=stop, columns=[ENTRY],
                                         batch_size=1000):
            count += 1
            value = row[ENTRY]
            if value[:1] != VOID:
                modseq, packed = _body(value)
                out.append((modseq, unpack_uids(packed)))
        return out if count == upto - after else None

    def first_kept(self, mailbox_id: bytes, upto: int) -> int:
        """The lowest change number still in the log at or below ``upto`` (0: none)."""
        if upto < 1:
            return 0
        start, stop = keys.change_range(mailbox_id, 1, upto)
        for key, _row in self.table.scan(start=start, stop=stop, columns=[ENTRY], limit=1):
            return keys.change_key_seq(key)
        return 0

    # -- housekeeping -------------------------------------------------------------------------

    def trim(self, mailbox_id: bytes, below: int) -> int:
        """Delete the entries numbered below ``below``; return how many."""
        if below <= 1:
            return 0
        start, stop = keys.change_range(mailbox_id, 1, below - 1)
        return delete_rows(self.table, start=start, stop=stop, columns=[ENTRY], batch=1000)

    def drop(self, mailbox_id: bytes) -> None:
        """Delete a mailbox's log and checkpoint (the mailbox is being deleted)."""
        delete_rows(self.table, prefix=mailbox_id, batch=1000)


__all__ = ["ChangeLog", "LOGMARK", "LOGSEQ", "pack_uids", "unpack_uids"]
