"""FETCH rendering: ENVELOPE, BODY/BODYSTRUCTURE, BODY[section]<partial>, INTERNALDATE, items.

Unit tests of :mod:`imapserver.imap.render` and :mod:`imapserver.imap.sections` against
hand-written expectations, each citing the part of RFC 3501 it checks.  The same code is
compared with Dovecot's answers in ``test_imap_render_dovecot.py``.
"""

from __future__ import annotations

import io
import json

import pytest
from corpus import crlf

from imapserver.imap.render import (
    BODY,
    CONTENT,
    ENVELOPE,
    HEADER,
    FetchItem,
    bodystructure,
    envelope,
    internaldate,
    join_rfc2231,
    parse_fetch_item,
    parse_fetch_items,
    rfc822_size,
)
from imapserver.imap.sections import (
    EMPTY,
    HeaderSubset,
    Plan,
    Range,
    Section,
    find_part,
    header_subset,
    iter_section,
    parse_section,
    resolve,
)
from imapserver.imap.wire import Atom, ParseError, tokenize
from mailstore.mime import parse_bytes


def info_of(raw: bytes) -> dict:
    """What the store keeps for a message: the parser's result, through JSON as in a cell."""
    return json.loads(json.dumps(parse_bytes(raw).to_json()))


def section_bytes(raw: bytes, spec: str, partial=None, header: bytes | None = None,
                  chunk: int = 65536) -> bytes:
    info = info_of(raw)
    hs = info["header_size"]
    plan = resolve(spec, info["body"], raw[:hs] if header is None else header, len(raw), hs)
    total, chunks = iter_section(plan, io.BytesIO(raw), partial, chunk)
    data = b"".join(chunks)
    assert len(data) == total
    return data


# -- ENVELOPE (RFC 3501 section 7.4.2) -----------------------------------------------------------

RFC3501_EXAMPLE = crlf("""\
Date: Wed, 17 Jul 1996 02:23:25 -0700 (PDT)
From: Terry Gray <gray@cac.washington.edu>
Subject: IMAP4rev1 WG mtg summary and minutes
To: imap@cac.washington.edu
cc: minutes@CNRI.Reston.VA.US, John Klensin <KLENSIN@MIT.EDU>
Message-Id: <B27397-0100000@cac.washington.edu>
MIME-Version: 1.0
Content-Type: TEXT/PLAIN; CHARSET=US-ASCII

Hello.
""")


def test_envelope_of_the_rfc3501_example():
    """RFC 3501 section 8's sample FETCH response: sender and reply-to default to from, absent
    fields are NIL, address lists have no space between addresses."""
    assert envelope(info_of(RFC3501_EXAMPLE)["envelope"]) == (
        b'("Wed, 17 Jul 1996 02:23:25 -0700 (PDT)" "IMAP4rev1 WG mtg summary and minutes" '
        b'(("Terry Gray" NIL "gray" "cac.washington.edu")) '
        b'(("Terry Gray" NIL "gray" "cac.washington.edu")) '
        b'(("Terry Gray" NIL "gray" "cac.washington.edu")) '
        b'((NIL NIL "imap" "cac.washington.edu")) '
        b'((NIL NIL "minutes" "CNRI.Reston.VA.US")("John Klensin" NIL "KLENSIN" "MIT.EDU")) '
        b'NIL NIL "<B27397-0100000@cac.washington.edu>")')


def test_envelope_without_one_is_all_nil():
    """RFC 3501 section 7.4.2: every envelope field is nil when the header lacks it."""
    assert envelope(None) == b"(" + b" ".join([b"NIL"] * 10) + b")"
    assert envelope({}) == envelope(None)
    assert envelope(info_of(b"\r\nno header\r\n")["envelope"]) == envelope(None)


def test_envelope_groups_and_source_routes():
    """RFC 3501 section 7.4.2: a group is ``(NIL NIL name NIL)``, its members, then
    ``(NIL NIL NIL NIL)``; a source route is the adl."""
    env = {"to": [[None, None, "A Group", None], ["Ed", None, "ed", "a.test"],
                  [None, None, None, None]],
           "from": [["Mary", "@r1.test,@r2.test", "mary", "x.test"]]}
    assert envelope(env) == (
        b'(NIL NIL (("Mary" "@r1.test,@r2.test" "mary" "x.test")) NIL NIL '
        b'((NIL NIL "A Group" NIL)("Ed" NIL "ed" "a.test")(NIL NIL NIL NIL)) NIL NIL NIL NIL)')


