"""URLAUTH (RFC 4467) transcript tests: GENURLAUTH, URLFETCH, RESETKEY, and URLAUTH URLs in
CATENATE (RFC 4469 3, 5).

RFC 4467's example (7.2 GENURLAUTH, 7.3 URLFETCH) is played as written, with our host and
UIDs: joe makes a URL for part 1.2 of a message that only the submission server "fred" may
fetch, and fred fetches "Si vis pacem, para bellum." with it.  The other tests take each rule
in turn: access identifiers (3.3), the INTERNAL mechanism (3.4.1), EXPIRE (4), validation
(6), a key reset revoking URLs (7.1), a tampered URL, a message or mailbox gone.
tests/test_differential_catenate.py compares what Dovecot can be asked (its
cross-user URLFETCH crashes in Debian's 2.3.19; see docs/differential.md).
"""

from __future__ import annotations

import re

import pytest

from tests.imapproc import Client, ServerProcess, make_users

# RFC 4467 7.2, 7.3: part 1.2 of the message is the quotation.
MESSAGE = (b"From: joe@example.com\r\nTo: fred@example.com\r\nSubject: a quotation\r\n"
           b"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=out\r\n\r\n"
           b"--out\r\nContent-Type: multipart/alternative; boundary=in\r\n\r\n"
           b"--in\r\nContent-Type: text/plain\r\n\r\nLatin follows.\r\n"
           b"--in\r\nContent-Type: text/plain\r\n\r\nSi vis pacem, para bellum.\r\n\r\n"
           b"--in--\r\n\r\n--out--\r\n")
QUOTE = b"Si vis pacem, para bellum.\r\n"
USERS = ("joe", "fred", "max", "ann")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("urlauth")
    conf = base / "imapserver.conf"
    conf.write_text("[store]\nsynchronous = NORMAL\n[imap]\nurlauth_submit_users = fred\n"
                    "auth_failure_delay = 0.1\n")
    data_dir = str(base / "store")
    make_users(data_dir, *((u, "pw") for u in USERS))
    with ServerProcess(data_dir, config=str(conf)) as proc:
        yield proc
        log = proc.wait_output(rb"$", timeout=0)
        assert b"Traceback" not in log, log[-4000:].decode(errors="replace")


@pytest.fixture
def sessions(server):
    opened = {}

    def session(user: str) -> Client:
        if user not in opened:
            c = Client(server.port)
            assert c.cmd("l", f"LOGIN {user} pw")[-1].startswith(b"l OK")
            opened[user] = c
        return opened[user]
    yield session
    for c in opened.values():
        c.close()


_boxes = iter(range(1000))


@pytest.fixture
def source(sessions):
    """A fresh mailbox of joe's holding MESSAGE: (mailbox name, UID, UIDVALIDITY)."""
    joe = sessions("joe")
    name = f"box{next(_boxes)}"
    assert joe.cmd("c", f"CREATE {name}")[-1].startswith(b"c OK")
    joe.send(f"a APPEND {name} {{{len(MESSAGE)}+}}\r\n".encode() + MESSAGE + b"\r\n")
    line = joe.until_tagged("a")[-1]
    validity, uid = re.search(rb"APPENDUID (\d+) (\d+)", line).groups()
    return name, int(uid), int(validity)


def gen(c: Client, *rumps: str, mech: str = "INTERNAL") -> list[bytes]:
    args = " ".join(f'"{r}" {mech}' for r in rumps)
    return c.cmd("g", f"GENURLAUTH {args}")


def generated(c: Client, *rumps: str) -> list[str]:
    lines = gen(c, *rumps)
    assert lines[-1].startswith(b"g OK"), lines
    assert len(lines) == 2 and lines[0].startswith(b"* GENURLAUTH "), lines
    return [u.strip('"') for u in lines[0][len(b"* GENURLAUTH "):].decode().split(" ")]


def fetch(c: Client, *urls: str) -> list[bytes | None]:
    """URLFETCH's data per URL, in order (None for NIL)."""
    lines = c.cmd("f", "URLFETCH " + " ".join(f'"{u}"' for u in urls))
    assert lines[-1].startswith(b"f OK"), lines
    out = []
    for url, line in zip(urls, lines[:-1], strict=True):
        prefix = b"* URLFETCH " + _astring(url) + b" "
        assert line.startswith(prefix), (line, url)
        rest = line[len(prefix):]
        if rest == b"NIL":
            out.append(None)
        else:
            size, data = re.match(rb"\{(\d+)\}\r\n(.*)\Z", rest, re.S).groups()
            assert len(data) == int(size)
            out.append(data)
    return out


