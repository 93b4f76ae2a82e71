"""Access control commands (RFC 4314 3).

    setacl       = "SETACL" SP mailbox SP identifier SP mod-rights      ; 3.1
    deleteacl    = "DELETEACL" SP mailbox SP identifier                 ; 3.2
    getacl       = "GETACL" SP mailbox                                  ; 3.3
    listrights   = "LISTRIGHTS" SP mailbox SP identifier                ; 3.4
    myrights     = "MYRIGHTS" SP mailbox                                ; 3.5
    identifier   = astring
    mod-rights   = astring       ; +rights to add, -rights to remove, else the rights to set
    acl-data     = "ACL" SP mailbox *(SP identifier SP rights)          ; 3.6
    listrights-data = "LISTRIGHTS" SP mailbox SP identifier SP rights *(SP rights)   ; 3.7
    myrights-data   = "MYRIGHTS" SP mailbox SP rights                   ; 3.8

Rights are checked and changed in mailstore (sharing.py, acl.py); these handlers only parse
and answer.  A mailbox the user may not see is answered as one that does not exist
(NO [NONEXISTENT], RFC 4314 6); one they may see without ``a`` gets NO [NOPERM] (3.1-3.4).
"""

from __future__ import annotations

from twisted.internet import defer

from mailstore import sharing
from mailstore.acl import format_rights, public_name
from mailstore.errors import InvalidName

from ..context import AUTH, SELECTED, Bad, command
from ..names import decode_name, encode_name
from ..rev2 import utf8_names
from ..wire import ParseError, as_text, astring


def _text(token, what: str) -> str:
    try:
        return as_text(token, what)
    except ParseError as exc:
        raise Bad(str(exc)) from None


def _shown(ctx, mailbox) -> bytes:
    """The mailbox by the name the user sees (RFC 2342), in the session's spelling."""
    return encode_name(public_name(ctx.session.user, mailbox.owner, mailbox.name),
                       utf8_names(ctx.session))


def _name(ctx) -> str:
    """The mailbox argument, UTF-8 once enabled (RFC 6855 3, RFC 9051 5.1)."""
    return decode_name(ctx.args[0], utf8_names(ctx.session))


@command("SETACL", AUTH, SELECTED)
@defer.inlineCallbacks
def setacl(ctx):
    ctx.expect_args(3)
    name = _name(ctx)
    identifier, rights = _text(ctx.args[1], "identifier"), _text(ctx.args[2], "rights")
    try:
        yield ctx.call(sharing.set_acl, ctx.store, ctx.session.user, name, identifier, rights)
    except ValueError as exc:  # a letter that is no right (RFC 4314 3.1: BAD)
        raise Bad(str(exc)) from None
    except InvalidName as exc:
        raise Bad(str(exc)) from None
    ctx.finish(b"OK", "SETACL completed")


@command("DELETEACL", AUTH, SELECTED)
@defer.inlineCallbacks
def deleteacl(ctx):
    ctx.expect_args(2)
    name = _name(ctx)
    identifier = _text(ctx.args[1], "identifier")
    try:
        yield ctx.call(sharing.delete_acl, ctx.store, ctx.session.user, name, identifier)
    except InvalidName as exc:
        raise Bad(str(exc)) from None
    ctx.finish(b"OK", "DELETEACL completed")


@command("GETACL", AUTH, SELECTED)
@defer.inlineCallbacks
def getacl(ctx):
    ctx.expect_args(1)
    name = _name(ctx)
    mailbox, _rights = yield ctx.call(sharing.open_mailbox, ctx.store, ctx.session.user,
                                      name, "a")
    line = b"ACL " + _shown(ctx, mailbox)
    for identifier, rights in sharing.acl_entries(mailbox):
        line += b" " + astring(identifier.encode()) + b" " + astring(
            format_rights(rights).encode())
    ctx.untagged(line)
    ctx.finish(b"OK", "GETACL completed")


@command("LISTRIGHTS", AUTH, SELECTED)
@defer.inlineCallbacks
def listrights(ctx):
    ctx.expect_args(2)
    name = _name(ctx)
    identifier = _text(ctx.args[1], "identifier")
    mailbox, _rights = yield ctx.call(sharing.open_mailbox, ctx.store, ctx.session.user,
                                      name, "a")
    # RFC 4314 3.7: nothing is always granted; every right can be given on its own, and the
    # obsolete c and d (2.1.1) too.  (The owner's rights are implicit, decision 0018.)
    optional = " ".join("lrwstpiekxacd")  # Dovecot's order, so transcripts compare
    ctx.untagged(b"LISTRIGHTS " + _shown(ctx, mailbox) + b" " + astring(identifier.encode())
                 + b' "" ' + optional.encode())
    ctx.finish(b"OK", "LISTRIGHTS completed")


@command("MYRIGHTS", AUTH, SELECTED)
@defer.inlineCallbacks
def myrights(ctx):
    ctx.expect_args(1)
    name = _name(ctx)
    # RFC 4314 3.5: any right at all lets the user ask.
    mailbox, rights = yield ctx.call(sharing.open_mailbox, ctx.store, ctx.session.user,
                                     name, "")
    ctx.untagged(b"MYRIGHTS " + _shown(ctx, mailbox) + b" " + format_rights(rights).encode())
    ctx.finish(b"OK", "MYRIGHTS completed")
