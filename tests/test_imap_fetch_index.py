"""FETCH of FLAGS, UID and MODSEQ answered from the session's index (issue 14).

RFC 3501 7.4.2: FETCH FLAGS shows a message's flags as they are; RFC 7162 3.1.4.2: MODSEQ its
mod-sequence.  The session's index (mailstore/index.py) holds every stored flag and MODSEQ of
its messages, so when one read of the mailbox's marks shows nothing changed since the
session's last look, the rows need not be read.  When something did change (another session,
this session's own STORE before its refresh, expunges held back), the rows are read as
before, so the answer is always what the rows say at the time of the FETCH, with \\Recent the
session's (2.3.2) and new keywords announced first (7.2.6).
"""

from __future__ import annotations

import pytest
from mailgen import message

from imapserver.imap.commands.fetch import _render_batch, _render_from_index
from imapserver.imap.render import parse_fetch_items
from imapserver.imap.selected import SelectedMailbox
from imapserver.imap.wire import Atom
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.messages import SUMMARY
from mailstore.store import MailStore


class CountingTable:
    """Counts the message rows read, by get or by scan."""

    def __init__(self, table):
        self.table = table
        self.rows_read = 0

    def rows(self, keys_, *args, **kwargs):
        found = self.table.rows(keys_, *args, **kwargs)
        self.rows_read += len(found)
        return found

    def scan(self, *args, **kwargs):
        for item in self.table.scan(*args, **kwargs):
            self.rows_read += 1
            yield item

    def __getattr__(self, name):
        return getattr(self.table, name)


@pytest.fixture
def world(tmp_path):
    store = MailStore(EmbeddedBackend(str(tmp_path / "s")))
    store.create_user("u", "pw")
    for i in range(12):
        store.append("u", "INBOX", message(i),
                     flags=[["\\Seen"], [], ["$a", "\\Flagged"], ["\\Deleted", "\\Seen"]][i % 4])
    inbox = store.mailbox("u", "INBOX")
    counting = CountingTable(store.messages.table)
    store.messages.table = counting
    session = SelectedMailbox(store, inbox, readonly=False)
    session.load()
    yield store, inbox, session, counting
    store.backend.close()


SPEC = [Atom("UID"), Atom("FLAGS"), Atom("MODSEQ")]


def from_rows(store, inbox, session, uids):
    return _render_batch(store, inbox, uids, list(SUMMARY), parse_fetch_items(SPEC), False,
                         session.seq_of, session.note_own_flags, session.recent, set())


def from_index(session, uids, changed_since=None):
    return _render_from_index(session, uids, parse_fetch_items(SPEC), session.recent, set(),
                              changed_since)


def test_fetch_flags_of_an_unchanged_mailbox_reads_no_message_row(world):
    """RFC 3501 7.4.2 / RFC 7162 3.1.4.2: the same responses as the rows give -- keywords,
    system flags, \\Recent (2.3.2, this session claimed all at SELECT), MODSEQ -- without
    reading one message row; CHANGEDSINCE filters on the index's MODSEQs."""
    store, inbox, session, counting = world
    uids = list(session.uids)
    before = counting.rows_read
    answered = from_index(session, uids)
    assert counting.rows_read == before
    assert answered == from_rows(store, inbox, session, uids)
    assert b"$a" in b" ".join(answered[0][2][1]) and b"\\Recent" in answered[0][0][1][1]
    middle = session.index.modseqs[5]
    late = from_index(session, uids, changed_since=middle)[0]
    assert [seq for seq, _parts in late] == list(range(7, 13))


def test_a_change_since_the_last_look_is_read_from_the_rows(world):
    """Another session's flag change, or this session's own STORE not yet refreshed: the
    index may be behind the rows, so the rows answer (RFC 3501 7.4.2: the flags as they
    are); after the refresh the index answers again, with the change."""
    store, inbox, session, _counting = world
    uids = list(session.uids)
    store.store_flags(inbox, [uids[1]], ["$new"], "add")
    assert from_index(session, uids) is None
    session.refresh()
    answered = from_index(session, uids)
    assert answered == from_rows(store, inbox, session, uids)
    assert b"$new" in answered[0][1][1][1]
    changed, _ = store.store_flags(inbox, [uids[2]], ["\\Seen"], "add")
    session.note_own_flags(changed)  # as STORE does, before its closing refresh
    assert from_index(session, uids) is None
    session.refresh()
    assert from_index(session, uids) == from_rows(store, inbox, session, uids)


def test_expunges_held_back_are_read_from_the_rows(world):
    """RFC 5465 6.1.2 / RFC 3501 7.4.1: expunges a refresh held back leave messages
    numbered that the rows no longer have; the index does not answer for them."""
    store, inbox, session, _counting = world
    uids = list(session.uids)
    store.expunge(inbox, [uids[3]])
    session.refresh(hold_expunges=True)
    assert from_index(session, uids) is None