def _astring(url: str) -> bytes:
    return url.encode() if "%" not in url else b'"' + url.encode() + b'"'


def test_rfc4467_example(sessions, source):
    """RFC 4467 7.2, 7.3: joe's GENURLAUTH for ``submit+fred`` gives a ``:internal:`` URL; fred, a
    submission server (``urlauth_submit_users``), URLFETCHes part 1.2 with it.  Nobody else
    may, not even joe (RFC 4467 3: submit+ is for the submission entity)."""
    box, uid, _v = source
    rump = f"imap://joe@example.com/{box}/;uid={uid}/;section=1.2;urlauth=submit+fred"
    [url] = generated(sessions("joe"), rump)
    assert re.fullmatch(re.escape(rump) + r":internal:[0-9a-f]{40}", url), url
    assert fetch(sessions("fred"), url) == [QUOTE]
    assert fetch(sessions("max"), url) == [None]
    assert fetch(sessions("joe"), url) == [None]


def test_access_identifiers(sessions, source):
    """RFC 4467 3: ``anonymous`` and ``authuser`` admit any logged-in user, ``user+name``
    only that user."""
    box, uid, v = source
    base = f"imap://joe@localhost/{box};UIDVALIDITY={v}/;UID={uid}"
    anon, auth, fred, joe = generated(sessions("joe"), f"{base};URLAUTH=anonymous",
                                      f"{base};URLAUTH=authuser", f"{base};URLAUTH=user+fred",
                                      f"{base};URLAUTH=user+joe")
    for user in USERS:
        got = fetch(sessions(user), anon, auth, fred, joe)
        assert got == [MESSAGE, MESSAGE, MESSAGE if user == "fred" else None,
                       MESSAGE if user == "joe" else None], user


def test_resetkey_revokes(sessions, source):
    """RFC 4467 7.1: RESETKEY mailbox gives it a new key (URLs made before stop working,
    new ones work; [URLMECH INTERNAL]); RESETKEY alone removes every key of the user."""
    box, uid, _v = source
    joe, ann = sessions("joe"), sessions("ann")
    rump = f"imap://joe@localhost/{box}/;UID={uid}/;SECTION=1.1;URLAUTH=authuser"
    [old] = generated(joe, rump)
    [inbox_url] = generated(joe, f"imap://joe@localhost/{box}/;UID={uid};URLAUTH=authuser")
    assert fetch(ann, old) == [b"Latin follows."]
    line = joe.cmd("r", f"RESETKEY {box}")[-1]
    assert line.startswith(b"r OK [URLMECH INTERNAL]"), line
    [new] = generated(joe, rump)
    assert new != old
    assert fetch(ann, old, new) == [None, b"Latin follows."]
    assert joe.cmd("r", f"RESETKEY {box} INTERNAL")[-1].startswith(b"r OK")
    assert fetch(ann, new) == [None]
    [again] = generated(joe, rump)
    assert joe.cmd("r", "RESETKEY")[-1].startswith(b"r OK")
    assert fetch(ann, again, inbox_url) == [None, None]


def test_tampered_expired_and_gone(sessions, source):
    """A URL verifies only exactly as made (RFC 4467 3.4.1: the verifier covers the whole rump),
    before its EXPIRE (3), while its message and mailbox exist; otherwise URLFETCH says NIL
    for it and still answers the others (7.3)."""
    box, uid, v = source
    joe, ann = sessions("joe"), sessions("ann")
    base = f"imap://joe@localhost/{box};UIDVALIDITY={v}/;UID={uid}"
    [good, dated] = generated(joe, f"{base};URLAUTH=authuser",
                              f"{base};EXPIRE=2099-01-01T00:00:00Z;URLAUTH=authuser")
    digest = good.rsplit(":", 1)[1]
    flipped = good[:-1] + ("0" if good[-1] != "0" else "1")
    other_uid = good.replace(f";UID={uid}", f";UID={uid + 1}")
    other_section = good.replace(";URLAUTH", "/;SECTION=1;URLAUTH")
    plain = base
    assert fetch(ann, good, flipped, other_uid, other_section, plain, dated) == \
        [MESSAGE, None, None, None, None, MESSAGE]
    assert len(digest) == 40
    assert gen(joe, f"{base};EXPIRE=2001-01-01T00:00:00Z;URLAUTH=authuser")[-1] \
        .startswith(b"g BAD")
    # The message expunged: NIL.
    joe.cmd("s", f"SELECT {box}")
    joe.cmd("d", f"UID STORE {uid} +FLAGS.SILENT (\\Deleted)")
    joe.cmd("e", "EXPUNGE")
    joe.cmd("u", "UNSELECT")
    assert fetch(ann, good) == [None]


