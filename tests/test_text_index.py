"""The text index (issue 14, docs/decisions/0026): SEARCH's text keys answered through it give
exactly the scan's answers (RFC 3501 6.4.4: case-insensitive substring of the decoded text),
on every backend, through appends, copies, moves, expunges, renames and crashes.
"""

from __future__ import annotations

import random

import pytest

from imapserver.imap.search import evaluate, parse_search
from imapserver.imap.wire import tokenize
from mailstore.backends.base import TEXT_DOCS
from mailstore.mime import parse_bytes
from mailstore.store import MailStore
from mailstore.textindex import message_docs
from tests import textgen
from tests.corpus import SAMPLES
from tests.mailgen import message


class ScanOnly:
    """The store without its text index: SEARCH scans, the reference answer."""

    def __init__(self, store: MailStore):
        self._store = store

    def __getattr__(self, name):
        if name == "text_candidates":
            raise AttributeError(name)
        return getattr(self._store, name)


class Watching:
    """The store, remembering what the index proposed (to show it was used)."""

    def __init__(self, store: MailStore):
        self._store = store
        self.narrowed = 0
        self.exact = 0

    def text_candidates(self, mailbox, queries, uids):
        out = self._store.text_candidates(mailbox, queries, uids)
        self.narrowed += sum(1 for found in out.values() if len(found.possible()) < len(uids))
        self.exact += sum(1 for found in out.values() if found.exact)
        return out

    def __getattr__(self, name):
        return getattr(self._store, name)


def program(key: bytes, needle: str):
    raw = needle.encode("utf-8")
    segments = [b"CHARSET UTF-8 " + key + b" {%d}" % len(raw), raw, b""]
    return parse_search(tokenize(segments), uid_mode=True)


KEYS = [b"BODY", b"TEXT", b"SUBJECT", b"FROM", b"TO", b"CC", b"BCC", b"HEADER X-Note",
        b"HEADER Message-ID", b"NOT BODY", b"OR SUBJECT alice TEXT", b"UNSEEN BODY"]


_KEY_DOC = {b"BODY": "body", b"TEXT": "head", b"SUBJECT": "subject", b"FROM": "from",
            b"TO": "to", b"CC": "cc", b"BCC": "bcc", b"HEADER X-Note": "head",
            b"NOT BODY": "body", b"OR SUBJECT alice TEXT": "body", b"UNSEEN BODY": "body"}


def differential(store: MailStore, box, rng: random.Random, texts: list[dict[str, str]],
                 rounds: int) -> Watching:
    """``rounds`` random text searches, each through the index and by the scan: equal."""
    uids = store.uids(box)
    watching = Watching(store)
    for _ in range(rounds):
        key = rng.choice(KEYS)
        # Mostly a piece of the very document the key searches (addresses as the scan
        # writes them, decoded words), else of any document.
        doc = _KEY_DOC.get(key) if rng.random() < 0.6 else None
        pool = [d[doc] for d in texts if d.get(doc)] if doc else \
            [t for d in texts for t in d.values() if t]
        needle = textgen.needle(rng, pool)
        prog = program(key, needle)
        expected = evaluate(prog, ScanOnly(store), box, uids)
        got = evaluate(prog, watching, box, uids)
        assert got == expected, (key, needle)
    return watching


def docs_texts(data: bytes) -> dict[str, str]:
    """The decoded texts of a message, for sampling needles that occur in it."""
    info = parse_bytes(data).to_json()
    docs = message_docs(data[:info["header_size"]], info.get("body"), info["header_size"],
                        len(data), lambda: _BytesReader(data))
    return docs


class _BytesReader:
    chunk_size = 65536

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def seek(self, pos: int) -> None:
        self.pos = pos

    def read(self, size: int) -> bytes:
        out = self.data[self.pos:self.pos + size]
        self.pos += len(out)
        return out

    def close(self) -> None:
        pass


