"""Commands valid in any state, and CHECK.

    capability = "CAPABILITY"            ; RFC 3501 6.1.1
    noop       = "NOOP"                  ; 6.1.2 (reports pending changes)
    logout     = "LOGOUT"                ; 6.1.3
    id         = "ID" SP ("(" *(string SP nstring) ")" / nil)   ; RFC 2971
    enable     = "ENABLE" 1*(SP capability)                     ; RFC 5161, RFC 9051 6.3.1
                 ; CONDSTORE, QRESYNC (RFC 7162), IMAP4rev2 (RFC 9051), UTF8=ACCEPT (RFC 6855)
    check      = "CHECK"                 ; 6.4.1
"""

from __future__ import annotations

from twisted.internet import defer

from .. import rev2 as rev2_switches
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


ENABLEABLE = ("CONDSTORE", "QRESYNC", *rev2_switches.ENABLEABLE)
_SPELLING = {name.upper(): name for name in ENABLEABLE}


@command("ENABLE", AUTH, SELECTED)
@defer.inlineCallbacks
def enable(ctx):
    if not ctx.args:
        raise Bad("ENABLE needs at least one capability")
    # RFC 5161 3.1: unknown capabilities are ignored; ENABLED lists the known ones asked for,
    # also when already enabled (as Dovecot does).  QRESYNC implies CONDSTORE (RFC 7162
    # 3.2.3).
    session = ctx.session
    enabled = []
    for arg in ctx.args:
        name = _SPELLING.get(str(arg).upper())
        if name is not None and name not in enabled:
            enabled.append(name)
    had_condstore = "CONDSTORE" in session.enabled
    session.enabled.update(enabled)
    if "QRESYNC" in enabled:
        session.enabled.add("CONDSTORE")
    selected = session.selected
    if selected is not None and not had_condstore and "CONDSTORE" in session.enabled:
        # The mailbox was selected without CONDSTORE: its HIGHESTMODSEQ now (as Dovecot
        # sends it; RFC 7162 3.1.2.1 gives it at SELECT).
        selected.modseqs = True
        highest = yield ctx.call(selected.highest_modseq)
        ctx.untagged(b"OK [HIGHESTMODSEQ %d] Highest" % highest)
    if selected is not None and rev2_switches.rev2(session):
        # RFC 9051 has no \Recent: a session switched while a mailbox is selected (RFC 5161
        # 3.1 asks clients not to, servers need not refuse) stops showing and claiming it.
        selected.stop_recent()
    ctx.untagged(b"ENABLED" + b"".join(b" " + name.encode() for name in enabled))
