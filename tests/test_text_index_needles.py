"""Long and repetitive SEARCH strings through the text index (docs/decisions/0026).

RFC 3501 6.4.4: BODY, TEXT, SUBJECT and HEADER match a case-insensitive substring; the index
only narrows the messages the scan's substring test would look at.  A needle of N code points
has N - 2 trigrams, and a repeated one cost FTS5 its position list once per repetition (5.8 s
for a 5,000-character needle of x's against one message of x's): the lookups now read a
bounded number of trigrams, and these tests count that work instead of timing it.
"""

from __future__ import annotations

import random
import re
import time

from imapserver.imap.search import evaluate as evaluate_search
from mailstore.backends import postings
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.backends.embedded_fts import PHRASE_TRIGRAMS, lookup_query
from mailstore.backends.postings import MAX_LOOKUP_TRIGRAMS, PostingIndex, needle_trigrams
from mailstore.mime.searchtext import StreamMatcher
from mailstore.store import MailStore
from tests.imapproc import Client, ServerProcess, make_users
from tests.test_text_index import ScanOnly, Watching, docs_texts, program


def _raw(n: int, subject: str, body: bytes, qp: bool = False) -> bytes:
    head = (f"From: a@example.com\r\nTo: b@example.com\r\nSubject: {subject}\r\n"
            f"Message-ID: <n{n}@test>\r\nMIME-Version: 1.0\r\n"
            "Content-Type: text/plain; charset=us-ascii\r\n")
    if qp:
        head += "Content-Transfer-Encoding: quoted-printable\r\n"
    return head.encode() + b"\r\n" + body


def _qp_run(text: bytes) -> bytes:
    """``text`` quoted-printable with soft line breaks: one contiguous run once decoded."""
    return b"".join(text[i:i + 75] + b"=\r\n" for i in range(0, len(text), 75)) + b"\r\n"


def _natural(rng: random.Random, size: int) -> str:
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(400)]
    out = []
    while sum(map(len, out)) < size:
        out.append(rng.choice(words) + " ")
    return "".join(out)


def _mailbox(backend):
    rng = random.Random(4998)
    store = MailStore(backend)
    user = store.create_user("nd", "pw")
    natural = _natural(rng, 9000)
    datas = [
        _raw(1, "ab" * 60, b"x" * 76 + b"\r\n" + (b"x" * 76 + b"\r\n") * 80),  # lines of x's
        _raw(2, "abc" * 30, _qp_run(b"x" * 6000), qp=True),                   # 6,000 x's
        _raw(3, "natural", _qp_run(natural.encode()), qp=True),
        _raw(4, "near miss", _qp_run(b"x" * 4999 + b"y"), qp=True),
        _raw(5, "short", b"nothing long here\r\n"),
    ]
    for data in datas:
        store.append(user, "INBOX", data)
    box = store.mailbox(user, "INBOX")
    return store, box, [docs_texts(d) for d in datas], natural


