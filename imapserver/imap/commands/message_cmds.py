"""Commands on messages (besides FETCH and SEARCH).

    append   = "APPEND" SP mailbox 1*(SP [flag-list SP] [date-time SP] append-data)
                                               ; RFC 3501 6.3.11, RFC 3502 MULTIAPPEND
    append-data = literal / literal8 / "UTF8" SP "(" literal8 ")"
                                               ; RFC 3516, RFC 6855 4 (after ENABLE)
                / "CATENATE" SP "(" cat-part *(SP cat-part) ")"   ; RFC 4469 5
    expunge  = "EXPUNGE"                       ; 6.4.3
    uid-exp  = "UID EXPUNGE" SP sequence-set   ; RFC 4315
    store    = "STORE" SP sequence-set [SP "(" "UNCHANGEDSINCE" SP mod-sequence-valzer ")"]
               SP ["+" / "-"] "FLAGS" [".SILENT"] SP
               (flag-list / (flag *(SP flag)))  ; 6.4.6, RFC 7162 3.1.3
    copy     = "COPY" SP sequence-set SP mailbox          ; 6.4.7, COPYUID (RFC 4315)
    move     = "MOVE" SP sequence-set SP mailbox          ; RFC 6851
    uid      = "UID" SP (copy / move / fetch / search / store / uid-exp / sort / thread /
                         replace)                         ; 6.4.8, RFC 5256, RFC 8508
"""

from __future__ import annotations

import calendar
import datetime
import re

from twisted.internet import defer

from mailstore import sharing
from mailstore.acl import flag_changeable, public_name
from mailstore.errors import NotFound
from mailstore.messages import canonical_flags

from ..catenate import Catenate, build_message, parse_catenate
from ..context import AUTH, SELECTED, Bad, No, command
from ..literal_stream import StreamedLiteral
from ..names import decode_name
from ..notify_session import note_own
from ..rev2 import utf8_accept, utf8_names
from ..seqset import parse_seqset
from ..wire import Atom, Literal
from .common import (
    announce_keywords,
    enable_condstore,
    flags_list,
    modseq_item,
    modseq_modes,
    parse_modseq,
    report_changes,
)

_MONTHS = {m: i for i, m in enumerate(calendar.month_abbr) if m}


def uid_set_text(uids: list[int]) -> str:
    """UIDs as a compact sequence set, e.g. ``1:3,7`` (for APPENDUID/COPYUID)."""
    out = []
    start = prev = None
    for uid in uids:
        if start is None:
            start = prev = uid
        elif uid == prev + 1:
            prev = uid
        else:
            out.append(f"{start}" if start == prev else f"{start}:{prev}")
            start = prev = uid
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}:{prev}")
    return ",".join(out)


def resolve(ctx, token, uid_mode: bool) -> list[int]:
    """The UIDs a sequence-set argument names in the selected mailbox (ascending).

    ``$`` is the saved search result (RFC 5182 2.1), the same messages in a UID command and
    in one numbered by sequence; empty when nothing was saved since SELECT.  Only ``$`` alone:
    RFC 5182's grammar has no ``$`` inside a set (Dovecot: BAD)."""
    if not isinstance(token, (Atom, bytes)):
        raise Bad("expected a sequence set")
    text = token if isinstance(token, str) else token.decode("ascii", "replace")
    if text == "$":
        return ctx.session.selected.saved_uids()
    try:
        return parse_seqset(text).resolve_uids(ctx.session.selected.uids, uid_mode)
    except ValueError as exc:
        raise Bad(str(exc)) from None


def _existing(store, user: str, name: str, with_rights: bool = False):
    """The target mailbox of APPEND, COPY or MOVE; ``NO [TRYCREATE]`` when it does not exist
    (RFC 3501 6.3.11, 6.4.7) or the user may not see it (RFC 4314 6), ``NO [NOPERM]`` when
    they may see it but not insert into it (RFC 4314 4: "i")."""
    try:
        found = sharing.open_mailbox(store, user, name, "i")
    except NotFound:
        raise No(f"Mailbox does not exist: {name}", "TRYCREATE") from None
    return found if with_rights else found[0]


