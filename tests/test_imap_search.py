"""SEARCH: RFC 3501 6.4.4 search keys, section 9 grammar, sequence sets, and what it costs.

The evaluation tests run over every backend (embedded, hbase over Thrift).  Where RFC 3501
leaves a choice the expected results are Dovecot 2.3's, checked against a real Dovecot, unless a
test says otherwise.
"""

from __future__ import annotations

import base64
import calendar
import io

import pytest

from imapserver.imap.search import BadCharset, evaluate, parse_search
from imapserver.imap.search_parse import AndKey, ContentKey, FlagKey, NotKey, OrKey, RecentKey
from imapserver.imap.search_text import (
    PartDecoder,
    StreamMatcher,
    decode_field,
    decode_header_text,
)
from imapserver.imap.seqset import parse_seqset
from imapserver.imap.wire import tokenize
from mailstore.messages import HEADER
from mailstore.store import MailStore
from tests.mailgen import message


def parse(*segments: bytes, uid: bool = False):
    """Parse SEARCH arguments given as wire segments: line text and literals alternating."""
    return parse_search(tokenize(list(segments)), uid_mode=uid)


def utc(*fields: int) -> float:
    return float(calendar.timegm(fields + (0,) * (6 - len(fields))))


class CountingStore:
    """The MailStore, counting fetch round trips (and their size) and every content read."""

    def __init__(self, store: MailStore):
        self.store = store
        self.fetches: list[tuple[int, tuple[bytes, ...]]] = []
        self.scans: list[tuple[int, int | None, tuple[bytes, ...]]] = []
        self.opened: list[int] = []
        self.reads: list[int] = []

    def fetch(self, mailbox, uids, columns):
        uids = list(uids)
        self.fetches.append((len(uids), tuple(columns)))
        return self.store.fetch(mailbox, uids, columns)

    def uid_flags(self, mailbox, high_uid):
        self.scans.append((1, high_uid, ("uid_flags",)))
        return self.store.uid_flags(mailbox, high_uid)

    def scan(self, mailbox, low_uid=1, high_uid=None, columns=None):
        self.scans.append((low_uid, high_uid, tuple(columns or ())))
        return self.store.scan(mailbox, low_uid, high_uid, columns)

    def open_message(self, view):
        self.opened.append(view.uid)
        return _CountingReader(self.store.open_message(view), self.reads)


class _CountingReader(io.RawIOBase):
    def __init__(self, reader, reads: list[int]):
        super().__init__()
        self.reader = reader
        self.reads = reads
        self.chunk_size = reader.chunk_size

    def seek(self, offset, whence=io.SEEK_SET):
        return self.reader.seek(offset, whence)

    def read(self, size=-1):
        data = self.reader.read(size)
        self.reads.append(len(data))
        return data


# -- the corpus ------------------------------------------------------------------------------

MULTIPART = (
    b"From: =?utf-8?q?J=C3=BCrgen?= <j@example.com>\r\nTo: bob@example.com\r\n"
    b"Subject: =?iso-8859-1?b?4nBwbGU=?= pie\r\nDate: Sun, 01 Mar 2020 23:30:00 -0800\r\n"
    b"X-Thing: Hello World\r\nContent-Type: multipart/mixed; boundary=B\r\n\r\n"
    b"preamble-word\r\n--B\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Transfer-Encoding: quoted-printable\r\n\r\ncaf=C3=A9 soft=\r\nbreak\r\n"
    b"--B\r\nContent-Type: application/octet-stream; name=report.pdf\r\n\r\nbinaryneedle\r\n"
    b"--B\r\nContent-Type: message/rfc822\r\n\r\nSubject: innersubj\r\n\r\ninner body text\r\n"
    b"--B--\r\nepilogue-word\r\n")
LATIN1_BASE64 = (
    b"From: x@example.net\r\nTo: bob@example.com\r\nSubject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\r\n"
    b"Date: 2 Mar 2020 10:00 +0000\r\nContent-Type: text/plain; charset=iso-8859-1\r\n"
    b"Content-Transfer-Encoding: base64\r\n\r\n"
    + base64.encodebytes("grüße aus Köln\r\n".encode("latin-1")).replace(b"\n", b"\r\n"))
UNDATED = (
    b"From: Carol <carol@example.org>\r\nTo: dave@example.net\r\nCc: Erin <erin@example.com>\r\n"
    b"Bcc: frank@example.com\r\nSubject: padded\r\nX-Priority: 1\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable"
    b"\r\n\r\nna=C3=AFve approach\r\n" + b"padding line\r\n" * 400)


@pytest.fixture
def store(backend):
    return MailStore(backend)


