"""STATUS=SIZE, OBJECTID, SAVEDATE and PREVIEW over IMAP: the RFCs' examples as transcripts.

RFC 8438 section 3 (STATUS SIZE), RFC 8474 sections 4-7 (MAILBOXID, EMAILID, THREADID and
their SEARCH keys), RFC 8514 sections 3-5 (SAVEDATE, SAVEDBEFORE/SAVEDON/SAVEDSINCE,
SAVEDATESUPPORTED), RFC 8970 sections 3-6 (PREVIEW and its LAZY modifier).  The object ids are
ours, not the RFC examples' (their form is the server's choice): the transcripts check their
grammar and which ids are equal.  One server process for the module, a fresh mailbox per test.
"""

from __future__ import annotations

import re
import time

import pytest

from mailstore import keys
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.messages import PREVIEW, STATE
from mailstore.records import MessageRecord
from mailstore.store import MailStore
from tests.dovecot import RawImap
from tests.imapproc import ServerProcess, make_users

USER, PASSWORD = "test", "secret"  # as tests/dovecot.py's RawImap logs in
OBJECTID = rb"[A-Za-z0-9_-]{1,255}"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("objectid") / "store")
    make_users(path, (USER, PASSWORD))
    return path


@pytest.fixture(scope="module")
def server(data_dir):
    with ServerProcess(data_dir) as proc:
        yield proc


@pytest.fixture
def imap(server):
    session = RawImap(server.port)
    session.login()
    yield session
    session.close()


_names = iter(range(1_000_000))


@pytest.fixture
def box(imap):
    name = f"O{next(_names)}"
    imap.command(b"CREATE " + name.encode())
    return name


def crlf(text: str) -> bytes:
    return text.replace("\n", "\r\n").encode()


ROOT = crlf("""\
From: Fred Foobar <foobar@example.org>
Subject: afternoon meeting
Message-Id: <B27397-0100000@example.org>
MIME-Version: 1.0
Content-Type: TEXT/PLAIN; CHARSET=US-ASCII

Hello Joe, do you think we can meet at 3:30 tomorrow?
""")
REPLY = crlf("""\
From: Joe <joe@example.org>
Subject: Re: afternoon meeting
Message-Id: <C1@example.org>
In-Reply-To: <B27397-0100000@example.org>
References: <B27397-0100000@example.org>

> Hello Joe, do you think we can meet at 3:30 tomorrow?
Yes, 3:30 it is.
""")
LOREM = crlf("Subject: lorem\n\n" + (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit.\n"
    "Curabitur aliquam turpis et ante dictum, et pulvinar dui congue.\n"
    "Maecenas hendrerit, lorem in volutpat check, ligula nullam nulla, vitae\n"
    "tincidunt metus velit eu ipsum.  Aenean dignissim arcu et tortor.\n"))


def untagged(imap: RawImap, command: bytes, literal: bytes | None = None) -> list[bytes]:
    return imap.command(command, literal)


def fetch_items(imap: RawImap, command: bytes) -> dict[int, bytes]:
    """``* n FETCH (...)`` responses of a command, by sequence number."""
    out = {}
    for line in untagged(imap, command):
        m = re.match(rb"\* (\d+) FETCH \((.*)\)\r\n\Z", line, re.S)
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def ids(data: dict[int, bytes], name: bytes) -> dict[int, bytes]:
    out = {}
    for seq, items in data.items():
        m = re.search(name + rb" \((" + OBJECTID + rb")\)", items)
        assert m, items
        out[seq] = m.group(1)
    return out


def test_capabilities_are_advertised(imap):
    """Each is advertised once complete (RFC 8438 section 3, RFC 8474 section 3, RFC 8514
    section 2, RFC 8970 section 6)."""
    [caps] = untagged(imap, b"CAPABILITY")
    for name in (b"STATUS=SIZE", b"OBJECTID", b"SAVEDATE", b"PREVIEW"):
        assert b" " + name + b" " in caps.rstrip(b"\r\n") + b" "


