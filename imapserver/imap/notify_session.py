"""One session's NOTIFY (RFC 5465): what it watches, what it last told the client, and the
delivery of what changed.

The process-wide poller (notify.py) reads, each tick, the marks of every mailbox NOTIFY sessions
watch (one multi-get, capped) and the change generations of their users (decision 0021); it
hands them to :meth:`NotifyState.compare`, which notes what moved since this session's last look
and, if anything did, asks for a delivery.  A delivery runs in the connection's command queue
between commands (protocol.run_soon: never inside a command's responses), or at once while the
session is in IDLE (RFC 5465 4: IDLE gets the same events), one at a time.  It writes:

* for the selected mailbox (SELECTED / SELECTED-DELAYED, 5.1-5.3): a refresh's EXPUNGE (or
  QRESYNC's VANISHED), FETCH FLAGS and EXISTS, then a FETCH of the new messages with the
  MessageNew fetch-atts.  With SELECTED-DELAYED, and with SELECTED but no MessageExpunge,
  expunges wait for a command that may report them (RFC 3501 7.4.1: none between commands);
* for other mailboxes: STATUS when what their events are about changed (5.1-5.3: MESSAGES,
  UIDNEXT, UNSEEN; HIGHESTMODSEQ once CONDSTORE is enabled), LIST for mailboxes created,
  deleted (``\\NonExistent``) and renamed (``OLDNAME``, 5.4), LIST with or without
  ``\\Subscribed`` for subscription changes (5.5), and METADATA for metadata changes (5.6, 5.7)
  once the store can say which entries changed (:func:`metadata_supported`);
* ``OK [NOTIFICATIONOVERFLOW]`` and NOTIFY NONE when the session would watch more than
  :data:`MAX_WATCHED` mailboxes (5.8).

At most :data:`STATUS_PER_DELIVERY` mailboxes are looked at per delivery; the rest stay due for
the next one.  Changes this session made itself are not reported back (5: SHOULD), so far as
it can tell: names it created, renamed, deleted or (un)subscribed, mailboxes it appended to.

Other users' mailboxes (``Other Users/alice/Team``, ``Shared/...``) are watched as the ACL
allows (RFC 4314 4, RFC 5465 5.9): they exist for NOTIFY only with ``l`` (the filters SUBTREE,
MAILBOXES and SUBSCRIBED may name them; PERSONAL and INBOXES never do), message events and
STATUS come only with ``r``, and a mailbox seen without ``r`` is announced once as ``LIST
(\\NoAccess)``.  Rights are read again from the mailbox row whenever a report about it goes
out (a right taken away stops its events there), and an ACL change moves the grantee's names
generation, so a mailbox that appears or disappears for them is a MailboxName event.
"""

from __future__ import annotations

from bisect import bisect_right

from twisted.internet import defer
from twisted.python import log

from mailstore import sharing
from mailstore.acl import ALL_RIGHTS

from .commands.common import changes_lines, modseq_modes
from .context import CommandContext
from .names import DELIMITER, encode_name
from .notify_spec import (
    FLAG_CHANGE,
    MAILBOX_METADATA_CHANGE,
    MAILBOX_NAME,
    MESSAGE_EVENTS,
    MESSAGE_EXPUNGE,
    MESSAGE_NEW,
    SERVER_METADATA_CHANGE,
    SUBSCRIPTION_CHANGE,
    NotifySpec,
)
from .rev2 import utf8_names
from .wire import Atom

MAX_WATCHED = 10_000
"""Mailboxes one session may watch for message events (RFC 5465 3.1, 5.8: NOTIFICATIONOVERFLOW
beyond it)."""
OWN_CAP = 1000
"""Own changes remembered for omission at most (note_own)."""
STATUS_PER_DELIVERY = 200
"""Changed mailboxes one delivery reads and reports; the rest wait for the next delivery."""


def metadata_supported(store) -> bool:
    """Whether the store can tell which metadata entries changed (METADATA, RFC 5464): it
    offers ``metadata_digest(user) -> {(mailbox name or "", entry name): digest}``."""
    return callable(getattr(store, "metadata_digest", None))


def _status_values(mailbox, highest: int | None) -> tuple[int, int, int, int | None]:
    return mailbox.messages, mailbox.uidnext, mailbox.unseen, highest


def status_line(name: str, items: list[tuple[str, int]], utf8: bool = False) -> bytes:
    body = " ".join(f"{item} {value}" for item, value in items)
    return b"STATUS " + encode_name(name, utf8) + b" (" + body.encode() + b")"


