"""A mailbox's index: its UID list and the flags SELECT needs, without reading every row.

An IMAP session numbers messages by position in the mailbox's UID list, and SELECT reports
how many there are and the first unseen one (RFC 3501 6.3.1).  Reading that from the message
rows costs one row per message: about half a second at 100,000 messages.  Instead (docs/
decisions/0009-change-log-and-checkpoints.md):

* A :class:`MailboxIndex` holds the UIDs, the unseen UIDs, those with \\Deleted, \\Flagged,
  \\Answered or \\Draft, the UIDs carrying each keyword, the keywords in use and each
  message's MODSEQ, valid as of two marks: the UID watermark and the change-log watermark it
  was read at.  That is every stored flag of every message, so a FETCH of FLAGS, UID and
  MODSEQ is answered from it without a row read (RFC 3501 6.4.5, RFC 7162 3.1.4.2).
* It is brought up to date from those marks by a :class:`Delta`: one bounded scan of the UIDs
  above the old watermark, plus the rows of the UIDs the change log names since the old log
  mark.  The cost is that of the change, not of the mailbox.
* A compact copy, the *checkpoint*, is kept in ``JAMES_CHANGES`` (one row, one put, so never
  torn), so a process that has never opened the mailbox starts from it, not from the rows.
  Whoever has caught up over more than ``checkpoint_after`` messages writes a fresh one, and
  trims the log entries older than it by ``keep_log`` numbers.
* Each process keeps the indexes of the mailboxes it opened lately, so a second SELECT costs
  one get of the marks when nothing changed.

The message rows remain the truth.  Everything here is derived, re-read on doubt (a trimmed
log, a checkpoint that does not decode), and may be deleted at any time.
"""

from __future__ import annotations

import base64
import bisect
import json
import threading
import zlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from . import keys
from .backends.base import Backend, decode_counter
from .changelog import LOGMARK, LOGSEQ, ChangeLog, pack_uids, unpack_uids
from .mailboxes import MODSEQ, UID, VISIBLE, Mailbox
from .messages import FLAGS, Messages
from .modseqs import Point, Points
from .records import Flags
from .schema import CHANGES, MAILBOXES

META = b"k:meta"
UIDS = b"k:uids"
UNSEEN = b"k:unseen"
TRACKED = ("\\Deleted", "\\Flagged", "\\Answered", "\\Draft")
"""System flags whose UIDs an index keeps (besides the unseen ones): EXPUNGE needs \\Deleted,
and SEARCH on any system flag is then answered without reading rows."""
FLAG_CELLS = {flag: b"k:" + flag[1:].lower().encode() for flag in TRACKED}
MODSEQS = b"k:modseqs"
TAGGED = b"k:tagged"
CHECKPOINT_VERSION = 3
"""3: per-message MODSEQs and keywords (k:modseqs, k:tagged); an older checkpoint does not
decode, and the index is rebuilt from the rows once."""
CHECKPOINT_EVERY = 1000
"""Delivery refreshes a mailbox's checkpoint each time a UID is a multiple of this."""
SMALL_CHANGE = 64
"""Up to this many UIDs removed at once are found by bisection; more, by one pass."""
GET_BATCH = 500
"""Rows per multi-get when re-reading the rows a change log names."""
SCAN_ABOVE = 5000
"""Above this many rows to re-read, one bounded scan of their UID range instead."""


class Marks(NamedTuple):
    """Where a mailbox stands: every change moves ``visible`` (new messages) or ``logmark``
    (flag changes, expunges); ``modseq`` is its highest MODSEQ."""

    modseq: int
    visible: int
    logmark: int


@dataclass
class Delta:
    """What changed in a mailbox between two sets of marks."""

    marks: Marks
    new: list[tuple[int, Flags]] = field(default_factory=list)      # ascending UIDs
    changed: list[tuple[int, Flags]] = field(default_factory=list)  # still there, re-read
    gone: set[int] = field(default_factory=set)                     # no longer visible

    @property
    def size(self) -> int:
        return len(self.new) + len(self.changed) + len(self.gone)