def test_status_size(imap, box):
    """RFC 8438 section 3's example:
    C: A042 STATUS blurdybloop (UIDNEXT MESSAGES SIZE)
    S: * STATUS blurdybloop (MESSAGES 231 UIDNEXT 44292 SIZE 23481)
    -- and the same item in LIST-STATUS (RFC 5819) answers."""
    untagged(imap, b"APPEND " + box.encode(), ROOT)
    untagged(imap, b"APPEND " + box.encode(), REPLY)
    [line] = untagged(imap, b"STATUS %s (UIDNEXT MESSAGES SIZE)" % box.encode())
    assert line == b"* STATUS %s (UIDNEXT 3 MESSAGES 2 SIZE %d)\r\n" % (
        box.encode(), len(ROOT) + len(REPLY))
    listing = untagged(imap, b'LIST "" %s RETURN (STATUS (SIZE))' % box.encode())
    assert listing[-1] == b"* STATUS %s (SIZE %d)\r\n" % (box.encode(), len(ROOT) + len(REPLY))
    imap.command(b"SELECT " + box.encode())
    imap.command(b"STORE 1 +FLAGS (\\Deleted)")
    imap.command(b"EXPUNGE")
    imap.command(b"UNSELECT")
    [line] = untagged(imap, b"STATUS %s (SIZE)" % box.encode())
    assert line == b"* STATUS %s (SIZE %d)\r\n" % (box.encode(), len(REPLY))


def test_mailboxid_on_create_select_status_and_across_rename(imap):
    """RFC 8474 section 4's examples: CREATE answers OK [MAILBOXID (id)]; a second CREATE of
    the name is refused; RENAME keeps the id (4.2); STATUS MAILBOXID (4.3) and SELECT's
    untagged OK [MAILBOXID (id)] (4.1) give it."""
    name = f"M{next(_names)}".encode()
    _, tagged = imap.run(b"CREATE " + name)
    foo = re.match(rb"t\d+ OK \[MAILBOXID \((" + OBJECTID + rb")\)\]", tagged).group(1)
    _, tagged = imap.run(b"CREATE " + name + b"bar")
    bar = re.match(rb"t\d+ OK \[MAILBOXID \((" + OBJECTID + rb")\)\]", tagged).group(1)
    assert foo != bar
    _, tagged = imap.run(b"CREATE " + name)
    assert b" NO " in tagged
    imap.command(b"RENAME %s %srenamed" % (name, name))
    assert untagged(imap, b"STATUS %srenamed (MAILBOXID)" % name) == [
        b"* STATUS %srenamed (MAILBOXID (%s))\r\n" % (name, foo)]
    assert untagged(imap, b"STATUS %sbar (MAILBOXID)" % name) == [
        b"* STATUS %sbar (MAILBOXID (%s))\r\n" % (name, bar)]
    listing = untagged(imap, b'LIST "" %sbar RETURN (STATUS (MAILBOXID SIZE))' % name)
    assert listing[-1] == b"* STATUS %sbar (MAILBOXID (%s) SIZE 0)\r\n" % (name, bar)
    for verb in (b"SELECT", b"EXAMINE"):
        lines = untagged(imap, b"%s %srenamed" % (verb, name))
        assert b"* OK [MAILBOXID (%s)] Ok\r\n" % foo in lines
    # Section 4: a mailbox deleted and created again under its name is a new object.
    imap.command(b"UNSELECT")
    imap.command(b"DELETE %srenamed" % name)
    _, tagged = imap.run(b"CREATE %srenamed" % name)
    again = re.match(rb"t\d+ OK \[MAILBOXID \((" + OBJECTID + rb")\)\]", tagged).group(1)
    assert again not in (foo, bar)