def test_envelope_strings_are_raw_octets():
    """RFC 3501 section 7.4.2 returns header text undecoded: encoded words stay encoded; 8-bit
    octets (stored as latin-1 code points) go out as they came, in a literal (section 4.3)."""
    subject = "Größe".encode().decode("latin-1")
    out = envelope({"subject": subject, "date": "=?utf-8?q?x?=",
                    "from": [["J\xfcrgen", None, "j", "example.de"]]})
    assert out == (b'("=?utf-8?q?x?=" {7}\r\nGr\xc3\xb6\xc3\x9fe ((' b"{6}\r\nJ\xfcrgen"
                   b' NIL "j" "example.de")) NIL NIL NIL NIL NIL NIL NIL)')


def test_envelope_subject_and_names_are_cleaned_up_for_humans():
    """Dovecot's choice where RFC 3501 is silent: in the subject and display names, white
    space runs become one space and the ends are trimmed; a NUL (not allowed in an IMAP string)
    becomes 0x80.  Other fields keep their white space."""
    out = envelope({"subject": "  a \t b\r\n c  ", "date": "x  y",
                    "from": [["  Two   Spaces ", None, "t", "s.test"]], "message_id": "a\0b"})
    assert out == (b'("x  y" "a b c" (("Two Spaces" NIL "t" "s.test")) NIL NIL NIL NIL NIL NIL '
                   b'{3}\r\na\x80b)')
    assert envelope({"subject": " \t "}).startswith(b'(NIL "" ')


# -- BODY / BODYSTRUCTURE (RFC 3501 section 7.4.2) -----------------------------------------------

def test_body_of_the_rfc3501_example():
    """RFC 3501 section 8's sample: ``BODY ("TEXT" "PLAIN" ("CHARSET" "US-ASCII") NIL NIL
    "7BIT" 3028 92)`` -- type, subtype, parameter names and values as written; the message has
    no Content-Transfer-Encoding, and Dovecot writes RFC 2045's default as "7bit"."""
    body = info_of(RFC3501_EXAMPLE)["body"]
    assert bodystructure(body, False) == (
        b'("TEXT" "PLAIN" ("CHARSET" "US-ASCII") NIL NIL "7bit" 8 1)')
    assert bodystructure(body, True) == (
        b'("TEXT" "PLAIN" ("CHARSET" "US-ASCII") NIL NIL "7bit" 8 1 NIL NIL NIL NIL)')
    explicit = info_of(RFC3501_EXAMPLE.replace(b"MIME-Version: 1.0\r\n",
                                               b"Content-Transfer-Encoding: 7BIT\r\n"))
    assert b' NIL NIL "7BIT" 8 1)' in bodystructure(explicit["body"], False)


def test_metadata_of_earlier_versions_renders_as_before():
    """Stored structure from before encodings were kept as written (a default stored as 7BIT,
    parameter names lower-cased) is written out as it is: nothing to tell a default from."""
    old = {"type": "TEXT", "subtype": "PLAIN", "params": [["charset", "US-ASCII"]],
           "encoding": "7BIT", "size": 8, "lines": 1, "header_start": 0, "body_start": 0,
           "body_end": 8}
    assert bodystructure(old, False) == (
        b'("TEXT" "PLAIN" ("charset" "US-ASCII") NIL NIL "7BIT" 8 1)')


def test_text_part_gets_the_default_charset():
    """RFC 2045 section 5.2: text without a charset is us-ascii; Dovecot writes it out, after
    the parameters given."""
    part = {"type": "text", "subtype": "html", "params": [["format", "flowed"]],
            "encoding": "base64", "size": 10, "lines": 2}
    assert bodystructure(part, False) == (
        b'("text" "html" ("format" "flowed" "charset" "us-ascii") NIL NIL "base64" 10 2)')
    part["params"].append(["CharSet", "utf-8"])
    assert b'"charset" "us-ascii"' not in bodystructure(part, False)
    basic = {"type": "application", "subtype": "pdf", "params": [], "encoding": "base64",
             "size": 3}
    assert bodystructure(basic, False) == b'("application" "pdf" NIL NIL NIL "base64" 3)'


def test_single_part_extension_data():
    """RFC 3501 body-ext-1part: md5, disposition ``(type params)``, language (a list), location;
    BODY omits them, BODYSTRUCTURE writes all four."""
    part = {"type": "image", "subtype": "png", "params": [["name", "a.png"]], "id": "<i@x>",
            "description": "logo", "encoding": "base64", "size": 12, "md5": "Q2hl",
            "disposition": ["inline", []], "language": ["en", "de"],
            "location": "http://x.test/a.png"}
    assert bodystructure(part, False) == (
        b'("image" "png" ("name" "a.png") "<i@x>" "logo" "base64" 12)')
    assert bodystructure(part, True) == (
        b'("image" "png" ("name" "a.png") "<i@x>" "logo" "base64" 12 "Q2hl" ("inline" NIL) '
        b'("en" "de") "http://x.test/a.png")')
    part["disposition"] = ["attachment", [["filename", "a b.png"]]]
    part.pop("language")
    assert b' ("attachment" ("filename" "a b.png")) NIL "http' in bodystructure(part, True)