def _attrs(name: str, existing: set[str], subscribed: set[str]) -> list[str]:
    """LIST attributes of an existing mailbox in a notification (5.4, 5.5 SHOULD: children;
    ``\\Subscribed`` as it stands), as Dovecot sends them."""
    out = ["\\Subscribed"] if name in subscribed else []
    child = any(n.startswith(name + DELIMITER) for n in existing)
    return [*out, "\\HasChildren" if child else "\\HasNoChildren"]


def _list_line(name: str, attrs: list[str], oldname: str | None = None,
               utf8: bool = False) -> bytes:
    """A LIST notification, names in the session's spelling (UTF-8 once enabled: RFC 6855
    3, RFC 9051 5.1)."""
    line = b"LIST (" + " ".join(attrs).encode() + f') "{DELIMITER}" '.encode() + \
        encode_name(name, utf8)
    if oldname is not None:
        # RFC 5465 5.4 / RFC 5258 6: the extended data item of a rename.
        line += b' ("OLDNAME" (' + encode_name(oldname, utf8) + b"))"
    return line


class NotifyState:
    """What one session asked for with NOTIFY SET, and where it stands."""

    def __init__(self, session, conn, spec: NotifySpec):
        self.session = session
        self.conn = conn
        self.spec = spec
        self.user: str = session.user
        self.names: dict[bytes, str] = {}      # mailboxes seen (l): id -> name, as last told
        self.rights: dict[bytes, frozenset[str]] = {}  # and the user's rights on them
        self.no_access: set[bytes] = set()    # those told LIST (\NoAccess)
        self.subscribed: set[str] = set()
        self.generations: tuple[int, int, int] | None = None
        self.watched: dict[bytes, frozenset[str]] = {}  # mailboxes with message events wanted
        self.seen: dict[bytes, object] = {}   # watched mailbox -> its marks at the last look
        self.known: dict[bytes, tuple] = {}   # watched mailbox -> status values last known
        self.metadata: dict | None = None     # metadata digests as last known
        self.dirty: set[bytes] = set()        # watched mailboxes whose marks moved
        self.lists_due = self.subs_due = self.meta_due = self.selected_due = False
        self.own_names: set[str] = set()      # names this session itself changed
        self.own_subscriptions: set[str] = set()  # and (un)subscribed
        self.own_mailboxes: set[str] = set()  # mailboxes this session itself appended to
        self.own_metadata: set[tuple[str, str]] = set()  # (mailbox or "", entry) it set
        self.idle = None                      # the IDLE in progress, if any
        self.queued = False                   # a delivery is queued or running
        self.again = False
        self.pending: defer.Deferred | None = None
        self.stopped = False

    # -- what the poller reads and compares -----------------------------------------------------

    @property
    def wants_generations(self) -> bool:
        return bool(self.spec.filters)

    def poll_ids(self) -> list[bytes]:
        ids = list(self.watched)
        selected = self.session.selected
        if selected is not None and (self.spec.selected_events or self.idle is not None):
            ids.append(selected.mailbox.id)
        return ids

    def compare(self, marks: dict, generations: tuple | None) -> bool:
        """Note what moved since the last look (reactor thread); True if a delivery is due."""
        due = False
        for mailbox_id in self.watched:
            now = marks.get(mailbox_id)
            if now is not None and now != self.seen.get(mailbox_id):
                self.seen[mailbox_id] = now
                self.dirty.add(mailbox_id)
                due = True
        selected = self.session.selected
        if selected is not None and selected.mailbox.id in marks:
            now, had = marks[selected.mailbox.id], selected.index.marks
            if (now.visible, now.logmark) != (had.visible, had.logmark):
                self.selected_due = True
                due = True
        if generations is not None and generations != self.generations:
            old, self.generations = self.generations, generations
            if old is not None:
                self.lists_due |= old[0] != generations[0]
                self.subs_due |= old[1] != generations[1]
                self.meta_due |= old[2] != generations[2]
                due = True
        # Also what a failed delivery left due (it is retried at each tick until it goes out).
        return due or bool(self.dirty or self.lists_due or self.subs_due or self.meta_due
                           or (self.selected_due and (self.idle is not None
                                                      or bool(self.spec.selected_events))))

    # -- NOTIFY SET: the first look (in a thread) ---------------------------------------------

    def load(self, store) -> None:
        """Read where everything stands now: generations first and marks before rows, so that
        a change in between is seen again at the next tick rather than missed."""
        self.generations = store.generations([self.user]).get(self.user, (0, 0, 0))
        visible = sharing.visible_mailboxes(store, self.user)
        mailboxes = [m for m, _ in visible]
        self.subscribed = set(store.subscriptions(self.user))
        self.names = {m.id: m.name for m in mailboxes}
        self.rights = {m.id: rights for m, rights in visible}
        self._rewatch()
        if len(self.watched) > MAX_WATCHED:
            return
        self.seen.update(store.marks(list(self.watched)))
        for m in mailboxes:
            if m.id in self.watched:
                self.known[m.id] = _status_values(
                    m, store.highest_modseq(m) if self._modseqs(m.id) else None)
        if self.spec.wants(MAILBOX_METADATA_CHANGE) or self.spec.wants(SERVER_METADATA_CHANGE):
            self.metadata = store.metadata_digest(self.user)

    def _modseqs(self, mailbox_id: bytes) -> bool:
        """Whether STATUS responses about a mailbox carry HIGHESTMODSEQ: once CONDSTORE is
        enabled (5.2, 5.3 MUST), and only then -- RFC 7162 3.1 lets no MOD-SEQUENCE reach a
        client that has not enabled it (so a keyword change elsewhere, which moves no other
        item, is reported to CONDSTORE clients only; Dovecot does the same)."""
        return modseq_modes(self.session)[0]

    def _rewatch(self) -> None:
        """The mailboxes to watch for message events, from the names, subscriptions and
        rights: only those the user may read (RFC 4314 4: ``r``)."""
        watched = {}
        for mailbox_id, name in self.names.items():
            events = self.spec.events_for(name, self.subscribed)
            if events & set(MESSAGE_EVENTS) and "r" in self.rights.get(mailbox_id, ALL_RIGHTS):
                watched[mailbox_id] = events
        self.watched = watched
        for gone in [k for k in self.seen if k not in watched]:
            del self.seen[gone]
            self.known.pop(gone, None)
            self.dirty.discard(gone)

    @property
    def overflowing(self) -> bool:
        return len(self.watched) > MAX_WATCHED

    def initial_status(self, store) -> list[bytes]:
        """NOTIFY SET STATUS (3.1), in a thread: a STATUS for every watched mailbox but the
        selected one, with MESSAGES, UIDNEXT, UIDVALIDITY (and UNSEEN, as Dovecot), and
        HIGHESTMODSEQ once CONDSTORE is enabled.  (Dovecot adds HIGHESTMODSEQ when FlagChange
        is asked for, and so enables CONDSTORE; RFC 7162 3.1 does not list NOTIFY among the
        commands that enable it.)"""
        selected = self.session.selected
        skip = selected.mailbox.id if selected is not None else None
        seen = sharing.seen_by_id(store, self.user, [k for k in self.watched if k != skip])
        rows = {mid: m for mid, (m, rights) in seen.items() if "r" in rights}
        condstore = modseq_modes(self.session)[0]
        lines = self.no_access_lines(set(seen) - set(rows))
        for mailbox in sorted(rows.values(), key=lambda m: (m.name != "INBOX", m.name)):
            items = [("MESSAGES", mailbox.messages), ("UIDNEXT", mailbox.uidnext),
                     ("UIDVALIDITY", mailbox.uidvalidity), ("UNSEEN", mailbox.unseen)]
            if condstore:
                items.append(("HIGHESTMODSEQ", store.highest_modseq(mailbox)))
            lines.append(status_line(mailbox.name, items, utf8_names(self.session)))
        return lines

    def no_access_lines(self, also: set[bytes] = frozenset()) -> list[bytes]:
        """``LIST (\\NoAccess)`` for each mailbox whose message events were asked for but which
        the user may only see (``l`` without ``r``: RFC 5465 5.9), once per mailbox."""
        lines = []
        for mailbox_id, name in sorted(self.names.items(), key=lambda kv: kv[1]):
            rights = self.rights.get(mailbox_id, ALL_RIGHTS)
            unreadable = mailbox_id in also or "r" not in rights
            if not unreadable or "l" not in rights or mailbox_id in self.no_access:
                continue
            if self.spec.events_for(name, self.subscribed) & set(MESSAGE_EVENTS):
                self.no_access.add(mailbox_id)
                lines.append(_list_line(name, ["\\NoAccess"], utf8=utf8_names(self.session)))
        return lines

    # -- delivery --------------------------------------------------------------------------------

    def wake(self) -> None:
        """Something is due: deliver it now if in IDLE, else between the next commands."""
        if self.stopped or self.conn.closed:
            return
        if self.queued:
            self.again = True
            return
        self.queued = True
        if self.idle is not None:
            self._run(True)
        else:
            self.conn.run_soon(lambda: self._run(False))

    def _run(self, during_idle: bool) -> defer.Deferred:
        d = defer.maybeDeferred(self._deliver, during_idle)
        self.pending = d
        d.addErrback(log.err, "NOTIFY delivery failed")

        def finished(_):
            self.pending = None
            self.queued = False
            if self.again and not self.stopped:
                self.again = False
                self.wake()
        d.addBoth(finished)
        return d

    def stop(self) -> None:
        self.stopped = True
        if self.session.notify is self:
            self.session.notify = None
        self.session.server.watchers.unnotify(self.session)

    @defer.inlineCallbacks
    def _deliver(self, during_idle: bool):
        if self.stopped or self.conn.closed or self.conn.closing:
            return
        ctx = CommandContext(self.conn, "*", "NOTIFY", [])
        yield self._deliver_selected(ctx, during_idle)
        if not (self.dirty or self.lists_due or self.subs_due or self.meta_due):
            return
        ids = sorted(self.dirty)[:STATUS_PER_DELIVERY]
        self.dirty.difference_update(ids)
        want = (self.lists_due, self.subs_due, self.meta_due)
        self.lists_due = self.subs_due = self.meta_due = False
        try:
            found = yield ctx.call(self._gather, ctx.store, ids, *want)
        except Exception:
            # Nothing was reported: all of it is still due (the next tick delivers it).
            self.dirty.update(ids)
            self.lists_due |= want[0]
            self.subs_due |= want[1]
            self.meta_due |= want[2]
            raise
        if self.stopped:
            return
        lines = self._report(found)
        if self.dirty:
            self.again = True  # more than one delivery's worth: go on next time round
        self.conn.write_lines([b"* " + line for line in lines])

    @defer.inlineCallbacks
    def _deliver_selected(self, ctx, during_idle: bool):
        selected = self.session.selected
        events = self.spec.selected_events
        if selected is None:
            self.selected_due = False
        if not self.selected_due or not (events or during_idle):
            return
        self.selected_due = False
        # RFC 3501 7.4.1: no EXPUNGE while no command is in progress; SELECTED with
        # MessageExpunge is the client's leave to send them anyway (RFC 5465 5.3, 6.1.1).
        hold = not during_idle and (self.spec.delayed or MESSAGE_EXPUNGE not in events)
        known = selected.known_visible
        try:
            changes = yield ctx.call(selected.refresh, hold)
        except Exception:
            self.selected_due = True  # retried at the next tick
            raise
        if self.session.selected is not selected:
            return
        lines = changes_lines(changes, readonly=selected.readonly, session=self.session)
        self.conn.write_lines([b"* " + line for line in lines])
        if self.spec.fetch_atts and changes.exists is not None and MESSAGE_NEW in events:
            uids = selected.uids
            new = list(uids[bisect_right(uids, known):])
            if new:
                yield self._fetch_new(new)

    @defer.inlineCallbacks
    def _fetch_new(self, uids: list[int]):
        """RFC 5465 5.2: a FETCH of the new messages with the MessageNew fetch-atts, after
        their EXISTS -- as a UID FETCH, so each carries its UID."""
        from .commands.fetch import fetch_command
        from .commands.message_cmds import uid_set_text
        fetch = _Unsolicited(self.conn, "*", "FETCH",
                             [Atom(uid_set_text(uids)), self.spec.fetch_atts])
        try:
            yield fetch_command(fetch, uid_mode=True)
        except Exception as exc:  # a message expunged meanwhile, say: what was sent stands
            log.msg(f"NOTIFY MessageNew FETCH ended early: {exc}")
        fetch.flush()

    def _gather(self, store, ids: list[bytes], lists: bool, subs: bool, meta: bool) -> dict:
        """In a thread: what the reporting needs -- the rows of the changed mailboxes, and
        the mailbox list, subscriptions and metadata if their generation moved."""
        found: dict = {}
        if lists:
            found["mailboxes"] = sharing.visible_mailboxes(store, self.user)
        if subs or lists:
            found["subscribed"] = set(store.subscriptions(self.user))
        if meta and self.metadata is not None:
            found["metadata"] = store.metadata_digest(self.user)
        # The rows say the rights as they are now: what goes out is checked against them.
        rows = sharing.seen_by_id(store, self.user, ids) if ids else {}
        found["rows"] = {mid: (m, rights, store.highest_modseq(m)
                               if self._modseqs(mid) and "r" in rights else None)
                         for mid, (m, rights) in rows.items()}
        return found

    def _report(self, found: dict) -> list[bytes]:
        """The untagged responses for what :meth:`_gather` found (reactor thread)."""
        lines: list[bytes] = []
        old_subscribed = self.subscribed
        subscribed = found.get("subscribed", old_subscribed)
        if "mailboxes" in found:
            lines += self._name_changes({m.id: m.name for m, _ in found["mailboxes"]},
                                        subscribed)
            self.rights = {m.id: rights for m, rights in found["mailboxes"]}
            self.no_access = {k for k in self.no_access if "r" not in self.rights.get(k, "")}
            for mailbox, _rights in found["mailboxes"]:
                if mailbox.id not in self.known:  # new: what it holds now is no news
                    self.known[mailbox.id] = _status_values(mailbox, None)
        for mailbox_id, (_mailbox, rights, _highest) in found["rows"].items():
            if mailbox_id in self.names:
                self.rights[mailbox_id] = rights
            if "l" not in rights:  # gone from the user's view: no more events (RFC 4314 4)
                self.names.pop(mailbox_id, None)
            if "r" in rights:
                self.no_access.discard(mailbox_id)
        if subscribed != old_subscribed:
            lines += self._subscription_changes(old_subscribed, subscribed)
        self.subscribed = subscribed
        before = set(self.watched)
        self._rewatch()
        if self.overflowing:
            self.stop()
            return lines + [b"OK [NOTIFICATIONOVERFLOW] Too many mailboxes to watch, "
                            b"NOTIFY is off"]
        for added in set(self.watched) - before:
            self.dirty.add(added)  # its marks are read at the next tick
        lines += self.no_access_lines()
        lines += self._status_changes(found["rows"])
        if "metadata" in found:
            lines += self._metadata_changes(found["metadata"])
        return lines

    def _name_changes(self, names: dict[bytes, str], subscribed: set[str]) -> list[bytes]:
        """RFC 5465 5.4: LIST for each name created, deleted or renamed (by id: a rename keeps
        the mailbox), where a filter with MailboxName names it (old or new name)."""
        lines = []
        old = self.names
        everything = set(names.values())
        utf8 = utf8_names(self.session)

        def wanted(*candidates: str) -> bool:
            if any(self._own(self.own_names, n) for n in candidates):
                return False
            return any(MAILBOX_NAME in self.spec.events_for(n, subscribed) for n in candidates)

        def attrs(name: str) -> list[str]:
            return _attrs(name, everything, subscribed)
        for mailbox_id, name in sorted(names.items(), key=lambda kv: kv[1]):
            was = old.get(mailbox_id)
            if was is None and wanted(name):
                lines.append(_list_line(name, attrs(name), utf8=utf8))
            elif was is not None and was != name and wanted(name, was):
                lines.append(_list_line(name, attrs(name), oldname=was, utf8=utf8))
        for mailbox_id, name in sorted(old.items(), key=lambda kv: kv[1]):
            if mailbox_id not in names and name not in everything and wanted(name):
                lines.append(_list_line(name, ["\\NonExistent"], utf8=utf8))
        self.names = names
        return lines

    def _subscription_changes(self, old: set[str], new: set[str]) -> list[bytes]:
        """RFC 5465 5.5: LIST for each name (un)subscribed, ``\\Subscribed`` if and only if
        it is subscribed now."""
        lines = []
        existing = set(self.names.values())
        for name in sorted(old ^ new):
            if self._own(self.own_subscriptions, name) or \
                    SUBSCRIPTION_CHANGE not in self.spec.events_for(name, old | new):
                continue
            if name in existing:
                attrs = _attrs(name, existing, new)
            else:
                attrs = ["\\NonExistent", *(["\\Subscribed"] if name in new else [])]
            lines.append(_list_line(name, attrs, utf8=utf8_names(self.session)))
        return lines

    @staticmethod
    def _own(marks: set[str], name: str) -> bool:
        """Whether ``name``'s change is this session's own (RFC 5465 5: SHOULD NOT be
        reported back); each mark excuses one report."""
        if name in marks:
            marks.discard(name)
            return True
        return False

    def note_own(self, names=(), subscriptions=(), mailboxes=()) -> None:
        """A command of this session changed these: do not report them back (RFC 5465 5).
        Bounded: past OWN_CAP marks, forget them (the cost is a report too many)."""
        # Only what would be reported: a mark nothing consumes would excuse a later change
        # by someone else instead.
        watched = {self.names.get(k) for k in self.watched}
        names = [n for n in names if MAILBOX_NAME in self.spec.events_for(n, self.subscribed)]
        subscriptions = [n for n in subscriptions if SUBSCRIPTION_CHANGE in
                         self.spec.events_for(n, self.subscribed | {n})]
        mailboxes = [n for n in mailboxes if n in watched]
        for marks, new in ((self.own_names, names), (self.own_subscriptions, subscriptions),
                           (self.own_mailboxes, mailboxes)):
            if len(marks) > OWN_CAP:
                marks.clear()
            marks.update(new)

    def _status_changes(self, rows: dict) -> list[bytes]:
        """RFC 5465 5.1-5.3: STATUS for each watched mailbox whose counters changed in a way
        its events ask about (not for the selected mailbox, which its own responses cover)."""
        selected = self.session.selected
        skip = selected.mailbox.id if selected is not None else None
        lines = []
        for mailbox_id, (mailbox, rights, highest) in sorted(rows.items(),
                                                             key=lambda kv: kv[1][0].name):
            if "r" not in rights:  # RFC 4314 4: nothing of it without r (now)
                self.known.pop(mailbox_id, None)
                continue
            events = self.watched.get(mailbox_id)
            before = self.known.get(mailbox_id)
            now = self.known[mailbox_id] = _status_values(mailbox, highest)
            if events is None or before is None or mailbox_id == skip:
                continue
            if self._own(self.own_mailboxes, mailbox.name):
                continue
            messages, uidnext, unseen, modseq = now
            counts = (MESSAGE_NEW in events and (messages, uidnext) != before[:2]) or \
                (MESSAGE_EXPUNGE in events and messages != before[0])
            flags = FLAG_CHANGE in events and (
                unseen != before[2] or (None not in (modseq, before[3]) and modseq != before[3]))
            if not (counts or flags):
                continue
            items = [("MESSAGES", messages), ("UIDNEXT", uidnext)] if counts else []
            items.append(("UNSEEN", unseen))
            if modseq is not None:
                items.append(("HIGHESTMODSEQ", modseq))
            lines.append(status_line(mailbox.name, items, utf8_names(self.session)))
        return lines

    def _metadata_changes(self, digest: dict) -> list[bytes]:
        """RFC 5465 5.6, 5.7 / RFC 5464 4.4.2: ``METADATA mailbox entry...`` naming the
        entries changed (values are not sent); server entries under the mailbox ``""``.
        Changes this session made itself are left out (5: SHOULD NOT be reported)."""
        from .commands.metadata import unsolicited_metadata
        old, self.metadata = self.metadata or {}, digest
        changed: dict[str, set[str]] = {}
        for key in set(old) | set(digest):
            if old.get(key) != digest.get(key) and not self._own(self.own_metadata, key):
                changed.setdefault(key[0], set()).add(key[1])
        lines = []
        utf8 = utf8_names(self.session)
        for mailbox, entries in sorted(changed.items()):
            if mailbox == "":
                if not self.spec.wants(SERVER_METADATA_CHANGE):
                    continue
            elif MAILBOX_METADATA_CHANGE not in self.spec.events_for(mailbox, self.subscribed):
                continue
            lines.append(unsolicited_metadata(mailbox or None, sorted(entries), utf8))
        return lines


def note_own_metadata(session, mailbox: str | None, entries) -> None:
    """For SETMETADATA: the session's NOTIFY, if it reports metadata changes, does not report
    these back (RFC 5465 5).  ``mailbox``: the name as the user gave it (None: the server);
    only the user's own mailboxes are reported on, so only their names are marked."""
    state = session.notify
    if state is None or state.metadata is None:
        return
    if len(state.own_metadata) > OWN_CAP:
        state.own_metadata.clear()
    key = "" if mailbox is None else mailbox
    state.own_metadata.update((key, entry) for entry in entries)


def note_own(session, names=(), subscriptions=(), mailboxes=()) -> None:
    """For commands: tell the session's NOTIFY, if any, what they changed (RFC 5465 5)."""
    if session.notify is not None:
        session.notify.note_own(names, subscriptions, mailboxes)


class _Unsolicited(CommandContext):
    """A FETCH run for NOTIFY's MessageNew: its responses go out as they are made, and it
    ends without a tagged response (there is no command)."""

    def finish(self, status: bytes, text: str, code: str | None = None) -> None:
        self.flush()