def test_emailid_kept_by_copy_and_move_and_searchable(imap, box):
    """RFC 8474 section 5.1's example: a copy has the original's EMAILID, and so has a
    message moved; SEARCH EMAILID (section 6) finds every copy in the mailbox."""
    other = f"{box}-other".encode()
    imap.command(b"CREATE " + other)
    untagged(imap, b"APPEND " + box.encode(), ROOT)
    untagged(imap, b"APPEND " + box.encode(), REPLY)
    imap.command(b"SELECT " + box.encode())
    imap.command(b"COPY 1 " + box.encode())
    emailids = ids(fetch_items(imap, b"UID FETCH 1:* (EMAILID)"), b"EMAILID")
    assert emailids[1] == emailids[3] != emailids[2]
    imap.command(b"MOVE 2 " + other)
    assert untagged(imap, b"SEARCH EMAILID " + emailids[1]) == [b"* SEARCH 1 2\r\n"]
    assert untagged(imap, b"SEARCH EMAILID " + emailids[2]) == [b"* SEARCH\r\n"]
    imap.command(b"SELECT " + other)
    assert ids(fetch_items(imap, b"FETCH 1 (EMAILID)"), b"EMAILID") == {1: emailids[2]}


def test_threadid_shared_by_a_thread_and_searchable(imap, box):
    """RFC 8474 section 5.2: messages of one thread share a THREADID (ours: the root of
    References or In-Reply-To); SEARCH THREADID (section 6) finds the thread; an id that is
    not an objectid (section 7 grammar) is a BAD."""
    untagged(imap, b"APPEND " + box.encode(), ROOT)
    untagged(imap, b"APPEND " + box.encode(), LOREM)
    untagged(imap, b"APPEND " + box.encode(), REPLY)
    imap.command(b"EXAMINE " + box.encode())
    threads = ids(fetch_items(imap, b"FETCH 1:* (THREADID)"), b"THREADID")
    assert threads[1] == threads[3] != threads[2]
    assert untagged(imap, b"SEARCH THREADID " + threads[1]) == [b"* SEARCH 1 3\r\n"]
    assert untagged(imap, b"UID SEARCH NOT THREADID " + threads[1]) == [b"* SEARCH 2\r\n"]
    _, tagged = imap.run(b"SEARCH THREADID T$1")
    assert b" BAD " in tagged
    _, tagged = imap.run(b"SEARCH EMAILID")
    assert b" BAD " in tagged


def test_savedate_fetch_and_search(imap, box):
    """RFC 8514 sections 3 and 4: SAVEDATE is when the message was saved in this mailbox,
    not its internal date; SAVEDBEFORE/SAVEDON/SAVEDSINCE compare its day;
    SAVEDATESUPPORTED matches every message of a mailbox that keeps save dates."""
    untagged(imap, b'APPEND %s "20-Mar-2018 03:07:37 +1100"' % box.encode(), ROOT)
    imap.command(b"SELECT " + box.encode())
    [items] = fetch_items(imap, b"FETCH 1 (INTERNALDATE SAVEDATE)").values()
    saved = re.search(rb'SAVEDATE "(\d\d)-(\w{3})-(\d{4}) [\d:]+ \+0000"', items)
    assert b'INTERNALDATE "19-Mar-2018 16:07:37 +0000"' in items
    today = time.strftime("%d-%b-%Y", time.gmtime()).encode()
    assert b"%s-%s-%s" % saved.groups() == today
    assert untagged(imap, b"SEARCH SAVEDON " + today) == [b"* SEARCH 1\r\n"]
    assert untagged(imap, b"SEARCH SAVEDSINCE " + today) == [b"* SEARCH 1\r\n"]
    assert untagged(imap, b"SEARCH SAVEDBEFORE " + today) == [b"* SEARCH\r\n"]
    assert untagged(imap, b"SEARCH SAVEDBEFORE 21-Mar-2018") == [b"* SEARCH\r\n"]
    assert untagged(imap, b"SEARCH BEFORE 21-Mar-2018") == [b"* SEARCH 1\r\n"]
    assert untagged(imap, b"SEARCH SAVEDATESUPPORTED") == [b"* SEARCH 1\r\n"]
    _, tagged = imap.run(b"SEARCH SAVEDON yesterday")
    assert b" BAD " in tagged


