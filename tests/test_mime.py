"""Tests of the streaming MIME structure parser (``mailstore.mime``).

The parser's output is what FETCH ENVELOPE / BODYSTRUCTURE / BODY[section] are later served
from (RFC 3501 sections 6.4.5 and 7.4.2), so offsets are checked by slicing the original bytes,
and the MIME rules come from RFC 2045/2046 (defaults, boundaries, the CRLF before a boundary
belonging to the boundary).
"""

from __future__ import annotations

import json
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mailstore.mime import (
    GROUP_END,
    MAX_DEPTH,
    MAX_PARTS,
    BodyPart,
    Envelope,
    MessageInfo,
    StructureParser,
    header_fields,
    parse_address_list,
    parse_bytes,
)


def walk(part: BodyPart):
    """Every part of a tree (encapsulated messages included), parents first, iteratively."""
    todo = [part]
    while todo:
        p = todo.pop()
        yield p
        if p.message is not None:
            todo.append(p.message.body)
        todo.extend(reversed(p.parts or []))


def text_lines(body: bytes) -> int:
    """RFC 3501 body-fld-lines as the parser counts it, as Dovecot and UW-IMAP do: line feeds
    (an unterminated last line is not counted)."""
    return body.count(b"\n")


def check_invariants(msg: bytes, info: MessageInfo) -> None:
    """What must hold for any input: offsets nest and lie inside the message."""
    assert info.size == len(msg)
    assert 0 <= info.header_size <= info.size
    assert info.body.header_start == 0 and info.body.body_start == info.header_size
    assert info.body.body_end == len(msg)
    count = 0
    for part in walk(info.body):
        count += 1
        assert part.header_start <= part.body_start <= part.body_end <= len(msg)
        assert part.size == part.body_end - part.body_start
        if part.lines is not None:
            assert part.lines == text_lines(msg[part.body_start:part.body_end])
        edge = part.body_start
        for child in part.parts or []:  # children in order, inside the parent, disjoint
            assert edge <= child.header_start and child.body_end <= part.body_end
            edge = child.body_end
        if part.message is not None:
            inner = part.message
            assert inner.body.header_start == part.body_start
            assert inner.body.body_end == part.body_end
            assert inner.size == part.size
            assert inner.header_size == inner.body.body_start - inner.body.header_start
    assert count <= MAX_PARTS + 1
    assert info.lines == text_lines(msg[info.header_size:])


def feed_split(msg: bytes, cuts) -> MessageInfo:
    parser = StructureParser()
    last = 0
    for cut in sorted(set(cuts)):
        parser.feed(msg[last:cut])
        last = cut
    parser.feed(msg[last:])
    return parser.close()


def crlf(text: str) -> bytes:
    return text.replace("\n", "\r\n").encode("latin-1")


SIMPLE = crlf("""\
Date: Mon, 7 Feb 1994 21:52:25 -0800 (PST)
From: Fred Foobar <foobar@Blurdybloop.example>
Subject: afternoon
 meeting
To: mooch@owatagu.siam.example
Message-Id: <B27397-0100000@Blurdybloop.example>
MIME-Version: 1.0
Content-Type: TEXT/PLAIN; CHARSET=US-ASCII

Hello Joe, do you think we can meet at 3:30 tomorrow?
""")


def test_simple_text_message():
    """RFC 3501 section 7.4.2's example message: ENVELOPE fields raw, unfolded; body fields."""
    info = parse_bytes(SIMPLE)
    head_end = SIMPLE.index(b"\r\n\r\n") + 4
    assert info.size == len(SIMPLE)
    assert info.header_size == head_end
    assert info.lines == 1
    env = info.envelope
    assert env.date == "Mon, 7 Feb 1994 21:52:25 -0800 (PST)"
    assert env.subject == "afternoon meeting"
    assert env.from_ == [("Fred Foobar", None, "foobar", "Blurdybloop.example")]
    assert env.sender == env.from_ and env.reply_to == env.from_
    assert env.to == [(None, None, "mooch", "owatagu.siam.example")]
    assert env.cc is None and env.bcc is None and env.in_reply_to is None
    assert env.message_id == "<B27397-0100000@Blurdybloop.example>"
    body = info.body
    assert (body.type, body.subtype, body.params) == ("TEXT", "PLAIN", [("CHARSET", "US-ASCII")])
    assert body.param("charset") == body.param("Charset") == "US-ASCII"
    assert body.encoding is None and body.parts is None and body.message is None
    assert SIMPLE[body.body_start:body.body_end] == SIMPLE[head_end:]
    assert body.size == len(SIMPLE) - head_end and body.lines == 1
    check_invariants(SIMPLE, info)
    parser = StructureParser()
    parser.feed(SIMPLE)
    assert parser.close() == info and parser.close() is parser.close()
    with pytest.raises(ValueError):
        parser.feed(b"more")