def remove_parallel(uids: array, values: array, gone: set[int]) -> tuple[array, array]:
    """:func:`remove_sorted` for ``uids`` and an array of one value per UID (same positions)."""
    if len(gone) > SMALL_CHANGE:
        kept = [(u, v) for u, v in zip(uids, values, strict=True) if u not in gone]
        return array("Q", (u for u, _ in kept)), array("Q", (v for _, v in kept))
    for uid in gone:
        i = bisect.bisect_left(uids, uid)
        if i < len(uids) and uids[i] == uid:
            del uids[i]
            del values[i]
    return uids, values


def remove_sorted(uids: array, gone: set[int]) -> array:
    """``uids`` (ascending) without ``gone``: a few found by bisection and deleted in place,
    many by one pass (which returns a new array)."""
    if len(gone) > SMALL_CHANGE:
        return array("Q", (u for u in uids if u not in gone))
    for uid in gone:
        i = bisect.bisect_left(uids, uid)
        if i < len(uids) and uids[i] == uid:
            del uids[i]
    return uids


class UidSet:
    """A set of UIDs kept as a sorted ``array('Q')``: 8 bytes a UID, where a Python set of ints
    takes about 70.  Every session holds one per tracked flag of its mailbox, and a junk folder
    with 100,000 unseen messages would otherwise cost each of them 7 MB."""

    __slots__ = ("_uids",)

    def __init__(self, uids=()):
        self._uids = array("Q", sorted(set(uids)))

    @classmethod
    def _wrap(cls, sorted_uids: array) -> UidSet:
        out = cls.__new__(cls)
        out._uids = sorted_uids
        return out

    def _find(self, uid: int) -> int:
        return bisect.bisect_left(self._uids, uid)

    def __contains__(self, uid: int) -> bool:
        i = self._find(uid)
        return i < len(self._uids) and self._uids[i] == uid

    def add(self, uid: int) -> None:
        uids = self._uids
        if not uids or uid > uids[-1]:
            uids.append(uid)   # the common case: a new message
            return
        i = self._find(uid)
        if uids[i] != uid:
            uids.insert(i, uid)

    def discard(self, uid: int) -> None:
        i = self._find(uid)
        if i < len(self._uids) and self._uids[i] == uid:
            del self._uids[i]

    def difference_update(self, gone: set[int]) -> None:
        self._uids = remove_sorted(self._uids, gone)

    def first(self) -> int:
        return self._uids[0]

    def copy(self) -> UidSet:
        return UidSet._wrap(array("Q", self._uids))

    def __len__(self) -> int:
        return len(self._uids)

    def __iter__(self):
        return iter(self._uids)

    def __eq__(self, other) -> bool:
        if isinstance(other, UidSet):
            return self._uids == other._uids
        if isinstance(other, (set, frozenset)):
            return set(self._uids) == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"UidSet({list(self._uids)!r})"