# -- the contract, on every backend ----------------------------------------------------------

def test_text_index_contract(backend):
    """Both backends' TextIndex: superset matches per document, markers, removal, drop."""
    MailStore(backend)  # creates the tables
    index = backend.text_index()
    box, other = b"\x01" * 16, b"\x02" * 16
    index.put(box, 1, {"subject": "lunch on friday", "body": "straße \"quoted\" text",
                       "head": "subject: lunch on friday"})
    index.put(box, 2, {"subject": "report", "body": "nothing here"})
    index.put(box, 3, None)
    index.put(other, 1, {"subject": "lunch"})
    assert index.markers(box) == {1: True, 2: True, 3: False}
    assert 1 in index.match(box, "subject", "lunch on")
    assert 2 not in index.match(box, "subject", "lunch")
    assert 1 in index.match(box, "body", "aße \"q")
    assert 1 not in index.match(box, "from", "lunch")  # another document
    assert index.match(box, "body", "zzz") == set()
    assert index.match(other, "subject", "lun") >= {1}
    with pytest.raises(ValueError):
        index.match(box, "subject", "lu")
    index.remove(box, [1])
    assert index.markers(box) == {2: True, 3: False}
    index.put(box, 4, {doc: "same text" for doc in TEXT_DOCS})
    for doc in TEXT_DOCS:
        assert 4 in index.match(box, doc, "me te")
    index.drop(box)
    assert index.markers(box) == {}
    assert index.markers(other) == {1: True}


# -- differential: index against scan ----------------------------------------------------------

def test_index_answers_equal_scan_answers(backend):
    """RFC 3501 6.4.4: for random messages (RFC 2047 words, folded fields, base64/QP parts,
    attachments, attached messages, non-ASCII) and random needles (1-2 code points,
    non-ASCII, case changed, across folds), BODY/TEXT/SUBJECT/FROM/TO/CC/BCC/HEADER through
    the index equal the scan's answers -- with some messages unindexed (stored with the index
    off, or their marker lost), through expunge, copy, move and rename."""
    rng = random.Random(14)
    store = MailStore(backend)
    user = store.create_user("ann", "pw")
    store.create_mailbox(user, "Keep")
    plain = MailStore(backend, create_tables=False, text_index=False)
    count = 24 if backend.name == "embedded" else 14
    texts: list[dict[str, str]] = []
    datas = [textgen.message(rng, n) for n in range(count)]
    datas += [s.raw for s in SAMPLES[:6]]
    for n, data in enumerate(datas):
        texts.append(docs_texts(data))
        writer = plain if n % 7 == 3 else store  # some stored before the index existed
        writer.append(user, "INBOX", data, flags=["\\Seen"] if n % 3 == 0 else [])
    box = store.mailbox(user, "INBOX")
    lost = store.uids(box)[5]
    backend.text_index().remove(box.id, [lost])  # an index write that never happened
    watching = differential(store, box, rng, texts, 160 if backend.name == "embedded" else 70)
    assert watching.narrowed > 20  # the index did the narrowing, not only the scan
    assert watching.exact > 20 if backend.name == "embedded" else watching.exact == 0

    uids = store.uids(box)
    store.expunge(box, uids[::4])
    store.copy(box, uids[1:6], store.mailbox(user, "Keep"))
    store.move(box, uids[6:10], store.mailbox(user, "Keep"))
    store.rename_mailbox(user, "Keep", "Old")
    for name in ("INBOX", "Old"):
        differential(store, store.mailbox(user, name), rng, texts, 60)