ALTERNATIVE = crlf("""\
From: a@example.com
Content-Type: multipart/alternative; boundary="=_alt"

This is the preamble.
--=_alt
Content-Type: text/plain; charset=utf-8

plain line one
plain line two
--=_alt \t
Content-Type: text/html; charset=utf-8
Content-Transfer-Encoding: quoted-printable

<p>html</p>
--=_alt--
epilogue
""")


def test_multipart_alternative():
    """RFC 2046 5.1.1: the CRLF before a delimiter belongs to it; padding after it is allowed;
    preamble and epilogue are not parts."""
    info = parse_bytes(ALTERNATIVE)
    mp = info.body
    assert (mp.type, mp.subtype, mp.boundary) == ("multipart", "alternative", "=_alt")
    assert mp.lines is None
    plain, html = mp.parts
    assert ALTERNATIVE[plain.body_start:plain.body_end] == b"plain line one\r\nplain line two"
    assert plain.lines == 1 and plain.size == 30  # "plain line two" ends at the boundary
    assert ALTERNATIVE[plain.header_start:plain.body_start] == \
        b"Content-Type: text/plain; charset=utf-8\r\n\r\n"
    assert html.encoding == "quoted-printable"
    assert ALTERNATIVE[html.body_start:html.body_end] == b"<p>html</p>"
    assert ALTERNATIVE[html.header_start:].startswith(b"Content-Type: text/html")
    check_invariants(ALTERNATIVE, info)


NESTED = crlf("""\
From: a@example.com
Subject: report
Content-Type: multipart/mixed; boundary=outer

--outer
Content-Type: multipart/alternative; boundary="inner"

--inner
Content-Type: text/plain

see attached
--inner
Content-Type: text/html

<b>see attached</b>
--inner--

--outer
Content-Type: application/pdf; name="report (1).pdf"
Content-Transfer-Encoding: base64
Content-Disposition: attachment;
 filename="report (1).pdf"; size=12
Content-ID: <part1@example.com>
Content-Description: The report
Content-MD5: Q2hlY2sgSW50ZWdyaXR5IQ==
Content-Language: en, de (German)
Content-Location: http://example.com/
 report.pdf

SGVsbG8gV29ybGQh
--outer--
""")


def test_nested_multipart_with_attachment():
    """RFC 3501 7.4.2 body fields of an attachment, and parts nested two deep."""
    info = parse_bytes(NESTED)
    mixed = info.body
    alt, pdf = mixed.parts
    text, html = alt.parts
    assert NESTED[text.body_start:text.body_end] == b"see attached"
    assert NESTED[html.body_start:html.body_end] == b"<b>see attached</b>"
    # The alternative ends before the CRLF preceding "--outer": its epilogue is an empty line.
    assert NESTED[alt.body_start:alt.body_end].endswith(b"--inner--\r\n")
    assert (pdf.type, pdf.subtype, pdf.params) == ("application", "pdf",
                                                   [("name", "report (1).pdf")])
    assert pdf.encoding == "base64" and pdf.lines is None
    assert pdf.disposition == ("attachment", [("filename", "report (1).pdf"), ("size", "12")])
    assert pdf.id == "<part1@example.com>" and pdf.description == "The report"
    assert pdf.md5 == "Q2hlY2sgSW50ZWdyaXR5IQ=="
    assert pdf.language == ["en", "de"]
    assert pdf.location == "http://example.com/ report.pdf"
    assert NESTED[pdf.body_start:pdf.body_end] == b"SGVsbG8gV29ybGQh"
    check_invariants(NESTED, info)


FORWARD = crlf("""\
From: outer@example.com
Content-Type: multipart/mixed; boundary=b

--b
Content-Type: text/plain

Forwarded message below.
--b
Content-Type: message/rfc822

From: "Inner, Sender" <inner@example.org>
Subject: the original
Content-Type: text/plain; charset=iso-8859-1

original body
second line

--b--
""")


