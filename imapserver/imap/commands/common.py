"""Helpers shared by command modules: reporting changes, untagged FETCH FLAGS lines, and the
FLAGS / PERMANENTFLAGS announcement of the mailbox's keywords."""

from __future__ import annotations

from twisted.internet import defer

from mailstore.acl import flag_changeable

from ...observe import timed_store_call
from ..context import Bad
from ..selected import Changes

SYSTEM_FLAGS = ("\\Answered", "\\Flagged", "\\Deleted", "\\Seen", "\\Draft")


def flags_list(names, recent: bool = False) -> bytes:
    """A FETCH FLAGS list.  ``recent``: the message is \\Recent in this session (RFC 3501
    2.3.2), a flag of the session and never stored; it goes last, where Dovecot puts it."""
    words = sorted(names)
    if recent:
        words.append("\\Recent")
    return b"(" + " ".join(words).encode() + b")"


def flags_lines(keywords, readonly: bool, rights=None) -> list[bytes]:
    """``FLAGS`` and ``OK [PERMANENTFLAGS]`` for a mailbox whose keywords are ``keywords``
    (RFC 3501 7.2.6, 7.1): at SELECT, and again, before anything shows it, whenever a keyword
    comes into use -- in this session or any other (as Dovecot does).  ``rights``: the
    session's ACL rights on the mailbox, if not all: PERMANENTFLAGS then lists only the flags
    they let it change (RFC 4314 4: \\Seen with ``s``, \\Deleted with ``t``, the others
    and new keywords with ``w``)."""
    flags = " ".join([*SYSTEM_FLAGS, *keywords])
    if readonly:
        return [f"FLAGS ({flags})".encode(), b"OK [PERMANENTFLAGS ()] Read-only mailbox"]
    changeable = flag_changeable(rights)
    if changeable is None:
        permanent = f"{flags} \\*"
    else:
        allowed = [f for f in [*SYSTEM_FLAGS, *keywords] if changeable(f)]
        permanent = " ".join(allowed + (["\\*"] if changeable("$any") else []))
    return [f"FLAGS ({flags})".encode(),
            f"OK [PERMANENTFLAGS ({permanent})] Flags permitted".encode()]


def announce_keywords(ctx, shown=()) -> None:
    """Queue FLAGS / PERMANENTFLAGS if ``shown`` (flags about to go out in FETCH responses) or
    the session's index hold a keyword the client has not been told of (RFC 3501 7.2.6)."""
    selected = ctx.session.selected
    keywords = selected.new_keywords(shown)
    if keywords is not None:
        for line in flags_lines(keywords, selected.readonly, selected.rights):
            ctx.untagged(line)


def modseq_item(modseq: int) -> bytes:
    """The MODSEQ fetch data item (RFC 7162 3.1.4.2)."""
    return b"MODSEQ (%d)" % modseq


def vanished_line(uids, earlier: bool = False) -> bytes:
    """``VANISHED [(EARLIER)] uid-set`` (RFC 7162 3.2.10): expunged UIDs in one response."""
    from .message_cmds import uid_set_text
    return (b"VANISHED (EARLIER) " if earlier else b"VANISHED ") + \
        uid_set_text(sorted(uids)).encode()


def changes_lines(changes: Changes, with_uid: bool = True, readonly: bool = False,
                  session=None) -> list[bytes]:
    """Untagged responses for a refresh: FLAGS (new keywords, before any FETCH shows them),
    EXPUNGE, FETCH, EXISTS, RECENT.  Dovecot's order, except that Dovecot puts its FETCHes
    before the EXPUNGEs (numbered as before them) where ours follow them (numbered after):
    RFC 3501 7.4.1 allows both.  A FETCH names only messages the client knew, so it may come
    before the EXISTS that announces new ones.  CONTEXT=SEARCH updates (RFC 5267 4.3.3,
    4.3.4) surround them: REMOVEFROMs for expunged messages before the EXPUNGEs, the rest
    (numbered after every change) last, as Dovecot sends them.  With CONDSTORE enabled in
    ``session`` a FETCH carries MODSEQ (RFC 7162 3.1.4.1); with QRESYNC, expunges go as one
    VANISHED instead of EXPUNGEs (3.2.10), still after the REMOVEFROMs."""
    condstore, qresync = modseq_modes(session)
    rights = getattr(getattr(session, "selected", None), "rights", None)
    lines = flags_lines(changes.keywords, readonly, rights) if changes.keywords else []
    lines += changes.context_before
    if qresync and changes.expunged_uids:
        lines.append(vanished_line(changes.expunged_uids))
    elif not qresync:
        lines += [b"%d EXPUNGE" % seq for seq in changes.expunged_seqs]
    for seq, uid, names, modseq in changes.flags:
        item = b"FLAGS " + flags_list(names, uid in changes.recent_uids)
        if with_uid:
            item = b"UID %d " % uid + item
        if condstore:
            item += b" " + modseq_item(modseq)
        lines.append(b"%d FETCH (%s)" % (seq, item))
    if changes.exists is not None:
        lines.append(b"%d EXISTS" % changes.exists)
    if changes.recent is not None:
        lines.append(b"%d RECENT" % changes.recent)
    lines += changes.context_after
    return lines


