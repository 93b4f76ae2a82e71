"""MODSEQs for CONDSTORE and QRESYNC (RFC 7162): which HIGHESTMODSEQ may be reported, and what
changed since a client's MODSEQ (docs/decisions/0014-modseq-and-vanished.md).

Every change takes its MODSEQ from the mailbox row's counter *before* it commits (decision
0001), so the counter may be ahead of changes still in flight, and RFC 7162 3.1.2.1 forbids a
HIGHESTMODSEQ that a change with a lower MODSEQ can still follow.  Two facts make it exact:

* Each change takes its MODSEQ *after* the number that shows it in flight -- a new message
  after its UID (the UID watermark ``c:visible`` stays behind ``c:uid`` until it commits), a
  flag change or expunge after its change-log number (``c:logmark`` stays behind ``c:logseq``
  until its entry is closed).  So a read of the mailbox row (one row: atomic on both backends)
  that finds ``c:uid == c:visible`` and ``c:logseq == c:logmark`` -- a *quiet* read -- finds
  every MODSEQ up to ``c:modseq`` committed and visible at those watermarks.
* Any read of the row gives a *point* (modseq, visible, logmark): every change visible at those
  watermarks took its MODSEQ before the read, so is at most ``modseq``.  Hence every change
  with a MODSEQ above a client's value ``m`` lies after a point whose modseq is ``<= m``: a
  message above its UID watermark, or named by a log entry past its log watermark.

The HIGHESTMODSEQ a session reports is the modseq of the latest quiet point at or behind its
view (else the highest stored one); points are kept per process and, when reported to a client,
stored in one row of ``JAMES_CHANGES`` beside the log, so that another process resyncs that
client from there rather than from the beginning.
"""

from __future__ import annotations

import bisect
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from . import keys
from .backends.base import Backend
from .messages import SUMMARY
from .schema import CHANGES

POINT_PREFIX = b"k:p"
_POINT = struct.Struct(">QQ?")
KEEP_POINTS = 64
"""Points remembered per mailbox, in memory and in the stored row."""
GET_BATCH = 500


class Point(NamedTuple):
    modseq: int
    visible: int
    logmark: int
    quiet: bool = False


def points_key(mailbox_id: bytes) -> bytes:
    """The row of a mailbox's stored points: after every log entry of the mailbox (change
    numbers stay below 2**63), so log scans and trims never meet it; dropped with the log."""
    return keys.checkpoint_key(mailbox_id) + b"\xff" * 8 + b"points"


def _not_after(point: Point, visible: int, logmark: int) -> bool:
    return point.visible <= visible and point.logmark <= logmark