def test_message_rfc822_nested():
    """RFC 3501 7.4.2: message/rfc822 carries the encapsulated message's envelope and body,
    and its line count is that of the whole encapsulated message."""
    info = parse_bytes(FORWARD)
    note, fwd = info.body.parts
    assert (fwd.type, fwd.subtype) == ("message", "rfc822")
    inner = fwd.message
    assert inner.envelope.subject == "the original"
    assert inner.envelope.from_ == [("Inner, Sender", None, "inner", "example.org")]
    assert FORWARD[fwd.body_start:fwd.body_end].startswith(b"From: \"Inner")
    assert FORWARD[fwd.body_start:fwd.body_end].endswith(b"second line\r\n")
    assert fwd.lines == 6
    body = inner.body
    assert body.header_start == fwd.body_start
    assert FORWARD[body.body_start:body.body_end] == b"original body\r\nsecond line\r\n"
    assert body.params == [("charset", "iso-8859-1")] and body.lines == 2
    assert inner.header_size == body.body_start - body.header_start
    assert inner.lines == 2 and inner.size == fwd.size
    check_invariants(FORWARD, info)
    # A base64 message/rfc822 cannot be parsed in place: it is opaque, no nested message.
    msg = crlf("Content-Type: message/rfc822\nContent-Transfer-Encoding: base64\n\nU3ViamVj\n")
    info = parse_bytes(msg)
    assert info.body.message is None and info.body.lines == 1


DIGEST = crlf("""\
Content-Type: multipart/digest; boundary=d

--d

Subject: first

one
--d
Content-Type: text/plain

an explicit text part
--d

Subject: third

three
--d--
""")


def test_multipart_digest_default():
    """RFC 2046 5.1.5: in multipart/digest a part without Content-Type is message/rfc822."""
    info = parse_bytes(DIGEST)
    first, explicit, third = info.body.parts
    assert (first.type, first.subtype, first.params) == ("message", "rfc822", [])
    assert first.message.envelope.subject == "first"
    assert DIGEST[first.message.body.body_start:first.message.body.body_end] == b"one"
    assert (explicit.type, explicit.subtype) == ("text", "plain")
    assert third.message.envelope.subject == "third"
    # The MIME header of a part without fields is just the blank line.
    assert DIGEST[first.header_start:first.body_start] == b"\r\n"
    check_invariants(DIGEST, info)


def test_group_addresses_and_source_routes():
    """RFC 3501 7.4.2: groups as (NIL NIL name NIL) ... (NIL NIL NIL NIL); routes in adl."""
    msg = crlf("""\
From: Pete(A nice \\) chap) <pete(his account)@silly.test(his host)>
To: A Group:Ed Jones <c@a.test>,joe@where.test,John <jdoe@one.test>;, Mary <mary@x.test>
Cc: undisclosed-recipients:;
Bcc: <@relay1.example,@relay2.example:user@dest.example>
Reply-To: "Doe, \\"Jo\\"" <jo@example.com>, old@example.com (Old Style)
Sender:

body
""")
    env = parse_bytes(msg).envelope
    assert env.from_ == [("Pete", None, "pete", "silly.test")]
    assert env.sender == env.from_  # present but empty: RFC 3501 says use From
    assert env.to == [
        (None, None, "A Group", None), ("Ed Jones", None, "c", "a.test"),
        (None, None, "joe", "where.test"), ("John", None, "jdoe", "one.test"), GROUP_END,
        ("Mary", None, "mary", "x.test")]
    assert env.cc == [(None, None, "undisclosed-recipients", None), GROUP_END]
    assert env.bcc == [(None, "@relay1.example,@relay2.example", "user", "dest.example")]
    assert env.reply_to == [('Doe, "Jo"', None, "jo", "example.com"),
                            ("Old Style", None, "old", "example.com")]


@pytest.mark.parametrize("value, expected", [
    ("=?utf-8?q?J=C3=B6rg?= <j@x.example>", [("=?utf-8?q?J=C3=B6rg?=", None, "j", "x.example")]),
    ('"john doe"@example.com', [(None, None, '"john doe"', "example.com")]),
    ("a@b.example c@d.example", [(None, None, "a", "b.example"), (None, None, "c", "d.example")]),
    ("<>", [(None, None, "", "")]),
    ("localonly", [(None, None, "localonly", "")]),
    ("Open Group: a@b.example", [(None, None, "Open Group", None), (None, None, "a", "b.example"),
                                 GROUP_END]),
    ('"unterminated <x@y>', [(None, None, "unterminated <x@y>", "")]),
    ("(((", []),
])
def test_address_edge_cases(value, expected):
    """Best effort on odd or broken address lists; encoded words are NOT decoded."""
    assert parse_address_list(value) == expected