def allowed_flags(flags: list[str], rights: frozenset[str]) -> list[str]:
    """The flags of an APPEND (or REPLACE) that ``rights`` let the user set; the others are
    left off, silently (RFC 4314 4, as Dovecot)."""
    changeable = flag_changeable(rights)
    if changeable is None:
        return flags
    return [f for f in flags if all(map(changeable, canonical_flags([f])))]


def parse_date_time(raw: bytes) -> float:
    """RFC 3501 date-time: "dd-Mon-yyyy hh:mm:ss +zzzz" (day may be space-padded).

    An impossible date or time (31-Feb, 29-Feb of a common year, hour 24, minute 60) is BAD
    rather than rolled over into another day: the client asked for a date that does not
    exist, and storing another one in its place would be silent (RFC 3501 section 9
    date-time; SEARCH dates are refused alike).  Second 60, a leap second (RFC 5322 3.3), is
    taken as second 59 of the same minute, as Dovecot does, so the day stays the one the
    client named.  Dovecot accepts impossible dates and stores the current time instead.
    """
    try:
        text = raw.decode("ascii").strip()
        date_part, time_part, zone = text.split()
        day, month, year = date_part.split("-")
        hh, mm, ss = (int(x) for x in time_part.split(":"))
        sign = 1 if zone[0] == "+" else -1 if zone[0] == "-" else None
        if sign is None or len(zone) != 5 or month not in _MONTHS:
            raise ValueError
        datetime.date(int(year), _MONTHS[month], int(day))  # ValueError if impossible
        if not (0 <= hh < 24 and 0 <= mm < 60 and 0 <= ss <= 60):
            raise ValueError
        offset = sign * (int(zone[1:3]) * 3600 + int(zone[3:5]) * 60)
        stamp = calendar.timegm((int(year), _MONTHS[month], int(day), hh, mm, min(ss, 59),
                                 0, 0, 0))
        return float(stamp - offset)
    except (ValueError, IndexError, UnicodeDecodeError):
        raise Bad(f"Invalid date-time: {raw!r}") from None


_KEYWORD = re.compile(r'[^(){ %*"\\\]\x00-\x1f\x7f]+\Z')


def parse_flag_args(args) -> list[str]:
    items = args[0] if len(args) == 1 and isinstance(args[0], list) else args
    flags = []
    for item in items:
        if not isinstance(item, Atom):
            raise Bad("flags must be atoms")
        if item.upper() == "\\RECENT":
            raise Bad("\\Recent cannot be set")
        if item.startswith("\\") and item.lower() not in (
                "\\seen", "\\answered", "\\flagged", "\\deleted", "\\draft"):
            raise Bad(f"Unknown system flag {item}")
        if not item.startswith("\\") and not _KEYWORD.match(item):
            # flag-keyword is an atom (RFC 3501 section 9): no ], %, * or \ -- the tokenizer
            # lets ] through for astrings, and a keyword with ] would end PERMANENTFLAGS' code.
            raise No(f"Invalid characters in keyword {item}", "CANNOT")
        flags.append(str(item))
    return flags


def take_append_message(args: list, verb: str, session=None
                        ) -> tuple[list[str], float | None, object]:
    """Take one ``[flag-list SP] [date-time SP] append-data`` off the front of ``args`` (RFC
    3501 6.3.11 append-message, RFC 4469 5; RFC 8508 REPLACE takes the same): ``(flags,
    internal date or None, message)``, the message a literal's bytes, a spooled file, or a
    :class:`~imapserver.imap.catenate.Catenate` (only when ``session`` is given: its selected
    mailbox is the base of ``;UID=`` URLs).  BAD without a message.

    Once the session enabled UTF8=ACCEPT, ``UTF8 (literal8)`` may carry the message (RFC 6855
    4: a message with UTF-8 headers, RFC 6532; stored as any other).  Before that ENABLE the
    data item is BAD (RFC 6855 4: only after ENABLE UTF8=ACCEPT)."""
    flags, date = [], None
    if args and isinstance(args[0], list):
        flags = parse_flag_args([args.pop(0)])
    if args and isinstance(args[0], bytes) and not isinstance(args[0], Literal):
        date = parse_date_time(args.pop(0))
    if session is not None and len(args) >= 2 and isinstance(args[0], Atom) \
            and args[0].upper() == "CATENATE":
        selected = session.selected
        # The selected mailbox by the name the user sees it by: a ";UID=" URL in another
        # user's selected mailbox names that mailbox, not one of the user's own.
        base = (public_name(session.user, selected.mailbox.owner, selected.mailbox.name),
                selected.mailbox.uidvalidity) if selected else None
        args.pop(0)
        return flags, date, parse_catenate(args.pop(0), base)
    if args and isinstance(args[0], Atom) and args[0].upper() == "UTF8":
        if session is None or not utf8_accept(session):
            raise Bad(f"{verb} UTF8 needs ENABLE UTF8=ACCEPT first (RFC 6855 4)")
        if len(args) < 2 or not isinstance(args[1], list) or len(args[1]) != 1 or not _message(
                args[1][0]):
            raise Bad(f"{verb} UTF8 takes one message literal in parentheses")
        args.pop(0)
        return flags, date, args.pop(0)[0]
    if not args or not _message(args[0]):
        raise Bad(f"{verb} expects a message literal")
    return flags, date, args.pop(0)


