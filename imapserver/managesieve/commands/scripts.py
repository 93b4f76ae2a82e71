"""Script management, in the authenticated state (RFC 5804 2.3, 2.5-2.12).

    havespace    = "HAVESPACE" SP sieve-name SP number CRLF          ; 2.5
    putscript    = "PUTSCRIPT" SP sieve-name SP sieve-script CRLF    ; 2.6
    listscripts  = "LISTSCRIPTS" CRLF                                ; 2.7
    setactive    = "SETACTIVE" SP active-sieve-name CRLF             ; 2.8 ("" deactivates)
    getscript    = "GETSCRIPT" SP sieve-name CRLF                    ; 2.9
    deletescript = "DELETESCRIPT" SP sieve-name CRLF                 ; 2.10
    renamescript = "RENAMESCRIPT" SP old-sieve-name SP new-sieve-name CRLF   ; 2.11.1
    checkscript  = "CHECKSCRIPT" SP sieve-script CRLF                ; 2.12

Storage, limits and atomic activation are mailstore's (mailstore/sievescripts.py); the
validity check is mailstore/sieve/validate.py's.  Store errors become response codes in
server.py (NONEXISTENT, ACTIVE, ALREADYEXISTS, QUOTA/MAXSCRIPTS, QUOTA/MAXSIZE, QUOTA).
"""

from __future__ import annotations

from twisted.internet import defer

from mailstore.errors import InvalidName, NotFound
from mailstore.sieve.validate import validate, warnings

from .. import wire
from ..context import AUTH, No, command


def _script(ctx, index: int) -> str:
    arg = ctx.args[index]
    if not arg.is_string:
        raise No("Expected the script as a string")
    try:
        return arg.data.decode("utf-8")
    except UnicodeDecodeError:
        raise No("The script is not UTF-8 (RFC 5228 2.2)") from None


def _refuse_invalid(errors: list[str]) -> None:
    """RFC 5804 2.6: NO with the errors, which name their lines; nothing is stored."""
    if errors:
        raise No("\r\n".join(errors))


def _warnings(store, user: str, script: str, limits) -> list[str]:
    """RFC 5804 1.3 WARNINGS for a valid script (mailstore/sieve/validate.py), with the
    user's mailboxes for fileinto's target and [sieve]'s vacation range.  In a thread."""
    def exists(name: str) -> bool:
        try:
            store.mailbox(user, name, recover=False)
            return True
        except (NotFound, InvalidName):
            return False
    return warnings(script, limits, exists)


def _finish(ctx, found: list[str], text: str) -> None:
    """OK, with ``(WARNINGS)`` and the warnings as its text when there are some (RFC 5804
    1.3, 2.6: the script is stored all the same), as Pigeonhole answers.  The warnings go
    on one line, joined by "; ", as a quoted string when they fit one (1024 octets):
    sieve-connect takes an OK whose text is a multi-line literal -- what Pigeonhole sends --
    for a failure and exits 1 although the script was stored."""
    if found:
        joined = "; ".join(found)
        ctx.finish(b"OK", joined if len(joined.encode()) <= wire.MAX_QUOTED
                   else "\r\n".join(found), "WARNINGS")
    else:
        ctx.finish(b"OK", text)


@command("HAVESPACE", AUTH)
@defer.inlineCallbacks
def havespace(ctx):
    ctx.expect_args(2)
    name, size = ctx.text(0, "script name"), ctx.number(1, "script size")
    yield ctx.call(ctx.store.sieve_scripts.check_space, ctx.session.user, name, size)
    ctx.finish(b"OK", "Putscript would succeed")


@command("PUTSCRIPT", AUTH)
@defer.inlineCallbacks
def putscript(ctx):
    ctx.expect_args(2)
    name, script = ctx.text(0, "script name"), _script(ctx, 1)
    _refuse_invalid((yield ctx.compute(validate, script)))
    yield ctx.call(ctx.store.sieve_scripts.put, ctx.session.user, name, script)
    found = yield ctx.call(_warnings, ctx.store, ctx.session.user, script,
                           ctx.server.sieve_limits)
    _finish(ctx, found, "Putscript completed")


@command("CHECKSCRIPT", AUTH)
@defer.inlineCallbacks
def checkscript(ctx):
    ctx.expect_args(1)
    script = _script(ctx, 0)
    _refuse_invalid((yield ctx.compute(validate, script)))
    found = yield ctx.call(_warnings, ctx.store, ctx.session.user, script,
                           ctx.server.sieve_limits)
    _finish(ctx, found, "Script is valid")


@command("LISTSCRIPTS", AUTH)
@defer.inlineCallbacks
def listscripts(ctx):
    ctx.expect_args(0)
    for name, active in (yield ctx.call(ctx.store.sieve_scripts.list, ctx.session.user)):
        ctx.line(wire.string(name) + (b" ACTIVE" if active else b""))
    ctx.finish(b"OK", "Listscripts completed")


@command("SETACTIVE", AUTH)
@defer.inlineCallbacks
def setactive(ctx):
    ctx.expect_args(1)
    name = ctx.text(0, "script name")
    yield ctx.call(ctx.store.sieve_scripts.activate, ctx.session.user, name or None)
    ctx.finish(b"OK", "Setactive completed" if name else "Script deactivated")


@command("GETSCRIPT", AUTH)
@defer.inlineCallbacks
def getscript(ctx):
    ctx.expect_args(1)
    name = ctx.text(0, "script name")
    text = yield ctx.call(ctx.store.sieve_scripts.get, ctx.session.user, name)
    if text is None:
        raise No("Script does not exist", "NONEXISTENT")
    data = text.encode("utf-8")
    ctx.line(b"{%d}\r\n" % len(data) + data)     # always a literal, as Dovecot sends it
    ctx.finish(b"OK", "Getscript completed")


@command("DELETESCRIPT", AUTH)
@defer.inlineCallbacks
def deletescript(ctx):
    ctx.expect_args(1)
    yield ctx.call(ctx.store.sieve_scripts.delete, ctx.session.user,
                   ctx.text(0, "script name"))
    ctx.finish(b"OK", "Deletescript completed")


@command("RENAMESCRIPT", AUTH)
@defer.inlineCallbacks
def renamescript(ctx):
    ctx.expect_args(2)
    yield ctx.call(ctx.store.sieve_scripts.rename, ctx.session.user,
                   ctx.text(0, "old script name"), ctx.text(1, "new script name"))
    ctx.finish(b"OK", "Renamescript completed")
