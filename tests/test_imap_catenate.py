"""CATENATE (RFC 4469) transcript tests over real sockets, plain and TLS.

The judge is RFC 4469 itself: section 6's example (a draft rebuilt from the parts of another
draft and a forwarded message), section 3's rule that the new message is the concatenation of
the TEXT literals and the referenced octets in order -- checked byte for byte against FETCH of
the same sections --, ``[BADURL url]`` for a URL that does not resolve with nothing appended,
and ``[TOOBIG]``.  tests/test_differential_catenate.py asks Dovecot the same things.
"""

from __future__ import annotations

import re
import socket
import ssl

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message
from tests.tlscert import make_cert

USERS = 30
BIG = 1024 * 1024 + 4099
"""A URL part over 1 MiB: more than one content chunk, more than the receiver's in-memory
literal budget."""

# RFC 4469 6: the draft (UID 20 there) that the example takes a header and a part from ...
DRAFT = (b"Date: Mon, 7 Feb 1994 21:52:25 -0800 (PST)\r\n"
         b"From: Fred Foobar <foobar@Blurdybloop.example.COM>\r\n"
         b"Subject: afternoon meeting\r\n"
         b"To: mooch@owatagu.example.net\r\n"
         b"Message-Id: <B27397-0100000@Blurdybloop.example.COM>\r\n"
         b"MIME-Version: 1.0\r\n"
         b"Content-Type: multipart/mixed;\r\n"
         b" boundary=\"------------030308070208000400050907\"\r\n\r\n"
         b"--------------030308070208000400050907\r\n"
         b"Content-Type: TEXT/PLAIN; CHARSET=US-ASCII\r\n\r\n"
         b"Hello Joe, do you think we can meet at 3:30 tomorrow?\r\n\r\n"
         b"--------------030308070208000400050907\r\n"
         b"Content-Type: text/plain; name=\"notes.txt\"\r\n\r\n"
         b"agenda: lunch\r\n\r\n"
         b"--------------030308070208000400050907--\r\n")
# ... and the message it attaches whole (UID 30 there).
FORWARDED = message(30, subject="the forwarded one")
BOUNDARY = b"--------------030308070208000400050907"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_cert(str(tmp_path_factory.mktemp("cert")))


@pytest.fixture(scope="module")
def server(tmp_path_factory, certs):
    base = tmp_path_factory.mktemp("catenate")
    cert, key = certs
    conf = base / "imapserver.conf"
    # A small message limit so that [TOOBIG] is cheap to reach (APPENDLIMIT follows it).
    conf.write_text(f"[store]\nsynchronous = NORMAL\nmax_message_size = {4 * BIG}\n"
                    f"[imap]\ntls_cert = {cert}\ntls_key = {key}\n"
                    f"max_literal_size = {4 * BIG}\n"
                    "plaintext_auth = loopback\nauth_failure_delay = 0.1\n")
    data_dir = str(base / "store")
    make_users(data_dir, *((f"u{i}", "pw") for i in range(USERS)), ("quota", "pw"))
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"))
    try:
        store.set_quota("quota", 40 * 1024, None)
    finally:
        store.close()
    with ServerProcess(data_dir, "--imaps-port", "auto", config=str(conf)) as proc:
        yield proc
        log = proc.wait_output(rb"$", timeout=0)
        assert b"Traceback" not in log, log[-4000:].decode(errors="replace")


_users = iter(range(USERS))


def connect(server, certs, user: str, transport: str = "plain") -> Client:
    if transport == "imaps":
        c = Client.__new__(Client)
        raw = socket.create_connection(("127.0.0.1", server.ports["imaps"]), timeout=30)
        context = ssl.create_default_context(cafile=certs[0])
        c.sock = context.wrap_socket(raw, server_hostname="localhost")
        c.buffer = b""
        c.greeting = c.read_line()
    else:
        c = Client(server.port, timeout=30)
    assert c.cmd("l", f"LOGIN {user} pw")[-1].startswith(b"l OK")
    return c


@pytest.fixture
def login(server, certs):
    """A fresh account per test; ``login(transport)`` opens a session on it."""
    user = f"u{next(_users)}"
    clients = []

    def open_session(transport: str = "plain", as_user: str | None = None) -> Client:
        clients.append(connect(server, certs, as_user or user, transport))
        return clients[-1]
    open_session.user = user
    yield open_session
    for c in clients:
        c.close()


