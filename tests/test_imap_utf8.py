"""UTF8=ACCEPT (RFC 6855) transcript tests: what ``ENABLE UTF8=ACCEPT`` changes, each case
beside the answer a session that has not enabled it gets.

Debian's Dovecot 2.3.19 does not implement UTF8=ACCEPT (not advertised, ENABLE ignores it:
tests/test_differential_rev2.py checks that), so these are judged against RFC 6855's text.
"""

from __future__ import annotations

import pytest

from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message

USERS = [(f"u{i}", "pw") for i in range(16)]
_next_user = iter(USERS)

UTF8_MESSAGE = ("From: J\u00f6rg <j\u00f6rg@b\u00fccher.example>\r\nTo: bob@example.com\r\n"
                "Subject: Gr\u00fc\u00dfe aus K\u00f6ln\r\nMessage-ID: <u1@test>\r\n"
                "Date: Sat, 21 Nov 2026 12:00:00 +0000\r\nMIME-Version: 1.0\r\n"
                "Content-Type: text/plain; charset=utf-8\r\n\r\nHall\u00f6chen\r\n").encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("utf8")
    data_dir = str(base / "store")
    make_users(data_dir, *USERS)
    with ServerProcess(data_dir) as proc:
        yield proc


@pytest.fixture
def user():
    return next(_next_user)[0]


@pytest.fixture
def clients():
    opened: list[Client] = []
    yield opened
    for c in opened:
        c.close()


def login(server, user: str, enable: str | None = "UTF8=ACCEPT") -> Client:
    c = Client(server.port)
    assert c.cmd("L", f"LOGIN {user} pw")[-1].startswith(b"L OK")
    if enable:
        assert c.cmd("E", f"ENABLE {enable}") == [f"* ENABLED {enable}".encode(),
                                                  b"E OK ENABLE completed"]
    return c


def send(c: Client, tag: str, *parts: bytes) -> list[bytes]:
    c.send(b"".join(parts))
    return c.until_tagged(tag)


def test_advertised_and_enabled(server, user, clients):
    """RFC 6855 3: UTF8=ACCEPT is advertised and switched on by ENABLE (RFC 5161), which
    answers ``* ENABLED UTF8=ACCEPT`` also when sent together with IMAP4rev2."""
    c = Client(server.port)
    clients.append(c)
    assert b"UTF8=ACCEPT" in c.cmd("c", "CAPABILITY")[0].split()
    assert c.cmd("L", f"LOGIN {user} pw")[-1].startswith(b"L OK")
    assert c.cmd("e", "ENABLE utf8=accept IMAP4rev2 X-UNKNOWN") == [
        b"* ENABLED UTF8=ACCEPT IMAP4rev2", b"e OK ENABLE completed"]


def test_append_utf8_data_item(server, user, clients):
    """RFC 6855 4: ``APPEND mailbox [flags] [date] UTF8 (literal8)`` stores a message with
    UTF-8 header fields (RFC 6532) once UTF8=ACCEPT is enabled; the octets come back as
    sent.  A plain literal inside the parentheses is taken too (Python's imaplib sends one),
    and MULTIAPPEND mixes both forms."""
    c = login(server, user)
    clients.append(c)
    n = len(UTF8_MESSAGE)
    assert send(c, "a", b"a APPEND INBOX (\\Seen) UTF8 (~{%d+}\r\n" % n, UTF8_MESSAGE,
                b")\r\n")[-1].startswith(b"a OK [APPENDUID")
    c.send(b'b APPEND INBOX "21-Nov-2026 12:00:00 +0000" UTF8 ({%d}\r\n' % n)
    assert c.read_line().startswith(b"+")
    assert send(c, "b", UTF8_MESSAGE, b")\r\n")[-1].startswith(b"b OK [APPENDUID")
    assert send(c, "m", b"m APPEND INBOX UTF8 (~{%d+}\r\n" % n, UTF8_MESSAGE,
                b") {%d+}\r\n" % len(message(1)), message(1), b"\r\n")[-1].startswith(
        b"m OK [APPENDUID")
    assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    body = c.cmd("f", "FETCH 1:3 BODY.PEEK[]")
    assert body[0] == b"* 1 FETCH (BODY[] {%d}\r\n%s)" % (n, UTF8_MESSAGE)
    assert body[1] == body[0].replace(b"* 1", b"* 2")
    assert c.cmd("f", "FETCH 1 FLAGS")[0] == b"* 1 FETCH (FLAGS (\\Seen \\Recent))"