def test_mailbox_recreated_is_not_the_same(sessions, source):
    """The key belongs to the mailbox (RFC 4467 3): one deleted and created again under the
    same name has none, and URLs made for the old one stay dead."""
    box, uid, _v = source
    joe, ann = sessions("joe"), sessions("ann")
    [url] = generated(joe, f"imap://joe@localhost/{box}/;UID={uid};URLAUTH=authuser")
    assert joe.cmd("d", f"DELETE {box}")[-1].startswith(b"d OK")
    assert joe.cmd("c", f"CREATE {box}")[-1].startswith(b"c OK")
    joe.send(f"a APPEND {box} {{{len(MESSAGE)}+}}\r\n".encode() + MESSAGE + b"\r\n")
    assert joe.until_tagged("a")[-1].startswith(b"a OK")
    assert fetch(ann, url) == [None]


@pytest.mark.parametrize(("rump", "mech"), [
    ("imap://fred@localhost/INBOX/;UID=1;URLAUTH=anonymous", "INTERNAL"),  # not joe's
    ("/{box}/;UID={uid};URLAUTH=anonymous", "INTERNAL"),                   # relative
    ("imap://joe@localhost/{box}/;UID={uid};URLAUTH=anonymous", "FOO"),    # mechanism
    ("imap://joe@localhost/{box}/;UID={uid}", "INTERNAL"),                 # no URLAUTH
    ("imap://joe@localhost/{box}/;UID={uid};URLAUTH=anonymous:internal:" + "0" * 40,
     "INTERNAL"),                                                          # not a rump
    ("imap://joe@localhost/Nope/;UID=1;URLAUTH=anonymous", "INTERNAL"),    # no mailbox
    ("imap://joe@localhost/{box}/;UID=999;URLAUTH=anonymous", "INTERNAL"),  # no message
    ("imap://joe@localhost/{box};UIDVALIDITY=1/;UID={uid};URLAUTH=anonymous", "INTERNAL"),
    ("imap://joe@localhost/{box}/;UID={uid};URLAUTH=nobody", "INTERNAL"),  # access
])
def test_genurlauth_refusals(sessions, source, rump, mech):
    """RFC 4467 7.2: only the session's own user's URLs, absolute, naming a message that
    exists, with a URLAUTH access identifier and no verifier yet, for INTERNAL; BAD otherwise
    (as Dovecot answers)."""
    box, uid, _v = source
    line = gen(sessions("joe"), rump.format(box=box, uid=uid), mech=mech)[-1]
    assert line.startswith(b"g BAD"), line


def test_resetkey_refusals(sessions):
    """RFC 4467 7.1: an unknown mechanism or mailbox is NO."""
    joe = sessions("joe")
    assert joe.cmd("r", "RESETKEY INBOX FOO")[-1].startswith(b"r NO")
    assert joe.cmd("r", "RESETKEY Nope")[-1].startswith(b"r NO")
    assert joe.cmd("r", "URLFETCH")[-1].startswith(b"r BAD")
    assert joe.cmd("r", "GENURLAUTH")[-1].startswith(b"r BAD")


def test_catenate_with_another_users_urlauth_url(sessions, source):
    """RFC 4469 3 and 5: a URLAUTH-authorized URL to another user's message is a CATENATE
    part when it verifies for the session's user; the same URL without URLAUTH, or with a
    verifier that does not match, is [BADURL]."""
    box, uid, v = source
    joe, fred = sessions("joe"), sessions("fred")
    [url] = generated(joe, f"imap://joe@localhost/{box};UIDVALIDITY={v}/;UID={uid}"
                           f"/;SECTION=1.2;URLAUTH=user+fred")
    fred.send(b'c APPEND Drafts CATENATE (TEXT {14+}\r\nSubject: q\r\n\r\n URL "'
              + url.encode() + b'")\r\n')
    line = fred.until_tagged("c")[-1]
    assert line.startswith(b"c OK [APPENDUID"), line
    new = int(re.search(rb"APPENDUID \d+ (\d+)", line).group(1))
    fred.cmd("x", "EXAMINE Drafts")
    body = fred.cmd("f", f"UID FETCH {new} BODY.PEEK[]")[0]
    assert body.endswith(b"{42}\r\nSubject: q\r\n\r\n" + QUOTE + b")")
    fred.cmd("u", "UNSELECT")
    plain = url.split(";URLAUTH=")[0]
    for bad in (plain, url[:-1] + ("0" if url[-1] != "0" else "1")):
        line = fred.cmd("c", f'APPEND Drafts CATENATE (URL "{bad}")')[-1]
        assert line.startswith(f"c NO [BADURL {bad}]".encode()), line
    # The URL is fred's to use, not max's.
    line = sessions("max").cmd("c", f'APPEND Drafts CATENATE (URL "{url}")')[-1]
    assert line.startswith(b"c NO [BADURL"), line


