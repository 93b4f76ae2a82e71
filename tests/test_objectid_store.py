"""The stored facts behind STATUS=SIZE, OBJECTID, SAVEDATE and PREVIEW, over every backend.

RFC 8438 (SIZE: the sum of the messages' RFC822.SIZE), RFC 8474 sections 4 and 5 (MAILBOXID
stable across RENAME; EMAILID kept by COPY and MOVE; THREADID shared by a thread), RFC 8514
section 3 (the save date is when a message came into its current mailbox; unknown, NIL, for
messages stored before it was kept) and RFC 8970 section 3 (previews: computed when a message
is stored, for older messages on first request).
"""

from __future__ import annotations

import io
import struct

import pytest

from mailstore import keys
from mailstore.messages import PREVIEW, STATE
from mailstore.objectids import email_id, is_objectid, mailbox_id, thread_id, thread_root
from mailstore.preview import MAX_CHARS, make_preview
from mailstore.records import MessageRecord
from mailstore.store import MailStore
from tests.mailgen import message


class Clock:
    """An injectable clock, moved by hand."""

    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(backend, clock):
    return MailStore(backend, clock=clock, abandon_after=2.0)


@pytest.fixture
def alice(store):
    return store.create_user("alice", "secret")


def crlf(text: str) -> bytes:
    return text.replace("\n", "\r\n").encode()


PLAIN = crlf("""\
From: a@example.com
Subject: hello
Message-ID: <root@example.com>

Hello   there,
> a quoted line
how are you?
""")

REPLY = crlf("""\
From: b@example.com
Subject: Re: hello
Message-ID: <reply@example.com>
In-Reply-To: <root@example.com>
References: <root@example.com>
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary="b"

--b
Content-Type: text/html; charset=utf-8
Content-Transfer-Encoding: quoted-printable

<html><head><style>p {color: red}</style></head><body><p>Fine, <b>thanks</b> &amp; =
you? caf=C3=A9</p></body></html>
--b--
""")


def one(store, mailbox, uid, columns=None):
    [view] = store.fetch(mailbox, [uid], columns)
    return view


def test_save_date_is_set_by_append_copy_move_delivery_and_import(store, alice, clock):
    """RFC 8514 section 3: the save date is when the message was saved in its *current*
    mailbox; the internal date stays what APPEND gave (RFC 3501 6.4.7)."""
    store.append(alice, "INBOX", PLAIN, internal_date=1_000_000_000.0)
    inbox = store.mailbox(alice, "INBOX")
    assert one(store, inbox, 1).record.save_date == clock.now
    assert one(store, inbox, 1).record.internal_date == 1_000_000_000.0

    clock.now += 3600
    [(_, copied)] = store.copy(inbox, [1], store.mailbox(alice, "Archive"))
    archived = one(store, store.mailbox(alice, "Archive"), copied)
    assert archived.record.save_date == clock.now
    assert archived.record.internal_date == 1_000_000_000.0

    clock.now += 3600
    [(_, moved)] = store.move(inbox, [1], store.mailbox(alice, "Trash"))
    assert one(store, store.mailbox(alice, "Trash"), moved).record.save_date == clock.now

    clock.now += 3600
    [delivery] = store.deliver([(alice, "INBOX")], REPLY)
    assert one(store, store.mailbox(alice, "INBOX"), delivery.uid).record.save_date == \
        clock.now

    clock.now += 3600
    importer = store.importer(alice)
    done = importer.add(importer.mailbox("Imported"), PLAIN, len(PLAIN), b"d" * 32)
    importer.finish()
    assert one(store, store.mailbox(alice, "Imported"), done.uid).record.save_date == \
        clock.now


def old_record(raw: bytes) -> bytes:
    """``raw`` as the previous release wrote it: no save date."""
    record = MessageRecord.decode(raw)
    record.save_date = None
    return record.encode(raw[:1])


def test_a_record_written_before_save_dates_has_none(store, alice):
    """RFC 8514 section 3: a message whose save date is not known answers NIL: rows whose
    commit record was written before save dates were kept decode without one."""
    store.append(alice, "INBOX", PLAIN)
    inbox = store.mailbox(alice, "INBOX")
    view = one(store, inbox, 1)
    store.messages.table.put(keys.message_key(inbox.id, 1), {STATE: old_record(view.state_raw)})
    record = one(store, inbox, 1).record
    assert record.save_date is None
    assert (record.uid, record.size, record.content) == (1, len(PLAIN), view.record.content)