def test_append_utf8_refused_before_enable(server, user, clients):
    """RFC 6855 4: the UTF8 data item belongs to UTF8=ACCEPT, so it is BAD in a session that
    has not enabled it -- also after ENABLE IMAP4rev2 alone (RFC 9051's APPEND has no UTF8
    item) -- and nothing is stored.  Malformed UTF8 items are BAD after ENABLE too."""
    plain = login(server, user, enable=None)
    rev2 = login(server, user, enable="IMAP4rev2")
    enabled = login(server, user)
    clients += [plain, rev2, enabled]
    n = len(UTF8_MESSAGE)
    for c in (plain, rev2):
        lines = send(c, "a", b"a APPEND INBOX UTF8 (~{%d+}\r\n" % n, UTF8_MESSAGE, b")\r\n")
        assert lines == [b"a BAD APPEND UTF8 needs ENABLE UTF8=ACCEPT first (RFC 6855 4)"]
    assert enabled.cmd("b", 'APPEND INBOX UTF8 ("quoted")')[-1].startswith(b"b BAD")
    assert send(enabled, "c", b"c APPEND INBOX UTF8 {%d+}\r\n" % n, UTF8_MESSAGE,
                b"\r\n")[-1].startswith(b"c BAD")
    assert plain.cmd("s", "STATUS INBOX (MESSAGES)")[0] == b"* STATUS INBOX (MESSAGES 0)"


def test_replace_takes_utf8_too(server, user, clients):
    """RFC 8508 5 (append-message) with RFC 6855 4: REPLACE's message may be a UTF8 item once
    UTF8=ACCEPT is enabled."""
    c = login(server, user)
    clients.append(c)
    assert send(c, "a", b"a APPEND Drafts {%d+}\r\n" % len(message(1)), message(1),
                b"\r\n")[-1].startswith(b"a OK")
    assert c.cmd("s", "SELECT Drafts")[-1].startswith(b"s OK")
    lines = send(c, "r", b"r REPLACE 1 Drafts UTF8 (~{%d+}\r\n" % len(UTF8_MESSAGE),
                 UTF8_MESSAGE, b")\r\n")
    assert lines[-1] == b"r OK REPLACE completed"
    assert c.cmd("f", "FETCH 1 BODY.PEEK[]")[0].endswith(UTF8_MESSAGE + b")")
    lines = send(c, "u", b"u UID REPLACE 2 Drafts (\\Seen) UTF8 (~{%d+}\r\n"
                 % len(UTF8_MESSAGE), UTF8_MESSAGE, b")\r\n")
    assert lines[-1] == b"u OK REPLACE completed"
    # A literal8 is a message only there: not in another command's parentheses.
    c.send(b"x UID FETCH 1 UTF8 (~{3+}\r\nabc)\r\n")
    assert c.until_tagged("x")[-1].startswith(b"x BAD")


def test_search_charset_is_bad_after_enable(server, user, clients):
    """RFC 6855 3: once UTF8=ACCEPT is enabled a SEARCH with CHARSET is BAD (every string is
    UTF-8 now), whatever the charset; UTF-8 search strings work without it.  Before the
    ENABLE CHARSET is accepted as ever (after ENABLE IMAP4rev2 alone too: test_imap_rev2)."""
    c = login(server, user)
    plain = login(server, user, enable=None)
    clients += [c, plain]
    assert send(c, "a", b"a APPEND INBOX UTF8 (~{%d+}\r\n" % len(UTF8_MESSAGE), UTF8_MESSAGE,
                b")\r\n")[-1].startswith(b"a OK")
    for session in (c, plain):
        assert session.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    for command in ("SEARCH CHARSET UTF-8 ALL", "UID SEARCH CHARSET US-ASCII ALL",
                    "SEARCH RETURN (COUNT) CHARSET UTF-8 ALL", "SEARCH CHARSET KOI8-R ALL"):
        assert c.cmd("b", command) == [
            b"b BAD SEARCH CHARSET is not allowed after ENABLE UTF8=ACCEPT (RFC 6855 3)"]
    assert c.cmd("u", 'SEARCH SUBJECT "Gr\u00fc\u00dfe"')[0] == b"* SEARCH 1"
    assert c.cmd("u", 'SEARCH FROM "j\u00f6rg"')[0] == b"* SEARCH 1"
    assert plain.cmd("p", 'SEARCH CHARSET UTF-8 SUBJECT "Gr\u00fc\u00dfe"')[0] == \
        b"* SEARCH 1"
    # SORT and THREAD take a charset as a required argument (RFC 5256): UTF-8 is the only one
    # left (RFC 6855 3 with its verified erratum 4029: other charsets SHOULD be BAD).
    assert c.cmd("t", "SORT (SUBJECT) utf-8 ALL")[0] == b"* SORT 1"
    assert c.cmd("t", "THREAD REFERENCES UTF-8 ALL")[0] == b"* THREAD (1)"
    for command in ("SORT (SUBJECT) US-ASCII ALL", "UID THREAD REFERENCES US-ASCII ALL"):
        assert c.cmd("t", command)[-1].startswith(b"t BAD"), command
        assert plain.cmd("p", command)[-1].startswith(b"p OK"), command


