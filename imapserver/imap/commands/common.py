"""Helpers shared by command modules: reporting changes, untagged FETCH FLAGS lines."""

from __future__ import annotations

from twisted.internet import defer

from ..selected import Changes


def flags_list(names) -> bytes:
    return b"(" + " ".join(sorted(names)).encode() + b")"


def changes_lines(changes: Changes, with_uid: bool = True) -> list[bytes]:
    """Untagged responses for a refresh, in RFC 3501 order: EXPUNGE, EXISTS, RECENT, FETCH."""
    lines = [b"%d EXPUNGE" % seq for seq in changes.expunged_seqs]
    if changes.exists is not None:
        lines.append(b"%d EXISTS" % changes.exists)
    for seq, uid, names, _modseq in changes.flags:
        item = b"FLAGS " + flags_list(names)
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