# No deadline (as every other Hypothesis test here): on a busy machine the process can be
# kept off the CPU for longer than the default 200 ms in the middle of one example, which
# then fails the test as "unreliable test timings" (FlakyFailure).
@settings(deadline=None)
@given(st.text(alphabet=st.sampled_from(list('ab@.<>,;:"()\\[] \t\r\n\xe9')), max_size=60))
def test_address_parser_never_raises(value):
    """Malformed headers must never make a message undeliverable."""
    for address in parse_address_list(value):
        assert len(address) == 4


_WORD = st.text(alphabet=st.sampled_from(list("aZ09!#'*+/=?^_`{|}~.-")), min_size=1, max_size=6)
_SPACE = st.text(alphabet=st.sampled_from([" ", "\t"]), max_size=2)


@settings(deadline=None)  # as above
@given(st.one_of(
    st.builds(lambda s1, words, s2, local, host, s3: (
        f"{s1}{' '.join(words)}{s2}<{local}@{host}>{s3}"),
        _SPACE, st.lists(_WORD, max_size=3), _SPACE, _WORD, _WORD, _SPACE),
    st.builds(lambda s1, local, host, s2: f"{s1}{local}@{host}{s2}",
              _SPACE, _WORD, _WORD, _SPACE),
    st.text(alphabet=st.sampled_from(list('ab.@<> \t"(),:;\\[]-')), max_size=30)))
def test_simple_addresses_take_a_shortcut_to_the_same_result(value):
    """Plain ``Name <a@b>`` and ``a@b`` skip the tokenizer; the answer must not change."""
    from mailstore.mime.address import _parse_tokens
    assert parse_address_list(value) == _parse_tokens(value)


def test_missing_headers():
    """RFC 2045 defaults (text/plain; charset=us-ascii; the 7bit encoding, stored as None so
    that it stays apart from an explicit one) and an all-NIL envelope."""
    info = parse_bytes(b"\r\njust a body\r\n")
    assert info.header_size == 2 and info.envelope == Envelope()
    body = info.body
    assert (body.type, body.subtype, body.params, body.encoding) == \
        ("text", "plain", [("charset", "us-ascii")], None)
    assert info.lines == 1 and body.size == 13
    assert "encoding" not in body.to_json()

    header_only = b"Subject: no body\r\nFrom: x@y.example"
    info = parse_bytes(header_only)
    assert info.header_size == len(header_only) and info.size == len(header_only)
    assert info.lines == 0 and info.body.size == 0
    assert info.envelope.subject == "no body"
    assert info.envelope.reply_to == [(None, None, "x", "y.example")]

    empty = parse_bytes(b"")
    assert (empty.size, empty.header_size, empty.lines) == (0, 0, 0)


def test_parameter_without_equals_and_invalid_type():
    """A parameter without '=' is skipped; an invalid Content-Type falls back to the default."""
    info = parse_bytes(b"Content-Type: text/plain; format; charset=\"utf-8\"; =x\r\n\r\nx")
    assert info.body.params == [("charset", "utf-8")]
    info = parse_bytes(b"Content-Type: garbage\r\nContent-Transfer-Encoding:\r\n\r\nx")
    assert (info.body.type, info.body.subtype, info.body.encoding) == ("text", "plain", None)


@pytest.mark.parametrize("field, encoding", [
    (b"", None),
    (b"Content-Transfer-Encoding: 7BIT\r\n", "7BIT"),
    (b"Content-Transfer-Encoding: 7bit\r\n", "7bit"),
    (b"Content-Transfer-Encoding: Quoted-Printable (comment)\r\n", "Quoted-Printable"),
])
def test_encoding_as_written(field, encoding):
    """Content-Transfer-Encoding is kept as written, and None when the part has none (Dovecot
    writes "7bit" for that but an explicit "7BIT" as it is)."""
    info = parse_bytes(field + b"Content-Type: text/plain\r\n\r\nx\r\n")
    assert info.body.encoding == encoding
    assert MessageInfo.from_json(json.loads(json.dumps(info.to_json()))) == info