def test_capability(sessions):
    """RFC 4467 2: URLAUTH is advertised."""
    caps = sessions("joe").cmd("c", "CAPABILITY")[0].split()
    assert b"URLAUTH" in caps and b"CATENATE" in caps


def test_urlfetch_streams_a_big_part(sessions):
    """URLFETCH of a part over 1 MiB (FETCH's streaming threshold) sends it read a chunk at a
    time, octet for octet, then answers the next URL (RFC 4467 7.3's urlfetch-data)."""
    from tests.mailgen import message
    joe, ann = sessions("joe"), sessions("ann")
    big = message(5, size=3 * 1024 * 1024 + 17)
    joe.send(f"a APPEND INBOX {{{len(big)}+}}\r\n".encode() + big + b"\r\n")
    uid = int(re.search(rb"APPENDUID \d+ (\d+)", joe.until_tagged("a")[-1]).group(1))
    whole, text = generated(joe, f"imap://joe@localhost/INBOX/;UID={uid};URLAUTH=authuser",
                            f"imap://joe@localhost/INBOX/;UID={uid}/;SECTION=TEXT/;PARTIAL=0.9"
                            f";URLAUTH=authuser")
    assert fetch(ann, whole, text, whole + "0") == [big, big.split(b"\r\n\r\n", 1)[1][:9],
                                                    None]


def test_urlmech_at_select(sessions):
    """RFC 4467 8.1: SELECT and EXAMINE say which URLAUTH mechanisms the mailbox takes."""
    joe = sessions("joe")
    for verb in ("SELECT", "EXAMINE"):
        lines = joe.cmd("s", f"{verb} INBOX")
        assert b"* OK [URLMECH INTERNAL] URLAUTH mechanisms" in lines, lines
    joe.cmd("u", "UNSELECT")


@pytest.mark.parametrize("command", [
    "URLFETCH (a b)", "URLFETCH NIL", 'URLFETCH "imap://joe@h/INBOX/;UID=1;URLAUTH=x:y:z"',
    "GENURLAUTH \"imap://joe@h/INBOX/;UID=1;URLAUTH=anonymous\"", "GENURLAUTH (x) INTERNAL",
    'GENURLAUTH "imap://joe@h/%FF/;UID=1;URLAUTH=anonymous" INTERNAL',
    'GENURLAUTH "imap://joe@h/INBOX/;UID=1;EXPIRE=2030-13-45T99:99:99Z;URLAUTH=anonymous" '
    'INTERNAL', "RESETKEY (INBOX)", "RESETKEY INBOX (INTERNAL)",
    'APPEND Drafts CATENATE ((TEXT "x"))', "APPEND Drafts CATENATE (URL (x))",
    'APPEND Drafts CATENATE (URL "/INBOX/;UID=1/;SECTION=HEADER.FIELDS%20(")',
    'APPEND Drafts CATENATE (URL "/INBOX/;UID=1/;PARTIAL=99999999999999999999")',
    'APPEND Drafts CATENATE (URL "imap://joe@h/INBOX/;UID=1;EXPIRE=2030-13-45T99:99:99Z'
    ';URLAUTH=anonymous:internal:' + "0" * 40 + '")',
])
def test_garbage_gets_an_answer(sessions, command):
    """Malformed URLAUTH and CATENATE arguments are answered (BAD, NO, or NIL data), never a
    traceback (the server fixture checks its log), and the session goes on."""
    joe = sessions("joe")
    line = joe.cmd("g", command)[-1]
    assert re.match(rb"g (OK|NO|BAD) ", line), line
    assert joe.cmd("n", "NOOP")[-1].startswith(b"n OK")