def test_short_needles_and_folding_fall_back_to_the_scan(backend):
    """A needle under three code points is not looked up (trigrams cannot narrow it: FTS5
    returns no row at all for one), and case folding is Python's full folding on both sides:
    ``STRASSE`` finds ``Straße`` through the index as the scan does (RFC 3501 6.4.4)."""
    store = MailStore(backend)
    user = store.create_user("bo", "pw")
    store.append(user, "INBOX", message(1, subject="Straße", body=b"ok\r\n"))
    store.append(user, "INBOX", message(2, subject="x", body=b"no\r\n"))
    box = store.mailbox(user, "INBOX")
    uids = store.uids(box)
    assert store.text_candidates(box, {"k": (("body",), "ok", True)}, uids) == {}
    for key, needle, expected in [(b"BODY", "OK", [1]), (b"BODY", "o", [1, 2]),
                                  (b"SUBJECT", "STRASSE", [1]), (b"SUBJECT", "ẞ", [1]),
                                  (b"SUBJECT", "x", [2])]:
        assert evaluate(program(key, needle), store, box, uids) == expected
    found = store.text_candidates(box, {"k": (("subject",), "strasse", True)}, uids)
    assert found["k"].matches == {1} and not found["k"].unindexed


def test_lazy_mode_indexes_at_search_time(backend, monkeypatch):
    """``text_index = lazy``: APPEND writes no index entry; each SEARCH first indexes up to
    LAZY_BATCH of the messages it does not cover (newest first) and scans the rest, with the
    scan's answers throughout (RFC 3501 6.4.4)."""
    import mailstore.textindex as textindex
    monkeypatch.setattr(textindex, "LAZY_BATCH", 5)
    rng = random.Random(26)
    store = MailStore(backend, text_index="lazy")
    user = store.create_user("lu", "pw")
    datas = [textgen.message(rng, n) for n in range(12)]
    for data in datas:
        store.append(user, "INBOX", data)
    box = store.mailbox(user, "INBOX")
    uids = store.uids(box)
    assert store.text.check(box.id, uids)[0] == uids  # nothing indexed at append
    texts = [docs_texts(d) for d in datas]
    for covered in (5, 10, 12):
        search = program(b"TEXT", rng.choice(textgen.WORDS[:4]))  # three letters or more
        assert evaluate(search, store, box, uids) == evaluate(search, ScanOnly(store), box,
                                                                uids)
        assert store.text.check(box.id, uids)[0] == uids[:12 - covered]  # the newest first
    differential(store, box, rng, texts, 40)


class _CountingReader(_BytesReader):
    read_octets = 0

    def read(self, size: int) -> bytes:
        data = super().read(size)
        _CountingReader.read_octets += len(data)
        return data


@pytest.mark.parametrize("extra", [-1024, 1024])
def test_text_over_the_limit_is_not_indexed_and_not_read_past_it(extra):
    """RFC 3501 6.4.4 answers stay the scan's either way; what the limit bounds is the
    indexer's memory.  Decoded text just under MAX_INDEXED_TEXT is indexed whole; just over
    it, the message is recorded as not indexable (None), and the reading stops a piece past
    the limit -- not at the end of a 24 MB part, as it did."""
    from mailstore import textindex
    line = b"abcdefghij" * 7 + b"\r\n"
    body = (line * (textindex.MAX_INDEXED_TEXT // len(line) + 2))[
        :textindex.MAX_INDEXED_TEXT + extra - 200]
    data = b"Subject: big\r\n\r\n" + body + b"\r\nend\r\n" + line * 300_000
    small = b"Subject: big\r\n\r\n" + body
    info = parse_bytes(small).to_json()
    docs = message_docs(small[:info["header_size"]], info.get("body"), info["header_size"],
                        len(small), lambda: _BytesReader(small))
    if extra < 0:
        assert docs is not None and len(docs["body"]) > textindex.MAX_INDEXED_TEXT - 2048
    else:
        assert docs is None
    info = parse_bytes(data).to_json()
    _CountingReader.read_octets = 0
    assert message_docs(data[:info["header_size"]], info.get("body"), info["header_size"],
                        len(data), lambda: _CountingReader(data)) is None
    assert _CountingReader.read_octets < textindex.MAX_INDEXED_TEXT + 4 * 65536 < len(data) // 2