class MailboxIndex:
    """UIDs (ascending) with each one's MODSEQ, the unseen UIDs and those with each of the
    ``TRACKED`` system flags, the UIDs carrying each keyword, and the keywords in use (a
    superset of those carried: a keyword once announced stays in use), as of ``marks``."""

    def __init__(self, marks: Marks, uids: array | None = None, unseen: UidSet | None = None,
                 flagged: dict[str, UidSet] | None = None, keywords: set[str] | None = None,
                 modseqs: array | None = None, tagged: dict[str, UidSet] | None = None):
        self.marks = marks
        self.uids = uids if uids is not None else array("Q")
        # MODSEQ of the message at the same position (a message's flag cell carries its
        # MODSEQ: written with the row at append/copy, raised by each flag change).
        self.modseqs = modseqs if modseqs is not None else array("Q", bytes(8 * len(self.uids)))
        self.unseen = unseen if unseen is not None else UidSet()
        flagged = flagged or {}
        self.flagged = {flag: flagged.get(flag) or UidSet() for flag in TRACKED}
        self.tagged: dict[str, UidSet] = tagged if tagged is not None else {}
        self.keywords = keywords if keywords is not None else set()
        self.keywords.update(self.tagged)

    @property
    def deleted(self) -> UidSet:
        return self.flagged["\\Deleted"]

    def copy(self) -> MailboxIndex:
        return MailboxIndex(self.marks, array("Q", self.uids), self.unseen.copy(),
                            {flag: uids.copy() for flag, uids in self.flagged.items()},
                            set(self.keywords), array("Q", self.modseqs),
                            {kw: uids.copy() for kw, uids in self.tagged.items() if uids})

    def seq_of(self, uid: int) -> int | None:
        i = bisect.bisect_left(self.uids, uid)
        return i + 1 if i < len(self.uids) and self.uids[i] == uid else None

    @property
    def first_unseen(self) -> int | None:
        """Sequence number of the first unseen message (RFC 3501 6.3.1 UNSEEN), if any."""
        return self.seq_of(self.unseen.first()) if self.unseen else None

    def note_flags(self, uid: int, flags: Flags) -> None:
        """Record a message's current flags (its UID must be in the list)."""
        i = bisect.bisect_left(self.uids, uid)
        if i < len(self.uids) and self.uids[i] == uid:
            self.modseqs[i] = flags.modseq
        if flags.seen:
            self.unseen.discard(uid)
        else:
            self.unseen.add(uid)
        names = flags.names
        for flag, uids in self.flagged.items():
            if flag in names:
                uids.add(uid)
            else:
                uids.discard(uid)
        for keyword, uids in self.tagged.items():
            if keyword not in names:
                uids.discard(uid)
        for name in names:
            if not name.startswith("\\"):
                self._tag(name, uid)

    def _tag(self, keyword: str, uid: int) -> None:
        uids = self.tagged.get(keyword)
        if uids is None:
            uids = self.tagged[keyword] = UidSet()
        uids.add(uid)
        self.keywords.add(keyword)

    def add(self, uid: int, flags: Flags) -> None:
        """Append a new message (its UID above every UID in the list)."""
        self.uids.append(uid)
        self.modseqs.append(flags.modseq)
        # Above every UID, so in no set yet: only the sets it joins change (a checkpoint
        # refresh adds a thousand at a time; note_flags' discards were half its work).
        if not flags.seen:
            self.unseen.add(uid)
        if flags.names:
            for flag, uids in self.flagged.items():
                if flag in flags.names:
                    uids.add(uid)
            for name in flags.names:
                if not name.startswith("\\"):
                    self._tag(name, uid)

    def remove(self, gone: set[int]) -> None:
        if not gone:
            return
        self.uids, self.modseqs = remove_parallel(self.uids, self.modseqs, gone)
        self.unseen.difference_update(gone)
        for uids in self.flagged.values():
            uids.difference_update(gone)
        for uids in self.tagged.values():
            uids.difference_update(gone)

    def flags_of(self, uids: Sequence[int]) -> list[tuple[int, int, frozenset[str], int]]:
        """(sequence number, UID, stored flags, MODSEQ) of each of ``uids`` in the list, in
        the order given (those not in it left out): what a FETCH of FLAGS and MODSEQ shows
        (RFC 3501 7.4.2, RFC 7162 3.1.4.2), from the index alone."""
        members: dict[int, list[str]] = {}
        named = [*self.flagged.items(), *self.tagged.items()]
        if len(uids) * 16 < sum(len(s) for _, s in named):
            for uid in uids:  # few messages of a big index: look each one up
                members[uid] = [flag for flag, s in named if uid in s]
        else:
            wanted = set(uids)
            for flag, s in named:
                for uid in s:
                    if uid in wanted:
                        members.setdefault(uid, []).append(flag)
        unseen = self.unseen
        if len(uids) * 16 >= len(unseen):
            unseen = set(unseen)  # one pass, then cheaper lookups than bisection
        out = []
        all_uids, modseqs = self.uids, self.modseqs
        n = len(all_uids)
        for uid in uids:
            i = bisect.bisect_left(all_uids, uid)
            if i == n or all_uids[i] != uid:
                continue
            names = members.get(uid, [])
            if uid not in unseen:
                names = [*names, "\\Seen"]
            out.append((i + 1, uid, _interned(names), modseqs[i]))
        return out

    def apply(self, delta: Delta) -> None:
        self.remove(delta.gone)
        for uid, flags in delta.changed:
            if self.seq_of(uid) is not None:
                self.note_flags(uid, flags)
        last = self.uids[-1] if self.uids else 0
        for uid, flags in delta.new:
            if uid > last:
                self.add(uid, flags)
                last = uid
            elif self.seq_of(uid) is not None:
                self.note_flags(uid, flags)
        self.marks = delta.marks

    # -- the checkpoint's cells ---------------------------------------------------------------

    def encode(self) -> dict[bytes, bytes]:
        meta = {"v": CHECKPOINT_VERSION, "modseq": self.marks.modseq,
                "visible": self.marks.visible, "logmark": self.marks.logmark,
                "count": len(self.uids), "keywords": sorted(self.keywords)}
        cells = {META: json.dumps(meta).encode(), UIDS: pack_uids(self.uids),
                 UNSEEN: pack_uids(self.unseen),
                 MODSEQS: zlib.compress(self.modseqs.tobytes(), 1),
                 TAGGED: json.dumps({kw: base64.b64encode(pack_uids(uids)).decode()
                                     for kw, uids in sorted(self.tagged.items()) if uids
                                     }).encode()}
        cells.update({FLAG_CELLS[flag]: pack_uids(uids) for flag, uids in self.flagged.items()})
        return cells

    @classmethod
    def decode(cls, row: dict[bytes, bytes]) -> MailboxIndex | None:
        """The checkpoint in ``row``, or None if there is none or it cannot be trusted."""
        try:
            meta = json.loads(row[META])
            if meta.get("v") != CHECKPOINT_VERSION:
                return None
            uids = unpack_uids(row.get(UIDS, b""))
            modseqs = array("Q")
            modseqs.frombytes(zlib.decompress(row[MODSEQS]))
            if len(uids) != meta["count"] or len(modseqs) != len(uids):
                return None
            flagged = {flag: UidSet._wrap(unpack_uids(row.get(cell, b"")))
                       for flag, cell in FLAG_CELLS.items()}
            tagged = {kw: UidSet._wrap(unpack_uids(base64.b64decode(packed)))
                      for kw, packed in json.loads(row[TAGGED]).items()}
            return cls(Marks(meta["modseq"], meta["visible"], meta["logmark"]), uids,
                       UidSet._wrap(unpack_uids(row.get(UNSEEN, b""))), flagged,
                       set(meta["keywords"]), modseqs, tagged)
        except (KeyError, ValueError, TypeError, AttributeError, zlib.error):
            return None


