"""Commands valid in any state, and CHECK.

    capability = "CAPABILITY"            ; RFC 3501 6.1.1
    noop       = "NOOP"                  ; 6.1.2 (reports pending changes)
    logout     = "LOGOUT"                ; 6.1.3
    id         = "ID" SP ("(" *(string SP nstring) ")" / nil)   ; RFC 2971
    enable     = "ENABLE" 1*(SP capability)                     ; RFC 5161
    check      = "CHECK"                 ; 6.4.1
"""

from __future__ import annotations

from twisted.internet import defer

from ..context import ANY, AUTH, SELECTED, Bad, command
from ..wire import Atom, nstring
from .common import report_changes


@command("CAPABILITY", *ANY)
def capability(ctx):
    ctx.expect_args(0)
    ctx.untagged(b"CAPABILITY " + " ".join(ctx.session.capabilities()).encode())


@command("NOOP", *ANY)
@defer.inlineCallbacks
def noop(ctx):
    ctx.expect_args(0)
    yield report_changes(ctx)


@command("CHECK", SELECTED)
@defer.inlineCallbacks
def check(ctx):
    ctx.expect_args(0)
    yield report_changes(ctx)


@command("LOGOUT", *ANY)
def logout(ctx):
    ctx.expect_args(0)
    ctx.untagged(b"BYE Logging out")
    ctx.finish(b"OK", "LOGOUT completed")
    # RFC 3501 6.1.3: nothing after the tagged OK; the server closes the connection.
    ctx.conn.close()


@command("ID", *ANY)
def ident(ctx):
    ctx.expect_args(1)
    arg = ctx.args[0]
    if not (isinstance(arg, list) or (isinstance(arg, Atom) and arg.upper() == "NIL")):
        raise Bad("ID takes a parenthesized list or NIL")
    if isinstance(arg, list) and (len(arg) % 2 or len(arg) > 60):
        raise Bad("ID list must hold field/value pairs (at most 30)")
    fields = [b'"name"', nstring("hbase-imap"), b'"vendor"', nstring("hbase-imap project")]
    ctx.untagged(b"ID (" + b" ".join(fields) + b")")


@command("ENABLE", AUTH, SELECTED)
def enable(ctx):
    if not ctx.args:
        raise Bad("ENABLE needs at least one capability")
    # We implement no extension that needs enabling (CONDSTORE, QRESYNC, UTF8=ACCEPT come
    # later); RFC 5161 says unknown ones are ignored, and ENABLED lists what was enabled.
    ctx.untagged(b"ENABLED")
