"""Units of CATENATE (RFC 4469) and URLAUTH (RFC 4467): the IMAP URL grammar (RFC 5092), the
literal8 TEXT part, and that a CATENATEd message is streamed -- URL parts read from the content
store a chunk at a time, only while the store ingests the new message -- on both backends.
"""

from __future__ import annotations

import pytest

from imapserver.imap.catenate import Catenate, CatenatedSource, build_message
from imapserver.imap.imapurl import UrlError, parse_url
from imapserver.imap.urlparts import BadUrl, expired, open_url
from imapserver.imap.wire import Literal, ParseError, tokenize
from mailstore.store import MailStore
from tests.mailgen import message

# -- RFC 5092 ----------------------------------------------------------------------------------


def test_rfc5092_forms():
    """RFC 5092 3 (absolute, iuserinfo with ;AUTH= ignored, %-encoded mailbox and section,
    UIDVALIDITY, PARTIAL) and 7.2 (relative ``/mailbox`` and ``;UID=`` forms)."""
    url = parse_url("imap://michael;AUTH=*@minbari.example.org/gray%20council;UIDVALIDITY=385"
                    "759045/;UID=20/;SECTION=1.2/;PARTIAL=0.1024")
    assert (url.absolute, url.user, url.host, url.mailbox, url.uidvalidity, url.uid,
            url.section, url.partial) == (True, "michael", "minbari.example.org",
                                          "gray council", 385759045, 20, "1.2", (0, 1024))
    assert parse_url("/INBOX/;uid=7").mailbox == "INBOX"
    assert parse_url("/a/b%2Fc;UIDVALIDITY=1/;UID=2").mailbox == "a/b/c"
    rel = parse_url(";UID=3/;SECTION=HEADER.FIELDS%20(TO)", selected="Sent")
    assert (rel.mailbox, rel.uid, rel.section) == ("Sent", 3, "HEADER.FIELDS (TO)")
    assert parse_url("/INBOX/;UID=1/;PARTIAL=7").partial == (7, None)


def test_rfc4467_rump_and_verifier():
    """RFC 4467 3: the rump is the URL up to the access identifier; the verifier follows."""
    text = ("imap://joe@example.com/INBOX/;uid=20/;section=1.2;urlauth=submit+fred"
            ":internal:91354a473744909de610943775f92038")
    url = parse_url(text)
    assert url.rump == text.rsplit(":internal:", 1)[0]
    assert (url.access, url.mechanism, url.verifier) == \
        ("submit+fred", "internal", "91354a473744909de610943775f92038")
    dated = parse_url("imap://joe@h/INBOX/;UID=1;EXPIRE=2030-01-01T10:00:00Z;URLAUTH=authuser")
    assert dated.expire == "2030-01-01T10:00:00Z" and dated.verifier is None
    assert expired("2001-01-01T00:00:00Z", 1e9 + 1) and not expired("2099-01-01T00:00:00+02:00",
                                                                    1e9)


@pytest.mark.parametrize("bad", [
    "", "INBOX", "/INBOX", "/INBOX;UIDVALIDITY=1", "/;UID=1", "/INBOX/;UID=0",
    "/INBOX/;UID=99999999999", "/INBOX/;UID=1;UIDVALIDITY=3", "/INBOX/;SECTION=1/;UID=2",
    "/INBOX/;UID=1/;SECTION=1;URLAUTH=bogus", "/INBOX/;UID=1;URLAUTH=anonymous:internal:12",
    "/INBOX/;UID=1/;PARTIAL=x", "/INBOX/;UID=1;EXPIRE=tomorrow;URLAUTH=anonymous",
    "imap:///INBOX/;UID=1", "//host/INBOX/;UID=1", "http://host/INBOX/;UID=1",
    "/INBOX/;UID=1 x", "/%FF/;UID=1", ";UID=1",
])
def test_malformed_urls(bad):
    """RFC 5092 3's grammar: anything else is no URL to a message."""
    with pytest.raises(UrlError):
        parse_url(bad)


