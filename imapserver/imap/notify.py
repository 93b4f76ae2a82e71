"""Telling IDLE sessions about changes, through the store itself.

Any process may change a mailbox (another frontend, LMTP delivery), so there is no in-process
event to wait for.  Instead one poller per server process reads the counters of every mailbox
that some IDLE session is watching -- one multi-get per tick for all of them -- and wakes the
sessions of the mailboxes whose UID or change-log watermark moved.  Each woken session refreshes
its own view (selected.py) and writes EXISTS / EXPUNGE / FETCH.  The tick is 0.25 s, so a
change is pushed well within the one second the issues ask for; an idle store costs one small
read per tick.  See docs/decisions/0007-imap-change-detection.md.

NOTIFY sessions (RFC 5465, notify_session.py) ride the same tick: the mailboxes they watch join
the one multi-get of marks, and the change generations of their users (mailbox list,
subscriptions, metadata: decision 0021) are one more multi-get.  The marks read per tick are
capped at :data:`MARKS_PER_TICK`: beyond it the watched mailboxes are read in turns, so a
session watching thousands of mailboxes slows its own notifications, not the tick.  Each NOTIFY
session compares what was read with its own last look and is woken when something it watches
moved.
"""

from __future__ import annotations

from twisted.internet import task, threads
from twisted.python import log

POLL_INTERVAL = 0.25
MARKS_PER_TICK = 2000
"""Mailbox marks read per tick at most (one multi-get); more watched ones are read in turns."""


class Watchers:
    def __init__(self, server):
        self.server = server
        self.by_mailbox: dict[bytes, set] = {}
        self.seen: dict[bytes, tuple[int, int, int]] = {}
        self._loop: task.LoopingCall | None = None
        self._polling = False
        self.notifying: set = set()  # sessions with NOTIFY SET in force
        self._turn = 0  # where the next capped read of marks starts (MARKS_PER_TICK)

    def watch(self, session, callback) -> None:
        """Call ``callback()`` (in the reactor thread) when ``session``'s mailbox changes."""
        mailbox_id = session.selected.mailbox.id
        session._watch_callback = callback
        self.by_mailbox.setdefault(mailbox_id, set()).add(session)
        self._start()

    def notify(self, session) -> None:
        """Poll for ``session.notify`` (a NotifyState) until :meth:`unnotify`."""
        self.notifying.add(session)
        self._start()

    def unnotify(self, session) -> None:
        self.notifying.discard(session)
        self._stop_if_idle()

    def _start(self) -> None:
        if self._loop is None:
            self._loop = task.LoopingCall(self._tick)
            self._loop.clock = self.server.reactor
            self._loop.start(POLL_INTERVAL, now=False).addErrback(log.err)

    def _stop_if_idle(self) -> None:
        if not self.by_mailbox and not self.notifying and self._loop is not None \
                and self._loop.running:
            self._loop.stop()
            self._loop = None

    def unwatch(self, session) -> None:
        for mailbox_id, sessions in list(self.by_mailbox.items()):
            sessions.discard(session)
            if not sessions:
                del self.by_mailbox[mailbox_id]
                self.seen.pop(mailbox_id, None)
        self._stop_if_idle()

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None

    def _tick(self):
        if self._polling or not (self.by_mailbox or self.notifying):
            return None
        self._polling = True
        ids = self._ids_this_tick()
        users = sorted({s.user for s in self.notifying
                        if s.user is not None and s.notify is not None
                        and s.notify.wants_generations})
        d = threads.deferToThreadPool(self.server.reactor, self.server.threadpool,
                                      self._read, ids, users)
        d.addCallback(self._compare_all)
        d.addErrback(log.err, "IDLE/NOTIFY poll failed")
        d.addBoth(self._done)
        return None

    def _ids_this_tick(self) -> list[bytes]:
        """IDLE's mailboxes, then NOTIFY's, at most MARKS_PER_TICK: the NOTIFY ones past the
        cap are read in turns (a window moving round them tick by tick)."""
        ids = list(self.by_mailbox)
        wanted = set(ids)
        extra: list[bytes] = []
        for session in self.notifying:
            if session.notify is not None:
                for mailbox_id in session.notify.poll_ids():
                    if mailbox_id not in wanted:
                        wanted.add(mailbox_id)
                        extra.append(mailbox_id)
        room = max(MARKS_PER_TICK - len(ids), 0)
        if len(extra) <= room:
            return ids + extra
        extra.sort()
        start = self._turn % len(extra)
        window = (extra + extra)[start:start + room]
        self._turn = start + room
        return ids + window

    def _read(self, ids: list[bytes], users: list[str]):
        store = self.server.store
        return (store.marks(ids) if ids else {}), (store.generations(users) if users else {})

    def _compare_all(self, found) -> None:
        marks, generations = found
        self._compare({k: v for k, v in marks.items() if k in self.by_mailbox})
        for session in list(self.notifying):
            state = session.notify
            if state is not None and state.compare(marks, generations.get(session.user)):
                state.wake()

    def _done(self, _):
        self._polling = False

    def _compare(self, found) -> None:
        for mailbox_id, marks in found.items():
            if self.seen.get(mailbox_id) == marks:
                continue
            self.seen[mailbox_id] = marks
            # The first reading of a mailbox wakes its sessions too: a change may have landed
            # between a session's last refresh and its watch.  A refresh that finds nothing
            # sends nothing.
            for session in list(self.by_mailbox.get(mailbox_id, ())):
                callback = getattr(session, "_watch_callback", None)
                if callback is not None:
                    callback()