@pytest.fixture
def corpus(store):
    """Four messages; RECENT is given as {3, 4}.

    1: plain, \\Seen \\Answered, internal date 2020-03-01 00:00:00 UTC, sent 21-Nov-2026
    2: multipart, \\Flagged $Junk, internal 2020-03-01 23:59:59 UTC, sent 1-Mar-2020 (-0800)
    3: base64 latin-1, \\Seen \\Deleted \\Draft, internal 2020-03-02 00:00:00, sent 2-Mar-2020
    4: no Date:, Cc/Bcc, QP body, > 5000 octets, no flags, internal 2020-03-10 08:00
    """
    user = store.create_user("alice", "pw")
    rows = [(message(1, subject="Quarterly report"), ["\\Seen", "\\Answered"], utc(2020, 3, 1)),
            (MULTIPART, ["\\Flagged", "$Junk"], utc(2020, 3, 1, 23, 59, 59)),
            (LATIN1_BASE64, ["\\Seen", "\\Deleted", "\\Draft"], utc(2020, 3, 2)),
            (UNDATED, [], utc(2020, 3, 10, 8))]
    for data, flags, date in rows:
        store.append(user, "INBOX", data, flags=flags, internal_date=date)
    return store, store.mailbox(user, "INBOX")


def run(corpus, *segments: bytes, uid: bool = False, uids=None, recent=frozenset({3, 4})):
    store, box = corpus
    uids = store.uids(box) if uids is None else uids
    return evaluate(parse(*segments, uid=uid), store, box, uids, set(recent))


# -- each key (RFC 3501 6.4.4) -------------------------------------------------------------------

@pytest.mark.parametrize("criteria, expected", [
    # "ALL: All messages in the mailbox"
    (b"ALL", [1, 2, 3, 4]),
    # the flag keys: ANSWERED/DELETED/DRAFT/FLAGGED/SEEN and their UN- forms
    (b"ANSWERED", [1]), (b"UNANSWERED", [2, 3, 4]),
    (b"DELETED", [3]), (b"UNDELETED", [1, 2, 4]),
    (b"DRAFT", [3]), (b"UNDRAFT", [1, 2, 4]),
    (b"FLAGGED", [2]), (b"UNFLAGGED", [1, 3, 4]),
    (b"SEEN", [1, 3]), (b"UNSEEN", [2, 4]),
    # KEYWORD/UNKEYWORD: keywords compare case-insensitively, as in Dovecot
    (b"KEYWORD $junk", [2]), (b"UNKEYWORD $JUNK", [1, 3, 4]), (b"KEYWORD $Other", []),
    (b'KEYWORD "$Junk"', [2]),
    # RECENT; NEW = RECENT UNSEEN; OLD = NOT RECENT
    (b"RECENT", [3, 4]), (b"NEW", [4]), (b"OLD", [1, 2]),
    # BEFORE/ON/SINCE: the internal date, as a UTC date, time disregarded
    (b"BEFORE 2-Mar-2020", [1, 2]), (b"ON 1-Mar-2020", [1, 2]), (b"ON 02-mar-2020", [3]),
    (b'SINCE "2-Mar-2020"', [3, 4]), (b"BEFORE 1-Mar-2020", []), (b"SINCE 11-Mar-2020", []),
    # SENTBEFORE/SENTON/SENTSINCE: the date written in Date:, time and zone disregarded
    # (message 2 was sent 1 March at 23:30 -0800, 2 March in UTC); no Date: matches none
    (b"SENTBEFORE 2-Mar-2020", [2]), (b"SENTON 1-Mar-2020", [2]), (b"SENTON 2-Mar-2020", [3]),
    (b"SENTSINCE 2-Mar-2020", [1, 3]), (b"NOT SENTON 1-Mar-2020", [1, 3, 4]),
    # LARGER/SMALLER: RFC822.SIZE strictly greater / smaller
    (b"LARGER 5000", [4]), (b"SMALLER 5000", [1, 2, 3]), (b"LARGER 4294967296", []),
    # FROM/TO/CC/BCC/SUBJECT: case-insensitive substring of the decoded field value
    (b"FROM alice", [1]), (b"FROM ALICE@EXAMPLE.COM", [1]), (b'FROM "<j@"', [2]),
    (b"FROM example.org", [4]), (b"TO bob", [1, 2, 3]), (b"CC erin", [4]), (b"BCC frank", [4]),
    (b"BCC bob", []), (b"SUBJECT REPORT", [1]), (b'SUBJECT "apple pie"', []),
    (b'SUBJECT "=?iso"', []),
    # HEADER field-name string; an empty string matches every message with the field
    (b'HEADER X-Priority ""', [4]), (b'HEADER x-thing "hello world"', [2]),
    (b'HEADER "Message-ID" "<m1@test>"', [1]), (b'HEADER X-None ""', []),
    # BODY: the decoded text parts; TEXT: those and every header block
    (b'BODY "body of message"', [1]), (b"BODY softbreak", [2]), (b'BODY "inner body"', [2]),
    (b"BODY innersubj", []), (b"TEXT innersubj", [2]), (b"BODY binaryneedle", []),
    (b"TEXT binaryneedle", []), (b"TEXT report.pdf", [2]), (b"BODY preamble-word", []),
    (b"BODY epilogue-word", []), (b"BODY alice", []), (b"TEXT alice", [1]),
    (b'TEXT "content-type"', [1, 2, 3, 4]), (b'BODY "content-type"', []),
    (b"BODY Z3L8", []), (b"BODY =C3", []), (b'BODY ""', [1, 2, 3, 4]),
    # message sequence numbers and UID sets
    (b"2:3", [2, 3]), (b"3:2", [2, 3]), (b"*", [4]), (b"1,3:*", [1, 3, 4]), (b"5", []),
    (b"UID 2:3", [2, 3]), (b"UID 9:*", [4]), (b"UID *", [4]), (b"UID 7", []),
])
def test_each_search_key(corpus, criteria, expected):
    assert run(corpus, criteria) == expected