def append(c: Client, mailbox: str, data: bytes, flags: str = "") -> int:
    c.send(f"a APPEND {mailbox} ({flags}) {{{len(data)}+}}\r\n".encode() + data + b"\r\n")
    line = c.until_tagged("a")[-1]
    assert line.startswith(b"a OK [APPENDUID"), line
    return int(re.search(rb"APPENDUID \d+ (\d+)", line).group(1))


def uidvalidity(c: Client, mailbox: str) -> int:
    line = c.cmd("s", f"STATUS {mailbox} (UIDVALIDITY)")[0]
    return int(re.search(rb"UIDVALIDITY (\d+)", line).group(1))


def messages(c: Client, mailbox: str) -> int:
    line = c.cmd("s", f"STATUS {mailbox} (MESSAGES)")[0]
    return int(re.search(rb"MESSAGES (\d+)", line).group(1))


def fetch_section(c: Client, mailbox: str, uid: int, section: str) -> bytes:
    c.cmd("x", f"EXAMINE {mailbox}")
    lines = c.cmd("f", f"UID FETCH {uid} BODY.PEEK[{section}]")
    c.cmd("u", "UNSELECT")
    line = lines[0]
    head, _, rest = line.partition(b"}\r\n")
    size = int(head[head.rindex(b"{") + 1:])
    return rest[:size]


def catenate(c: Client, tag: str, head: str, parts: list, plus: bool = True) -> list[bytes]:
    """``head`` then ``CATENATE (parts)``: each part ("TEXT", bytes) or ("URL", text).  TEXT
    literals are sent LITERAL+ (RFC 7888) or, with ``plus=False``, synchronizing: the client
    waits for each continuation as RFC 4469 6's example does."""
    c.send(f"{tag} {head} CATENATE (".encode())
    first = True
    for kind, value in parts:
        sep = b"" if first else b" "
        first = False
        if kind == "URL":
            c.send(sep + b'URL "' + value.encode() + b'"')
        elif plus:
            c.send(sep + b"TEXT {%d+}\r\n" % len(value) + value)
        else:
            c.send(sep + b"TEXT {%d}\r\n" % len(value))
            cont = c.read_line()
            assert cont.startswith(b"+"), cont
            c.send(value)
    c.send(b")\r\n")
    return c.until_tagged(tag)


def new_uid(line: bytes) -> int:
    assert b"[APPENDUID" in line, line
    return int(re.search(rb"APPENDUID \d+ ([\d:,]+)", line).group(1).split(b":")[0]
               .split(b",")[0])


# -- RFC 4469 6 ------------------------------------------------------------------------------

def test_rfc4469_example_rebuilds_a_draft(login):
    """RFC 4469 6: the client keeps the header and first part of draft 20, drops its second
    part and attaches message 30 whole, sending only the boundaries; synchronizing literals,
    so every TEXT waits for its continuation.  The result is the TEXT and URL octets in order
    (RFC 4469 3), with the flags given."""
    c = login()
    draft = append(c, "Drafts", DRAFT, "\\Draft")
    fwd = append(c, "Drafts", FORWARDED)
    v = uidvalidity(c, "Drafts")
    base = f"/Drafts;UIDVALIDITY={v}/;UID={draft}"
    texts = [b"\r\n" + BOUNDARY + b"\r\n",
             b"\r\n" + BOUNDARY + b"\r\nContent-Type: message/rfc822\r\n\r\n",
             b"\r\n" + BOUNDARY + b"--\r\n"]
    lines = catenate(c, "A003", "APPEND Drafts (\\Seen \\Draft $MDNSent)", [
        ("URL", f"{base}/;section=HEADER"), ("TEXT", texts[0]),
        ("URL", f"{base}/;section=1.MIME"), ("URL", f"{base}/;section=1"),
        ("TEXT", texts[1]), ("URL", f"/Drafts;UIDVALIDITY={v}/;UID={fwd}"),
        ("TEXT", texts[2])], plus=False)
    assert lines[-1].startswith(b"A003 OK [APPENDUID"), lines
    uid = new_uid(lines[-1])
    expected = (fetch_section(c, "Drafts", draft, "HEADER") + texts[0]
                + fetch_section(c, "Drafts", draft, "1.MIME")
                + fetch_section(c, "Drafts", draft, "1") + texts[1] + FORWARDED + texts[2])
    assert fetch_section(c, "Drafts", uid, "") == expected
    c.cmd("x", "EXAMINE Drafts")
    flags = c.cmd("f", f"UID FETCH {uid} FLAGS")[0]
    assert b"\\Seen" in flags and b"\\Draft" in flags and b"$MDNSent" in flags
    # The new message is a MIME message again: its parts are where the boundaries say.
    assert fetch_section(c, "Drafts", uid, "1") == b"Hello Joe, do you think we can meet " \
        b"at 3:30 tomorrow?\r\n"
    assert fetch_section(c, "Drafts", uid, "2") == FORWARDED
    assert fetch_section(c, "Drafts", uid, "2.HEADER.FIELDS (SUBJECT)") == \
        b"Subject: the forwarded one\r\n\r\n"