def test_parameter_names_as_written():
    """Parameter names keep their case (Dovecot returns them so); lookups ignore it, and a
    boundary is found whatever the spelling of its name (RFC 2045 section 5.1)."""
    msg = crlf("""\
Content-Type: Multipart/Mixed; BOUNDARY="b"; Charset=x

--b
Content-Type: text/plain; CharSet=UTF-8; Format=flowed
Content-Disposition: inline; FileName=a.txt

one
--b--
""")
    info = parse_bytes(msg)
    mp = info.body
    assert mp.params == [("BOUNDARY", "b"), ("Charset", "x")] and mp.boundary == "b"
    (part,) = mp.parts
    assert part.params == [("CharSet", "UTF-8"), ("Format", "flowed")]
    assert part.param("charset") == "UTF-8" and part.param("FORMAT") == "flowed"
    assert part.param("name") is None
    assert part.disposition == ("inline", [("FileName", "a.txt")])
    assert msg[part.body_start:part.body_end] == b"one"
    check_invariants(msg, info)


def test_line_counts_are_line_feeds():
    """body-fld-lines counts line feeds, as Dovecot and UW-IMAP do: text right before a
    boundary (its CRLF belongs to the boundary) or at the end of the message is not a line."""
    msg = crlf("""\
Content-Type: multipart/mixed; boundary=b

--b

See below.
--b

terminated

--b

--b
Content-Type: text/plain

unterminated""")
    info = parse_bytes(msg)
    assert [(msg[p.body_start:p.body_end], p.lines) for p in info.body.parts] == [
        (b"See below.", 0), (b"terminated\r\n", 1), (b"", 0), (b"unterminated", 0)]
    check_invariants(msg, info)
    assert parse_bytes(b"\r\nno line feed").lines == 0
    assert parse_bytes(b"\r\nthree\r\n\r\nlines\r\n").body.lines == 3


def test_old_metadata_still_loads():
    """Metadata stored by earlier versions (an encoding of 7BIT for the default, lower-cased
    parameter names) loads as it was written."""
    old = {"type": "text", "subtype": "plain", "params": [["charset", "us-ascii"]],
           "encoding": "7BIT", "size": 3, "lines": 1, "header_start": 0, "body_start": 2,
           "body_end": 5}
    part = BodyPart.from_json(old)
    assert part.encoding == "7BIT" and part.param("Charset") == "us-ascii"
    assert part.to_json() == old


def test_eight_bit_header():
    """8-bit octets in headers do not raise and come back exactly through latin-1."""
    msg = b"Subject: caf\xc3\xa9 \xff\r\nFrom: J\xf6rg <j@x.example>\r\n" \
          b"Content-Type: text/plain; name=\"\xe9t\xe9.txt\"\r\n\r\nbody"
    info = parse_bytes(msg)
    assert info.envelope.subject.encode("latin-1") == b"caf\xc3\xa9 \xff"
    assert info.envelope.from_[0][0].encode("latin-1") == b"J\xf6rg"
    assert info.body.param("name").encode("latin-1") == b"\xe9t\xe9.txt"
    again = MessageInfo.from_json(json.loads(json.dumps(info.to_json())))
    assert again == info


def test_bare_lf():
    """LF-only messages: LF ends lines, offsets stay exact octet offsets."""
    msg = ALTERNATIVE.replace(b"\r\n", b"\n")
    info = parse_bytes(msg)
    plain, html = info.body.parts
    assert msg[plain.body_start:plain.body_end] == b"plain line one\nplain line two"
    assert msg[html.body_start:html.body_end] == b"<p>html</p>"
    assert info.header_size == msg.index(b"\n\n") + 2
    check_invariants(msg, info)
    mixed = b"Content-Type: multipart/mixed; boundary=x\n\n--x\r\n\r\nA\n--x\n\nB\r\n\r\n--x--"
    info = parse_bytes(mixed)
    assert [mixed[p.body_start:p.body_end] for p in info.body.parts] == [b"A", b"B\r\n"]
    check_invariants(mixed, info)


@pytest.mark.parametrize("msg", [
    b"Subject: a\r\nX: b\r\n\r\nbody\n\nmore\r\n",           # LF LF only in the body
    b"Subject: a\nX: b\n\nbody\r\n\r\nmore\n",                 # CRLF CRLF only in the body
    b"Subject: a\r\nX: b\n\nbody\r\n\r\n",                    # mixed: the LF blank first
    b"Subject: a\nX: b\r\n\r\nbody\n\n",                       # mixed: the CRLF blank first
    b"\r\nbody only", b"\nbody only", b"Subject: no blank line\r\n",
    b"Subject: a\r\n--x\r\n\r\n--x\r\n",                     # no boundary open: plain lines
    b"Subject: a\r\n\r\r\n\r\nbody",                          # CR CR LF is no blank line
    b"Content-Type: message/rfc822\r\n\r\nSubject: in\r\n\r\nbody\r\n",
])
def test_a_whole_header_is_taken_at_once_with_the_same_result(msg):
    """A header whose blank line is in the buffer is stored and counted in one step (the
    common case: a message fed whole); the result must be what line-by-line parsing gives."""
    info = parse_bytes(msg)
    assert feed_split(msg, range(len(msg))) == info
    check_invariants(msg, info)


