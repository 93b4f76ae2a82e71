"""METADATA and METADATA-SERVER (RFC 5464): annotations on mailboxes and on the server.

    getmetadata  = "GETMETADATA" [SP getmetadata-options] SP mailbox SP entries   ; 4.2
    getmetadata-options = "(" getmetadata-option *(SP getmetadata-option) ")"
    getmetadata-option  = "MAXSIZE" SP number                                    ; 4.2.1
                        / "DEPTH" SP ("0" / "1" / "infinity")                     ; 4.2.2
    setmetadata  = "SETMETADATA" SP mailbox SP "(" entry-value *(SP entry-value) ")"  ; 4.3
    entries      = entry / "(" entry *(SP entry) ")"
    entry        = astring          ; slash-separated, no "*" or "%" (3.2.1)
    entry-value  = entry SP value
    value        = nstring / literal8
    metadata-resp = "METADATA" SP mailbox SP entry-values                       ; 4.4.1
    resp-text-code =/ "METADATA" SP ("LONGENTRIES" SP number / "MAXSIZE" SP number /
                                     "TOOMANY" / "NOPRIVATE")                    ; 4.2.1, 4.3

The mailbox ``""`` names the server (METADATA-SERVER).  Entry names are case-insensitive and
answered lower case; a requested entry without a value is answered NIL with DEPTH 0 and left
out of a deeper answer, as Dovecot does.  Mail semantics (names, limits, what is read-only, the
predefined entries) are :mod:`mailstore.metadata`'s; this module parses and renders.  NOPRIVATE
never applies: every mailbox here has private entries.  The unsolicited METADATA response of
4.4.2 is only for NOTIFY's MailboxMetadataChange and ServerMetadataChange (RFC 5465 5.6,
5.7): every SETMETADATA that changes something moves the user's metadata generation on,
which NOTIFY polls (notify_session.py).

Rights (RFC 5464 3.3 with RFC 4314): reading or writing a mailbox's entries, private or
shared, needs ``l`` and one of ``r``, ``s``, ``w``, ``i``, ``p`` on it (mailstore checks
them through sharing.open_mailbox: without ``l`` the answer is the NO [NONEXISTENT] of a
missing mailbox, with ``l`` alone NO [NOPERM]); ``/private`` entries on another user's
mailbox are the reader's own; its ``/private/specialuse`` is the owner's setting, not
theirs to read or set.  Server entries need no right.
"""

from __future__ import annotations

from twisted.internet import defer

from mailstore.errors import OverQuota
from mailstore.metadata import (
    DEPTHS,
    BadSpecialUse,
    EntryTooLarge,
    InvalidEntry,
    Policy,
    ReadOnlyEntry,
    TooManyEntries,
    entry_name,
)

from ..context import AUTH, SELECTED, Bad, No, command
from ..names import decode_name, encode_name
from ..notify_session import note_own_metadata
from ..rev2 import utf8_names
from ..wire import Atom, ParseError, as_text, astring, nstring


def policy(ctx) -> Policy:
    """The ``[imap] metadata_*`` settings as the store's Policy."""
    imap = ctx.server.cfg["imap"]
    return Policy(max_value=imap["metadata_max_value_size"],
                  max_entries=imap["metadata_max_entries"],
                  max_user_octets=imap["metadata_max_user_size"], admin=imap["metadata_admin"])


def _mailbox(ctx, token) -> str | None:
    """The mailbox argument: None for ``""`` (the server, RFC 5464 4.2); UTF-8 once the
    session enabled it (RFC 6855 3, RFC 9051 5.1)."""
    if isinstance(token, bytes) and token == b"":
        return None
    return decode_name(token, utf8_names(ctx.session))


def _entry(token) -> str:
    if isinstance(token, list):
        raise Bad("An entry name is a string, not a list")
    try:
        return entry_name(as_text(token, "entry name"))
    except InvalidEntry as exc:
        raise Bad(str(exc)) from None


def _options(tokens: list) -> tuple[int | None, int | None]:
    """(MAXSIZE or None, DEPTH: 0, 1 or None for infinity) from an options list (4.2.1, 4.2.2)."""
    maxsize, depth = None, 0
    if len(tokens) % 2:
        raise Bad("GETMETADATA options come as name and value pairs")
    for name, value in zip(tokens[::2], tokens[1::2], strict=True):
        word = name.upper() if isinstance(name, Atom) else ""
        text = str(value) if isinstance(value, Atom) else ""
        if word == "MAXSIZE" and text.isdigit() and text.isascii() and int(text) < 2**32:
            maxsize = int(text)
        elif word == "DEPTH" and text.lower() in DEPTHS:
            depth = DEPTHS[text.lower()]
        else:
            raise Bad("GETMETADATA options are MAXSIZE n and DEPTH 0, 1 or infinity")
    return maxsize, depth


