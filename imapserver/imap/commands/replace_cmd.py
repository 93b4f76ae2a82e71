"""REPLACE (RFC 8508): save a new version of a message (a draft, a note) in one command.

    replace     = "REPLACE" SP seq-number SP mailbox append-message     ; RFC 8508 5
    uid-replace = "UID" SP "REPLACE" SP uniqueid SP mailbox append-message
    append-message = [SP flag-list] [SP date-time] SP append-data       ; as APPEND's
    append-data    = literal / "CATENATE" SP "(" cat-part *(SP cat-part) ")"   ; RFC 4469
                                                   ; (UTF8 (...) too: RFC 6855 4)

The new message is appended to ``mailbox`` and the replaced one expunged from the selected
mailbox (RFC 8508 3.4), by ``MailStore.replace`` in that order (docs/decisions/0017).  The
client hears ``OK [APPENDUID ...]`` untagged before the EXPUNGE (RFC 8508 4.3), then the
EXPUNGE (VANISHED once QRESYNC is enabled: report_changes chooses, RFC 7162 3.2.10) and,
when ``mailbox`` is the selected one, the EXISTS of the new message.
"""

from __future__ import annotations

from twisted.internet import defer

from ..context import SELECTED, Bad, No, command
from ..names import decode_name
from ..rev2 import utf8_names
from ..wire import Atom
from .common import report_changes
from .message_cmds import (
    _existing,
    _writable,
    allowed_flags,
    assemble,
    close_all,
    close_message,
    resolve,
    take_append_message,
)


def _replaced_uid(ctx, token, uid_mode: bool) -> int | None:
    """The UID the seq-number / uniqueid names (``*``: the last message), None for a UID the
    session does not hold.  One number only: RFC 8508 5 takes no set (BAD)."""
    text = str(token) if isinstance(token, Atom) else ""
    if not (text == "*" or (text.isdigit() and not text.startswith("0"))):
        raise Bad("REPLACE takes one message number")
    uids = resolve(ctx, token, uid_mode)  # BAD for a sequence number out of range
    return uids[0] if uids else None


@defer.inlineCallbacks
def replace_command(ctx, uid_mode: bool):
    if len(ctx.args) < 3:
        raise Bad("REPLACE takes a message number, a mailbox and a message")
    args = list(ctx.args)
    token = args.pop(0)
    name = decode_name(args.pop(0), utf8_names(ctx.session))
    try:
        flags, date, message = take_append_message(args, "REPLACE", ctx.session)
        if args:
            raise Bad("REPLACE takes one message")  # no MULTIAPPEND (RFC 8508 4.7)
        _writable(ctx, "te")  # RFC 8508 3.4, RFC 4314 4: the replaced message goes
        selected = ctx.session.selected
        old_uid = _replaced_uid(ctx, token, uid_mode)
        if old_uid is None and str(token) == "*":
            raise No("No message to replace", "EXPUNGEISSUED")
        user = ctx.session.user

        def run():
            selected.require("te")  # RFC 4314 4 as of now: the replaced message goes
            # NO [TRYCREATE] (RFC 8508 3.4); "i" on the target as for APPEND, whose flags
            # the target's ACL does not let the user set are left off.
            target, rights = _existing(ctx.store, user, name, with_rights=True)
            kept = allowed_flags(flags, rights)
            # A UID this session does not hold is asked of the store too: it may have come
            # since the last refresh; if it is not there, Expunged (NO [EXPUNGEISSUED]).
            uid = old_uid if old_uid is not None else int(str(token))
            # RFC 8508 takes CATENATE's append-data too; the quota is the store's to check,
            # with the replaced message credited.
            source = assemble(ctx, message, check_quota=False)
            try:
                return target, uid, ctx.store.replace(selected.mailbox, uid, target, source,
                                                      kept, date)
            finally:
                close_message(source)
        target, uid, (validity, new_uid) = yield ctx.call(run)
    finally:
        # A literal spooled to a file (large messages) is closed whatever became of it: also
        # when the arguments around it were refused.
        close_all(ctx.args)
    # RFC 8508 4.3: APPENDUID in an untagged OK before the EXPUNGE; then the EXPUNGE and the
    # EXISTS (when the target is the selected mailbox) as MOVE's are reported.
    ctx.untagged(f"OK [APPENDUID {validity} {new_uid}] Replacement message ready".encode())
    yield report_changes(ctx, expunged=selected.forget([uid]))
    ctx.finish(b"OK", "REPLACE completed")


@command("REPLACE", SELECTED)
def replace(ctx):
    return replace_command(ctx, uid_mode=False)