class Points:
    """Points seen by this process, and the stored ones, per mailbox."""

    def __init__(self, backend: Backend, cache_size: int = 256):
        self.table = backend.table(CHANGES.name)
        self.cache_size = cache_size
        self._seen: OrderedDict[bytes, list[Point]] = OrderedDict()
        self._stored: dict[bytes, set[int]] = {}
        self._lock = threading.Lock()

    def note(self, mailbox_id: bytes, point: Point) -> None:
        """A read of the mailbox row (Indexes.marks): remember it."""
        with self._lock:
            seen = self._seen.get(mailbox_id)
            if seen is None:
                seen = self._seen[mailbox_id] = []
                while len(self._seen) > self.cache_size:
                    gone, _ = self._seen.popitem(last=False)
                    self._stored.pop(gone, None)
            self._seen.move_to_end(mailbox_id)
            if seen and seen[-1][:3] == point[:3]:
                if point.quiet and not seen[-1].quiet:
                    seen[-1] = point
                return
            seen.append(point)
            seen.sort()
            del seen[:-KEEP_POINTS]

    def _all(self, mailbox_id: bytes, stored: bool) -> list[Point]:
        with self._lock:
            points = list(self._seen.get(mailbox_id, ()))
        if stored:
            points += self.stored(mailbox_id)
        return points

    def highest(self, mailbox_id: bytes, visible: int, logmark: int) -> Point | None:
        """The quiet point with the highest MODSEQ at or behind these watermarks: every change
        up to its MODSEQ is visible there.  None if no point tells."""
        for stored in (False, True):
            found = [p for p in self._all(mailbox_id, stored)
                     if p.quiet and _not_after(p, visible, logmark)]
            if found:
                return max(found)
        return None

    def before(self, mailbox_id: bytes, modseq: int, visible: int, logmark: int) -> Point:
        """The latest point with a modseq at most ``modseq`` and watermarks at most these
        (a zero point when none is known: then everything is looked at)."""
        best = Point(0, 0, 0)
        for stored in (False, True):
            for p in self._all(mailbox_id, stored):
                if p.modseq <= modseq and _not_after(p, visible, logmark) and p > best:
                    best = p
            if best.modseq == modseq and best.modseq:
                break
        return best

    def stored(self, mailbox_id: bytes) -> list[Point]:
        row = self.table.row(points_key(mailbox_id), [b"k"])
        out = []
        for column, value in row.items():
            if column.startswith(POINT_PREFIX) and len(value) == _POINT.size:
                visible, logmark, quiet = _POINT.unpack(value)
                out.append(Point(int.from_bytes(column[len(POINT_PREFIX):], "big"),
                                 visible, logmark, quiet))
        return sorted(out)

    def keep(self, mailbox_id: bytes, point: Point) -> None:
        """Store a point reported to a client (HIGHESTMODSEQ), unless stored already; keep
        the newest ``KEEP_POINTS``."""
        with self._lock:
            done = self._stored.setdefault(mailbox_id, set())
            if point.modseq in done:
                return
        column = POINT_PREFIX + point.modseq.to_bytes(8, "big")
        self.table.put(points_key(mailbox_id),
                       {column: _POINT.pack(point.visible, point.logmark, point.quiet)})
        with self._lock:
            done.add(point.modseq)
            crowded = len(done) > KEEP_POINTS // 2
            if crowded:
                done.clear()
        if crowded:
            stored = self.stored(mailbox_id)
            old = stored[:-KEEP_POINTS]
            if old:
                self.table.delete(points_key(mailbox_id),
                                  [POINT_PREFIX + p.modseq.to_bytes(8, "big") for p in old])


@dataclass
class SinceModseq:
    """What changed in a mailbox after a client's MODSEQ (RFC 7162 3.1.4.1, 3.2.5)."""

    changed: list = field(default_factory=list)  # (uid, Flags): in the view, MODSEQ above
    vanished: list[int] | None = None
    """UIDs expunged after it, ascending -- a superset: an expunge of an earlier MODSEQ may be
    among them (RFC 7162 3.2.5.2 lets the client ignore those); None when the change log no
    longer reaches back that far (the caller then answers from the client's known UIDs)."""


def since_modseq(indexes, mailbox, modseq: int, view) -> SinceModseq:
    """Messages of ``view`` (a session's MailboxIndex) whose flags changed after ``modseq``,
    and the UIDs expunged after it: reads the rows the change log names after the latest
    point at or below ``modseq``, and those of messages newer than it."""
    points, log, messages = indexes.points, indexes.log, indexes.messages
    now = view.marks
    point = points.before(mailbox.id, modseq, now.visible, now.logmark)
    entries = log.entries(mailbox.id, point.logmark, now.logmark)
    out = SinceModseq()
    uids = view.uids
    if entries is None or point.visible == 0:
        # No point to start from, or the log was trimmed past it: every row's flags.
        candidates: Iterable[int] | None = None
    else:
        touched = {u for _m, named in entries for u in named}
        newer = uids[bisect.bisect_right(uids, point.visible):]
        candidates = sorted({u for u in touched if view.seq_of(u) is not None}
                            | set(newer))
    if candidates is None:
        out.changed = [(uid, flags) for uid, flags in messages.uid_flags(mailbox.id,
                                                                          now.visible)
                       if flags.modseq > modseq and view.seq_of(uid) is not None]
    else:
        for i in range(0, len(candidates), GET_BATCH):
            for v in messages.get(mailbox.id, candidates[i:i + GET_BATCH], SUMMARY):
                if v.flags.modseq > modseq:
                    out.changed.append((v.uid, v.flags))
    if entries is not None:
        out.vanished = sorted({u for m, named in entries if m == 0 or m > modseq
                               for u in named if view.seq_of(u) is None})
    return out


__all__ = ["Point", "Points", "SinceModseq", "points_key", "since_modseq"]