def test_missing_final_boundary():
    """A missing close delimiter ends parts at the end of the message; a boundary that never
    appears (or is missing) gives a multipart with no children."""
    msg = crlf("Content-Type: multipart/mixed; boundary=b\n\n--b\n\none\n--b\n\ntwo\n")
    info = parse_bytes(msg)
    assert [msg[p.body_start:p.body_end] for p in info.body.parts] == [b"one", b"two\r\n"]
    check_invariants(msg, info)
    for head in (b"Content-Type: multipart/mixed; boundary=nope", b"Content-Type: multipart/mixed"):
        msg = head + b"\r\n\r\n--b\r\n\r\ntext\r\n"
        info = parse_bytes(msg)
        assert info.body.parts == [] and info.body.size == len(msg) - info.header_size
    # A close delimiter right at the end, without CRLF, is still one.
    msg = b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\nx\r\n--b--"
    (part,) = parse_bytes(msg).body.parts
    assert msg[part.body_start:part.body_end] == b"x"


def test_part_header_cut_short_by_boundary():
    """A part whose header never ends: it ends at the next delimiter, with an empty body."""
    msg = b"Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/html\r\n" \
          b"--b\r\n--b\r\n\r\nlast\r\n--b--\r\n"
    info = parse_bytes(msg)
    first, empty, last = info.body.parts
    assert first.subtype == "html" and first.size == 0
    assert msg[first.header_start:first.body_start] == b"Content-Type: text/html"
    assert empty.header_start == empty.body_start == empty.body_end
    assert msg[last.body_start:last.body_end] == b"last"
    check_invariants(msg, info)


def test_blank_line_shared_with_delimiter():
    """One LF ending an encapsulated header and preceding a delimiter stays in the header,
    so the message/rfc822 part still contains its whole message."""
    msg = b"Content-Type: multipart/digest; boundary=d\n\n--d\n\n\n--d--"
    info = parse_bytes(msg)
    (part,) = info.body.parts
    assert msg[part.body_start:part.body_end] == b"\n" and part.lines == 1
    assert part.message.header_size == 1 and part.message.body.size == 0
    check_invariants(msg, info)


def test_deep_nesting_beyond_limit():
    """Past MAX_DEPTH content is opaque: no exception, no Python recursion, bounded depth."""
    depth = MAX_DEPTH * 3
    head = b"".join(b"Content-Type: multipart/mixed; boundary=b%d\r\n\r\n--b%d\r\n" % (i, i)
                    for i in range(depth))
    tail = b"".join(b"\r\n--b%d--" % i for i in reversed(range(depth)))
    msg = head + b"\r\ninnermost\r\n" + tail
    info = parse_bytes(msg)
    assert info.truncated
    levels, part = 0, info.body
    while part.parts:
        levels += 1
        (part,) = part.parts
    assert levels == MAX_DEPTH - 1
    check_invariants(msg, info)

    nested = b"Content-Type: message/rfc822\r\n\r\n" * depth + b"Subject: deep\r\n\r\nx"
    info = parse_bytes(nested)
    assert info.truncated
    check_invariants(nested, info)


def test_part_count_limit():
    """Past MAX_PARTS parts the rest of the multipart is opaque."""
    msg = b"Content-Type: multipart/mixed; boundary=b\r\n\r\n" + b"--b\r\n\r\nx\r\n" * \
        (MAX_PARTS + 50) + b"--b--\r\n"
    info = parse_bytes(msg)
    assert info.truncated and len(info.body.parts) == MAX_PARTS - 1
    check_invariants(msg, info)


