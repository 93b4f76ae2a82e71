"""Helpers shared by command modules: reporting changes, untagged FETCH FLAGS lines."""

from __future__ import annotations

from twisted.internet import defer

from ..selected import Changes


def flags_list(names, recent: bool = False) -> bytes:
    """A FETCH FLAGS list.  ``recent``: the message is \\Recent in this session (RFC 3501
    2.3.2), a flag of the session and never stored; it goes last, where Dovecot puts it."""
    words = sorted(names)
    if recent:
        words.append("\\Recent")
    return b"(" + " ".join(words).encode() + b")"


def changes_lines(changes: Changes, with_uid: bool = True) -> list[bytes]:
    """Untagged responses for a refresh, in RFC 3501 order: EXPUNGE, EXISTS, RECENT, FETCH."""
    lines = [b"%d EXPUNGE" % seq for seq in changes.expunged_seqs]
    if changes.exists is not None:
        lines.append(b"%d EXISTS" % changes.exists)
    if changes.recent is not None:
        lines.append(b"%d RECENT" % changes.recent)
    for seq, uid, names, _modseq in changes.flags:
        item = b"FLAGS " + flags_list(names, uid in changes.recent_uids)
        if with_uid:
            item = b"UID %d " % uid + item
        lines.append(b"%d FETCH (%s)" % (seq, item))
    return lines


@defer.inlineCallbacks
def report_changes(ctx):
    """Refresh the selected mailbox and queue what changed as untagged responses."""
    selected = ctx.session.selected
    if selected is None:
        return
    changes = yield ctx.call(selected.refresh)
    if ctx.session.selected is selected:
        for line in changes_lines(changes):
            ctx.untagged(line)