def close_message(message) -> None:
    """Close what a taken message holds open (spooled literals, CATENATE's TEXT files)."""
    if hasattr(message, "close"):
        message.close()


def close_all(items: list) -> None:
    """Close every spooled literal among a command's arguments, inside lists too (CATENATE's
    TEXT parts), whatever became of the command."""
    for item in items:
        if isinstance(item, list):
            close_all(item)
        else:
            close_message(item)


def assemble(ctx, message, check_quota: bool = True):
    """The message to store for an append-message: itself, or a CATENATE built (RFC 4469).
    Runs in the thread pool; NO [BADURL] / [TOOBIG] / [OVERQUOTA] as build_message says."""
    if not isinstance(message, Catenate):
        return message
    return build_message(ctx.store, message, ctx.session.user,
                         ctx.server.cfg["imap"]["urlauth_submit_users"], ctx.store.clock(),
                         ctx.session.append_limit(), check_quota)


def _message(token) -> bool:
    """Whether ``token`` is a message: a literal, in memory, spooled to a file or stored as it
    arrived (literal_stream.py)."""
    return isinstance(token, (Literal, StreamedLiteral)) or hasattr(token, "read")


def _writable(ctx, need: str = ""):
    """The selected mailbox may be changed, and the ACL gives every right in ``need``
    (RFC 4314 4): NO [READ-ONLY] or NO [NOPERM] otherwise."""
    if ctx.session.selected.readonly:
        raise No("Mailbox is read-only", "READ-ONLY")
    if not set(need) <= ctx.session.selected.rights:
        raise No("Permission denied", "NOPERM")


# -- APPEND ------------------------------------------------------------------------------------

@command("APPEND", AUTH, SELECTED)
@defer.inlineCallbacks
def append(ctx):
    if len(ctx.args) < 2:
        raise Bad("APPEND takes a mailbox and a message")
    name = decode_name(ctx.args[0], utf8_names(ctx.session))
    messages = []
    args = ctx.args[1:]
    user = ctx.session.user

    def run():
        mailbox, rights = _existing(ctx.store, user, name, with_rights=True)
        # CATENATE's URLs are all checked before the first message is stored (RFC 4469 3:
        # a bad URL appends nothing, RFC 3502: nor does any failure of a MULTIAPPEND).
        built = []
        uids = []
        try:
            for _flags, _date, message in messages:
                built.append(assemble(ctx, message))
            for (flags, date, _message), source in zip(messages, built, strict=True):
                flags = allowed_flags(flags, rights)
                if isinstance(source, StreamedLiteral):
                    source = source.take()  # stored already; append owns it from here
                _validity, uid = ctx.store.append(user, mailbox, source, flags, date)
                uids.append(uid)
        except BaseException:
            # RFC 3502: a MULTIAPPEND that fails appends nothing.
            if uids:
                ctx.store.expunge(mailbox, uids)
            raise
        finally:
            for source in built:
                close_message(source)
        return mailbox, uids
    try:
        while args:
            messages.append(take_append_message(args, "APPEND", ctx.session))
        for _flags, _date, message in messages:
            if isinstance(message, StreamedLiteral):
                yield message.ready()  # its last octets are being stored
        mailbox, uids = yield ctx.call(run)
    finally:
        # Spooled literals are closed whatever became of the command (BAD arguments too).
        close_all(ctx.args)
    note_own(ctx.session, mailboxes=[mailbox.name])
    yield report_changes(ctx)
    ctx.finish(b"OK", "APPEND completed",
               f"APPENDUID {mailbox.uidvalidity} {uid_set_text(uids)}")