def test_the_previous_release_still_reads_records_with_a_save_date(store, alice):
    """Rolling upgrade: a server of the previous release sharing the store reads a record
    with a save date as it read its own (version 1, its struct, trailing bytes ignored)."""
    store.append(alice, "INBOX", PLAIN, internal_date=1_000_000_000.0)
    raw = one(store, store.mailbox(alice, "INBOX"), 1).state_raw
    assert raw[1:2] == b"\x01"
    previous = struct.Struct("<16sqdqqqqq").unpack_from(raw, 2)
    assert previous[1:3] == (len(PLAIN), 1_000_000_000.0) and previous[4] == 1


def test_preview_is_stored_at_append_and_travels_with_copy_and_move(store, alice):
    """RFC 8970 section 3: previews of the first text part, white space collapsed, quoted
    lines left out; HTML made text; the charset and transfer encoding undone."""
    store.append(alice, "INBOX", PLAIN)
    store.append(alice, "INBOX", REPLY)
    inbox = store.mailbox(alice, "INBOX")
    assert one(store, inbox, 1).preview == "Hello there, how are you?"
    assert one(store, inbox, 2).preview == "Fine, thanks & you? café"
    [(_, copied)] = store.copy(inbox, [2], store.mailbox(alice, "Archive"))
    [(_, moved)] = store.move(inbox, [1], store.mailbox(alice, "Trash"))
    assert one(store, store.mailbox(alice, "Archive"), copied).preview == \
        "Fine, thanks & you? café"
    assert one(store, store.mailbox(alice, "Trash"), moved).preview == \
        "Hello there, how are you?"


def test_a_streamed_message_gets_its_preview_too(store, alice):
    """A message larger than a chunk is streamed: its preview is read back from the store."""
    big = crlf("Subject: big\n\nfirst words\n") + b"x" * (store.content.chunk_size + 10)
    store.append(alice, "INBOX", io.BytesIO(big))
    view = one(store, store.mailbox(alice, "INBOX"), 1)
    assert view.preview.startswith("first words x")
    assert len(view.preview) == MAX_CHARS


def test_an_older_message_gets_its_preview_on_first_request_and_keeps_it(store, alice):
    """Rows stored before previews were kept have no preview cell: the first request computes
    it from the content and stores it, so the second reads it."""
    store.append(alice, "INBOX", PLAIN)
    inbox = store.mailbox(alice, "INBOX")
    key = keys.message_key(inbox.id, 1)
    store.messages.table.delete(key, [PREVIEW])
    view = one(store, inbox, 1, [STATE, PREVIEW])
    assert view.preview is None
    assert store.preview(inbox, view) == "Hello there, how are you?"
    assert one(store, inbox, 1, [STATE, PREVIEW]).preview == "Hello there, how are you?"


def test_a_late_preview_never_brings_back_an_expunged_row(store, alice):
    """The late preview is stored by check-and-put on the commit record as read: a row
    expunged meanwhile is not recreated as a stray cell."""
    store.append(alice, "INBOX", PLAIN)
    inbox = store.mailbox(alice, "INBOX")
    store.messages.table.delete(keys.message_key(inbox.id, 1), [PREVIEW])
    view = one(store, inbox, 1, [STATE, PREVIEW])
    store.expunge(inbox, [1])
    assert store.preview(inbox, view) == "Hello there, how are you?"
    assert store.messages.table.row(keys.message_key(inbox.id, 1)) == {}


def test_mailbox_id_survives_rename_and_inbox_rename_makes_a_new_one(store, alice):
    """RFC 8474 section 4.2: RENAME keeps the MAILBOXID; renaming INBOX moves its messages
    into a new mailbox, which is a new object with a new id."""
    box = store.create_mailbox(alice, "Projects")
    child = store.create_mailbox(alice, "Projects/Alpha")
    store.rename_mailbox(alice, "Projects", "Work")
    assert store.mailbox(alice, "Work").id == box.id
    assert store.mailbox(alice, "Work/Alpha").id == child.id
    inbox = store.mailbox(alice, "INBOX")
    store.append(alice, "INBOX", PLAIN)
    [old] = store.rename_mailbox(alice, "INBOX", "Old")
    assert old.id != inbox.id and store.mailbox(alice, "INBOX").id == inbox.id
    assert is_objectid(mailbox_id(box.id))


def test_email_id_is_kept_by_copy_move_and_shared_by_one_delivery(store, alice):
    """RFC 8474 section 5.1: COPY and MOVE keep the EMAILID; content stored once for several
    recipients is one EMAILID; a new APPEND of the same octets is a new message."""
    store.create_user("bob", "x")
    inbox = store.mailbox(alice, "INBOX")
    store.append(alice, "INBOX", PLAIN)
    first = one(store, inbox, 1).record.content
    [(_, copied)] = store.copy(inbox, [1], store.mailbox(alice, "Archive"))
    [(_, moved)] = store.move(inbox, [1], store.mailbox(alice, "Trash"))
    assert one(store, store.mailbox(alice, "Archive"), copied).record.content == first
    assert one(store, store.mailbox(alice, "Trash"), moved).record.content == first
    a, b = store.deliver([(alice, "INBOX"), ("bob", "INBOX")], REPLY)
    assert one(store, store.mailbox(alice, "INBOX"), a.uid).record.content == \
        one(store, store.mailbox("bob", "INBOX"), b.uid).record.content
    store.append(alice, "INBOX", PLAIN)
    again = one(store, store.mailbox(alice, "INBOX"), a.uid + 1).record.content
    assert email_id(again) != email_id(first)
    assert is_objectid(email_id(first)) and email_id(first).startswith("M")