@pytest.mark.parametrize("criteria, expected", [
    (b'FROM "j\xc3\xbcrgen"', [2]),                  # RFC 2047 Q, UTF-8
    (b'SUBJECT "\xc3\xa2pple pie"', [2]),            # RFC 2047 B, ISO-8859-1
    (b'SUBJECT "GR\xc3\x9cSSE"', [3]),               # casefold: SS finds the sharp s
    (b'BODY "caf\xc3\xa9"', [2]),                    # quoted-printable, UTF-8
    (b'BODY "k\xc3\xb6ln"', [3]), (b'BODY "GR\xc3\x9c\xc3\x9fE"', [3]),   # base64, latin-1
    (b'BODY "na\xc3\xafve approach"', [4]),          # quoted-printable, UTF-8
])
def test_decoded_headers_and_bodies(corpus, criteria, expected):
    """Strings in UTF-8 (CHARSET UTF-8) match the decoded text, not the encoded octets."""
    assert run(corpus, b"CHARSET UTF-8 " + criteria) == expected
    assert run(corpus, b"CHARSET us-ascii " + criteria) == expected  # read as UTF-8 too


# -- NOT, OR, parentheses ------------------------------------------------------------------------

@pytest.mark.parametrize("criteria, expected", [
    (b"SEEN UNDELETED", [1]),                      # keys in a row all apply (AND)
    (b"OR SEEN FLAGGED", [1, 2, 3]),
    (b"NOT SEEN", [2, 4]), (b"NOT NOT SEEN", [1, 3]),
    (b"NOT (SEEN DELETED)", [1, 2, 4]),
    (b"OR OR ANSWERED DRAFT FLAGGED", [1, 2, 3]),
    (b"OR ANSWERED OR DRAFT OR FLAGGED LARGER 5000", [1, 2, 3, 4]),
    (b"OR (FROM alice SEEN) (NOT RECENT KEYWORD $Junk)", [1, 2]),
    (b"(UNSEEN (LARGER 100 (NOT DELETED)))", [2, 4]),
    (b"NOT OR BODY caf BODY approach", [1, 3]),
    (b"OR NOT 1:2 TEXT alice", [1, 3, 4]),
    (b"NOT (OR UID 1 BODY padding)", [2, 3]),
    (b"UID 1:3 NOT SEEN", [2]),
])
def test_not_or_and_parenthesised_groups(corpus, criteria, expected):
    assert run(corpus, criteria) == expected


def test_program_structure_and_case_insensitive_keys():
    program = parse(b"not (Unseen oR Recent new)")
    assert program.key == NotKey(AndKey((FlagKey("\\Seen", False), OrKey(
        RecentKey(), AndKey((RecentKey(), FlagKey("\\Seen", False)))))))
    assert parse(b"bOdY X").key == ContentKey("x", False)
    assert parse(b"TEXT \"Stra\xc3\x9fe\"").key == ContentKey("strasse", True)


def test_deep_nesting_is_refused_not_a_crash():
    with pytest.raises(ValueError, match="nested"):
        parse_search(["NOT"] * 5000 + ["SEEN"], uid_mode=False)
    nested: list = ["SEEN"]
    for _ in range(5000):
        nested = [nested]
    with pytest.raises(ValueError, match="nested"):
        parse_search(nested, uid_mode=False)
    assert parse_search(["NOT"] * 200 + ["SEEN"], uid_mode=False)


# -- charsets, literals, malformed input ------------------------------------------------------

def test_charset_utf8_and_us_ascii_are_accepted(corpus):
    assert parse(b"CHARSET UTF-8 ALL").charset == "UTF-8"
    assert parse(b'charset "us-ascii" ALL').charset == "US-ASCII"
    assert parse(b"ALL").charset == "US-ASCII"


