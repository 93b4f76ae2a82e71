"""The selected mailbox as one session sees it: sequence numbers and pending changes.

RFC 3501 2.3.1.2: message sequence numbers are per session and change only when the session is
told (EXPUNGE); new messages appear at the end (EXISTS).  A session therefore keeps its own
copy of the mailbox's index (mailstore/index.py: UIDs, sequence number = position + 1, unseen
and \\Deleted UIDs, keywords) and learns of other sessions' changes -- in this process, another
process, or from delivery -- from the store.  Everything here runs in a worker thread (it calls
the store); nothing touches the network.

Change detection (docs/decisions/0007 and 0009): a new message moves the mailbox's UID
watermark, a flag change or expunge its change-log watermark.  A refresh reads both marks (one
get); if either moved, it reads the new UIDs (one bounded scan) and the rows of the UIDs the
change log names since its last look: work in proportion to the change, not to the mailbox.
It reports EXPUNGE for UIDs gone, EXISTS for new ones and FETCH FLAGS for the rest (except
changes this session made and reported itself).  Only when the log no longer reaches back to
the session's mark (it was trimmed after a long absence) does it rescan the whole mailbox.

\\Recent (RFC 3501 2.3.2, docs/decisions/0010): a read-write session claims the UIDs it is the
first to see -- at SELECT and at each refresh that finds new ones -- through the mailbox's
\\Recent watermark, so exactly one session across all processes sees each message as recent.
A read-only one (EXAMINE) shows those nobody has claimed yet, and claims nothing (6.3.2).

Per selection, too: the saved search result of RFC 5182 (``$``: empty at SELECT, expunged
messages drop out of it) and the CONTEXT=SEARCH update contexts of RFC 5267 (search_updates.py),
which each refresh brings up to date.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from twisted.python import log

from mailstore import sharing
from mailstore.acl import ALL_RIGHTS
from mailstore.errors import MailStoreError, PermissionDenied
from mailstore.index import MailboxIndex, Marks
from mailstore.mailboxes import Mailbox
from mailstore.store import MailStore

from .search_updates import SearchContexts

_ZERO = Marks(0, 0, 0)
OWN_FLAGS_CAP = 50_000
"""Own flag changes remembered until the change log shows them; beyond this many, forget them
(the cost of forgetting is a redundant FETCH FLAGS, which RFC 3501 7.4.2 allows)."""


@dataclass
class Changes:
    """What a refresh found, in the order RFC 3501 wants it reported."""

    expunged_seqs: list[int] = field(default_factory=list)  # descending, current numbering
    expunged_uids: list[int] = field(default_factory=list)  # the same messages' UIDs
    exists: int | None = None
    recent: int | None = None  # the session's \Recent count, when it changed (RFC 3501 7.3.2)
    flags: list[tuple[int, int, frozenset[str], int]] = field(default_factory=list)
    # (seq, uid, flags, modseq)
    recent_uids: set[int] = field(default_factory=set)  # those of ``flags`` that are \Recent
    keywords: list[str] | None = None  # every keyword announced, when some are new (7.2.6)
    highest: int | None = None  # HIGHESTMODSEQ as of this refresh, if the session wants it
    # RFC 5267 4.3: ESEARCH updates, those due before the EXPUNGEs and those after the rest.
    context_before: list[bytes] = field(default_factory=list)
    context_after: list[bytes] = field(default_factory=list)
    touched: set[int] = field(default_factory=set)  # UIDs new or with flags changed (any session)

    def __bool__(self) -> bool:
        return bool(self.expunged_seqs or self.exists is not None or self.recent is not None
                    or self.flags or self.keywords or self.context_before
                    or self.context_after)


class SelectedMailbox:
    """A session's view of one mailbox.  Methods that touch the store run in a thread."""

    def __init__(self, store: MailStore, mailbox: Mailbox, readonly: bool,
                 rights: frozenset[str] = ALL_RIGHTS, viewer: str | None = None):
        self.store = store
        self.mailbox = mailbox
        self.readonly = readonly
        # The session's ACL rights on the mailbox as of SELECT (RFC 4314): what STORE,
        # EXPUNGE, MOVE and a FETCH that would set \Seen may do here.
        self.rights = rights
        # Who looks, when it is not the owner: their rights are read again at each refresh,
        # so a revoked "r" stops the updates (IDLE included) at the next one.
        self.viewer = viewer if viewer != mailbox.owner else None
        self.index = MailboxIndex(_ZERO)
        self.recent: set[int] = set()
        self.recent_mark = mailbox.recent_uid  # the \Recent watermark as last seen
        self.reported_recent = 0  # the \Recent count the client was last told
        # IMAP4rev2 has no \Recent (RFC 9051 Appendix E): such a session neither claims nor
        # shows it, leaving the messages recent for an IMAP4rev1 session.
        self.tracks_recent = True
        self.has_children = False  # read at an IMAP4rev2 SELECT, for its LIST (RFC 9051 6.3.2)
        # Flag changes this session made and already reported: uid -> their MODSEQ.
        self.own_flags: dict[int, int] = {}
        # Keywords the client was told of in an untagged FLAGS: RFC 3501 7.2.6 lets a FETCH
        # show no others, so a new one is announced first (new_keywords).
        self.announced: set[str] = set()
        # CONDSTORE/QRESYNC enabled in the session (RFC 7162 3.1, 3.2.3): refreshes then work
        # out HIGHESTMODSEQ too, and store the point it comes from (modseqs.py).
        self.modseqs = False
        # RFC 5182: the saved search result ($), UIDs ascending; SELECT starts it empty.
        self.saved: list[int] = []
        self.contexts = SearchContexts()  # RFC 5267 update contexts
        self._pending_context: list[bytes] = []  # REMOVEFROMs for our own expunges
        self._forgotten: list[int] = []  # UIDs we expunged, not yet reported (ascending)
        self._retest_later: set[int] = set()  # UIDs a failed context re-test left to do
        self._held_gone: set[int] = set()  # expunged UIDs a refresh held back (refresh())

    # -- opening ----------------------------------------------------------------------------

    def load(self) -> None:
        """SELECT: the mailbox's index from the store, without reading every message row."""
        self.index = self.store.open_index(self.mailbox)
        self.announced = set(self.index.keywords)  # SELECT's FLAGS lists them
        self.recent = set()
        # The mailbox row, read just before, gives the watermark: one check-and-put claims.
        self._take_recent(0, self.mailbox.recent_uid)
        self.reported_recent = len(self.recent)

    def _take_recent(self, known: int, watermark: int | None = None) -> None:
        """Add to ``recent`` the UIDs above ``known`` (the UID watermark before this look) up
        to the one the index now has that this session is the first to be told of (RFC 3501
        2.3.2).  Read-write, it claims them; read-only (EXAMINE, which MUST NOT take \\Recent
        from anyone, 6.3.2) it shows those nobody has claimed, as Dovecot does, and claims
        none.  ``watermark``: the \\Recent watermark if just read, else it is read."""
        top = self.index.marks.visible
        if top <= known or not self.tracks_recent:
            return
        if self.readonly:
            low = self.store.recent_watermark(self.mailbox) if watermark is None else watermark
            high = top
        else:
            low, high = self.store.claim_recent(
                self.mailbox, top, self.recent_mark if watermark is None else watermark)
            self.recent_mark = high
        low = max(low, known)
        if high > low:
            uids = self.index.uids
            self.recent.update(uids[bisect_right(uids, low):bisect_right(uids, high)])

    def stop_recent(self) -> None:
        """ENABLE IMAP4rev2 with this mailbox selected: from now on no \\Recent (RFC 9051
        Appendix E).  What this session claimed stays claimed: it was already told."""
        self.tracks_recent = False
        self.recent = set()
        self.reported_recent = 0

    def _recent_changes(self, changes: Changes) -> None:
        """RFC 3501 7.3.2: a RECENT response whenever the count changed (as Dovecot sends it),
        and \\Recent in the FETCH FLAGS of recent messages."""
        if len(self.recent) != self.reported_recent:
            self.reported_recent = changes.recent = len(self.recent)
        changes.recent_uids = {uid for _seq, uid, _names, _modseq in changes.flags
                               if uid in self.recent}

    # -- what commands read -------------------------------------------------------------------

    @property
    def uids(self):
        return self.index.uids

    @property
    def known_visible(self) -> int:
        return self.index.marks.visible

    @property
    def exists(self) -> int:
        return len(self.index.uids)

    @property
    def first_unseen(self) -> int | None:
        return self.index.first_unseen

    @property
    def keywords(self) -> set[str]:
        return self.index.keywords

    def seq_of(self, uid: int) -> int | None:
        return self.index.seq_of(uid)

    def saved_uids(self) -> list[int]:
        """The saved search result (RFC 5182 ``$``) as it stands: the saved UIDs that are still
        in the session's view, ascending (expunged ones drop out, 2.1)."""
        return [uid for uid in self.saved if self.index.seq_of(uid) is not None]

    def _client_seq(self, uid: int) -> int:
        """The number the client still knows ``uid`` by: its position, counting the messages
        this session expunged whose EXPUNGE has not gone out yet."""
        return self.index.seq_of(uid) + bisect_left(self._forgotten, uid)

    def new_keywords(self, shown=()) -> list[str] | None:
        """Keywords to announce before responses that show the flags ``shown`` (RFC 3501
        7.2.6, 7.4.2): every keyword announced so far plus the new ones, sorted -- or None when
        neither ``shown`` nor the index holds a keyword the client has not been told of.
        Those returned count as announced from now on."""
        keywords = self.index.keywords
        keywords.update(f for f in shown if not f.startswith("\\"))
        if keywords <= self.announced:
            return None
        self.announced |= keywords
        return sorted(self.announced)

    def _flags_now(self) -> MailboxIndex | None:
        """The session's index with the flag changes logged since its last refresh applied
        (its UIDs as they are: the client has not been told of anything else yet) -- no row
        read but those the log names.  None when the log no longer reaches back."""
        delta = self.store.changes_since(self.mailbox, self.index.marks)
        if delta is None:
            return None
        view = self.index.copy()
        for uid, flags in delta.changed:
            if view.seq_of(uid) is not None:
                view.note_flags(uid, flags)
        return view

    def current_flags(self, uids) -> list[tuple[int, int, frozenset[str], int]] | None:
        """(sequence number, UID, stored flags, MODSEQ) of ``uids`` from the session's index,
        when one row read (the mailbox's marks, written by no one) shows that nothing has
        changed since the session's last look -- the index then holds exactly what the rows
        say (mailstore/index.py); None when it may not (a change since, by any session, or
        this one's own STORE not yet refreshed; expunges held back), for reading the rows."""
        if self._held_gone or self.store.indexes.peek(self.mailbox.id) != self.index.marks:
            return None
        return self.index.flags_of(uids)

    def deleted_uids(self) -> list[int]:
        """UIDs of this session's messages that may have \\Deleted now (EXPUNGE, CLOSE).  The
        store confirms each on its row as it expunges (``only_deleted``)."""
        view = self._flags_now()
        if view is None:
            return [uid for uid, flags in self.store.uid_flags(self.mailbox, self.known_visible)
                    if "\\Deleted" in flags.names and self.index.seq_of(uid) is not None]
        # Keywords set on them meanwhile are in use in the mailbox all the same: announced
        # with the EXPUNGE (as Dovecot does), though no FETCH will show them now.
        self.index.keywords |= view.keywords
        return list(view.deleted)

    def flag_sets(self) -> dict[str, tuple[bool, set[int]]] | None:
        """For SEARCH: per system flag (lower-case), ``(True, UIDs having it)`` -- or for
        \\Seen ``(False, UIDs lacking it)``, the small side -- as of now (see _flags_now);
        None when the log no longer reaches back (SEARCH then reads the rows)."""
        view = self._flags_now()
        if view is None:
            return None
        sets = {flag.lower(): (True, set(uids)) for flag, uids in view.flagged.items()}
        sets["\\seen"] = (False, set(view.unseen))
        return sets

    # -- refresh ----------------------------------------------------------------------------

    def require(self, need: str) -> frozenset[str]:
        """The session's rights as the ACL says now (re-read for a session on another
        user's mailbox: one get), raising PermissionDenied unless they hold every right in
        ``need`` (RFC 4314 4).  Called by changing commands in their store call, so a right
        taken away counts from the next command on, refresh or not."""
        if self.viewer is not None:
            self.rights = sharing.current_rights(self.store, self.viewer, self.mailbox)
        if not set(need) <= self.rights:
            raise PermissionDenied("Permission denied")
        return self.rights

    def refresh(self, hold_expunges: bool = False) -> Changes:
        """Learn what changed since the last look; apply it to the sequence numbers.

        ``hold_expunges``: no command is in progress, when RFC 3501 7.4.1 allows no EXPUNGE
        (NOTIFY's SELECTED-DELAYED, RFC 5465 6.1.2): messages found gone stay numbered, and
        are reported by the next refresh without it."""
        if self.viewer is not None:
            self.rights = sharing.current_rights(self.store, self.viewer, self.mailbox)
            if "r" not in self.rights:
                return Changes()  # RFC 4314 4: nothing of the mailbox without "r"
        known = self.index.marks.visible
        changes = self._look(hold_expunges)
        self._take_recent(known)
        self._recent_changes(changes)
        changes.context_before[:0] = self._pending_context
        self._pending_context, self._forgotten = [], []
        if self.contexts and (changes.touched or self._retest_later):
            changes.context_after = self.retest_contexts(changes.touched)
        if self.modseqs:
            changes.highest = self.highest_modseq()
        return changes

    def quiet_refresh(self) -> Changes | None:
        """What :meth:`refresh` would return when nothing changed since the last look, from
        one row read (the mailbox's marks) that writes nothing; None when something may have
        changed, or the session has work pending, so that the full refresh is needed.

        For a backend with ``local_reads`` the reactor calls this in its own thread: most
        refreshes (every NOOP, STORE, SEARCH, COPY ... of a session alone in its mailbox)
        find nothing, and then a worker thread's round trip cost ten times the read
        (bench/RESULTS.md, issue 14)."""
        if (self.viewer is not None or self.modseqs or self._pending_context
                or self._forgotten or self._retest_later or self._held_gone):
            return None
        now = self.store.indexes.peek(self.mailbox.id)
        if now != self.index.marks:
            return None
        changes = Changes()
        self._recent_changes(changes)
        return changes

    def highest_modseq(self) -> int:
        """HIGHESTMODSEQ as this session sees the mailbox (RFC 7162 3.1.2.1: no change with a
        lower MODSEQ is still to come).  Its point is stored for a resync elsewhere when the
        session has CONDSTORE enabled: other clients ignore it, and a put per SELECT would
        cost them (docs/decisions/0014)."""
        return self.store.highest_modseq(self.mailbox, self.index.marks, keep=self.modseqs)

    def retest_contexts(self, uids) -> list[bytes]:
        """ESEARCH updates (RFC 5267 4.3) for the messages ``uids``, new or with flags changed
        -- by a refresh, or by this session's own STORE (the results change whoever changed
        them).  A store failure costs only the updates, never the refresh's EXPUNGE/EXISTS
        (the session's numbering has moved on already): the UIDs are kept and tested again
        at the next call, which re-testing makes safe (a context's matches are updated as
        each is tested)."""
        if not self.contexts:
            return []
        touched = set(uids) | self._retest_later
        try:
            lines = self.contexts.retest(self.store, self.mailbox, self.index.uids,
                                         self.recent, touched)
        except MailStoreError:
            log.err(None, "CONTEXT=SEARCH update re-test failed; retried at the next refresh")
            self._retest_later = touched
            return []
        self._retest_later = set()
        return lines

    def _look(self, hold_expunges: bool = False) -> Changes:
        changes = Changes()
        delta = self.store.changes_since(self.mailbox, self.index.marks)
        if delta is None:
            if not hold_expunges:  # else left for the next refresh, which may expunge
                self._rescan(changes)
            return changes
        index = self.index
        gone = {u for u in delta.gone if index.seq_of(u) is not None}
        if hold_expunges:
            self._held_gone |= gone
            gone = set()
        elif self._held_gone:
            gone |= {u for u in self._held_gone if index.seq_of(u) is not None}
            self._held_gone = set()
        if gone:
            if self.contexts:
                changes.context_before = self.contexts.expunged(gone, self._client_seq)
            changes.expunged_seqs = self._seqs_descending(gone)
            changes.expunged_uids = sorted(gone, reverse=True)
            index.remove(gone)
            self.recent -= gone
        last = index.uids[-1] if index.uids else 0
        for uid, flags in delta.new:
            if uid > last:
                index.add(uid, flags)
                last = uid
                changes.exists = len(index.uids)
                changes.touched.add(uid)
        for uid, flags in delta.changed:
            seq = index.seq_of(uid)
            if seq is None:
                continue
            index.note_flags(uid, flags)
            changes.touched.add(uid)
            if self.own_flags.pop(uid, None) != flags.modseq:
                changes.flags.append((seq, uid, flags.names, flags.modseq))
        index.marks = delta.marks
        changes.keywords = self.new_keywords()
        return changes

    def _rescan(self, changes: Changes) -> None:
        """The change log was trimmed past our mark: read every row once and diff."""
        old = self.index
        now = self.store.marks([self.mailbox.id]).get(self.mailbox.id) or _ZERO
        current = {}
        for uid, flags in self.store.uid_flags(self.mailbox, now.visible):
            current[uid] = flags
        gone = {u for u in old.uids if u not in current}
        if self.contexts and gone:
            changes.context_before = self.contexts.expunged(gone, self._client_seq)
        changes.expunged_seqs = self._seqs_descending(gone)
        changes.expunged_uids = sorted(gone, reverse=True)
        old.remove(gone)
        self.recent -= gone
        last = old.uids[-1] if old.uids else 0
        fresh = MailboxIndex(now)
        for uid in old.uids:
            fresh.add(uid, current[uid])
        for uid in sorted(u for u in current if u > last):
            fresh.add(uid, current[uid])
            changes.exists = len(fresh.uids)
        for seq, uid in enumerate(old.uids, start=1):
            flags = current[uid]
            # A MODSEQ is taken before its change commits (0001), so one below the old mark
            # may still be new to us: also compare the flags the index tracks.
            tracked = (uid in old.unseen, *(uid in s for s in old.flagged.values()))
            now_tracked = (uid in fresh.unseen, *(uid in s for s in fresh.flagged.values()))
            if (flags.modseq > old.marks.modseq or tracked != now_tracked) \
                    and self.own_flags.get(uid) != flags.modseq:
                changes.flags.append((seq, uid, flags.names, flags.modseq))
        self.own_flags.clear()
        self._held_gone = set()  # the rescan found them gone again
        self.index = fresh
        changes.touched = set(fresh.uids)  # no log to say what changed: test them all
        changes.keywords = self.new_keywords()

    def _seqs_descending(self, gone: set[int]) -> list[int]:
        """Sequence numbers of ``gone``, highest first: each is still valid when the client
        applies the EXPUNGE before it (RFC 3501 7.4.1)."""
        return sorted((self.index.seq_of(u) for u in gone), reverse=True)

    def note_own_flags(self, changed) -> None:
        """Remember flag changes this session reported itself, so a refresh does not repeat
        them as if another session had made them."""
        if len(self.own_flags) > OWN_FLAGS_CAP:
            self.own_flags.clear()
        for uid, flags in changed:
            self.own_flags[uid] = flags.modseq
            if self.index.seq_of(uid) is not None:
                self.index.note_flags(uid, flags)

    def forget(self, uids: list[int]) -> tuple[list[int], list[int]]:
        """Remove expunged UIDs this session itself expunged; returns their sequence numbers,
        descending (the order EXPUNGE responses must use), and their UIDs in the same order
        (for VANISHED, RFC 7162 3.2.10)."""
        gone = {u for u in uids if self.index.seq_of(u) is not None}
        if self.contexts and gone:
            # RFC 5267 4.3.4: the REMOVEFROM goes before the EXPUNGE, numbered as the client
            # numbers the messages until then; report_changes' refresh sends it.
            self._pending_context += self.contexts.expunged(gone, self._client_seq)
        self._forgotten = sorted([*self._forgotten, *gone])
        seqs = self._seqs_descending(gone)
        self.index.remove(gone)
        self.recent -= gone
        return seqs, sorted(gone, reverse=True)