def _needles(natural: str) -> list[str]:
    out = []
    for n in (3, 4, PHRASE_TRIGRAMS + 2, PHRASE_TRIGRAMS + 3, 100, 5000):
        out += ["x" * n, "X" * (n - 1) + "y", "y" + "x" * (n - 1)]
        piece = natural[1000:1000 + n]
        out += [piece, piece[:n // 2] + "#" + piece[n // 2 + 1:]]   # matching, then not
        out += [("ab" * n)[:n], ("abc" * n)[:n]]
    return out + ["x" * 6000, "x" * 6001, "x" * 7000]


def test_long_and_repetitive_needles_answer_as_the_scan(backend):
    """RFC 3501 6.4.4: needles of 3, 4, 34, 35, 100 and 5,000 code points (and 6,000 to
    7,000), repetitive ("xxx...", "abab...") and not, matching and not, under BODY, TEXT
    and SUBJECT give through the index exactly the scan's answers -- with the index used."""
    store, box, texts, natural = _mailbox(backend)
    uids = store.uids(box)
    watching = Watching(store)
    for needle in _needles(natural):
        for key in (b"BODY", b"TEXT", b"SUBJECT"):
            search = program(key, needle)
            expected = evaluate_search(search, ScanOnly(store), box, uids)
            assert evaluate_search(search, watching, box, uids) == expected, (key, needle[:40])
    assert watching.narrowed > 40
    # And the index alone, per document: every message holding the needle (the contract),
    # and on an exact engine only those.
    index = backend.text_index()
    for needle in _needles(natural):
        needle = needle.casefold()
        holding = {uid for uid, docs in zip(uids, texts, strict=True) if needle in docs["body"]}
        found = index.match(box.id, "body", needle)
        assert found == holding if index.exact else found >= holding, needle[:40]


def test_a_long_needle_reads_a_bounded_number_of_trigrams(backend):
    """A 5,000-character SEARCH string (RFC 3501 6.4.4) reads at most MAX_LOOKUP_TRIGRAMS
    posting rows, however many distinct trigrams it has, and still finds its message."""
    MailStore(backend)  # creates the tables
    reads: list[int] = []

    class Counting:
        """The posting table, counting the rows each read asks for."""

        def __init__(self, table):
            self.table = table

        def rows(self, keys, columns=None):
            reads.append(len(keys))
            return self.table.rows(keys, columns)

        def __getattr__(self, name):
            return getattr(self.table, name)

    index = PostingIndex(Counting(backend.table("JAMES_TEXT_INDEX")))
    box = b"\x07" * 16
    text = _natural(random.Random(7), 12000)
    needle = text[3000:8000]
    assert len(postings.trigrams(needle)) > 20 * MAX_LOOKUP_TRIGRAMS
    index.put(box, 1, {"body": text})
    index.put(box, 2, {"body": text[:6000]})
    index.put(box, 3, {"body": "x" * 9000})
    assert 1 in index.match(box, "body", needle)
    assert 3 in index.match(box, "body", "x" * 5000)
    assert reads and max(reads) <= MAX_LOOKUP_TRIGRAMS


def test_fts5_queries_of_long_needles_are_bounded():
    """The FTS5 lookup of a needle (RFC 3501 6.4.4): a phrase up to PHRASE_TRIGRAMS
    trigrams, else at most MAX_LOOKUP_TRIGRAMS distinct trigrams -- one for 5,000 x's, where
    the phrase had 4,998 tokens -- spread from the needle's start to its end."""
    text = _natural(random.Random(8), 8000)
    for needle, most in [("x" * 5000, 1), (text[:5000], MAX_LOOKUP_TRIGRAMS),
                         ("ab" * 2500, 2), ('a"b' * 40, 3)]:
        query, verify = lookup_query("body", needle)
        terms = re.findall(r'"((?:[^"]|"")*)"', query)
        assert verify and 1 <= len(terms) <= most, (needle[:20], query[:80])
        assert len(set(terms)) == len(terms)
    grams = needle_trigrams(text[:5000])
    assert grams[0] == text[:3] and grams[-1] == text[4997:5000]
    short = "x" * (PHRASE_TRIGRAMS + 2)
    assert lookup_query("subject", short) == ('{subject} : "' + short + '"', False)


def test_imap_search_with_a_5000_octet_literal(tmp_path):
    """Over IMAP, UID SEARCH BODY and TEXT with a 5,000-octet literal (RFC 3501 6.4.4, 4.3)
    answer like the scan once the server's indexer has indexed the messages: the message
    whose body holds 6,000 x's, not the one of 76-character lines nor the near miss."""
    data_dir = str(tmp_path / "srv")
    make_users(data_dir, ("lit", "pw"))
    messages = [_raw(1, "lines", (b"x" * 76 + b"\r\n") * 80),
                _raw(2, "run", _qp_run(b"x" * 6000), qp=True),
                _raw(3, "near", _qp_run(b"x" * 4999 + b"y"), qp=True)]
    with ServerProcess(data_dir) as server:
        client = Client(server.ports["imap"])
        assert client.cmd("a1", "LOGIN lit pw")[-1].startswith(b"a1 OK")
        for n, data in enumerate(messages):
            client.send(f"b{n} APPEND INBOX {{{len(data)}}}\r\n")
            assert client.read_line().startswith(b"+")
            client.send(data + b"\r\n")
            assert client.until_tagged(f"b{n}")[-1].startswith(f"b{n} OK".encode())
        assert client.cmd("c1", "SELECT INBOX")[-1].startswith(b"c1 OK")
        reader = MailStore(EmbeddedBackend(data_dir), create_tables=False)
        box = reader.mailbox("lit", "INBOX")
        deadline = time.monotonic() + 20
        while reader.text.check(box.id, [1, 2, 3])[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reader.text.check(box.id, [1, 2, 3]) == ([], [])
        reader.close()
        for tag, key, needle, expected in [("d1", "BODY", b"x" * 5000, b"2"),
                                           ("d2", "TEXT", b"X" * 5000, b"2"),
                                           ("d3", "BODY", b"x" * 4999 + b"y", b"3"),
                                           ("d4", "BODY", b"y" + b"x" * 4999, b"")]:
            client.send(f"{tag} UID SEARCH {key} {{5000}}\r\n")
            assert client.read_line().startswith(b"+")
            client.send(needle + b"\r\n")
            lines = client.until_tagged(tag)
            assert lines[-1].startswith(f"{tag} OK".encode()), lines[-1]
            assert lines[:-1] == [(b"* SEARCH " + expected).rstrip()], (key, lines[:-1])
        client.cmd("z", "LOGOUT")
        client.close()


def test_stream_matcher_is_linear_however_the_text_is_cut():
    """The scan's substring test (RFC 3501 6.4.4) over text arriving in pieces finds exactly
    the needles the whole text holds (one run; none across a reset), and searches at most
    about twice the text fed even when the needle (5,000 code points) is far longer than
    the pieces -- it searched the needle's length again for every piece."""
    rng = random.Random(45)
    text = _natural(rng, 20000)
    for needle in (text[7000:12000], "x" * 5000, text[100:110], text[-50:]):
        for size in (1, 7, 4096, 30000):
            matcher = StreamMatcher([needle, "#absent#"])
            for i in range(0, len(text), size):
                matcher.feed(text[i:i + size])
            expected = {needle} if needle in text else set()
            assert matcher.found == expected, (needle[:20], size)
            assert matcher.searched <= 2 * len(text) + len(needle), size
    matcher = StreamMatcher(["ab"])
    matcher.feed("xa")
    matcher.reset()
    matcher.feed("bx")
    assert matcher.found == set()
    matcher.feed("xAB")  # the text in any case, the needles case-folded
    assert not matcher.done or matcher.found == {"ab"}
    assert matcher.found == {"ab"} and matcher.done