def test_rfc4469_badurl_appends_nothing(login):
    """RFC 4469 3/6: a URL naming a section the message does not have fails the APPEND with
    NO [BADURL url], the URL as sent; no message is added."""
    c = login()
    draft = append(c, "Drafts", DRAFT)
    v = uidvalidity(c, "Drafts")
    url = f"/Drafts;UIDVALIDITY={v}/;UID={draft}/;section=3"
    lines = catenate(c, "A004", "APPEND Drafts", [
        ("URL", f"/Drafts;UIDVALIDITY={v}/;UID={draft}/;section=HEADER"),
        ("TEXT", b"\r\n" + BOUNDARY + b"\r\n"), ("URL", url)])
    assert lines[-1].startswith(f"A004 NO [BADURL {url}]".encode()), lines
    assert messages(c, "Drafts") == 1


# -- byte for byte ---------------------------------------------------------------------------

SECTIONS = ["", "HEADER", "TEXT", "1", "1.MIME", "2", "2.MIME", "HEADER.FIELDS%20(SUBJECT%20TO)"]


@pytest.mark.parametrize("section", SECTIONS)
def test_text_plus_section_is_byte_for_byte(login, section):
    """RFC 4469 3: the message is the TEXT octets followed by exactly the octets FETCH
    BODY[section] returns for the URL's section (RFC 5092 isection, %-encoded)."""
    c = login()
    src = append(c, "INBOX", DRAFT)
    v = uidvalidity(c, "INBOX")
    lead = b"X-Lead: catenated\r\n\r\n"
    lines = catenate(c, "c", "APPEND Drafts", [
        ("TEXT", lead), ("URL", f"/INBOX;UIDVALIDITY={v}/;UID={src}/;SECTION={section}"
                         if section else f"/INBOX;UIDVALIDITY={v}/;UID={src}")])
    assert lines[-1].startswith(b"c OK"), lines
    want = lead + fetch_section(c, "INBOX", src, section.replace("%20", " "))
    assert fetch_section(c, "Drafts", new_uid(lines[-1]), "") == want


def test_partial_and_relative_forms(login):
    """RFC 5092 ipartial (``/;PARTIAL=origin.length``); the relative ``;UID=`` form resolved
    against the selected mailbox; an absolute ``imap://`` URL of the session's own user
    (RFC 4469 5); a URL without UIDVALIDITY."""
    c = login()
    src = append(c, "INBOX", DRAFT)
    whole = fetch_section(c, "INBOX", src, "")
    assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    lines = catenate(c, "c", "APPEND Drafts", [
        ("URL", f";UID={src}/;PARTIAL=10.20"), ("URL", f"/INBOX/;UID={src}/;PARTIAL=5"),
        ("URL", f"imap://{c_user(login)}@localhost/INBOX/;UID={src}/;SECTION=1")])
    assert lines[-1].startswith(b"c OK"), lines
    got = fetch_section(c, "Drafts", new_uid(lines[-1]), "")
    assert got == whole[10:30] + whole[5:] + fetch_section(c, "INBOX", src, "1")


def c_user(login) -> str:
    return login.user