def test_preview_fetch_and_lazy(imap, box):
    """RFC 8970 section 4's example: FETCH (RFC822.SIZE PREVIEW) answers the preview text,
    at most 256 characters, one line; PREVIEW (LAZY) of a stored preview answers it too;
    a modifier other than LAZY is a BAD (section 6 grammar).  Also the lone-item form
    ``FETCH n PREVIEW (LAZY)`` the grammar allows."""
    untagged(imap, b"APPEND " + box.encode(), LOREM)
    untagged(imap, b"APPEND " + box.encode(), REPLY)
    imap.command(b"EXAMINE " + box.encode())
    items = fetch_items(imap, b"FETCH 1:2 (RFC822.SIZE PREVIEW)")
    assert items[1].startswith(b"RFC822.SIZE %d PREVIEW " % len(LOREM))
    preview = re.search(rb'PREVIEW "([^"]*)"', items[1]).group(1)
    assert preview.startswith(b"Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
                              b"Curabitur aliquam")
    assert len(preview) <= 256 and b"\r" not in preview and b"  " not in preview
    assert items[2] == b'RFC822.SIZE %d PREVIEW "Yes, 3:30 it is."' % len(REPLY)
    assert fetch_items(imap, b"FETCH 2 (PREVIEW (LAZY))") == {2: b'PREVIEW "Yes, 3:30 it is."'}
    assert fetch_items(imap, b"FETCH 2 PREVIEW (LAZY)") == {2: b'PREVIEW "Yes, 3:30 it is."'}
    assert fetch_items(imap, b"UID FETCH 2 PREVIEW (LAZY)") == {
        2: b'UID 2 PREVIEW "Yes, 3:30 it is."'}
    for bad in (b"FETCH 1 (PREVIEW (FOO))", b"FETCH 1 (PREVIEW ())", b"FETCH 1 FLAGS (LAZY)",
                b"FETCH 1 (FLAGS (LAZY))", b"FETCH 1 PREVIEW (LAZY) UID",
                b"FETCH 1 (PREVIEW (LAZY) (LAZY))", b"FETCH 1 PREVIEW LAZY"):
        _, tagged = imap.run(bad)
        assert b" BAD " in tagged, bad
    [flags] = fetch_items(imap, b"FETCH 1 FLAGS").values()
    assert b"\\Seen" not in flags  # PREVIEW does not set \Seen (RFC 8970 section 3)


def test_messages_stored_before_answer_nil_savedate_and_lazy_preview(imap, box, data_dir):
    """Rows written before this change have no save date (RFC 8514 section 3: NIL) and no
    stored preview: PREVIEW (LAZY) answers NIL (RFC 8970 section 3.1), a plain PREVIEW
    computes it, after which LAZY has it too."""
    untagged(imap, b"APPEND " + box.encode(), REPLY)
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"), create_tables=False)
    try:
        mailbox = store.mailbox(USER, box)
        key = keys.message_key(mailbox.id, 1)
        raw = store.messages.table.row(key, [STATE])[STATE]
        record = MessageRecord.decode(raw)
        record.save_date = None  # as the previous release wrote it
        store.messages.table.put(key, {STATE: record.encode(raw[:1])})
        store.messages.table.delete(key, [PREVIEW])
    finally:
        store.close()
    imap.command(b"SELECT " + box.encode())
    assert fetch_items(imap, b"FETCH 1 (SAVEDATE PREVIEW (LAZY))") == {
        1: b"SAVEDATE NIL PREVIEW NIL"}
    assert untagged(imap, b"SEARCH SAVEDSINCE 1-Jan-1970") == [b"* SEARCH\r\n"]
    assert untagged(imap, b"SEARCH NOT SAVEDBEFORE 1-Jan-2100") == [b"* SEARCH 1\r\n"]
    assert fetch_items(imap, b"FETCH 1 PREVIEW") == {1: b'PREVIEW "Yes, 3:30 it is."'}
    assert fetch_items(imap, b"FETCH 1 (PREVIEW (LAZY))") == {
        1: b'PREVIEW "Yes, 3:30 it is."'}