def test_multipart_and_its_extension_data():
    """RFC 3501 body-type-mpart: the children with no space between them, then the subtype;
    BODYSTRUCTURE adds body-ext-mpart (parameters, disposition, language, location)."""
    raw = crlf("""\
Content-Type: multipart/alternative; boundary=b

--b
Content-Type: text/plain

one
--b
Content-Type: text/html; charset=utf-8

<p>two</p>
--b--
""")
    body = info_of(raw)["body"]
    # Lines are line feeds: "one" and "<p>two</p>" end at a boundary, so neither has one.
    assert bodystructure(body, False) == (
        b'(("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 3 0)'
        b'("text" "html" ("charset" "utf-8") NIL NIL "7bit" 10 0) "alternative")')
    assert bodystructure(body, True) == (
        b'(("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 3 0 NIL NIL NIL NIL)'
        b'("text" "html" ("charset" "utf-8") NIL NIL "7bit" 10 0 NIL NIL NIL NIL) '
        b'"alternative" ("boundary" "b") NIL NIL NIL)')


def test_multipart_without_parts_shows_one_empty_text_part():
    """RFC 3501's grammar needs ``1*body`` in a multipart; for one whose boundary never appears
    Dovecot writes an empty text/plain part, and so do we."""
    body = info_of(crlf("Content-Type: multipart/mixed; boundary=x\n\nno boundary\n"))["body"]
    assert body["parts"] == []
    assert bodystructure(body, False) == (
        b'(("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 0 0) "mixed")')
    assert bodystructure(body, True) == (
        b'(("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 0 0 NIL NIL NIL NIL) "mixed" '
        b'("boundary" "x") NIL NIL NIL)')


def test_message_rfc822_part():
    """RFC 3501 body-type-msg: body-fields, then the envelope, the body and the line count of
    the encapsulated message, and only then the extension data."""
    raw = crlf("""\
Content-Type: message/rfc822
Content-Disposition: inline

Subject: inner

text
""")
    body = info_of(raw)["body"]
    assert bodystructure(body, True) == (
        b'("message" "rfc822" NIL NIL NIL "7bit" 24 '
        b'(NIL "inner" NIL NIL NIL NIL NIL NIL NIL NIL) '
        b'("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 6 1 NIL NIL NIL NIL) 3 '
        b'NIL ("inline" NIL) NIL NIL)')


def test_message_rfc822_that_was_not_parsed():
    """An encapsulated message stored opaque (here base64-encoded) still has to be written as
    body-type-msg: Dovecot gives it an all-NIL envelope and an empty text/plain body."""
    raw = crlf("Content-Type: message/rfc822\nContent-Transfer-Encoding: base64\n\n"
               "U3ViamVjdDogeA==\n")
    body = info_of(raw)["body"]
    assert "message" not in body
    assert bodystructure(body, False) == (
        b'("message" "rfc822" NIL NIL NIL "base64" 18 (NIL NIL NIL NIL NIL NIL NIL NIL NIL NIL) '
        b'("text" "plain" ("charset" "us-ascii") NIL NIL "7bit" 0 0) 1)')


def test_rfc2231_continuations_are_joined():
    """RFC 2231 section 3: ``name*0``, ``name*1``... are one parameter.  Joined as Dovecot's
    rfc2231_parse does -- still encoded, since RFC 3501 returns values raw -- plain parameters
    first, then the joined ones by name."""
    params = [["title*1*", "%2A"], ["title*0*", "us-ascii'en'This%20"], ["title*2", "it!"],
              ["size", "3"], ["filename*", "utf-8''%E2%82%AC"], ["a*0", "x"], ["a*1", "y%"]]
    assert join_rfc2231(params) == [
        ("size", "3"), ("a", "xy%"), ("filename*", "utf-8''%E2%82%AC"),
        ("title*", "us-ascii'en'This%20%2Ait!")]
    # A plain first segment of an extended value gets the empty charset'language' prefix.
    assert join_rfc2231([["n*0", "50%"], ["n*1*", "%41"]]) == [("n*", "''50%25%41")]
    # With an index missing, the segments stay apart.
    assert join_rfc2231([["n*0", "a"], ["n*2", "c"]]) == [("n*0", "a"), ("n*2", "c")]
    # Names are as written: sorted as written, then a run equal but for case is one set,
    # named after its first segment; as in Dovecot 2.3, a set out of order that way is not.
    assert join_rfc2231([["title*1", "b"], ["Title*0", "a"]]) == [("Title", "ab")]
    assert join_rfc2231([["Name*1", "b"], ["name*0", "a"]]) == [("Name*1", "b"),
                                                                 ("name*0", "a")]


