"""Telling IDLE sessions about changes, through the store itself.

Any process may change a mailbox (another frontend, LMTP delivery), so there is no in-process
event to wait for.  Instead one poller per server process reads the counters of every mailbox
that some IDLE session is watching -- one multi-get per tick for all of them -- and wakes the
sessions of the mailboxes whose UID or change-log watermark moved.  Each woken session refreshes
its own view (selected.py) and writes EXISTS / EXPUNGE / FETCH.  The tick is 0.25 s, so a
change is pushed well within the one second the issues ask for; an idle store costs one small
read per tick.  See docs/decisions/0007-imap-change-detection.md.
"""

from __future__ import annotations

from twisted.internet import task, threads
from twisted.python import log

POLL_INTERVAL = 0.25


class Watchers:
    def __init__(self, server):
        self.server = server
        self.by_mailbox: dict[bytes, set] = {}
        self.seen: dict[bytes, tuple[int, int, int]] = {}
        self._loop: task.LoopingCall | None = None
        self._polling = False

    def watch(self, session, callback) -> None:
        """Call ``callback()`` (in the reactor thread) when ``session``'s mailbox changes."""
        mailbox_id = session.selected.mailbox.id
        session._watch_callback = callback
        self.by_mailbox.setdefault(mailbox_id, set()).add(session)
        if self._loop is None:
            self._loop = task.LoopingCall(self._tick)
            self._loop.clock = self.server.reactor
            self._loop.start(POLL_INTERVAL, now=False).addErrback(log.err)

    def unwatch(self, session) -> None:
        for mailbox_id, sessions in list(self.by_mailbox.items()):
            sessions.discard(session)
            if not sessions:
                del self.by_mailbox[mailbox_id]
                self.seen.pop(mailbox_id, None)
        if not self.by_mailbox and self._loop is not None and self._loop.running:
            self._loop.stop()
            self._loop = None

    def stop(self) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None

    def _tick(self):
        if self._polling or not self.by_mailbox:
            return None
        self._polling = True
        ids = list(self.by_mailbox)
        d = threads.deferToThreadPool(self.server.reactor, self.server.threadpool,
                                      self.server.store.marks, ids)
        d.addCallback(self._compare)
        d.addErrback(log.err, "IDLE poll failed")
        d.addBoth(self._done)
        return None

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