def test_names_in_utf8_and_modified_utf7_for_others(server, user, clients):
    """RFC 6855 3: after ENABLE UTF8=ACCEPT mailbox names are UTF-8 (quoted strings may hold
    UTF-8), and ``&`` is not modified UTF-7's shift; a client that has not enabled it gets
    the same names in modified UTF-7 (RFC 3501 5.1.3) -- LIST, LSUB and STATUS alike.  A
    name sent decomposed is stored composed (NFC, RFC 5198), without OLDNAME: that is
    IMAP4rev2's (RFC 9051 6.3.4), not asked for here.  \\Recent stays: only IMAP4rev2
    drops it."""
    c = login(server, user)
    plain = login(server, user, enable=None)
    clients += [c, plain]
    assert c.cmd("c", 'CREATE "Gr\u00fc\u00dfe/Tom & Jerry"')[-1].startswith(b"c OK")
    assert c.cmd("c", 'SUBSCRIBE "Gr\u00fc\u00dfe/Tom & Jerry"')[-1].startswith(b"c OK")
    lines = c.cmd("c", 'CREATE "Re\u0301sume\u0301"')
    assert len(lines) == 1 and lines[0].startswith(b"c OK")
    assert c.cmd("l", 'LIST "" "Gr\u00fc\u00dfe/*"')[0] == \
        '* LIST (\\HasNoChildren) "/" "Gr\u00fc\u00dfe/Tom & Jerry"'.encode()
    assert c.cmd("l", 'LIST "" "R*"')[0] == \
        '* LIST (\\HasNoChildren) "/" "R\u00e9sum\u00e9"'.encode()
    listing = plain.cmd("l", 'LIST "" "*"')
    assert b'* LIST (\\HasChildren) "/" Gr&APwA3w-e' in listing
    assert b'* LIST (\\HasNoChildren) "/" "Gr&APwA3w-e/Tom &- Jerry"' in listing
    assert b'* LIST (\\HasNoChildren) "/" R&AOk-sum&AOk-' in listing
    assert plain.cmd("l", 'LSUB "" "G*"')[0] == b'* LSUB () "/" "Gr&APwA3w-e/Tom &- Jerry"'
    assert c.cmd("l", 'LSUB "" "G*"')[0] == \
        '* LSUB () "/" "Gr\u00fc\u00dfe/Tom & Jerry"'.encode()
    assert c.cmd("s", 'STATUS "R\u00e9sum\u00e9" (MESSAGES)')[0] == \
        '* STATUS "R\u00e9sum\u00e9" (MESSAGES 0)'.encode()
    assert b"* 0 RECENT" in c.cmd("s", 'SELECT "R\u00e9sum\u00e9"')


def test_envelope_of_8bit_headers_is_not_downgraded(server, user, clients):
    """RFC 6855 5: a server MAY downgrade UTF-8 header fields for a client that has not
    enabled UTF8=ACCEPT; like Dovecot we do not (tests/test_differential_rev2.py compares
    the non-enabled answers with Dovecot's): ENVELOPE carries the stored octets, as a
    literal, to both kinds of session, and BODY[HEADER] is the header as stored."""
    c = login(server, user)
    plain = login(server, user, enable=None)
    clients += [c, plain]
    assert send(c, "a", b"a APPEND INBOX UTF8 (~{%d+}\r\n" % len(UTF8_MESSAGE), UTF8_MESSAGE,
                b")\r\n")[-1].startswith(b"a OK")
    answers = []
    for session in (c, plain):
        assert session.cmd("s", "EXAMINE INBOX")[-1].startswith(b"s OK")
        answers.append(session.cmd("f", "FETCH 1 (ENVELOPE BODY.PEEK[HEADER.FIELDS "
                                               "(SUBJECT)])"))
    assert answers[0] == answers[1]
    subject = "Gr\u00fc\u00dfe aus K\u00f6ln".encode()
    assert b"{%d}\r\n%s" % (len(subject), subject) in answers[0][0]