def test_strings_in_structures_use_literals_when_needed():
    """RFC 3501 section 4.3: 8-bit octets, quotes and CR/LF cannot be quoted; a literal it is."""
    part = {"type": "text", "subtype": "plain", "params": [["name", "r\xe9sum\xe9.txt"]],
            "description": 'say "hi"', "encoding": "8bit", "size": 1, "lines": 1}
    assert bodystructure(part, False) == (
        b'("text" "plain" ("name" {10}\r\nr\xe9sum\xe9.txt "charset" "us-ascii") NIL '
        b'{8}\r\nsay "hi" "8bit" 1 1)')


# -- sections (RFC 3501 section 6.4.5) -----------------------------------------------------------

NESTED = crlf("""\
From: outer@example.com
Subject: outer
Content-Type: multipart/mixed; boundary=o

--o
Content-Type: text/plain

first
--o
Content-Type: message/rfc822

From: inner@example.com
Received: one
Subject: inner
received: two

--i
ignored: not a multipart, these are body lines
--o
Content-Type: multipart/alternative; boundary=a

--a
Content-Type: text/plain

alt one
--a
Content-Type: message/rfc822

Subject: deepest
Content-Type: multipart/mixed; boundary=d

--d

deepest text
--d--
--a--
--o--
""")


@pytest.mark.parametrize("spec, expected", [
    ("", NESTED),
    ("HEADER", NESTED[:NESTED.index(b"\r\n\r\n") + 4]),
    ("TEXT", NESTED[NESTED.index(b"\r\n\r\n") + 4:]),
    ("1", b"first"),
    ("1.MIME", b"Content-Type: text/plain\r\n\r\n"),
    ("2", NESTED[NESTED.index(b"From: inner"):NESTED.index(b"\r\n--o\r\nContent-Type: multi")]),
    ("2.MIME", b"Content-Type: message/rfc822\r\n\r\n"),
    ("2.HEADER", b"From: inner@example.com\r\nReceived: one\r\nSubject: inner\r\n"
                 b"received: two\r\n\r\n"),
    ("2.TEXT", b"--i\r\nignored: not a multipart, these are body lines"),
    ("2.1", b"--i\r\nignored: not a multipart, these are body lines"),
    ("2.1.MIME", b"From: inner@example.com\r\nReceived: one\r\nSubject: inner\r\n"
                 b"received: two\r\n\r\n"),
    ("2.HEADER.FIELDS (RECEIVED)", b"Received: one\r\nreceived: two\r\n\r\n"),
    ("2.HEADER.FIELDS.NOT (received from)", b"Subject: inner\r\n\r\n"),
    ("3.1", b"alt one"),
    ("3.2.1", b"deepest text"),
    ("1.1", b"first"),
    ("3.2.1.1", b"deepest text"),
    ("3.2.1.1.MIME", b"\r\n"),
    ("3.2.HEADER.FIELDS (subject)", b"Subject: deepest\r\n\r\n"),
    ("3.2.TEXT", b"--d\r\n\r\ndeepest text\r\n--d--"),
    ("3.MIME", b"Content-Type: multipart/alternative; boundary=a\r\n\r\n"),
])
def test_sections_of_a_nested_message(spec, expected):
    """RFC 3501 section 6.4.5: part numbers within multiparts and encapsulated messages; MIME is
    a part's own header, HEADER/TEXT those of an encapsulated message; the header subsets keep
    the message's order and repeats, match names case-insensitively, and end with the blank
    line."""
    assert section_bytes(NESTED, spec) == expected


@pytest.mark.parametrize("spec", ["4", "1.2", "2.2", "3.3", "3.2.2", "1.HEADER",
                                  "1.TEXT", "3.HEADER", "3.1.1.1", "1.HEADER.FIELDS (X)"])
def test_sections_that_do_not_exist_are_empty(spec):
    """A part number naming no part, or HEADER/TEXT of a part that is not message/rfc822, is
    the empty string, as Dovecot answers (RFC 3501 does not say)."""
    assert section_bytes(NESTED, spec) == b""