def value_text(value: bytes | None) -> bytes:
    """A value for a METADATA response: NIL, a string, or a literal8 when it holds NUL (which
    neither a quoted string nor a literal may carry; RFC 5464 5 allows literal8)."""
    if value is not None and b"\x00" in value:
        return b"~{%d}\r\n" % len(value) + value
    return nstring(value)


@command("GETMETADATA", AUTH, SELECTED)
@defer.inlineCallbacks
def getmetadata(ctx):
    args = list(ctx.args)
    options: list = []
    if args and isinstance(args[0], list):
        options = args.pop(0)
    if len(args) != 2 or isinstance(args[0], list):
        raise Bad("GETMETADATA takes [options] mailbox entries")
    maxsize, depth = _options(options)
    mailbox = _mailbox(ctx, args[0])
    wanted = args[1] if isinstance(args[1], list) else [args[1]]
    if not wanted:
        raise Bad("GETMETADATA needs at least one entry")
    names = [_entry(token) for token in wanted]
    stored_name, found = yield ctx.call(ctx.store.get_metadata, ctx.session.user, mailbox,
                                        names, depth, policy(ctx))
    items, longest = [], 0
    for name, value in found:
        if value is not None and maxsize is not None and len(value) > maxsize:
            longest = max(longest, len(value))  # 4.2.1: left out, and its size reported
            continue
        items.append(astring(name) + b" " + value_text(value))
    if items:
        where = b'""' if stored_name is None else encode_name(stored_name,
                                                             utf8_names(ctx.session))
        ctx.untagged(b"METADATA " + where + b" (" + b" ".join(items) + b")")
    if longest:
        ctx.ok_code = f"METADATA LONGENTRIES {longest}"


def unsolicited_metadata(mailbox_name: str | None, entries, utf8: bool = False) -> bytes:
    """An unsolicited METADATA response without values (RFC 5464 4.4.2), for NOTIFY's
    MailboxMetadataChange and ServerMetadataChange (RFC 5465 5.6, 5.7): ``METADATA mailbox
    entry...`` -- the mailbox's name as the user sees it (None: the server), spelt in UTF-8
    with ``utf8``, and the entries that changed (metadata.changed_entries), unparenthesised
    as RFC 5464 4.4.2's entry-list and its example."""
    where = b'""' if mailbox_name is None else encode_name(mailbox_name, utf8)
    return b"METADATA " + where + b" " + b" ".join(astring(e) for e in entries)


def _value(token, limit: int) -> bytes | None:
    """A SETMETADATA value: NIL (remove), a string or literal (8), or a spooled literal read
    up to one octet past ``limit`` (enough to refuse it)."""
    if isinstance(token, Atom):
        if token.upper() == "NIL":
            return None
        raise Bad("An entry value is NIL or a string")
    if isinstance(token, bytes):
        return bytes(token)
    if hasattr(token, "read"):  # spooled to disk by the receiver (protocol.SPOOL_ABOVE)
        try:
            return token.read(limit + 1)
        finally:
            token.close()
    raise Bad("An entry value is NIL or a string")


@command("SETMETADATA", AUTH, SELECTED)
@defer.inlineCallbacks
def setmetadata(ctx):
    ctx.expect_args(2)
    pairs = ctx.args[1]
    if not isinstance(pairs, list) or not pairs or len(pairs) % 2:
        raise Bad("SETMETADATA takes a mailbox and a list of entry and value pairs")
    mailbox = _mailbox(ctx, ctx.args[0])
    limits = policy(ctx)
    changes = [(_entry(entry), _value(value, limits.max_value))
               for entry, value in zip(pairs[::2], pairs[1::2], strict=True)]
    try:
        changed = yield ctx.call(ctx.store.set_metadata, ctx.session.user, mailbox, changes,
                                 limits)
    except EntryTooLarge as exc:
        raise No("Metadata value too large", f"METADATA MAXSIZE {exc.limit}") from None
    except TooManyEntries:
        raise No("Too many metadata entries", "METADATA TOOMANY") from None
    except OverQuota:
        raise No("Metadata storage limit reached", "OVERQUOTA") from None
    except ReadOnlyEntry as exc:
        raise No(f"Cannot set that entry: {exc}", "CANNOT") from None  # as Dovecot
    except BadSpecialUse as exc:
        raise No(str(exc), "USEATTR") from None   # RFC 6154 3, 6
    except InvalidEntry as exc:
        raise Bad(str(exc)) from None
    except ParseError as exc:
        raise Bad(str(exc)) from None
    if changed:
        # RFC 5465 5: the session's own change is not reported back to it.
        note_own_metadata(ctx.session, mailbox, [name for name, _ in changes])
