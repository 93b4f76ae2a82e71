"""IDLE (RFC 2177).

    idle = "IDLE" CRLF "DONE"

The server answers ``+ idling``, then pushes EXISTS / EXPUNGE / FETCH as the mailbox changes
(the process-wide poller in notify.py wakes the session, within a second of the change, also
when it came from another process or from delivery).  Only a line ``DONE`` ends IDLE; any other
line gets an untagged BAD and IDLE goes on.

With NOTIFY SET in force (RFC 5465 4) the session's NOTIFY delivery does the pushing instead:
the selected mailbox's changes as IDLE always reports them, and the other mailboxes' events as
NOTIFY asked, in the order they are found (notify_session.py).
"""

from __future__ import annotations

from twisted.internet import defer
from twisted.python import log

from ..context import AUTH, SELECTED, command
from .common import changes_lines


class _Idle:
    idle = True

    def __init__(self, ctx):
        self.ctx = ctx
        self.done = defer.Deferred()
        self.refreshing = False
        self.again = False
        self.pending: defer.Deferred | None = None  # the refresh under way, if any

    def line_received(self, line: bytes) -> None:
        if line.strip().upper() == b"DONE":
            self.ctx.conn.line_consumer = None
            if not self.done.called:
                self.done.callback(None)
        else:
            self.ctx.conn.write_lines([b"* BAD Expected DONE to end IDLE"])

    def abort(self) -> None:
        if not self.done.called:
            self.done.callback(None)

    def wake(self) -> None:
        """The mailbox changed: refresh and push what changed (one refresh at a time)."""
        if self.done.called:
            return
        if self.refreshing:
            self.again = True
            return
        self.refreshing = True
        selected = self.ctx.session.selected
        d = self.ctx.call(selected.refresh)

        def push(changes):
            # Written even if DONE came meanwhile: the refresh has already moved the session's
            # numbering on, so the client must hear of it, and idle() waits for this before
            # its tagged OK (untagged responses may precede it, RFC 3501 7).
            if self.ctx.session.selected is selected:
                lines = changes_lines(changes, readonly=selected.readonly,
                                      session=self.ctx.session)
                self.ctx.conn.write_lines([b"* " + line for line in lines])

        def finished(_):
            self.refreshing = False
            self.pending = None
            if self.again and not self.done.called:
                self.again = False
                self.wake()
        d.addCallback(push)
        d.addErrback(log.err, "IDLE refresh failed")
        d.addBoth(finished)
        if self.refreshing:
            self.pending = d


@command("IDLE", AUTH, SELECTED)
@defer.inlineCallbacks
def idle(ctx):
    ctx.expect_args(0)
    consumer = _Idle(ctx)
    ctx.conn.line_consumer = consumer
    ctx.flush()
    ctx.conn.write_lines([b"+ idling"])
    ctx.conn.reset_timeout()
    notify = ctx.session.notify
    if notify is not None:
        notify.idle = consumer
        notify.selected_due = ctx.session.selected is not None
        notify.wake()  # anything that changed before IDLE began
    elif ctx.session.selected is not None:
        ctx.server.watchers.watch(ctx.session, consumer.wake)
        consumer.wake()  # anything that changed before IDLE began
    try:
        yield consumer.done
    finally:
        ctx.server.watchers.unwatch(ctx.session)
        if notify is not None:
            notify.idle = None
        ctx.conn.line_consumer = None
        ctx.conn.reset_timeout()
    # A refresh still running changes the session's view: let it finish and report before the
    # next command (which may refresh too) runs, or the numbering would drift from the client's.
    while consumer.pending is not None:
        yield consumer.pending
    while notify is not None and notify.pending is not None:
        yield notify.pending
