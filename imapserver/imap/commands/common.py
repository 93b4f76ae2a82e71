"""Helpers shared by command modules: reporting changes, untagged FETCH FLAGS lines, and the
FLAGS / PERMANENTFLAGS announcement of the mailbox's keywords."""

from __future__ import annotations

from twisted.internet import defer

from ..selected import Changes

SYSTEM_FLAGS = ("\\Answered", "\\Flagged", "\\Deleted", "\\Seen", "\\Draft")


def flags_list(names, recent: bool = False) -> bytes:
    """A FETCH FLAGS list.  ``recent``: the message is \\Recent in this session (RFC 3501
    2.3.2), a flag of the session and never stored; it goes last, where Dovecot puts it."""
    words = sorted(names)
    if recent:
        words.append("\\Recent")
    return b"(" + " ".join(words).encode() + b")"


def flags_lines(keywords, readonly: bool) -> list[bytes]:
    """``FLAGS`` and ``OK [PERMANENTFLAGS]`` for a mailbox whose keywords are ``keywords``
    (RFC 3501 7.2.6, 7.1): at SELECT, and again, before anything shows it, whenever a keyword
    comes into use -- in this session or any other (as Dovecot does)."""
    flags = " ".join([*SYSTEM_FLAGS, *keywords])
    if readonly:
        return [f"FLAGS ({flags})".encode(), b"OK [PERMANENTFLAGS ()] Read-only mailbox"]
    return [f"FLAGS ({flags})".encode(),
            f"OK [PERMANENTFLAGS ({flags} \\*)] Flags permitted".encode()]


def announce_keywords(ctx, shown=()) -> None:
    """Queue FLAGS / PERMANENTFLAGS if ``shown`` (flags about to go out in FETCH responses) or
    the session's index hold a keyword the client has not been told of (RFC 3501 7.2.6)."""
    selected = ctx.session.selected
    keywords = selected.new_keywords(shown)
    if keywords is not None:
        for line in flags_lines(keywords, selected.readonly):
            ctx.untagged(line)


def changes_lines(changes: Changes, with_uid: bool = True, readonly: bool = False
                  ) -> list[bytes]:
    """Untagged responses for a refresh: FLAGS (new keywords, before any FETCH shows them),
    EXPUNGE, FETCH, EXISTS, RECENT.  Dovecot's order, except that Dovecot puts its FETCHes
    before the EXPUNGEs (numbered as before them) where ours follow them (numbered after):
    RFC 3501 7.4.1 allows both.  A FETCH names only messages the client knew, so it may come
    before the EXISTS that announces new ones.  CONTEXT=SEARCH updates (RFC 5267 4.3.3,
    4.3.4) surround them: REMOVEFROMs for expunged messages before the EXPUNGEs, the rest
    (numbered after every change) last, as Dovecot sends them."""
    lines = flags_lines(changes.keywords, readonly) if changes.keywords else []
    lines += changes.context_before
    lines += [b"%d EXPUNGE" % seq for seq in changes.expunged_seqs]
    for seq, uid, names, _modseq in changes.flags:
        item = b"FLAGS " + flags_list(names, uid in changes.recent_uids)
        if with_uid:
            item = b"UID %d " % uid + item
        lines.append(b"%d FETCH (%s)" % (seq, item))
    if changes.exists is not None:
        lines.append(b"%d EXISTS" % changes.exists)
    if changes.recent is not None:
        lines.append(b"%d RECENT" % changes.recent)
    lines += changes.context_after
    return lines


@defer.inlineCallbacks
def report_changes(ctx, expunged: list[int] = ()):
    """Refresh the selected mailbox and queue what changed as untagged responses.

    ``expunged``: sequence numbers (descending) of messages the command itself removed and
    already forgot (EXPUNGE, MOVE); they are reported with the rest, after any new keywords
    are announced (Dovecot's order)."""
    selected = ctx.session.selected
    if selected is None:
        return
    try:
        changes = yield ctx.call(selected.refresh)
    except Exception:
        # The session has forgotten them already: the client must hear of them regardless.
        for seq in expunged:
            ctx.untagged(b"%d EXPUNGE" % seq)
        raise
    changes.expunged_seqs[:0] = expunged
    if ctx.session.selected is selected:
        for line in changes_lines(changes, readonly=selected.readonly):
            ctx.untagged(line)