MAX_MODSEQ = 2**63 - 1


def parse_modseq(token, zero: bool = False) -> int:
    """A mod-sequence-value (RFC 7162 7: 1 to 2**63-1), or with ``zero`` a
    mod-sequence-valzer (0 too); BAD otherwise."""
    text = token.decode("ascii", "replace") if isinstance(token, bytes) else str(token)
    if not text.isdigit() or not text.isascii() or int(text) > MAX_MODSEQ or (
            int(text) == 0 and not zero):
        raise Bad(f"Invalid mod-sequence value {text!r}")
    return int(text)


@defer.inlineCallbacks
def enable_condstore(ctx):
    """A CONDSTORE-enabling command (RFC 7162 3.1): from now on the session gets MODSEQ in
    every FETCH about flags.  The first one with a mailbox selected also reports that
    mailbox's HIGHESTMODSEQ (3.1: the client may not have it from SELECT), as Dovecot does."""
    session = ctx.session
    if "CONDSTORE" in session.enabled:
        return
    session.enabled.add("CONDSTORE")
    selected = session.selected
    if selected is not None:
        selected.modseqs = True
        highest = yield ctx.call(selected.highest_modseq)
        ctx.untagged(b"OK [HIGHESTMODSEQ %d] Highest" % highest)


def modseq_modes(session) -> tuple[bool, bool]:
    """(CONDSTORE, QRESYNC) as enabled in ``session`` (QRESYNC implies CONDSTORE)."""
    enabled = getattr(session, "enabled", None) or ()
    qresync = "QRESYNC" in enabled
    return qresync or "CONDSTORE" in enabled, qresync


@defer.inlineCallbacks
def report_changes(ctx, expunged: tuple[list[int], list[int]] = ((), ())):
    """Refresh the selected mailbox and queue what changed as untagged responses.

    ``expunged``: sequence numbers (descending) and UIDs of messages the command itself
    removed and already forgot (EXPUNGE, MOVE); they are reported with the rest, after any
    new keywords are announced (Dovecot's order).  Once QRESYNC is enabled, a refresh that
    reports expunges (VANISHED) ends with HIGHESTMODSEQ in the tagged OK, as Dovecot does, so
    the client's next resync need not go back before them (RFC 7162 3.2.10)."""
    selected = ctx.session.selected
    if selected is None:
        return
    seqs, uids = expunged
    changes = None
    if ctx.store.backend.local_reads:
        try:
            changes = timed_store_call("refresh", selected.quiet_refresh)
        except Exception:
            changes = None  # the full refresh below meets the same trouble and reports it
    try:
        if changes is None:
            changes = yield ctx.call(selected.refresh)
    except Exception:
        # The session has forgotten them already: the client must hear of them regardless.
        if modseq_modes(ctx.session)[1]:
            if uids:
                ctx.untagged(vanished_line(uids))
        else:
            for seq in seqs:
                ctx.untagged(b"%d EXPUNGE" % seq)
        raise
    changes.expunged_seqs[:0] = seqs
    changes.expunged_uids[:0] = uids
    if ctx.session.selected is selected:
        for line in changes_lines(changes, readonly=selected.readonly, session=ctx.session):
            ctx.untagged(line)
        if changes.expunged_uids and changes.highest and modseq_modes(ctx.session)[1]:
            ctx.ok_code = f"HIGHESTMODSEQ {changes.highest}"