# -- EXPUNGE -----------------------------------------------------------------------------------

@defer.inlineCallbacks
def _expunge(ctx, only: list[int] | None):
    _writable(ctx, "e")  # RFC 4314 4: EXPUNGE needs "e"
    selected = ctx.session.selected

    def run():
        # Candidates from the session's index and the change log (no scan of the mailbox),
        # or the UIDs named by UID EXPUNGE; the store keeps those with \Deleted as it reads
        # them to expunge (RFC 3501 6.4.3, RFC 4315 2.1).
        selected.require("e")
        doomed = selected.deleted_uids() if only is None else only
        return ctx.store.expunge(selected.mailbox, doomed, only_deleted=True) if doomed else []
    gone = yield ctx.call(run)
    yield report_changes(ctx, expunged=selected.forget(gone))


@command("EXPUNGE", SELECTED)
def expunge(ctx):
    ctx.expect_args(0)
    return _expunge(ctx, None)


# -- STORE -------------------------------------------------------------------------------------

@defer.inlineCallbacks
def _store(ctx, uid_mode: bool):
    unchanged_since = None
    if len(ctx.args) > 1 and isinstance(ctx.args[1], list):
        # RFC 7162 3.1.3: the one store modifier we know; a CONDSTORE-enabling command.
        modifier = ctx.args.pop(1)
        if len(modifier) != 2 or str(modifier[0]).upper() != "UNCHANGEDSINCE":
            raise Bad("Unknown STORE modifier (only UNCHANGEDSINCE is supported)")
        unchanged_since = parse_modseq(modifier[1], zero=True)
        yield enable_condstore(ctx)
    if len(ctx.args) < 3:
        raise Bad("STORE takes a sequence set, an item and flags")
    _writable(ctx)
    uids = resolve(ctx, ctx.args[0], uid_mode)
    item = str(ctx.args[1]).upper()
    modes = {"FLAGS": "replace", "+FLAGS": "add", "-FLAGS": "remove"}
    silent = item.endswith(".SILENT")
    mode = modes.get(item[:-7] if silent else item)
    if mode is None:
        raise Bad(f"Unknown STORE item {ctx.args[1]}")
    flags = parse_flag_args(ctx.args[2:])
    selected = ctx.session.selected

    condstore, qresync = modseq_modes(ctx.session)

    def run():
        # RFC 4314 4: flags the ACL does not let the user change keep their state.
        changed, failed = ctx.store.store_flags(selected.mailbox, uids, flags, mode,
                                                unchanged_since, rights=selected.require(""))
        return changed, failed, [] if silent else ctx.store.fetch(
            selected.mailbox, [u for u in uids if u not in set(failed)])
    changed, failed, views = yield ctx.call(run)
    selected.note_own_flags(changed)  # .SILENT too: the client knows what it set
    updates = []
    if selected.contexts and changed:
        updates = yield ctx.call(selected.retest_contexts, [uid for uid, _flags in changed])
    # A keyword new to the client is announced before the FETCH that shows it, .SILENT or
    # not (RFC 3501 7.2.6; Dovecot does the same).
    announce_keywords(ctx, (name for view in views for name in view.flags.names))
    if silent and condstore:
        # RFC 7162 3.1.3: the new MODSEQ of each message changed, even with .SILENT.
        for uid, new in changed:
            seq = selected.seq_of(uid)
            if seq is not None:
                item = modseq_item(new.modseq)
                if uid_mode or qresync:
                    item = b"UID %d " % uid + item
                ctx.untagged(b"%d FETCH (%s)" % (seq, item))
    for view in views:
        seq = selected.seq_of(view.uid)
        if seq is None:
            continue
        item = b"FLAGS " + flags_list(view.flags.names, view.uid in selected.recent)
        if uid_mode or qresync:  # RFC 7162 3.2.4: UID in every FETCH once QRESYNC is on
            item = b"UID %d " % view.uid + item
        if condstore:
            item += b" " + modseq_item(view.modseq)
        ctx.untagged(b"%d FETCH (%s)" % (seq, item))
    for line in updates:  # RFC 5267 4.3.2: after the FETCH that caused them
        ctx.untagged(line)
    if failed:
        # RFC 7162 3.1.3: the messages whose MODSEQ was above UNCHANGEDSINCE, by UID for
        # UID STORE, else by sequence number.
        named = failed if uid_mode else sorted(
            s for s in (selected.seq_of(u) for u in failed) if s is not None)
        ctx.finish(b"OK", "Conditional STORE failed", f"MODIFIED {uid_set_text(named)}")


