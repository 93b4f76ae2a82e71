"""The selected mailbox as one session sees it: sequence numbers and pending changes.

RFC 3501 2.3.1.2: message sequence numbers are per session and change only when the session is
told (EXPUNGE); new messages appear at the end (EXISTS).  A session therefore keeps its own
list of UIDs (sequence number = index + 1) and learns of other sessions' changes -- in this
process, another process, or from delivery -- by comparing the mailbox's counters with what it
last saw.  Everything here runs in a worker thread (it calls the store); nothing touches the
network.

Change detection (docs/decisions/0007-imap-change-detection.md): every change to a mailbox
bumps its MODSEQ counter and every new message moves its UID watermark.  When only appends
happened, the MODSEQ delta equals the number of new messages, and one bounded scan of the new
UIDs is enough.  Otherwise (expunge, flag change) the session rescans the commit and flag cells
of the mailbox once and diffs: EXPUNGE for UIDs gone, FETCH FLAGS for flags changed since.
"""

from __future__ import annotations

import bisect
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field

from mailstore.mailboxes import Mailbox
from mailstore.messages import FLAGS
from mailstore.store import MailStore


@dataclass
class Changes:
    """What a refresh found, in the order RFC 3501 wants it reported."""

    expunged_seqs: list[int] = field(default_factory=list)  # descending, current numbering
    exists: int | None = None
    recent: int | None = None
    flags: list[tuple[int, int, frozenset[str], int]] = field(default_factory=list)
    # (seq, uid, flags, modseq)

    def __bool__(self) -> bool:
        return bool(self.expunged_seqs or self.exists is not None or self.flags)


class Snapshots:
    """What SELECT last read of recently selected mailboxes, per process.

    A snapshot is reused only while the mailbox's MODSEQ and UID watermark are exactly what they
    were when it was read, so it can never show a stale view; it only spares a second SELECT of
    an unchanged mailbox (a client reconnecting, several sessions of one user) the scan of
    every UID.  At most ``size`` mailboxes are kept, least recently used dropped first.
    """

    def __init__(self, size: int = 64):
        self.size = size
        self.entries: OrderedDict[bytes, tuple] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, mailbox_id: bytes):
        """((modseq, visible), data) of the last snapshot of a mailbox, or None."""
        with self.lock:
            entry = self.entries.get(mailbox_id)
            if entry is not None:
                self.entries.move_to_end(mailbox_id)
            return entry

    def put(self, mailbox_id: bytes, modseq: int, visible: int, data: tuple) -> None:
        with self.lock:
            self.entries[mailbox_id] = ((modseq, visible), data)
            self.entries.move_to_end(mailbox_id)
            while len(self.entries) > self.size:
                self.entries.popitem(last=False)