def test_response_text_spells_names_as_the_session_does(server, user, clients):
    """RFC 3501 9: the text of a status response is 7-bit (TEXT-CHAR); a mailbox name in it
    reaches a session that has not enabled UTF-8 in modified UTF-7, as it spelt the name.
    After ENABLE UTF8=ACCEPT the text may be UTF-8 (RFC 6855 3, RFC 9051 9's ``text``)."""
    c = login(server, user)
    plain = login(server, user, enable=None)
    clients += [c, plain]
    lines = plain.cmd("s", "STATUS &ZeVnLIqe- (MESSAGES)")
    assert lines == [b"s NO [NONEXISTENT] Mailbox does not exist: &ZeVnLIqe-"]
    assert lines[0].isascii()
    assert c.cmd("s", 'STATUS "\u65e5\u672c\u8a9e" (MESSAGES)') == [
        "s NO [NONEXISTENT] Mailbox does not exist: \u65e5\u672c\u8a9e".encode()]
    msg = message(1)
    plain.send(b"a APPEND &ZeVnLIqe- {%d+}\r\n%s\r\n" % (len(msg), msg))
    assert plain.until_tagged("a") == [b"a NO [TRYCREATE] Mailbox does not exist: &ZeVnLIqe-"]


def test_acl_metadata_urlauth_names_in_utf8(server, user, clients):
    """RFC 6855 3 (and RFC 9051 5.1): once UTF8=ACCEPT is enabled every mailbox name, in
    arguments and responses, is UTF-8 -- also in the ACL commands (RFC 4314 3), METADATA
    (RFC 5464 4.2, 4.3) and RESETKEY (RFC 4467 7.1); ``&`` is an ordinary character.  A
    session that has not enabled it keeps modified UTF-7 for the same mailbox."""
    c = login(server, user)
    clients.append(c)
    name = "Caf\u00e9 & Co"
    assert c.cmd("c", f'CREATE "{name}"')[-1].startswith(b"c OK")
    quoted = f'"{name}"'.encode()
    lines = c.cmd("m", f'MYRIGHTS "{name}"')
    assert lines == [b"* MYRIGHTS " + quoted + b" lrwstipekxacd", b"m OK MYRIGHTS completed"]
    acl = c.cmd("g", f'GETACL "{name}"')[0]
    assert acl == b"* ACL " + quoted + f" {user} lrwstipekxacd".encode()
    assert c.cmd("r", f'LISTRIGHTS "{name}" anyone')[0].startswith(b"* LISTRIGHTS " + quoted)
    assert c.cmd("s", f'SETACL "{name}" anyone lr')[-1].startswith(b"s OK")
    assert c.cmd("d", f'DELETEACL "{name}" anyone')[-1].startswith(b"d OK")
    assert c.cmd("t", f'SETMETADATA "{name}" (/private/comment "x")')[-1].startswith(b"t OK")
    assert c.cmd("u", f'GETMETADATA "{name}" /private/comment')[0] == \
        b"* METADATA " + quoted + b' (/private/comment "x")'
    assert c.cmd("k", f'RESETKEY "{name}"')[-1].startswith(b"k OK")
    old = login(server, user, enable=None)
    clients.append(old)
    utf7 = b'"Caf&AOk- &- Co"'
    assert old.cmd("m", 'MYRIGHTS "Caf&AOk- &- Co"')[0] == b"* MYRIGHTS " + utf7 + \
        b" lrwstipekxacd"
    assert old.cmd("u", 'GETMETADATA "Caf&AOk- &- Co" /private/comment')[0] == \
        b"* METADATA " + utf7 + b' (/private/comment "x")'


def test_rev2_select_lists_another_users_mailbox_by_its_public_name(tmp_path):
    """RFC 9051 6.3.2: SELECT's untagged LIST names the mailbox as the client does -- for
    another user's mailbox ``Other Users/<owner>/<name>`` (RFC 2342 5), not the owner's own
    name for it (which would be a mailbox of the client's own)."""
    from mailstore.backends.embedded import EmbeddedBackend
    from mailstore.store import MailStore
    data_dir = str(tmp_path / "store")
    store = MailStore(EmbeddedBackend(data_dir))
    for who in ("ann", "ben"):
        store.create_user(who, "pw", default_folders=False)
    box = store.create_mailbox("ann", "Team")
    store.grants.set(box.id, "ben", frozenset("lr"))
    store.close()
    with ServerProcess(data_dir) as proc:
        c = Client(proc.port)
        try:
            assert c.cmd("L", "LOGIN ben pw")[-1].startswith(b"L OK")
            assert c.cmd("E", "ENABLE IMAP4rev2")[-1].startswith(b"E OK")
            lines = c.cmd("s", 'SELECT "Other Users/ann/Team"')
            assert b'* LIST (\\HasNoChildren) "/" "Other Users/ann/Team"' in lines, lines
        finally:
            c.close()