@command("STORE", SELECTED)
def store(ctx):
    return _store(ctx, uid_mode=False)


# -- COPY / MOVE -------------------------------------------------------------------------------

@defer.inlineCallbacks
def _transfer(ctx, uid_mode: bool, move: bool):
    ctx.expect_args(2)
    if move:
        _writable(ctx, "te")  # RFC 6851 3.3 / RFC 4314 4: the source loses them
    uids = resolve(ctx, ctx.args[0], uid_mode)
    name = decode_name(ctx.args[1], utf8_names(ctx.session))
    selected = ctx.session.selected
    user = ctx.session.user

    def run():
        if move:
            selected.require("te")
        target, rights = _existing(ctx.store, user, name, with_rights=True)
        if not uids:
            return target, []
        # RFC 4314 4: the copies keep only the flags the target's ACL lets the user set.
        if move:
            # Into the selected mailbox itself too (RFC 6851 3.3): new UIDs, old ones expunged.
            return target, ctx.store.move(selected.mailbox, uids, target, rights)
        return target, ctx.store.copy(selected.mailbox, uids, target, rights)
    target, pairs = yield ctx.call(run)
    if pairs:
        note_own(ctx.session, mailboxes=[target.name])
    code = None
    if pairs:
        code = (f"COPYUID {target.uidvalidity} {uid_set_text([p[0] for p in pairs])} "
                f"{uid_set_text([p[1] for p in pairs])}")
    if move:
        # RFC 6851 4.1: COPYUID goes in an untagged OK before the EXPUNGEs.
        if code:
            ctx.untagged(f"OK [{code}] Moved".encode())
        # Then FLAGS if the new messages bring keywords, the EXPUNGEs, EXISTS (Dovecot's order).
        yield report_changes(ctx, expunged=selected.forget([p[0] for p in pairs]))
        ctx.finish(b"OK", "MOVE completed")
    else:
        yield report_changes(ctx)
        ctx.finish(b"OK", "COPY completed", code)


@command("COPY", SELECTED)
def copy(ctx):
    return _transfer(ctx, uid_mode=False, move=False)


@command("MOVE", SELECTED)
def move(ctx):
    return _transfer(ctx, uid_mode=False, move=True)


# -- UID ---------------------------------------------------------------------------------------

@command("UID", SELECTED)
def uid(ctx):
    if not ctx.args or not isinstance(ctx.args[0], Atom):
        raise Bad("UID needs a command")
    sub = ctx.args[0].upper()
    ctx.args = ctx.args[1:]
    if sub == "FETCH":
        from .fetch import fetch_command
        return fetch_command(ctx, uid_mode=True)
    if sub == "SEARCH":
        from .search_cmd import search_command
        return search_command(ctx, uid_mode=True)
    if sub == "SORT":
        from .sort_cmd import sort_command
        return sort_command(ctx, uid_mode=True)
    if sub == "THREAD":
        from .sort_cmd import thread_command
        return thread_command(ctx, uid_mode=True)
    if sub == "STORE":
        return _store(ctx, uid_mode=True)
    if sub == "COPY":
        return _transfer(ctx, uid_mode=True, move=False)
    if sub == "MOVE":
        return _transfer(ctx, uid_mode=True, move=True)
    if sub == "REPLACE":
        from .replace_cmd import replace_command
        return replace_command(ctx, uid_mode=True)
    if sub == "EXPUNGE":
        ctx.expect_args(1)
        return _expunge(ctx, resolve(ctx, ctx.args[0], uid_mode=True))
    raise Bad(f"Unknown UID command {sub}")