def test_literal8_text_part():
    """A CATENATE TEXT part takes a literal8 (message data, RFC 3516 4.3), as Dovecot's does;
    a URL or any other argument does not."""
    tokens = tokenize([b"a APPEND x CATENATE (TEXT ~{3}", b"a\x00b", b")"])
    assert tokens[-1] == ["TEXT", b"a\x00b"] and isinstance(tokens[-1][1], Literal)
    for head in (b"a APPEND x CATENATE (URL ~{3}", b"a APPEND x (~{3}", b"a LOGIN ~{3}"):
        with pytest.raises(ParseError):
            tokenize([head, b"a\x00b", b")"])


# -- streaming -----------------------------------------------------------------------------------

class CountingReader:
    """A content reader that counts the octets read through it."""

    reads: list[int] = []

    def __init__(self, inner):
        self.inner = inner

    def read(self, n=-1):
        data = self.inner.read(n)
        CountingReader.reads.append(len(data))
        return data

    def seek(self, *a):
        return self.inner.seek(*a)

    def close(self):
        self.inner.close()


@pytest.fixture
def store(backend, monkeypatch):
    s = MailStore(backend, chunk_size=64 * 1024)
    s.create_user("joe", "pw")
    opened = s.open_message
    monkeypatch.setattr(s, "open_message", lambda view: CountingReader(opened(view)))
    CountingReader.reads = []
    return s


def test_url_parts_stream_chunk_by_chunk(store):
    """RFC 4469 3's message is the parts in order.  A 3 MiB URL part is not read while the
    URLs are checked, and is read in pieces of at most 64 KiB while the store ingests it: the
    message never sits in memory whole."""
    big = message(1, size=3 * 1024 * 1024)
    _v, uid = store.append("joe", "INBOX", big)
    cat = Catenate([("TEXT", Literal(b"X-New: 1\r\n")), ("URL", "/INBOX/;UID=1", parse_url(
        f"/INBOX/;UID={uid}")), ("TEXT", Literal(b"\r\n-- \r\n"))])
    source = build_message(store, cat, "joe", [], 0.0, 64 * 1024 * 1024)
    assert isinstance(source, CatenatedSource)
    assert CountingReader.reads == []  # nothing read yet: the size came from the metadata
    assert source.size == len(big) + 17
    _v, new = store.append("joe", "Drafts", source)
    source.close()
    assert max(CountingReader.reads) <= 64 * 1024
    assert sum(CountingReader.reads) == len(big)
    view = store.fetch(store.mailbox("joe", "Drafts"), [new])[0]
    assert store.read_message(view) == b"X-New: 1\r\n" + big + b"\r\n-- \r\n"


def test_small_message_is_built_in_memory(store):
    """A message that fits one content chunk goes to the store as bytes (its fast path)."""
    _v, uid = store.append("joe", "INBOX", message(2))
    cat = Catenate([("URL", "x", parse_url(f"/INBOX/;UID={uid}/;SECTION=TEXT"))])
    assert build_message(store, cat, "joe", [], 0.0, 10**9) == b"Body of message 2.\r\n"


def test_open_url_refuses_what_is_not_there(store):
    """The checks behind BADURL (RFC 4469 3): wrong UIDVALIDITY, no such UID, no such
    section, another user's mailbox without URLAUTH (RFC 4469 5)."""
    _v, uid = store.append("joe", "INBOX", message(3))
    validity = store.mailbox("joe", "INBOX").uidvalidity
    store.create_user("ann", "pw")
    for text in (f"/INBOX;UIDVALIDITY={validity + 1}/;UID={uid}", f"/INBOX/;UID={uid + 1}",
                 f"/INBOX/;UID={uid}/;SECTION=2", f"/INBOX/;UID={uid}/;SECTION=1.TEXT",
                 f"imap://ann@h/INBOX/;UID={uid}", f"/Nope/;UID={uid}"):
        with pytest.raises(BadUrl):
            open_url(store, parse_url(text), "joe", [], 0.0, plain_allowed=True)
    part = open_url(store, parse_url(f"imap://joe@h/INBOX;UIDVALIDITY={validity}/;UID={uid}"
                                     f"/;SECTION=1"), "joe", [], 0.0, plain_allowed=True)
    assert part.length == len(b"Body of message 3.\r\n")
    with pytest.raises(BadUrl):  # URLFETCH takes URLAUTH URLs only (RFC 4467 7.3)
        open_url(store, parse_url(f"/INBOX/;UID={uid}"), "joe", [], 0.0, plain_allowed=False)