def test_thread_id_follows_the_root_of_references():
    """RFC 8474 section 5.2: one THREADID for a thread: References' first id, or
    In-Reply-To's, or the message's own Message-ID; ids valid per section 7."""
    root = thread_id(PLAIN[:PLAIN.index(b"\r\n\r\n") + 4], b"1" * 16)
    reply = thread_id(REPLY[:REPLY.index(b"\r\n\r\n") + 4], b"2" * 16)
    only_in_reply_to = thread_id(crlf("In-Reply-To: <root@example.com>\n\n"), b"3" * 16)
    folded = thread_id(crlf("References:\n <root@example.com>\n <reply@example.com>\n\n"),
                       b"4" * 16)
    assert root == reply == only_in_reply_to == folded
    assert is_objectid(root) and root.startswith("T")
    alone = thread_id(crlf("Subject: none\n\n"), b"5" * 16)
    assert alone != root and alone == thread_id(b"", b"5" * 16)
    assert thread_root(crlf("Message-ID: <a@b>\nReferences: junk\n\n")) == "a@b"


@pytest.mark.parametrize("raw, expected", [
    (crlf("Subject: x\n\n"), ""),
    (crlf("Content-Type: image/png\n\nAAAA\n"), ""),
    (crlf("Subject: x\n\n" + "word " * 100), ("word " * 40).strip()),
    (crlf("Content-Type: text/plain; charset=iso-8859-1\n"
          "Content-Transfer-Encoding: quoted-printable\n\nCaf=E9 au lait\n\n-- \nsig\n"),
     "Café au lait -- sig"),
    (crlf("Content-Transfer-Encoding: base64\n\nSGVsbG8gd29ybGQ=\n"), "Hello world"),
    (crlf("Subject: x\n\n\t lead\t\ttab\n\n\nnext\x00 para\x01x\n"), "lead tab next para x"),
    (crlf("Content-Type: multipart/mixed; boundary=z\n\n--z\nContent-Type: image/gif\n\n"
          "GIF89a\n--z\nContent-Type: message/rfc822\n\nSubject: inner\n\ninner text\n--z\n"
          "Content-Type: text/plain\n\nthis one\n--z--\n"), "this one"),
])
def test_preview_text(raw, expected):
    """RFC 8970 section 3: plain text, no line breaks, at most 256 characters (ours: 200, as
    Dovecot), empty when there is no text part to preview."""
    from mailstore.mime import parse_bytes
    body = parse_bytes(raw).to_json()["body"]
    text = make_preview(body, lambda start, end: raw[start:end])
    assert text == expected
    assert len(text) <= 256 and "\n" not in text


def test_status_size_is_the_sum_of_message_sizes(store, alice):
    """RFC 8438 section 3: SIZE is the total of the messages' RFC822.SIZE, kept by the
    mailbox size counter through append, copy, move and expunge."""
    inbox = store.mailbox(alice, "INBOX")
    store.append(alice, "INBOX", PLAIN)
    store.append(alice, "INBOX", REPLY)
    store.append(alice, "INBOX", message(3))
    store.move(inbox, [2], store.mailbox(alice, "Trash"))
    store.expunge(inbox, [3])
    assert store.mailbox(alice, "INBOX").size == len(PLAIN)
    assert store.mailbox(alice, "Trash").size == len(REPLY)


def test_a_failing_preview_never_fails_the_append(store, alice, monkeypatch):
    """A preview is derived data: if making it fails, the message is stored all the same
    (small and streamed alike) and gets its preview on its first request."""
    import mailstore.messages

    def broken(body, read):
        raise RuntimeError("preview bug")
    monkeypatch.setattr(mailstore.messages, "make_preview", broken)
    big = crlf("Subject: big\n\nfirst words\n") + b"x" * (store.content.chunk_size + 10)
    store.append(alice, "INBOX", PLAIN)
    store.append(alice, "INBOX", io.BytesIO(big))
    inbox = store.mailbox(alice, "INBOX")
    assert [v.preview for v in store.fetch(inbox, [1, 2], None)] == [None, None]
    monkeypatch.undo()
    assert store.preview(inbox, one(store, inbox, 1)) == "Hello there, how are you?"
