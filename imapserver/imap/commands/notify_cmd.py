"""NOTIFY (RFC 5465 3.1).

    notify          = "NOTIFY" SP (notify-set / notify-none)
    notify-set      = "SET" [SP "STATUS"] SP event-groups    ; grammar in ../notify_spec.py
    notify-none     = "NONE"
    resp-text-code  =/ "NOTIFICATIONOVERFLOW" / "BADEVENT" SP "(" event *(SP event) ")"

NOTIFY SET replaces what the session watches: a bad group is BAD with the reason, an event we
do not report NO [BADEVENT (what we report)], more than ../notify_session.py's MAX_WATCHED
mailboxes NO [NOTIFICATIONOVERFLOW]; on success the old setting is gone.  With STATUS, a STATUS
response for each watched mailbox other than the selected one comes before the OK, and like a
NOOP the command reports what changed in the selected mailbox (3.1).  NOTIFY NONE stops all
notifications (the ones IDLE and the base protocol give stay).
"""

from __future__ import annotations

from twisted.internet import defer

from ..context import AUTH, SELECTED, Bad, No, command
from ..notify_session import NotifyState, metadata_supported
from ..notify_spec import parse_notify_set, supported_events
from ..rev2 import utf8_names
from ..wire import Atom
from .common import report_changes


def _load(state: NotifyState, store) -> list[bytes]:
    state.load(store)
    if state.overflowing:
        return []
    if not state.spec.status:
        # Message events asked for a mailbox the user sees without r: LIST (\NoAccess)
        # at NOTIFY SET, STATUS or not (RFC 5465 3.1 with RFC 4314 4).
        return state.no_access_lines()
    return state.initial_status(store)


@command("NOTIFY", AUTH, SELECTED)
@defer.inlineCallbacks
def notify(ctx):
    if not ctx.args or not isinstance(ctx.args[0], Atom):
        raise Bad("NOTIFY takes SET or NONE")
    word = ctx.args[0].upper()
    session = ctx.session
    if word == "NONE":
        ctx.expect_args(1)
        if session.notify is not None:
            session.notify.stop()
        return
    if word != "SET":
        raise Bad("NOTIFY takes SET or NONE")
    spec = parse_notify_set(ctx.args[1:], supported_events(metadata_supported(ctx.store)),
                            ctx.server.cfg["delivery"]["plus_addressing"],
                            utf8_names(session))
    state = NotifyState(session, ctx.conn, spec)
    status = yield ctx.call(_load, state, ctx.store)
    if state.overflowing:
        raise No("Too many mailboxes to watch", "NOTIFICATIONOVERFLOW")
    if session.notify is not None:
        session.notify.stop()
    session.notify = state
    ctx.server.watchers.notify(session)
    for line in status:
        ctx.untagged(line)
    yield report_changes(ctx)  # "a successful NOTIFY SET command implies an implicit NOOP"