def test_part_one_of_a_single_part_message():
    """RFC 3501 section 6.4.5: "Every message has at least one part number" -- in a message
    that is not multipart, part 1 is the body and 1.MIME the message's header."""
    raw = crlf("Subject: s\nContent-Type: text/plain\n\nbody\n")
    assert section_bytes(raw, "1") == b"body\r\n"
    assert section_bytes(raw, "1.MIME") == crlf("Subject: s\nContent-Type: text/plain\n\n")
    assert section_bytes(raw, "2") == b"" and section_bytes(raw, "1.1") == b""


def test_top_level_message_rfc822():
    """A message that is itself a message/rfc822 part: 1 is the encapsulated message, 1.HEADER
    its header, 1.1 its body."""
    raw = crlf("Content-Type: message/rfc822\n\nSubject: in\n\nin body\n")
    assert section_bytes(raw, "1") == crlf("Subject: in\n\nin body\n")
    assert section_bytes(raw, "1.HEADER") == crlf("Subject: in\n\n")
    assert section_bytes(raw, "1.TEXT") == section_bytes(raw, "1.1") == b"in body\r\n"
    assert section_bytes(raw, "1.1.MIME") == crlf("Subject: in\n\n")
    assert section_bytes(raw, "1.MIME") == crlf("Content-Type: message/rfc822\n\n")


def test_header_subsets_without_a_blank_line():
    """RFC 3501 section 6.4.5: the blank line is included in all header fetches "except in the
    case of a message which has no body and no blank line"."""
    raw = b"Subject: s\r\nFrom: f\r\n"
    assert section_bytes(raw, "HEADER") == raw
    assert section_bytes(raw, "HEADER.FIELDS (FROM)") == b"From: f\r\n"
    assert section_bytes(raw, "HEADER.FIELDS.NOT (FROM)") == b"Subject: s\r\n"
    assert section_bytes(raw, "TEXT") == b""
    assert header_subset(b"A: 1\r\n\r\n", (b"B",), False) == b"\r\n"


def test_header_subset_keeps_folding_and_lines_that_are_not_fields():
    """Fields are returned as they are, continuation lines included; a line that is not a
    field can only be in a HEADER.FIELDS.NOT result."""
    block = b"From x  Sat Nov 21\nA: 1\n  more\nb: 2\nA: 3\n\n"
    assert header_subset(block, (b"A",), False) == b"A: 1\n  more\nA: 3\n\n"
    assert header_subset(block, (b"A",), True) == b"From x  Sat Nov 21\nb: 2\n\n"
    assert header_subset(block, (b"",), False) == b"\n"


def test_partial_fetches():
    """RFC 3501 section 6.4.5: ``<origin.length>`` returns at most length octets from origin;
    an origin past the end gives the empty string."""
    raw = crlf("Subject: s\n\n0123456789\n")
    assert section_bytes(raw, "TEXT", (2, 3)) == b"234"
    assert section_bytes(raw, "TEXT", (10, 100)) == b"\r\n"
    assert section_bytes(raw, "TEXT", (12, 5)) == b""
    assert section_bytes(raw, "TEXT", (500, 5)) == b""
    assert section_bytes(raw, "TEXT", (0, 0)) == b""
    assert section_bytes(raw, "HEADER.FIELDS (SUBJECT)", (3, 4)) == b"ject"
    for chunk in (1, 2, 3, 7):
        assert section_bytes(raw, "", (1, 20), chunk=chunk) == raw[1:21]


def test_nul_octets_are_sent_as_0x80():
    """IMAP literals are CHAR8 (RFC 3501 section 9), which excludes NUL; Dovecot sends 0x80
    instead, which keeps the announced length right."""
    raw = b"Subject: a\x00b\r\n\r\nx\x00y"
    assert section_bytes(raw, "TEXT") == b"x\x80y"
    assert section_bytes(raw, "HEADER") == b"Subject: a\x80b\r\n\r\n"