@pytest.mark.parametrize("charset", [b"ISO-8859-1", b"KOI8-R", b"x-unknown", b"UTF-16"])
def test_other_charsets_raise_badcharset(charset):
    with pytest.raises(BadCharset) as info:
        parse(b"CHARSET " + charset + b" BODY x")
    assert info.value.charset == charset.decode().upper()
    assert info.value.supported == ("US-ASCII", "UTF-8")
    assert not isinstance(info.value, ValueError)  # a NO [BADCHARSET], not a BAD


def test_literals_anywhere_in_search(corpus):
    # RFC 3501 section 4.3: a literal may stand wherever a string may (astring, date).
    assert run(corpus, b"CHARSET UTF-8 BODY {5}", b"caf\xc3\xa9", b" SEEN") == []
    assert run(corpus, b"CHARSET UTF-8 BODY {5}", b"caf\xc3\xa9", b" UNSEEN") == [2]
    assert run(corpus, b"OR (FROM {5}", b"alice", b") (HEADER {10}", b"X-Priority",
               b' "") SINCE {10}', b"1-Mar-2020", b"") == [1, 4]
    assert run(corpus, b"CHARSET {5}", b"UTF-8", b" SUBJECT {8}", b"gr\xc3\xbc\xc3\x9fe",
               b"") == [3]


@pytest.mark.parametrize("arguments, reason", [
    (b"", "at least one search key"),
    (b"FOO", "unknown search key 'FOO'"),
    (b"BODY", "missing string after BODY"),
    (b"HEADER X-Thing", "missing string after HEADER x-thing"),
    (b"NOT", "missing search key"),
    (b"OR SEEN", "missing search key"),
    (b"()", "empty parenthesised list"),
    (b"(SEEN ())", "empty parenthesised list"),
    (b"SINCE 1-Foo-2020", "invalid date '1-Foo-2020' after SINCE"),
    (b"ON 31-Feb-2020", "invalid date '31-Feb-2020' after ON"),
    (b"BEFORE 2020-03-01", "expected d-Mon-yyyy"),
    (b"SENTON 1-Mar-20", "invalid date"),
    (b"LARGER -1", "invalid number '-1' after LARGER"),
    (b"SMALLER ten", "invalid number"),
    (b"LARGER 99999999999999999999", "too large"),
    (b"KEYWORD \\Seen", "invalid keyword"),
    (b"UID", "missing sequence set after UID"),
    (b"UID 0:4", "0 is not a message number"),
    (b"1,,2", "bad element ''"),
    (b"4:5:6", "bad element '4:5:6'"),
    (b"$", "SEARCHRES"),
    (b"ALL CHARSET UTF-8", "unknown search key 'CHARSET'"),
    (b"CHARSET", "CHARSET needs a charset name"),
    (b'"ALL"', "expected a search key, got a string"),
    (b'BODY "\xff\xfe"', "not valid UTF-8"),
    (b"FROM (alice)", "expected a string after FROM, got a list"),
])
def test_malformed_criteria_raise_valueerror_with_reason(arguments, reason):
    with pytest.raises(ValueError, match=None) as info:
        parse(arguments)
    assert reason in str(info.value)


# -- UID SEARCH, sessions, concurrency -----------------------------------------------------------

def test_uid_search_still_takes_message_numbers(corpus):
    """RFC 3501 6.4.8: UID SEARCH returns UIDs, its sequence-set keys stay message numbers."""
    store, box = corpus
    session = [2, 3, 4]  # message 1 expunged and reported: UID 2 is message 1
    program = parse(b"1 UID 2:*", uid=True)
    matched = evaluate(program, store, box, session)
    assert matched == [2]
    assert program.response_numbers(matched, session) == [2]
    program = parse(b"UID 3:4", uid=False)
    matched = evaluate(program, store, box, session)
    assert program.response_numbers(matched, session) == [2, 3]


def test_recent_comes_from_the_session(corpus):
    assert run(corpus, b"RECENT", recent=set()) == []
    assert run(corpus, b"NEW", recent={1, 2}) == [2]
    assert run(corpus, b"OLD", recent={1, 2}) == [3, 4]


def test_message_expunged_by_another_session_matches_no_data_key(corpus):
    store, box = corpus
    store.expunge(box, [2])
    session = [1, 2, 3, 4]  # this session has not been told yet
    assert evaluate(parse(b"UNSEEN"), store, box, session) == [4]
    assert evaluate(parse(b"NOT FROM nobody"), store, box, session) == [1, 3, 4]
    # Keys needing no data answer from the session's view, which still has the message.
    assert evaluate(parse(b"ALL"), store, box, session) == [1, 2, 3, 4]


def test_empty_mailbox(store):
    user = store.create_user("bob", "pw")
    box = store.mailbox(user, "INBOX")
    for criteria in (b"ALL", b"*", b"1:*", b"UID *", b"UID 1:*", b"UNSEEN", b"BODY x"):
        assert evaluate(parse(criteria), store, box, []) == []