def test_multiappend_with_catenate(login):
    """RFC 4469 5 with RFC 3502: CATENATE and plain literals mixed in one MULTIAPPEND; one
    APPENDUID with every new UID."""
    c = login()
    src = append(c, "INBOX", FORWARDED)
    url = f"/INBOX;UIDVALIDITY={uidvalidity(c, 'INBOX')}/;UID={src}"
    one = message(1)
    c.send(b"m APPEND Drafts CATENATE (URL \"" + url.encode() + b"\") (\\Seen) {%d+}\r\n"
           % len(one) + one + b" CATENATE (TEXT {3+}\r\nab\n URL \"" + url.encode()
           + b"\")\r\n")
    line = c.until_tagged("m")[-1]
    assert re.match(rb"m OK \[APPENDUID \d+ 1:3\]", line), line
    assert fetch_section(c, "Drafts", 1, "") == FORWARDED
    assert fetch_section(c, "Drafts", 2, "") == one
    assert fetch_section(c, "Drafts", 3, "") == b"ab\n" + FORWARDED


# -- URLs that do not resolve ----------------------------------------------------------------

def bad_urls(user: str, v: int, uid: int, gone: int) -> list[str]:
    return [
        f"/INBOX;UIDVALIDITY={v + 1}/;UID={uid}",          # wrong UIDVALIDITY
        f"/INBOX;UIDVALIDITY={v}/;UID={gone}",             # expunged
        f"/INBOX;UIDVALIDITY={v}/;UID={uid}/;SECTION=7",   # no such part
        f"/INBOX;UIDVALIDITY={v}/;UID={uid}/;SECTION=1.HEADER",  # part 1 is not a message
        f"/INBOX;UIDVALIDITY={v}/;UID={uid}/;SECTION=BOGUS",
        f"/Nowhere/;UID={uid}",                            # no such mailbox
        f"imap://u0@localhost/INBOX/;UID={uid}",           # another user, no URLAUTH
        f"imap://{user}@localhost/INBOX/;UID={uid};URLAUTH=anonymous:INTERNAL:"
        + "0" * 40,                                        # a verifier never made
        "/INBOX;UID=x",                                    # malformed
        "http://example.com/",
        f";UID={uid}",                                     # relative, nothing selected
    ]


def test_bad_urls_fail_with_badurl_and_append_nothing(login):
    """RFC 4469 3: every URL that does not resolve -- wrong UIDVALIDITY, an expunged UID, an
    unknown section, a mailbox that does not exist or is another user's (RFC 4469 5) -- is
    NO [BADURL url], and nothing is appended, in a MULTIAPPEND neither (RFC 3502)."""
    c = login()
    uid = append(c, "INBOX", DRAFT)
    gone = append(c, "INBOX", message(2))
    c.cmd("s", "SELECT INBOX")
    c.cmd("d", f"UID STORE {gone} +FLAGS (\\Deleted)")
    c.cmd("e", "EXPUNGE")
    c.cmd("u", "UNSELECT")
    v = uidvalidity(c, "INBOX")
    for url in bad_urls(login.user, v, uid, gone):
        lines = catenate(c, "b", "APPEND Drafts", [("TEXT", b"x\r\n"), ("URL", url)])
        assert lines[-1].startswith(f"b NO [BADURL {url}]".encode()), (url, lines)
        # The second message of a MULTIAPPEND is the bad one: the first is not kept either.
        c.send(b"m APPEND Drafts {3+}\r\nab\n CATENATE (URL \"" + url.encode() + b"\")\r\n")
        assert c.until_tagged("m")[-1].startswith(b"m NO [BADURL"), url
    assert messages(c, "Drafts") == 0
    # The same URLs with the mistake fixed do resolve.
    lines = catenate(c, "g", "APPEND Drafts", [("URL", f"/INBOX;UIDVALIDITY={v}/;UID={uid}")])
    assert lines[-1].startswith(b"g OK"), lines


def test_malformed_catenate_is_bad(login):
    """RFC 4469 5's grammar: parts are TEXT literal or URL astring; anything else is BAD."""
    c = login()
    for args in ('CATENATE ()', 'CATENATE (TEXT "quoted")', 'CATENATE (FOO "x")',
                 'CATENATE (URL)', 'CATENATE (URL ("x"))', 'CATENATE'):
        line = c.cmd("k", f"APPEND Drafts {args}")[-1]
        assert line.startswith(b"k BAD"), (args, line)
    assert messages(c, "Drafts") == 0