class ShortReads(io.BytesIO):
    """A reader that returns at most 3 octets per read and counts the octets it returned."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.served = 0

    def read(self, n=-1):
        data = super().read(3 if n is None or n < 0 else min(n, 3))
        self.served += len(data)
        return data


def test_iter_section_reads_only_what_it_needs():
    """A partial fetch of a large part reads only the requested range, in chunks."""
    raw = crlf("Content-Type: multipart/mixed; boundary=b\n\n--b\n\n") + b"x" * 100_000 + \
        crlf("\n--b--\n")
    info = info_of(raw)
    plan = resolve("1", info["body"], None, len(raw), info["header_size"])
    reader = ShortReads(raw)
    total, chunks = iter_section(plan, reader, (50_000, 10), chunk=4)
    assert total == 10 and reader.served == 0  # nothing read before the iterator runs
    assert b"".join(chunks) == b"x" * 10 and reader.served == 10


def test_iter_section_raises_when_the_message_is_short():
    """The literal length goes out first, so content missing behind it must not pass silently."""
    total, chunks = iter_section(Plan((Range(0, 10),)), io.BytesIO(b"12345"))
    assert total == 10
    with pytest.raises(OSError):
        b"".join(chunks)


def test_top_level_header_comes_from_the_stored_header():
    """BODY[HEADER] and its subsets are answered from the stored header cell, without reading
    the message; a capped header cell (shorter than header_size) makes them read it."""
    raw = crlf("From: a@b\nTo: c@d\n\nbody\n")
    info = info_of(raw)
    hs = info["header_size"]
    plan = resolve("HEADER.FIELDS (TO)", info["body"], raw[:hs], len(raw), hs)
    assert plan == Plan((b"To: c@d\r\n\r\n",)) and not plan.needs_content
    assert iter_section(plan, None)[0] == 11
    capped = resolve("HEADER.FIELDS (TO)", None, raw[:5], len(raw), hs)
    assert capped == Plan((HeaderSubset(0, hs, (b"TO",), False),)) and capped.needs_content
    assert capped.known_length is None
    total, chunks = iter_section(capped, io.BytesIO(raw))
    assert (total, b"".join(chunks)) == (11, b"To: c@d\r\n\r\n")
    assert resolve("HEADER", None, None, len(raw), hs) == Plan((Range(0, hs),))
    assert resolve("TEXT", None, None, len(raw), hs).known_length == 6
    assert resolve("1", info["body"], None, len(raw), hs) == Plan((Range(hs, 6),))
    assert resolve("2", info["body"], None, len(raw), hs) == EMPTY


@pytest.mark.parametrize("spec, part, text, fields, name", [
    ("", (), "", (), ""),
    ("header", (), "HEADER", (), "HEADER"),
    ("1.2.3", (1, 2, 3), "", (), "1.2.3"),
    ("4.Mime", (4,), "MIME", (), "4.MIME"),
    ("2.text", (2,), "TEXT", (), "2.TEXT"),
    ("HEADER.FIELDS (From to)", (), "HEADER.FIELDS", (b"FROM", b"TO"), "HEADER.FIELDS (FROM TO)"),
    ('1.header.fields.not  ("x-a"  b "" "q\\"t")', (1,), "HEADER.FIELDS.NOT",
     (b"X-A", b"B", b"", b'Q"T'), '1.HEADER.FIELDS.NOT ("X-A" B "" "Q\\"T")'),
    ("HEADER.FIELDS (F:OM)", (), "HEADER.FIELDS", (b"F:OM",), "HEADER.FIELDS (F:OM)"),
])
def test_parse_section(spec, part, text, fields, name):
    """RFC 3501 section 9 section-spec; the response name spells keywords and field names in
    upper case and keeps quoted names quoted, as Dovecot does."""
    assert parse_section(spec) == Section(part, text, fields, name)


@pytest.mark.parametrize("spec", [
    "MIME", "1.", ".1", "1..2", "0", "01", "1.0", "1.TEXT.MIME", "TEXT.MIME", "HEADER.FIELDS",
    "HEADER.FIELDS ()", "HEADER.FIELDS(FROM)", "HEADER.FIELDS (FROM)X", "HEADER.FIELDS FROM",
    "HEADERX", "2.MIME.HEADER", "1.HEADER.MIME", "X", "1X", "HEADER.FIELDS (FR\"OM)",
    "HEADER.FIELDS (\"FROM)", "HEADER.FIELDS (X-\xe9)", "4294967296",
])
def test_parse_section_rejects(spec):
    """What RFC 3501 section 9's grammar does not allow is a BAD: MIME without a part, part
    numbers that are not nz-number (32 bits), an empty or malformed header-list."""
    with pytest.raises(ValueError):
        parse_section(spec)


def test_find_part_follows_dovecots_walk():
    """The part-number walk of RFC 3501 section 6.4.5 on the stored tree."""
    body = info_of(NESTED)["body"]
    assert find_part(body, (1,))["subtype"] == "plain"
    assert find_part(body, (2,))["subtype"] == "rfc822"
    assert find_part(body, (2, 1))["header_start"] == find_part(body, (2,))["body_start"]
    assert find_part(body, (3, 2, 1, 1))["type"] == "text"
    # A leaf's only part is itself, so 1.1 is part 1 again -- but nothing lies below 1.1.
    assert find_part(body, (1, 1)) is find_part(body, (1,))
    assert find_part(body, (1, 1, 1)) is None and find_part(body, (9,)) is None


# -- INTERNALDATE, RFC822.SIZE -------------------------------------------------------------------

@pytest.mark.parametrize("ts, expected", [
    (0, b'"01-Jan-1970 00:00:00 +0000"'),
    (1795262400, b'"21-Nov-2026 12:00:00 +0000"'),
    (1795262400.999, b'"21-Nov-2026 12:00:00 +0000"'),
    (951782400 + 86399, b'"29-Feb-2000 23:59:59 +0000"'),
])
def test_internaldate(ts, expected):
    """RFC 3501 date-time: date-day-fixed (two digits here), English month, 4-digit year, time
    and zone, quoted; the server's zone is UTC."""
    assert internaldate(ts) == expected