# -- sequence sets (RFC 3501 section 9) ------------------------------------------------------------

def test_parse_seqset_forms():
    assert parse_seqset("561,562,564:569,571").ranges == (
        (561, 561), (562, 562), (564, 569), (571, 571))
    assert parse_seqset("*").ranges == ((None, None),)
    assert parse_seqset("5:2,7:*").ranges == ((5, 2), (7, None))
    assert parse_seqset("007").ranges == ((7, 7),)   # leading zeros, as Dovecot
    assert str(parse_seqset("5:2,7:*,9")) == "5:2,7:*,9"


@pytest.mark.parametrize("text", ["", "0", "1:0", "a", "1:", ":3", "1,", ",1", "1 2", "-1",
                                  "4294967296", "1.5", "**", "$"])
def test_parse_seqset_rejects(text):
    with pytest.raises(ValueError):
        parse_seqset(text)


def test_resolve_uids_in_uid_mode():
    uids = [3, 5, 8, 13, 21]
    assert parse_seqset("1:*").resolve_uids(uids, True) == uids
    assert parse_seqset("4:10,6,21").resolve_uids(uids, True) == [5, 8, 21]
    assert parse_seqset("10:4").resolve_uids(uids, True) == [5, 8]
    assert parse_seqset("100:*").resolve_uids(uids, True) == [21]  # n:* with n > highest
    assert parse_seqset("*:100").resolve_uids(uids, True) == [21]
    assert parse_seqset("1,2,4,6").resolve_uids(uids, True) == []  # missing UIDs ignored
    assert parse_seqset("1:*").resolve_uids([], True) == []
    assert parse_seqset("*").resolve_uids([], True) == []


def test_resolve_uids_in_sequence_mode():
    uids = [3, 5, 8, 13, 21]
    assert parse_seqset("2:3,5").resolve_uids(uids, False) == [5, 8, 21]
    assert parse_seqset("*:4").resolve_uids(uids, False) == [13, 21]
    assert parse_seqset("1:2,2:3,1").resolve_uids(uids, False) == [3, 5, 8]
    assert parse_seqset("*").resolve_uids(uids, False) == [21]


@pytest.mark.parametrize("text, uids", [("6", [1, 2, 3, 4, 5]), ("5", [1, 2, 3]),
                                        ("2:4", [1, 2, 3]), ("4:*", [1, 2, 3]),
                                        ("1:*", []), ("*", [])])
def test_sequence_number_out_of_range_is_invalid(text, uids):
    """RFC 3501 9 (seq-number): BAD for a number above the count, "*" in an empty mailbox
    included; Dovecot answers FETCH 5 in a 3-message mailbox with BAD Invalid messageset."""
    with pytest.raises(ValueError, match="invalid message sequence number"):
        parse_seqset(text).resolve_uids(uids, False)
    # SEARCH is lenient instead, as Dovecot is: such numbers match nothing.
    assert len(parse_seqset(text).resolve_uids(uids, False, strict=False)) <= len(uids)


def test_resolve_is_slices_not_expansion():
    uids = list(range(1, 200_001, 2))  # 100,000 messages
    seqset = parse_seqset("1:*")
    assert seqset.slices(uids, False) == [(0, 100_000)]
    assert seqset.slices(uids, True) == [(0, 100_000)]
    assert parse_seqset("1:4294967295").slices(uids, True) == [(0, 100_000)]
    assert parse_seqset("10:20,15:30,31:40").slices(uids, True) == [(5, 20)]
    assert parse_seqset("1:*").resolve_uids(uids, False) == uids


# -- cost: batches, tiers, short-circuits ---------------------------------------------------------

@pytest.mark.slow  # ~20 s; the batch logic is also met by the smaller SEARCH tests
def test_big_mailbox_searches_in_batches(tmp_path):
    from mailstore.backends.embedded import EmbeddedBackend

    backend = EmbeddedBackend(str(tmp_path / "big"))
    try:
        store = MailStore(backend)
        user = store.create_user("big", "pw")
        box = store.mailbox(user, "INBOX")
        count = 20_000
        stored = store.ingest(message(1), refs=count)
        for i in range(count):
            store.add_stored(box, stored, flags=[] if i % 10 == 0 else ["\\Seen"])
        uids = store.uids(box)
        assert len(uids) == count
        counting = CountingStore(store)

        # Sequence sets need nothing from the store.
        assert evaluate(parse(b"1:*"), counting, box, uids) == uids
        assert evaluate(parse(b"UID 19990:*"), counting, box, uids) == uids[19_989:]
        assert counting.fetches == []

        # Flags of many messages: one bounded scan of the flag cells, no per-batch fetches.
        unseen = evaluate(parse(b"UNSEEN"), counting, box, uids)
        assert unseen == uids[::10]
        assert counting.scans == [(1, uids[-1], ("uid_flags",))]  # flags only: no records
        assert counting.fetches == []

        # Flags first, headers only for the messages still in the running.
        counting.fetches.clear()
        counting.scans.clear()
        assert evaluate(parse(b"UNSEEN FROM alice"), counting, box, uids) == unseen
        header_fetches = [n for n, columns in counting.fetches if columns == (HEADER,)]
        assert len(header_fetches) == count // 500 and sum(header_fetches) == len(unseen)

        # A top-level UID set narrows the candidates before anything is fetched.
        counting.fetches.clear()
        assert evaluate(parse(b"UID 101:1100 UNSEEN"), counting, box, uids) == [
            u for u in unseen if 101 <= u <= 1100]
        assert [n for n, _ in counting.fetches] == [500, 500]
        assert counting.opened == []
    finally:
        backend.close()