# -- sizes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("transport", ["plain", "imaps"])
def test_big_url_part_streams(login, transport):
    """A URL part over 1 MiB (several content chunks) copies exactly, over plain and TLS."""
    c = login(transport)
    big = message(7, size=BIG)
    src = append(c, "INBOX", big)
    v = uidvalidity(c, "INBOX")
    lines = catenate(c, "c", "APPEND Drafts", [
        ("URL", f"/INBOX;UIDVALIDITY={v}/;UID={src}/;SECTION=HEADER"),
        ("TEXT", b"Tail-Field: yes\r\n\r\n"),  # header ends at the TEXT's blank line
        ("URL", f"/INBOX;UIDVALIDITY={v}/;UID={src}/;SECTION=TEXT"),
        ("URL", f"/INBOX;UIDVALIDITY={v}/;UID={src}/;SECTION=TEXT")])
    assert lines[-1].startswith(b"c OK"), lines
    head, _, body = big.partition(b"\r\n\r\n")
    want = head + b"\r\n\r\nTail-Field: yes\r\n\r\n" + body + body
    assert len(want) > 2 * 1024 * 1024
    got = fetch_section(c, "Drafts", new_uid(lines[-1]), "")
    assert got == want


def test_toobig_and_overquota(login, server, certs):
    """RFC 4469 3: a message over the limit (APPENDLIMIT, RFC 7889) is NO [TOOBIG], found
    from the parts' sizes before any is read; over the user's quota it is NO [OVERQUOTA]
    (RFC 9208 7); a TEXT literal over the limit is refused before it is sent."""
    c = login()
    big = message(8, size=BIG)
    src = append(c, "INBOX", big)
    url = f"/INBOX;UIDVALIDITY={uidvalidity(c, 'INBOX')}/;UID={src}"
    lines = catenate(c, "t", "APPEND Drafts", [("URL", url)] * 5)
    assert lines[-1].startswith(b"t NO [TOOBIG]"), lines
    c.send(b"s APPEND Drafts CATENATE (TEXT {%d}\r\n" % (5 * BIG))
    assert c.read_line().startswith(b"s NO [TOOBIG]")
    assert messages(c, "Drafts") == 0
    q = connect(server, certs, "quota")
    small = message(9, size=15 * 1024)
    src = append(q, "INBOX", small)
    url = f"/INBOX;UIDVALIDITY={uidvalidity(q, 'INBOX')}/;UID={src}"
    lines = catenate(q, "q", "APPEND Drafts", [("URL", url), ("URL", url)])
    assert lines[-1].startswith(b"q NO [OVERQUOTA]"), lines
    assert messages(q, "Drafts") == 0
    lines = catenate(q, "q", "APPEND Drafts", [("URL", url)])
    assert lines[-1].startswith(b"q OK"), lines
    q.close()


def test_capability_advertised(login):
    """RFC 4469 2: CATENATE in CAPABILITY."""
    c = login()
    assert b" CATENATE" in c.cmd("c", "CAPABILITY")[0]


def test_literal8_text_and_replace_with_catenate(login):
    """A TEXT part may be a literal8 (message data, RFC 3516 4.3; Dovecot takes it too);
    REPLACE (RFC 8508) takes CATENATE's append-data like APPEND."""
    c = login()
    src = append(c, "INBOX", FORWARDED)
    c.send(b"b APPEND Drafts CATENATE (TEXT ~{12+}\r\nX-Bin: a\x00b\r\n URL \"/INBOX/;UID=%d"
           b"/;SECTION=TEXT\")\r\n" % src)
    line = c.until_tagged("b")[-1]
    assert line.startswith(b"b OK [APPENDUID"), line
    assert c.cmd("s", "SELECT Drafts")[-1].startswith(b"s OK")
    c.send(b"r UID REPLACE %d Drafts CATENATE (URL \"/INBOX/;UID=%d\" TEXT {4+}\r\nPS\r\n)\r\n"
           % (new_uid(line), src))
    lines = c.until_tagged("r")
    assert lines[-1].startswith(b"r OK"), lines
    replaced = int(re.search(rb"APPENDUID \d+ (\d+)", lines[0]).group(1))
    c.cmd("u", "UNSELECT")
    assert fetch_section(c, "Drafts", replaced, "") == FORWARDED + b"PS\r\n"
    assert messages(c, "Drafts") == 1