_FLAG_SETS: dict[tuple[str, ...], frozenset[str]] = {}


def _interned(names: list[str]) -> frozenset[str]:
    """``names`` as a frozenset shared with every other message with the same flags (a
    mailbox holds few distinct flag sets; renderers cache by them)."""
    key = tuple(names)
    found = _FLAG_SETS.get(key)
    if found is None:
        if len(_FLAG_SETS) > 4096:
            _FLAG_SETS.clear()
        found = _FLAG_SETS[key] = frozenset(names)
    return found


def _not_behind(a: Marks, b: Marks) -> bool:
    """Whether ``a`` is at or past ``b`` in both watermarks."""
    return a.visible >= b.visible and a.logmark >= b.logmark


class Indexes:
    """Opening mailbox indexes and computing deltas, with a per-process cache."""

    def __init__(self, backend: Backend, messages: Messages, changelog: ChangeLog,
                 cache_size: int = 64, checkpoint_after: int = 1000, keep_log: int = 10000):
        self.table = backend.table(CHANGES.name)
        self.rows = backend.table(MAILBOXES.name)
        self.messages = messages
        self.log = changelog
        self.cache_size = cache_size
        self.checkpoint_after = checkpoint_after
        self.keep_log = keep_log
        self._cache: OrderedDict[bytes, MailboxIndex] = OrderedDict()
        # The marks of each cached mailbox's stored checkpoint, as last seen: how far behind
        # it is decides when to write a fresh one.
        self._stored: dict[bytes, Marks] = {}
        self._lock = threading.Lock()
        self.points = Points(backend)

    def marks(self, mailbox_ids: Sequence[bytes]) -> dict[bytes, Marks]:
        """The marks of each mailbox, in one round trip (the IDLE poller's tick).  A change
        log stuck behind a dead writer is nudged on the way (changelog.ChangeLog.nudge)."""
        rows = self.rows.rows(list(mailbox_ids), [MODSEQ, VISIBLE, UID, LOGSEQ, LOGMARK])
        out = {}
        for mailbox_id, row in rows:
            top, mark = decode_counter(row.get(LOGSEQ)), decode_counter(row.get(LOGMARK))
            if top > mark:
                self.log.nudge(mailbox_id, top, mark)
            marks = out[mailbox_id] = Marks(decode_counter(row.get(MODSEQ)),
                                            decode_counter(row.get(VISIBLE)), mark)
            # One row read: a point for CONDSTORE/QRESYNC, quiet if nothing was in flight.
            self.points.note(mailbox_id, Point(
                *marks, quiet=top == mark and decode_counter(row.get(UID)) == marks.visible))
        return out

    def peek(self, mailbox_id: bytes) -> Marks | None:
        """The mailbox's marks from one row read that writes nothing: None when the mailbox
        row is gone or a change is in flight (its log entry not yet closed), for which
        :meth:`marks` is the call (it may nudge a stuck log)."""
        for _key, row in self.rows.rows([mailbox_id], [MODSEQ, VISIBLE, UID, LOGSEQ, LOGMARK]):
            mark = decode_counter(row.get(LOGMARK))
            if decode_counter(row.get(LOGSEQ)) > mark:
                return None
            return Marks(decode_counter(row.get(MODSEQ)), decode_counter(row.get(VISIBLE)), mark)
        return None

    def highest_modseq(self, mailbox_id: bytes, marks: Marks, keep: bool = False) -> int:
        """The HIGHESTMODSEQ a view at ``marks`` may report (modseqs.py): every change with
        a MODSEQ up to it is visible there.  At least 1 (RFC 7162 mod-sequence-value).
        ``keep``: it goes to a client, who may come back with it to another process; store
        its point."""
        point = self.points.highest(mailbox_id, marks.visible, marks.logmark)
        if point is None:
            return 1
        if keep:
            self.points.keep(mailbox_id, point)
        return max(1, point.modseq)

    def _current(self, mailbox_id: bytes) -> Marks:
        return self.marks([mailbox_id]).get(mailbox_id, Marks(0, 0, 0))

    def delta(self, mailbox: Mailbox, since: Marks, now: Marks | None = None) -> Delta | None:
        """What changed since ``since`` (None if the log no longer reaches back that far)."""
        if now is None or not _not_behind(now, since):
            # ``now`` may have been read before the checkpoint or cached copy that ``since``
            # belongs to was written; marks only grow, so marks read after it are not behind.
            now = self._current(mailbox.id)
            if not _not_behind(now, since):
                return None  # the mailbox row is gone: nothing to catch up from
        delta = Delta(now)
        if now.visible > since.visible:
            delta.new = list(self.messages.uid_flags(mailbox.id, now.visible,
                                                     since.visible + 1))
        touched = self.log.changed_uids(mailbox.id, since.logmark, now.logmark)
        if touched is None:
            return None
        wanted = sorted(u for u in touched if u <= since.visible)
        if not wanted:
            return delta
        if len(wanted) > SCAN_ABOVE:
            # Many (a STORE on 1:*): one bounded scan of the range beats multi-gets.
            keep = set(wanted)
            views = [v for v in self.messages.scan(mailbox.id, wanted[0], wanted[-1], [FLAGS],
                                                   batch_size=5000, visible=now.visible)
                     if v.uid in keep]
        else:
            views = [v for i in range(0, len(wanted), GET_BATCH)
                     for v in self.messages.get(mailbox.id, wanted[i:i + GET_BATCH], [FLAGS],
                                                visible=now.visible)]
        delta.changed = [(v.uid, v.flags) for v in views]
        delta.gone = set(wanted) - {v.uid for v in views}
        return delta

    def open(self, mailbox: Mailbox) -> MailboxIndex:
        """The mailbox's index as of now: a copy the caller may change."""
        now = self._current(mailbox.id)
        with self._lock:
            cached = self._cache.get(mailbox.id)
        if cached is not None and cached.marks == now:
            self._remember(mailbox.id, cached)
            return cached.copy()
        index = self._catch_up(mailbox, cached.copy() if cached else None, now)
        if index is None:
            # Nothing cached, or our copy is older than the log kept: the stored checkpoint.
            index = self._catch_up(mailbox, self.load_checkpoint(mailbox.id), now)
        if index is None:
            index = self.build(mailbox, now)
        stored = self._stored.get(mailbox.id)
        if stored is None or (index.marks.visible - stored.visible
                              + index.marks.logmark - stored.logmark) >= self.checkpoint_after:
            self.save_checkpoint(mailbox.id, index)
        self._remember(mailbox.id, index)
        return index.copy()

    def _catch_up(self, mailbox: Mailbox, index: MailboxIndex | None, now: Marks
                  ) -> MailboxIndex | None:
        """``index`` brought up to date; None if there is no index or the log no longer
        reaches back to it."""
        if index is None:
            return None
        delta = self.delta(mailbox, index.marks, now)
        if delta is None:
            return None
        index.apply(delta)
        return index

    def refresh_checkpoint(self, mailbox: Mailbox) -> None:
        """Bring the stored checkpoint up to date without caching the index in this process
        (for writers: delivery calls it every ``CHECKPOINT_EVERY`` UIDs, so even a mailbox
        nobody opens keeps a checkpoint close behind)."""
        now = self._current(mailbox.id)
        index = self._catch_up(mailbox, self.load_checkpoint(mailbox.id), now)
        self.save_checkpoint(mailbox.id, index or self.build(mailbox, now))

    def build(self, mailbox: Mailbox, now: Marks) -> MailboxIndex:
        """An index read from the message rows themselves (the commit and flag cells)."""
        index = MailboxIndex(now)
        for uid, flags in self.messages.uid_flags(mailbox.id, now.visible):
            index.add(uid, flags)
        return index

    def load_checkpoint(self, mailbox_id: bytes) -> MailboxIndex | None:
        row = self.table.row(keys.checkpoint_key(mailbox_id),
                             [META, UIDS, UNSEEN, MODSEQS, TAGGED, *FLAG_CELLS.values()])
        index = MailboxIndex.decode(row) if row else None
        if index is not None:
            self._note_stored(mailbox_id, index.marks)
        return index

    def _stored_marks(self, mailbox_id: bytes) -> Marks | None:
        """The marks of the stored checkpoint (None if there is none that decodes)."""
        raw = self.table.row(keys.checkpoint_key(mailbox_id), [META]).get(META)
        try:
            meta = json.loads(raw) if raw is not None else None
            if meta is None or meta.get("v") != CHECKPOINT_VERSION:
                return None
            return Marks(meta["modseq"], meta["visible"], meta["logmark"])
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def save_checkpoint(self, mailbox_id: bytes, index: MailboxIndex) -> None:
        """Write ``index`` as the checkpoint (unless one at least as new is there) and trim
        the log entries more than ``keep_log`` numbers older than the checkpoint."""
        theirs = self._stored_marks(mailbox_id)
        if theirs is not None and _not_behind(theirs, index.marks):
            self._note_stored(mailbox_id, theirs)
            return
        self.table.put(keys.checkpoint_key(mailbox_id), index.encode())
        # Read back: a writer racing us may have put an older checkpoint over ours after its
        # own check.  Trim only behind whichever checkpoint is there now, so that the log
        # always reaches back to it (keep_log leaves slack for a writer still in between).
        after = self._stored_marks(mailbox_id)
        floor = min(index.marks.logmark, after.logmark if after is not None else 0)
        self._note_stored(mailbox_id, after or index.marks)
        self.log.trim(mailbox_id, floor - self.keep_log + 1)

    def _note_stored(self, mailbox_id: bytes, marks: Marks) -> None:
        with self._lock:
            self._stored[mailbox_id] = marks

    def _remember(self, mailbox_id: bytes, index: MailboxIndex) -> None:
        with self._lock:
            held = self._cache.get(mailbox_id)
            # Two threads opening one mailbox: never replace a newer copy by an older one.
            if held is None or held is index or not _not_behind(held.marks, index.marks):
                self._cache[mailbox_id] = index
            self._cache.move_to_end(mailbox_id)
            while len(self._cache) > self.cache_size:
                gone, _ = self._cache.popitem(last=False)
                self._stored.pop(gone, None)

    def forget(self, mailbox_id: bytes) -> None:
        with self._lock:
            self._cache.pop(mailbox_id, None)
            self._stored.pop(mailbox_id, None)


__all__ = ["Delta", "Indexes", "MailboxIndex", "Marks", "UidSet"]