def test_content_is_read_only_for_messages_cheap_keys_left(corpus):
    store, box = corpus
    counting = CountingStore(store)
    assert evaluate(parse(b"SEEN BODY body"), counting, box, store.uids(box)) == [1]
    assert counting.opened == [1, 3]
    counting.opened.clear()
    counting.fetches.clear()
    assert evaluate(parse(b"OR ALL BODY x"), counting, box, store.uids(box)) == [1, 2, 3, 4]
    assert counting.opened == [] and counting.fetches == []
    counting.opened.clear()
    # A TEXT string found in the stored header block needs no content read at all.
    assert evaluate(parse(b"TEXT alice"), counting, box, store.uids(box)) == [1]
    assert 1 not in counting.opened


@pytest.fixture
def small_chunks(backend):
    store = MailStore(backend, chunk_size=65536)
    user = store.create_user("chunky", "pw")
    return store, user


def _padded_to(head: bytes, needle_at: int, needle: bytes, size: int = 140_000) -> bytes:
    """``head`` + filler lines, with ``needle`` starting at octet ``needle_at``."""
    filler = (b"lorem ipsum dolor sit amet\r\n" * (needle_at // 28 + 1))[:needle_at - len(head)]
    body = filler + needle
    tail = (b"\r\nconsectetur adipiscing elit" * (size // 29 + 1))[:size - len(head) - len(body)]
    return head + body + tail


def test_body_search_across_chunk_boundaries(small_chunks):
    store, user = small_chunks
    head = b"From: a@example.com\r\nSubject: big\r\n\r\n"
    straddling = _padded_to(head, 65536 - 7, b"NEEDLE-ACROSS-THE-BOUNDARY")
    store.append(user, "INBOX", straddling)
    box = store.mailbox(user, "INBOX")
    counting = CountingStore(store)
    uids = store.uids(box)
    assert evaluate(parse(b'BODY "needle-across-the-boundary"'), counting, box, uids) == [1]
    assert evaluate(parse(b'TEXT "needle-across"'), counting, box, uids) == [1]
    assert evaluate(parse(b'BODY "needle-across-the-boundaryX"'), counting, box, uids) == []
    # Read one content chunk at a time, never the message whole.
    assert counting.reads and max(counting.reads) <= 65536


def test_encoded_bodies_decoded_across_chunk_boundaries(small_chunks):
    store, user = small_chunks
    qp_head = (b"Subject: qp\r\nContent-Type: text/plain; charset=utf-8\r\n"
               b"Content-Transfer-Encoding: quoted-printable\r\n\r\n")
    # "=C3=A9" split inside its escape at the chunk boundary, and a soft break right after.
    qp = _padded_to(qp_head, 65536 - 4, b"caf=C3=A9=\r\nterrace")
    text = ("x" * 70 + "\r\n") * 900 + "Öl und Wasser" + "\r\n" + ("y" * 70 + "\r\n") * 200
    b64 = (b"Subject: b64\r\nContent-Type: text/plain; charset=utf-8\r\n"
           b"Content-Transfer-Encoding: base64\r\n\r\n"
           + base64.encodebytes(text.encode()).replace(b"\n", b"\r\n"))
    latin = (b"Subject: latin\r\nContent-Type: text/plain; charset=windows-1252\r\n\r\n"
             + b"plain " * 20000 + "Smørrebrød €uro".encode("cp1252"))
    for data in (qp, b64, latin):
        store.append(user, "INBOX", data)
    box = store.mailbox(user, "INBOX")
    uids = store.uids(box)
    assert len(qp) > 70000 and len(b64) > 70000 and len(latin) > 70000

    def search(criteria: bytes) -> list[int]:
        return evaluate(parse(b"CHARSET UTF-8 " + criteria), store, box, uids)

    assert search(b'BODY "caf\xc3\xa9terrace"') == [1]
    assert search(b'BODY "\xc3\xb6l und wasser"') == [2]
    assert search(b'BODY "sm\xc3\xb8rrebr\xc3\xb8d \xe2\x82\xacuro"') == [3]
    assert search(b'BODY "=C3=A9"') == [] and search(b"BODY w5ZsIHVuZC") == []


def test_charset_parameter_name_in_any_case(small_chunks):
    # RFC 2045 section 5.1: parameter names are case-insensitive; the store keeps them as
    # written (as Dovecot returns them), so "CharSet" must still select the KOI8-R decoder.
    store, user = small_chunks
    store.append(user, "INBOX", b"Subject: koi8\r\nContent-Type: text/plain; CharSet=\"KOI8-R\""
                 b"\r\n\r\n" + "Привет".encode("koi8-r") + b"\r\n")
    box = store.mailbox(user, "INBOX")
    needle = "привет".encode()
    assert evaluate(parse(b'CHARSET UTF-8 BODY "' + needle + b'"'), store, box,
                    store.uids(box)) == [1]


def test_attachments_are_skipped_not_read(small_chunks):
    store, user = small_chunks
    blob = base64.encodebytes(bytes(range(256)) * 1600).replace(b"\n", b"\r\n")
    data = (b"Subject: with attachment\r\nContent-Type: multipart/mixed; boundary=XX\r\n\r\n"
            b"--XX\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Transfer-Encoding: base64\r\n\r\n" + blob +
            b"\r\n--XX\r\nContent-Type: text/plain\r\n\r\nfind me after the attachment\r\n"
            b"--XX--\r\n")
    store.append(user, "INBOX", data)
    box = store.mailbox(user, "INBOX")
    counting = CountingStore(store)
    assert evaluate(parse(b'BODY "find me"'), counting, box, store.uids(box)) == [1]
    assert len(data) > 500_000 and sum(counting.reads) < 70_000


# -- decoding helpers ----------------------------------------------------------------------------

def test_rfc2047_header_decoding():
    assert decode_header_text("=?utf-8?q?J=C3=BCrgen?= <j@x>") == "Jürgen <j@x>"
    assert decode_header_text("=?ISO-8859-1?B?4nBwbGU=?= pie") == "âpple pie"
    # White space between adjacent encoded words goes; other white space stays.
    assert decode_header_text("=?utf-8?q?a?= \r\n =?utf-8?q?b?= c") == "ab c"
    assert decode_header_text("=?utf-8*en?q?hello_world?=") == "hello world"
    assert decode_header_text("=?bogus?q?caf=C3=A9?=") == "café"  # unknown charset: UTF-8
    assert decode_header_text("=?utf-8?x?abc?=") == "=?utf-8?x?abc?="
    assert decode_field(b"Subject: caf\xc3\xa9\r\n \xe9t\xe9\r\n") == "café été"


@pytest.mark.parametrize("encoding, raw, text", [
    ("quoted-printable", b"caf=C3=A9 soft=\r\nbreak =3D done=\r\n", "café softbreak = done"),
    ("base64", base64.encodebytes("Grüße aus Köln".encode()), "Grüße aus Köln"),
    ("base64", b"SGVsbG8g\r\nV29y\r\nbGQ=\r\n", "Hello World"),
    ("7bit", "naïve".encode(), "naïve"),
])
def test_part_decoder_gives_the_same_text_however_it_is_split(encoding, raw, text):
    for size in range(1, len(raw) + 1):
        decoder = PartDecoder(encoding, "utf-8")
        out = "".join(decoder.feed(raw[i:i + size]) for i in range(0, len(raw), size))
        assert out + decoder.feed(b"", final=True) == text, size


def test_charset_fallbacks():
    assert PartDecoder(None, "us-ascii").feed("Köln".encode("latin-1"), True) == "Köln"
    assert PartDecoder(None, None).feed("Köln".encode(), True) == "Köln"
    assert PartDecoder(None, "iso-8859-1").feed(b"\x80", True) == "€"   # read as cp1252
    assert PartDecoder(None, "koi8-r").feed("мир".encode("koi8-r"), True) == "мир"
    # A bytes-to-bytes codec is no charset: never decompress or un-hex content.
    assert PartDecoder(None, "hex").feed(b"414243", True) == "414243"


def test_stream_matcher_finds_needles_straddling_pieces():
    matcher = StreamMatcher(["needle", "q"])
    for piece in ("xxxxne", "E", "dL", "e and more"):
        matcher.feed(piece)
    assert matcher.found == {"needle"} and not matcher.done
    matcher.reset()
    matcher.feed("Q")
    # ``done`` may lag a piece shorter than the longest needle (searched in batches, to stay
    # linear); ``found`` never lags, and ``done`` agrees with it once read.
    assert matcher.found == {"needle", "q"} and matcher.done


FLAG_PROGRAMS = [
    b"UNSEEN", b"SEEN", b"DELETED", b"UNDELETED", b"FLAGGED", b"UNFLAGGED", b"ANSWERED",
    b"UNANSWERED", b"DRAFT", b"UNDRAFT", b"ALL", b"NEW", b"OLD", b"RECENT",
    b"NOT SEEN", b"OR FLAGGED DELETED", b"UNSEEN 2:5", b"NOT (SEEN OR ANSWERED DRAFT)",
    b"UID 3:* OR DELETED NOT FLAGGED", b"KEYWORD $work", b"1,4,7 UNDELETED",
    # every mix of "the UIDs in S" and "all but S" under AND and OR
    b"OR SEEN FLAGGED", b"OR UNSEEN UNFLAGGED", b"OR SEEN UNFLAGGED", b"OR UNSEEN FLAGGED",
    b"SEEN UNDELETED", b"UNSEEN UNDELETED", b"UNDELETED UNSEEN", b"FLAGGED DELETED",
    b"NOT OR SEEN DELETED", b"NOT (UNSEEN FLAGGED)", b"OR NOT ALL SEEN", b"NOT ALL",
]


def test_flag_searches_from_the_session_index_equal_reading_the_rows(store):
    """RFC 3501 6.4.4 flag keys answered by set algebra over a session's index (decision
    0009) give exactly what evaluating each message's row gives, and read no row."""
    import random

    from imapserver.imap.search import answerable_from_flags
    from imapserver.imap.selected import SelectedMailbox

    user = store.create_user("flags", "pw", default_folders=False)
    box = store.mailbox(user, "INBOX")
    rng = random.Random(7)
    names = ["\\Seen", "\\Deleted", "\\Flagged", "\\Answered", "\\Draft", "$Work"]
    for i in range(40):
        store.append(user, "INBOX", message(i), rng.sample(names, rng.randint(0, 3)))
    store.expunge(box, [3, 17])
    session = SelectedMailbox(store, box, readonly=False)
    session.load()
    # Changed by "another session" after this one's last refresh: the log corrects the index.
    store.store_flags(box, [1, 2, 5, 8], ["\\Flagged", "\\Seen"], "replace")
    uids = list(session.uids)
    recent = set(uids[-3:])
    for text in FLAG_PROGRAMS:
        program = parse(text)
        expected = evaluate(program, store, box, uids, recent)
        if not answerable_from_flags(program):
            assert text == b"KEYWORD $work"  # keywords are not in the index: rows are read
            continue
        counting = CountingStore(store)
        got = evaluate(program, counting, box, uids, recent, flag_sets=session.flag_sets())
        assert got == expected, text
        assert counting.fetches == [] and counting.scans == [], text


# -- FROM/TO/CC/BCC on parsed addresses (RFC 3501 6.4.4) ----------------------------------------

COMMENTED = (
    b"From: <user-from (comment)@ (comment) domain.org>\r\n"
    b"To: Joe <joe (c1) . q @ (c2) example\r\n .com>\r\nCc: a@x\r\n"
    b"CC: grp: m1@a.b, m2@c.d;\r\nBcc: \"Smith, J\" (boss) <js@ex.com>\r\n"
    b"Reply-To: r@x\r\nSubject: commented\r\n\r\nbody\r\n")
ADDRESS_SEARCHES = [
    (b"FROM user-from@domain.org", [1]), (b'FROM "<user-from@domain.org>"', [1]),
    (b"FROM USER-FROM@DOMAIN.ORG", [1]), (b"TO joe.q@example.com", [1]),
    (b'TO "Joe <joe.q@example.com>"', [1]), (b"CC m2@c.d", [1]), (b'CC "grp: <m1@a.b>"', [1]),
    (b"CC a@x", [1]), (b"BCC js@ex.com", [1]), (b'BCC "\\"Smith, J\\" <js@ex.com>"', [1]),
    (b"NOT FROM user-from@domain.org", [2]), (b"FROM other@domain.org", []),
    # As written, too (Dovecot only looks at the parsed form: see search_eval).
    (b"FROM comment", [1]), (b"BCC boss", [1]),
    # HEADER stays the text as written, as in Dovecot.
    (b"HEADER FROM user-from@domain.org", []), (b"HEADER FROM comment", [1]),
]


def test_address_keys_match_parsed_addresses(store):
    """RFC 3501 6.4.4: FROM/TO/CC/BCC look in "the envelope structure's" address field, so an
    address written with RFC 5322 comments and folding (``<user (c)@ (c) domain.org>``) is
    found by its ``mailbox@host``; every field of the name counts (two Cc lines), groups and
    display names come out as Dovecot writes them, and the text as written still matches."""
    user = store.create_user("alice", "pw")
    store.append(user, "INBOX", COMMENTED)
    store.append(user, "INBOX", message(2))
    box = store.mailbox(user, "INBOX")
    for criteria, expected in ADDRESS_SEARCHES:
        assert evaluate(parse(criteria), store, box, store.uids(box), set()) == expected, \
            criteria