def test_rfc822_size():
    """RFC 3501 section 7.4.2: RFC822.SIZE is a number."""
    assert rfc822_size(4286) == b"4286"


# -- FETCH items (RFC 3501 section 6.4.5) --------------------------------------------------------

def fetch_spec(line: bytes):
    """The FETCH argument after the sequence set, as the command layer gets it."""
    return tokenize([b"a FETCH 1 " + line])[3]


def test_macros():
    """RFC 3501 section 6.4.5: ALL, FAST and FULL, only on their own."""
    names = [item.name for item in parse_fetch_items(fetch_spec(b"all"))]
    assert names == ["FLAGS", "INTERNALDATE", "RFC822.SIZE", "ENVELOPE"]
    assert [i.name for i in parse_fetch_items(Atom("FAST"))] == names[:3]
    assert [i.name for i in parse_fetch_items(Atom("Full"))] == names + ["BODY"]
    with pytest.raises(ValueError):
        parse_fetch_items(fetch_spec(b"(FLAGS ALL)"))


def test_items_from_the_tokenizer():
    """Items as wire.tokenize delivers them, sections and partials inside one atom."""
    items = parse_fetch_items(fetch_spec(
        b"(uid flags BODY.PEEK[HEADER.FIELDS (From to)]<0.100> body[1.2.mime] Rfc822.Size "
        b"BODYSTRUCTURE body envelope internaldate rfc822 rfc822.header rfc822.text "
        b"BODY[]<5.10> BODY.PEEK[2.TEXT])"))
    assert [(i.kind, i.name, i.sets_seen) for i in items] == [
        ("UID", "UID", False), ("FLAGS", "FLAGS", False),
        ("BODY[]", "BODY[HEADER.FIELDS (FROM TO)]<0>", False),
        ("BODY[]", "BODY[1.2.MIME]", True), ("RFC822.SIZE", "RFC822.SIZE", False),
        ("BODYSTRUCTURE", "BODYSTRUCTURE", False), ("BODY", "BODY", False),
        ("ENVELOPE", "ENVELOPE", False), ("INTERNALDATE", "INTERNALDATE", False),
        ("RFC822", "RFC822", True), ("RFC822.HEADER", "RFC822.HEADER", False),
        ("RFC822.TEXT", "RFC822.TEXT", True), ("BODY[]", "BODY[]<5>", True),
        ("BODY[]", "BODY[2.TEXT]", False)]
    assert items[2].partial == (0, 100) and items[2].section.fields == (b"FROM", b"TO")
    assert items[12].partial == (5, 10) and items[3].partial is None


def test_items_say_what_they_need():
    """Which stored cells an item needs, so the command layer reads no more than that."""
    needs = {item.name: item.needs for item in parse_fetch_items(fetch_spec(
        b"(UID FLAGS ENVELOPE BODY BODYSTRUCTURE RFC822.HEADER RFC822 BODY.PEEK[HEADER] "
        b"BODY.PEEK[HEADER.FIELDS (A)] BODY.PEEK[TEXT] BODY.PEEK[1] BODY.PEEK[1.MIME] "
        b"BODY.PEEK[2.HEADER.FIELDS (A)])"))}
    assert needs == {
        "UID": frozenset(), "FLAGS": frozenset(), "ENVELOPE": {ENVELOPE}, "BODY": {BODY},
        "BODYSTRUCTURE": {BODY}, "RFC822.HEADER": {HEADER}, "RFC822": {CONTENT},
        "BODY[HEADER]": {HEADER}, "BODY[HEADER.FIELDS (A)]": {HEADER},
        "BODY[TEXT]": {CONTENT}, "BODY[1]": {BODY, CONTENT}, "BODY[1.MIME]": {BODY, CONTENT},
        "BODY[2.HEADER.FIELDS (A)]": {BODY, CONTENT}}