class SelectedMailbox:
    """A session's view of one mailbox.  Methods that touch the store run in a thread."""

    def __init__(self, store: MailStore, mailbox: Mailbox, readonly: bool,
                 snapshots: Snapshots | None = None):
        self.store = store
        self.snapshots = snapshots
        self.mailbox = mailbox
        self.readonly = readonly
        self.uids = array("q")
        self.recent: set[int] = set()
        self.known_modseq = 0
        self.known_visible = 0
        self.first_unseen: int | None = None
        self.unseen_count = 0
        self.keywords: set[str] = set()
        # Flag changes this session made and already knows of: uid -> their MODSEQ; and how
        # many other MODSEQs its own operations used (expunges) since the last refresh.
        self.own_flags: dict[int, int] = {}
        self.own_bumps = 0

    # -- opening ----------------------------------------------------------------------------

    def load(self) -> None:
        """Read UIDs and flags once (SELECT): one bounded scan of the small commit and flag
        cells, decoding only the state byte and the flags (no per-message JSON)."""
        marks = self.store.change_marks([self.mailbox.id]).get(self.mailbox.id, (0, 0, 0))
        self.known_modseq, self.known_visible, count = marks
        # \Recent (RFC 3501 2.3.2) is approximated per session: messages that arrive while this
        # session has the mailbox selected are recent to it.  No session "owns" older mail.
        self.recent = set()
        if self.snapshots is not None and self._from_snapshot(count):
            return
        uids = array("q")
        first_unseen = None
        unseen = 0
        keywords: set[str] = set()
        for uid, flags in self._scan_flags(self.known_visible):
            uids.append(uid)
            if not flags.seen:
                unseen += 1
                if first_unseen is None:
                    first_unseen = len(uids)
            for flag in flags.names:
                if not flag.startswith("\\"):
                    keywords.add(flag)
        self.uids = uids
        self.first_unseen = first_unseen
        self.unseen_count = unseen
        self.keywords = keywords
        if self.snapshots is not None:
            self.snapshots.put(self.mailbox.id, self.known_modseq, self.known_visible,
                               (array("q", uids), first_unseen, unseen, frozenset(keywords)))

    def _from_snapshot(self, count: int) -> bool:
        """Open from the process's last snapshot of this mailbox: as it is when nothing
        changed since, or extended by one bounded scan of the new UIDs when only appends
        happened (the same test as refresh()).  False when it cannot be trusted."""
        entry = self.snapshots.get(self.mailbox.id)
        if entry is None:
            return False
        (modseq, visible), (uids, first_unseen, unseen, keywords) = entry
        if (modseq, visible) != (self.known_modseq, self.known_visible):
            if visible > self.known_visible or modseq > self.known_modseq:
                return False
            new = list(self.store.scan(self.mailbox, low_uid=visible + 1,
                                       high_uid=self.known_visible, columns=[FLAGS]))
            if not (len(new) == self.known_modseq - modseq and count == len(uids) + len(new)
                    and all(v.record.modseq > modseq for v in new)):
                return False
            uids = array("q", uids)
            keywords = set(keywords)
            for view in new:
                uids.append(view.uid)
                keywords.update(f for f in view.flags.names if not f.startswith("\\"))
                if not view.flags.seen:
                    unseen += 1
                    if first_unseen is None:
                        first_unseen = len(uids)
            self.snapshots.put(self.mailbox.id, self.known_modseq, self.known_visible,
                               (array("q", uids), first_unseen, unseen, frozenset(keywords)))
        self.uids = array("q", uids)
        self.first_unseen, self.unseen_count = first_unseen, unseen
        self.keywords = set(keywords)
        return True

    def _scan_flags(self, visible: int):
        """(uid, Flags) of every visible message up to ``visible``, ascending."""
        return self.store.uid_flags(self.mailbox, visible)

    # -- sequence numbers --------------------------------------------------------------------

    def seq_of(self, uid: int) -> int | None:
        i = bisect.bisect_left(self.uids, uid)
        return i + 1 if i < len(self.uids) and self.uids[i] == uid else None

    @property
    def exists(self) -> int:
        return len(self.uids)

    # -- refresh ----------------------------------------------------------------------------

    def refresh(self) -> Changes:
        """Learn what changed since the last look; apply it to the sequence numbers."""
        marks = self.store.change_marks([self.mailbox.id]).get(self.mailbox.id, (0, 0, 0))
        modseq, visible, count = marks
        changes = Changes()
        if modseq == self.known_modseq and visible == self.known_visible:
            return changes
        new = []
        if visible > self.known_visible:
            new = list(self.store.scan(self.mailbox, low_uid=self.known_visible + 1,
                                       high_uid=visible, columns=[FLAGS]))
        own = sum(1 for m in self.own_flags.values() if m > self.known_modseq) + self.own_bumps
        # Nothing but new messages and this session's own changes happened: every MODSEQ
        # since the last look is accounted for, so no rescan is needed.
        appends_only = (len(new) + own == modseq - self.known_modseq
                        and count == len(self.uids) + len(new)
                        and all(v.record.modseq > self.known_modseq for v in new))
        own_flags, self.own_flags = self.own_flags, {}
        self.own_bumps = 0
        if appends_only:
            for view in new:
                self.uids.append(view.uid)
                self.recent.add(view.uid)
            if new:
                changes.exists = len(self.uids)
        else:
            self._rescan(changes, visible, own_flags)
        self.known_modseq = modseq
        self.known_visible = visible
        return changes

    def _rescan(self, changes: Changes, visible: int, own_flags: dict[int, int]) -> None:
        current: dict[int, tuple[frozenset[str], int]] = {}
        order = array("q")
        for uid, flags in self._scan_flags(visible):
            order.append(uid)
            current[uid] = (flags.names, flags.modseq)
        # Expunges: report from the highest sequence number down, so that each number is still
        # valid when the client applies the previous EXPUNGE.
        for seq in range(len(self.uids), 0, -1):
            uid = self.uids[seq - 1]
            if uid not in current:
                changes.expunged_seqs.append(seq)
                self.recent.discard(uid)
        old_last = self.uids[-1] if self.uids else 0
        kept = array("q", (u for u in self.uids if u in current))
        added = [u for u in order if u > old_last]
        kept.extend(added)
        self.recent.update(added)
        self.uids = kept
        if added:
            changes.exists = len(self.uids)
        for seq, uid in enumerate(self.uids, start=1):
            names, flag_modseq = current[uid]
            if flag_modseq > self.known_modseq and uid not in added \
                    and own_flags.get(uid) != flag_modseq:
                changes.flags.append((seq, uid, names, flag_modseq))

    def note_own_flags(self, changed) -> None:
        """Remember flag changes this session reported itself, so a refresh does not repeat
        them as if another session had made them."""
        for uid, flags in changed:
            self.own_flags[uid] = flags.modseq

    def note_own_expunge(self) -> None:
        """An expunge (or move out) by this session: one MODSEQ it already accounted for."""
        self.own_bumps += 1

    def forget(self, uids: list[int]) -> list[int]:
        """Remove expunged UIDs this session itself expunged; returns their sequence numbers,
        descending (the order EXPUNGE responses must use)."""
        seqs = []
        gone = set(uids)
        for seq in range(len(self.uids), 0, -1):
            if self.uids[seq - 1] in gone:
                seqs.append(seq)
        self.uids = array("q", (u for u in self.uids if u not in gone))
        self.recent.difference_update(gone)
        return seqs