def test_memory_is_bounded():
    """Huge bodies, huge lines and huge headers are counted, not kept."""
    chunk = b"A" * 65536
    lines = b"--b is not it\r\n" * 4096
    parser = StructureParser()
    parser.feed(b"Content-Type: multipart/mixed; boundary=b\r\nSubject: " + b"s" * 300_000 +
                b"\r\n\r\n--b\r\n\r\n")
    tracemalloc.start()
    try:
        for _ in range(200):  # a 13 MB line, then 13 MB of short lines
            parser.feed(chunk)
        for _ in range(200):
            parser.feed(lines)
        parser.feed(b"\r\n--b--\r\n")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    info = parser.close()
    assert peak < 2 * 1024 * 1024
    assert info.truncated  # the 300 kB subject was over the header cap
    assert info.body.parts[0].size == 200 * 65536 + 200 * 15 * 4096


def test_header_fields():
    """HEADER.FIELDS needs each field byte for byte, in order, repeats included."""
    block = b"Received: a\r\n\tb\r\nSubject: x\r\nReceived: c\nFrom bad line\r\nX-Y :z\r\n\r\nbody"
    fields = header_fields(block)
    assert fields == [("Received", b"Received: a\r\n\tb\r\n"), ("Subject", b"Subject: x\r\n"),
                      ("Received", b"Received: c\n"), ("", b"From bad line\r\n"),
                      ("X-Y", b"X-Y :z\r\n")]
    assert b"".join(raw for _, raw in fields) == block[:block.index(b"\r\n\r\n") + 2]
    assert header_fields(b"") == [] and header_fields(b"A: b") == [("A", b"A: b")]


def test_json_round_trip():
    """The store keeps MessageInfo as JSON; every value must survive json.dumps/loads."""
    for msg in (SIMPLE, ALTERNATIVE, NESTED, FORWARD, DIGEST):
        info = parse_bytes(msg)
        data = json.loads(json.dumps(info.to_json()))
        assert MessageInfo.from_json(data) == info
        assert BodyPart.from_json(data["body"]) == info.body
        assert Envelope.from_json(data["envelope"]) == info.envelope


# -- properties -------------------------------------------------------------------------------

_LINES = st.sampled_from([b"", b"hello", b"-- ", b"--=_c", b"-", b"  indented", b"x" * 80,
                          b"caf\xc3\xa9", b"From: not a header"])


def _trees():
    leaf = st.tuples(st.just("leaf"), st.sampled_from(["plain", "html"]),
                     st.lists(_LINES, max_size=4))
    return st.recursive(leaf, lambda kids: st.one_of(
        st.tuples(st.just("multi"), st.sampled_from(["mixed", "alternative"]),
                  st.lists(kids, max_size=3), st.booleans(), st.booleans()),
        st.tuples(st.just("msg"), kids)), max_leaves=8)


def render(tree, eol: bytes) -> tuple[bytes, dict]:
    """Serialise a generated tree; return the message and the structure it must parse to."""
    out = bytearray()
    counter = [0]

    def entity(node, extra: list[bytes]) -> dict:
        start = len(out)
        kind = node[0]
        if kind == "leaf":
            own = [b"Content-Type: text/" + node[1].encode()]
        elif kind == "multi":
            counter[0] += 1
            boundary = b"=_b%d" % counter[0]
            own = [b"Content-Type: multipart/" + node[1].encode() + b"; boundary=" + boundary]
        else:
            own = [b"Content-Type: message/rfc822"]
        for line in extra + own:
            out.extend(line + eol)
        out.extend(eol)
        shape = {"subtype": own[0].split(b"/")[1].split(b";")[0].decode(),
                 "hs": start, "bs": len(out)}
        if kind == "leaf":
            out.extend(eol.join(node[2]))
        elif kind == "multi":
            shape["parts"] = []
            if node[3]:
                out.extend(b"preamble" + eol)
            for child in node[2]:
                out.extend(b"--" + boundary + eol)
                shape["parts"].append(entity(child, []))
                out.extend(eol)
            out.extend(b"--" + boundary + b"--")
            if node[4]:
                out.extend(eol + b"epilogue")
        else:
            shape["message"] = entity(node[1], [b"Subject: inner"])
        shape["be"] = len(out)
        return shape

    shape = entity(tree, [b"From: a@b.example", b"Subject: top"])
    return bytes(out), shape


