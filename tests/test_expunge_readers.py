"""A reader of a message racing an expunge of it elsewhere (RFC 2180 4.1, RFC 9051 7.1).

A session reads a message row, another store handle (another session or process) expunges the
message and drops the last content reference, then the first session reads the content.  Until
docs/decisions/0011 the content row was deleted at once and the read failed with
``OSError: content ... lacks chunk``, which the IMAP server answered ``NO Internal server error``.
Now released content stays readable for ``release_grace`` seconds (RFC 2180 4.1.1: serve what
the session can still address); a reader slower than that gets ``errors.Expunged`` (4.1.2's
``NO [EXPUNGEISSUED]``), and the row goes once the grace period is over, with fsck finding
nothing in either state.
"""

from __future__ import annotations

import pytest

from mailstore import keys
from mailstore.content import RELEASED, chunk_column
from mailstore.errors import Expunged
from mailstore.fsck import Fsck
from mailstore.messages import EVERYTHING
from mailstore.store import MailStore

CHUNK = 64 * 1024
GRACE = 600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def big_message(chunks: float = 4.5) -> bytes:
    header = b"From: a@example.org\r\nSubject: race\r\n\r\n"
    body = bytes(range(256)) * int(CHUNK * chunks // 256)
    return header + body


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def handles(backend, clock):
    """Two store handles over the same tables: the reading session's and the expunger's.
    ``read_ahead=1`` so that a read fetches chunks as it goes, as a streamed FETCH does."""
    reader = MailStore(backend, chunk_size=CHUNK, read_ahead=1, clock=clock,
                       release_grace=GRACE)
    expunger = MailStore(backend, chunk_size=CHUNK, read_ahead=1, clock=clock,
                         release_grace=GRACE, create_tables=False)
    return reader, expunger


def staged(handles, data: bytes):
    """A message stored by the reader's handle and looked up by it (its row read)."""
    reader, expunger = handles
    user = reader.create_user("u", "pw")
    mailbox = reader.mailbox(user, "INBOX")
    _validity, uid = reader.append(user, mailbox, data)
    (view,) = reader.fetch(mailbox, [uid], EVERYTHING)
    return mailbox, uid, view


def clean(store: MailStore, repair: bool = False) -> list:
    return Fsck(store, repair=repair).run().problems


def test_reader_started_before_the_expunge_reads_to_the_end(handles, clock):
    """RFC 2180 4.1.1: a session that began reading a message before another session expunged
    it reads all of it, chunk by chunk after the expunge.  Failed before the fix with
    ``OSError: content ... lacks chunk 2``."""
    reader, expunger = handles
    data = big_message()
    mailbox, uid, view = staged(handles, data)
    body = reader.open_message(view)
    first = body.read(1000)
    assert expunger.expunge(expunger.mailbox("u", "INBOX"), [uid]) == [uid]
    assert first + body.read() == data
    assert clean(reader) == []  # released and waiting out its grace period: not a problem


def test_session_not_yet_told_of_the_expunge_still_reads_the_message(handles, clock):
    """RFC 2180 4.1.1: the session read the message row (it still addresses the message) and
    opens the content only after the expunge and after some time within the grace period."""
    reader, expunger = handles
    data = big_message(1.5)
    mailbox, uid, view = staged(handles, data)
    expunger.expunge(expunger.mailbox("u", "INBOX"), [uid])
    clock.now += GRACE - 1
    assert reader.read_message(view) == data
    assert reader.fetch(mailbox, [uid]) == []  # a new lookup does not find it


def test_slower_reader_than_the_grace_period_gets_expunged_not_an_os_error(handles, clock):
    """RFC 9051 7.1 EXPUNGEISSUED: past the grace period the content is deleted (by the next
    release's sweep) and a reader still holding the old row gets errors.Expunged, which the
    IMAP layer answers ``NO [EXPUNGEISSUED]``; fsck finds nothing before or after."""
    reader, expunger = handles
    data = big_message()
    mailbox, uid, view = staged(handles, data)
    body = reader.open_message(view)
    assert body.read(CHUNK) == data[:CHUNK]
    inbox = expunger.mailbox("u", "INBOX")
    expunger.expunge(inbox, [uid])
    content = view.record.content
    assert reader.content.table.row(content, [chunk_column(2)])  # still there
    clock.now += GRACE + 1
    # Another expunge (of another message) sweeps what is due.
    _v, other = expunger.append("u", inbox, b"Subject: x\r\n\r\nx\r\n")
    expunger.expunge(inbox, [other])
    assert reader.content.table.row(content) == {}
    with pytest.raises(Expunged):
        body.read()
    with pytest.raises(Expunged):
        reader.read_message(view)
    assert clean(reader) == []


def test_damaged_content_is_still_an_error_not_an_expunge(handles):
    """A chunk missing from content that messages still refer to is damage, not a race: it
    must stay a failure (and fsck's business), never be passed off as an expunge."""
    reader, _ = handles
    data = big_message(2.5)
    _mailbox, _uid, view = staged(handles, data)
    reader.content.table.delete(view.record.content, [chunk_column(2)])
    with pytest.raises(OSError) as excinfo:
        reader.read_message(view)
    assert not isinstance(excinfo.value, Expunged)


def test_release_is_swept_by_the_server_sweep_and_by_fsck_repair_after_the_grace(handles,
                                                                                 clock):
    """No content row outlives its last reference for good: once the grace period is over
    the periodic sweep (MailStore.sweep_released) or ``fsck --repair`` deletes it, and fsck
    reports nothing at any point."""
    reader, expunger = handles
    _mailbox, uid, view = staged(handles, big_message(1.2))
    inbox = expunger.mailbox("u", "INBOX")
    _v, second = expunger.append("u", inbox, big_message(0.5))
    (second_view,) = expunger.fetch(inbox, [second], EVERYTHING)
    expunger.expunge(inbox, [uid])
    clock.now += 10
    expunger.expunge(inbox, [second])
    pending = reader.content.pending_releases()
    assert set(pending) == {view.record.content, second_view.record.content}
    assert clean(reader) == [] and clean(reader, repair=True) == []
    assert reader.sweep_released() == 0  # nothing due yet
    clock.now += GRACE - 5
    assert reader.sweep_released() == 1  # the first is due, the second is not
    assert reader.content.table.row(view.record.content) == {}
    assert reader.content.table.row(second_view.record.content)
    clock.now += 10
    assert clean(reader, repair=True) == []
    assert reader.content.table.row(second_view.record.content) == {}
    assert reader.content.pending_releases() == {}
    assert clean(reader) == []


def test_copy_racing_the_release_is_refused_and_does_not_keep_the_content(handles, clock):
    """RFC 3501 6.4.7 COPY of a message expunged meanwhile skips it (decision 0003); the
    released content is not brought back to life and still goes after the grace period."""
    reader, expunger = handles
    mailbox, uid, view = staged(handles, b"Subject: c\r\n\r\nc\r\n")
    other = reader.create_mailbox("u", "Other")
    expunger.expunge(expunger.mailbox("u", "INBOX"), [uid])
    assert reader.content.incref(view.record.content) is False
    assert reader.content.refs(view.record.content) <= 0
    clock.now += GRACE + 1
    reader.sweep_released()
    assert reader.content.table.row(view.record.content) == {}
    assert reader.copy(mailbox, [uid], other) == []
    assert clean(reader) == []


def test_content_given_references_back_by_fsck_is_not_swept(handles, clock):
    """A release record whose content holds references again (fsck repaired a count that had
    dropped too low while messages still point to it) must not delete that content."""
    reader, _ = handles
    _mailbox, _uid, view = staged(handles, b"Subject: k\r\n\r\nk\r\n")
    content = view.record.content
    reader.content.table.increment(content, b"r:refs", -1)  # a count gone wrong: 0
    reader.content.releases.put(keys.release_key(int(clock.now), content), {RELEASED: content})
    problems = clean(reader, repair=True)
    assert [p.detail for p in problems] == ["refs 0, actual 1"]
    clock.now += GRACE + 1
    reader.sweep_released()
    assert reader.read_message(view) == b"Subject: k\r\n\r\nk\r\n"
    assert reader.content.pending_releases() == {}
    assert clean(reader) == []