def test_rfc822_items_are_sections():
    """RFC 3501 section 6.4.5: RFC822 is BODY[], RFC822.HEADER is BODY.PEEK[HEADER],
    RFC822.TEXT is BODY[TEXT] -- with their own response names."""
    rfc822, header, text = parse_fetch_items([Atom("RFC822"), Atom("RFC822.HEADER"),
                                              Atom("RFC822.TEXT")])
    assert (rfc822.section.text, header.section.text, text.section.text) == ("", "HEADER", "TEXT")
    assert rfc822.section.part == header.section.part == text.section.part == ()


@pytest.mark.parametrize("spec", [
    b"BINARY[1.MIME]", b"BINARY[HEADER]", b"BINARY.SIZE[1]<0.2>", b"BINARY[1]<0>",
    b"BINARY.PEEK", b"BINARY[0]", b"BODY[MIME]", b"BODY[]<5>", b"BODY[]<5.>", b"BODY[]<.5>",
    b"BODY[]<a.b>",
    b"BODY[]<1.4294967296>", b"BODY[]x", b"BODY.PEEK", b"FLAGSX", b"(FLAGS FAST)", b"()",
    b'("FLAGS")', b"BODY.PEEKS[]", b"MODSEQS",
])
def test_invalid_items(spec):
    """Anything outside RFC 3501's fetch-att, RFC 7162's MODSEQ and RFC 3516's BINARY items
    is a BAD (RFC 3516 section 8: section-binary is a part number only, and BINARY.SIZE takes
    no partial)."""
    with pytest.raises(ValueError):
        parse_fetch_items(fetch_spec(spec))


def test_fetch_item_is_a_value():
    """Items are immutable values the command layer can share and compare."""
    assert parse_fetch_item("flags") == FetchItem("FLAGS", "FLAGS")
    assert parse_fetch_item("BODY.PEEK[1]") == parse_fetch_item("body.peek[1]")


def test_brackets_outside_a_section_are_atom_characters():
    """RFC 3501 section 9: ``[`` is an ATOM-CHAR and ``]`` an ASTRING-CHAR; only after a
    fetch-att name (``BODY``, ``BODY.PEEK``, ``BINARY``...) does ``[`` open a section that
    holds spaces and lists.  A section owner without a closing ``]`` is a plain atom too."""
    assert tokenize([b"a SELECT x[y"]) == ["a", "SELECT", "x[y"]
    assert tokenize([b'a LIST "" x[%* ]z'])[2:] == [b"", "x[%*", "]z"]
    assert tokenize([b"a SELECT body[ x"])[2:] == ["body[", "x"]
    assert tokenize([b"a FETCH 1 (x[ BODY.PEEK[HEADER.FIELDS (A B)]<0.5> binary[1 2])"])[3] == [
        "x[", "BODY.PEEK[HEADER.FIELDS (A B)]<0.5>", "binary[1 2]"]


def test_repeated_fetch_items_answered_once():
    """RFC 3501 7.4.2: a FETCH response carries each data item once, so ``(UID FLAGS UID)``
    is UID and FLAGS, and RFC822.HEADER twice is one (as Dovecot answers); a BODY[section]
    asked twice is answered twice, as Dovecot does."""
    items = parse_fetch_items(fetch_spec(b"(UID FLAGS UID flags RFC822.HEADER RFC822.HEADER)"))
    assert [i.name for i in items] == ["UID", "FLAGS", "RFC822.HEADER"]
    items = parse_fetch_items(fetch_spec(b"(BODY.PEEK[1] BODY[1] BODY[]<0.5> BODY[]<0.5>)"))
    assert [(i.name, i.sets_seen) for i in items] == [
        ("BODY[1]", False), ("BODY[1]", True), ("BODY[]<0>", True), ("BODY[]<0>", True)]


def test_literal_names_a_header_field():
    """RFC 3501 section 9: header-fld-name = astring, so a literal may stand inside a section's
    header list; it is echoed quoted, as Dovecot does."""
    items = parse_fetch_items(tokenize([b"a FETCH 1 (BODY.PEEK[HEADER.FIELDS ({7}", b"Subject",
                                        b" {2+}", b"To", b")]<0.9> FLAGS)"])[3])
    assert [i.name for i in items] == ['BODY[HEADER.FIELDS ("SUBJECT" "TO")]<0>', "FLAGS"]
    assert items[0].section.fields == (b"SUBJECT", b"TO") and items[0].partial == (0, 9)
    # a literal outside a section stays a literal; CRLF can be no field name
    assert tokenize([b"a SEARCH HEADER {7}", b"Subject", b" x"])[3:] == [b"Subject", "x"]
    assert tokenize([b"a APPEND body[x {5}", b"hello", b""])[2:] == ["body[x", b"hello"]
    with pytest.raises(ParseError):
        tokenize([b"a FETCH 1 BODY[HEADER.FIELDS ({3}", b"a\r\n", b")]"])