def shape_of(part: BodyPart) -> dict:
    shape = {"subtype": part.subtype, "hs": part.header_start, "bs": part.body_start,
             "be": part.body_end}
    if part.parts is not None:
        shape["parts"] = [shape_of(p) for p in part.parts]
    if part.message is not None:
        shape["message"] = shape_of(part.message.body)
    return shape


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=_trees(), eol=st.sampled_from([b"\r\n", b"\n"]), data=st.data())
def test_generated_messages_parse_exactly(tree, eol, data):
    """Messages built from random MIME trees parse back to exactly the offsets they were built
    with (RFC 2046 boundaries, RFC 3501 sections), whatever the chunking."""
    msg, expected = render(tree, eol)
    info = parse_bytes(msg)
    assert shape_of(info.body) == expected
    check_invariants(msg, info)
    cuts = data.draw(st.lists(st.integers(0, len(msg)), max_size=12))
    assert feed_split(msg, cuts) == info
    assert feed_split(msg, range(len(msg))) == info  # one octet at a time
    assert MessageInfo.from_json(json.loads(json.dumps(info.to_json()))) == info


_NOISE = st.sampled_from([
    b"\r\n", b"\n", b"\r", b"--", b"--b", b"--b--", b"--=_b1", b"--=_b1--", b": ", b"\x00",
    b"\xff", b" ", b"(", b'"', b"<a@b>", b"Content-Type: multipart/mixed; boundary=b",
    b"Content-Type: message/rfc822", b"Content-Type: multipart/digest; boundary==_b1"])


@settings(max_examples=300, deadline=None)
@given(chunks=st.lists(st.one_of(_NOISE, st.binary(max_size=20)), max_size=40), data=st.data())
def test_random_bytes_never_raise_and_split_invariant(chunks, data):
    """Any input parses, keeps its invariants, and parses identically however it is split."""
    msg = b"".join(chunks)
    info = parse_bytes(msg)
    check_invariants(msg, info)
    cuts = data.draw(st.lists(st.integers(0, len(msg)), max_size=10))
    assert feed_split(msg, cuts) == info
    assert MessageInfo.from_json(json.loads(json.dumps(info.to_json()))) == info


@settings(max_examples=100, deadline=None)
@given(tree=_trees(), data=st.data())
def test_mutated_messages_never_raise(tree, data):
    """Real structure with random damage (cuts, inserted noise) still parses."""
    msg, _ = render(tree, b"\r\n")
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(msg)))
        if data.draw(st.booleans()):
            msg = msg[:at] + data.draw(_NOISE) + msg[at:]
        else:
            msg = msg[:at] + msg[at + data.draw(st.integers(0, 30)):]
    info = parse_bytes(msg)
    check_invariants(msg, info)
    cuts = data.draw(st.lists(st.integers(0, len(msg)), max_size=8))
    assert feed_split(msg, cuts) == info



def test_repeated_address_fields_are_merged():
    """RFC 3501 7.4.2 / RFC 5322 3.6: a message with several To:/Cc:/Bcc:/From:/Sender:/
    Reply-To: lines (each allowed once) lists the addresses of all of them, in order, so that
    no recipient is lost from ENVELOPE (Dovecot does the same); other fields keep the first."""
    info = parse_bytes(b"From: f@x\r\nCc: a@x\r\nTo: t1@x\r\nCC: b@x, grp: g@x;\r\n"
                       b"Subject: one\r\nSubject: two\r\ncc: c@x\r\nTO: t2@x\r\nFrom: \r\n"
                       b"Bcc: \r\nReply-To: r@x\r\nreply-to: s@x\r\n\r\nbody\r\n")
    env = info.envelope
    assert env.cc == [(None, None, "a", "x"), (None, None, "b", "x"),
                      (None, None, "grp", None), (None, None, "g", "x"), GROUP_END,
                      (None, None, "c", "x")]
    assert env.to == [(None, None, "t1", "x"), (None, None, "t2", "x")]
    assert env.from_ == env.sender == [(None, None, "f", "x")]
    assert env.reply_to == [(None, None, "r", "x"), (None, None, "s", "x")]
    assert env.bcc is None and env.subject == "one"


@pytest.mark.parametrize("value, expected", [
    ("(only a comment) bare@example.com", [(None, None, "bare", "example.com")]),
    ("(lead) plain@example.com (trail)", [("trail", None, "plain", "example.com")]),
    ("(before) local (inside) @ x.test", [("inside", None, "local", "x.test")]),
    ("(note) lonely", [(None, None, "lonely", "")]),
])
def test_a_comment_before_an_address_is_not_its_name(value, expected):
    """RFC 5322 3.4: the old ``addr-spec (Name)`` style names an address by a comment in or
    after it; a comment before the address is only a comment (Dovecot reads it so too)."""
    assert parse_address_list(value) == expected
