"""A corpus of awkward messages for FETCH rendering tests, with the sections worth fetching.

Each :class:`Sample` is a raw message (written in the source with ``\\n`` line ends and turned
into CRLF unless it is the bare-LF sample) plus the section specs (the text inside
``BODY[...]``) that exercise its structure: part numbers down to the deepest, ``.MIME`` of
each, ``.HEADER``/``.TEXT`` of encapsulated messages, header field subsets and a part that does
not exist.  The cases follow RFC 2045/2046 (defaults, multipart, digest, message/rfc822),
RFC 5322 (groups, obsolete routes, comments), RFC 2047/2231 (left encoded) and what turns up
in real mailboxes (8-bit headers, parameters without ``=``, no boundary, bare LF).
"""

from __future__ import annotations

from dataclasses import dataclass, field


def crlf(text: str) -> bytes:
    """The message text with CRLF line ends, octets as latin-1 code points (8-bit kept)."""
    return text.replace("\n", "\r\n").encode("latin-1")


def utf8(text: str) -> str:
    """``text``'s UTF-8 octets as latin-1 code points, for raw 8-bit headers in a sample."""
    return text.encode("utf-8").decode("latin-1")


@dataclass(frozen=True)
class Sample:
    name: str
    raw: bytes
    sections: tuple[str, ...] = ()
    partials: tuple[tuple[int, int], ...] = ()
    """``BODY.PEEK[]<offset.length>`` requests worth making."""
    fields: tuple[str, ...] = field(default=("FROM", "TO", "SUBJECT"))
    """Field names for the HEADER.FIELDS and HEADER.FIELDS.NOT requests."""


SAMPLES: list[Sample] = []


def sample(name: str, raw: bytes, *sections: str, partials=(), fields=None) -> None:
    kwargs = {"fields": tuple(fields)} if fields else {}
    SAMPLES.append(Sample(name, raw, tuple(sections), tuple(partials), **kwargs))


sample("plain", crlf("""\
Return-Path: <alice@example.com>
Received: from mx1.example.com by mx2.example.com; Sat, 21 Nov 2026 11:59:59 +0000
Received: from client.example.com
\tby mx1.example.com; Sat, 21 Nov 2026 11:59:58 +0000
Date: Sat, 21 Nov 2026 12:00:00 +0000
From: Alice Example <alice@example.com>
Sender: secretary@example.com
Reply-To: replies@example.com
To: Bob <bob@example.org>, carol@example.org,
  "Dave, Jr." <dave@example.org>
Cc: eve@example.net
Bcc: mallory@example.net
Subject: Lunch
 on Friday
In-Reply-To: <earlier@example.com>
Message-ID: <plain-1@example.com>
MIME-Version: 1.0
Content-Type: text/plain; charset=us-ascii; format=flowed

Hi Bob,

Lunch on Friday?
--\x20
Alice
"""), "1", "1.MIME", "2", "1.1", "TEXT", "HEADER", "1.HEADER", "1.TEXT",
    partials=((0, 10), (5, 0), (100, 1000), (10_000, 10), (0, 1)),
    fields=("received", "From", "TO", "Subject", "X-Missing"))

sample("mixed-attachment", crlf("""\
From: sender@example.com
To: rcpt@example.com
Subject: report
Date: Fri, 20 Nov 2026 09:15:00 -0500
Message-ID: <mixed@example.com>
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="==outer=="

This is a multi-part message in MIME format.

--==outer==
Content-Type: text/plain; charset="ISO-8859-1"
Content-Transfer-Encoding: quoted-printable

The report is attached.=0D
Caf=E9.
--==outer==
Content-Type: application/pdf; name="report (1).pdf"
Content-Transfer-Encoding: base64
Content-Disposition: attachment;
 filename="report (1).pdf"; size=12
Content-ID: <part1@example.com>
Content-Description: The report
Content-MD5: Q2hlY2sgSW50ZWdyaXR5IQ==
Content-Language: en, de (German)
Content-Location: http://example.com/report.pdf

SGVsbG8gV29ybGQh
--==outer==--
epilogue text
"""), "1", "2", "1.MIME", "2.MIME", "3", "2.1", "TEXT", "HEADER", "1.TEXT", "2.HEADER",
    partials=((0, 100), (200, 50)))

sample("alternative-nested", crlf("""\
From: "Newsletter" <news@example.com>
To: undisclosed-recipients:;
Subject: =?UTF-8?B?w5xiZXIgdW5z?= and =?ISO-8859-1?Q?caf=E9?=
Date: Thu, 19 Nov 2026 08:00:00 +0100
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary=outer

--outer
Content-Type: multipart/alternative; boundary="inner"

--inner
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: 8bit

""" + utf8("Grüße aus Köln\n") + """
--inner
Content-Type: text/html; charset=utf-8

<p>hello</p>
--inner--

--outer
Content-Type: image/png; name=logo.png
Content-Transfer-Encoding: base64
Content-Disposition: inline; filename=logo.png
Content-ID: <logo@example.com>

iVBORw0KGgo=
--outer--
"""), "1", "1.1", "1.2", "1.1.MIME", "1.2.MIME", "1.MIME", "2", "2.MIME", "1.3", "1.1.1")

sample("rfc822-in-multipart", crlf("""\
From: forwarder@example.com
To: friend@example.org
Subject: Fwd: the original
Date: Wed, 18 Nov 2026 18:30:00 +0000
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="fwd"

--fwd
Content-Type: text/plain

See below.
--fwd
Content-Type: message/rfc822
Content-Description: forwarded message
Content-Disposition: inline

From: Original <orig@example.net>
To: forwarder@example.com
Subject: the original
Date: Tue, 17 Nov 2026 10:00:00 +0000
Message-ID: <orig@example.net>
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary="orig-alt"

--orig-alt
Content-Type: text/plain; charset=us-ascii

original text
--orig-alt
Content-Type: text/html; charset=us-ascii

<p>original text</p>
--orig-alt--

--fwd--
"""), "1", "2", "2.MIME", "2.HEADER", "2.TEXT", "2.1", "2.2", "2.1.MIME", "2.2.MIME",
    "2.HEADER.FIELDS (SUBJECT from)", "2.HEADER.FIELDS.NOT (Subject)", "2.3", "2.1.1",
    "2.1.HEADER", "2.1.TEXT", "1.HEADER", "2.2.MIME")

sample("rfc822-top-level", crlf("""\
From: bounce@example.com
To: user@example.com
Subject: forwarded as a whole
MIME-Version: 1.0
Content-Type: message/rfc822

From: Inner <inner@example.com>
To: user@example.com
Subject: inner message
Message-ID: <inner@example.com>

Inner body line 1
Inner body line 2
"""), "1", "1.MIME", "1.HEADER", "1.TEXT", "1.1", "1.1.MIME", "HEADER", "TEXT", "2",
    "1.HEADER.FIELDS (TO)", "1.2")

sample("rfc822-nested-twice", crlf("""\
From: a@example.com
Subject: outer
Content-Type: multipart/mixed; boundary=b1

--b1
Content-Type: message/rfc822

From: b@example.com
Subject: middle
Content-Type: multipart/mixed; boundary=b2

--b2
Content-Type: text/plain

middle text
--b2
Content-Type: message/rfc822

From: c@example.com
Subject: innermost
Content-Type: text/plain; charset=utf-8

innermost text
--b2--

--b1--
"""), "1", "1.HEADER", "1.TEXT", "1.1", "1.2", "1.2.HEADER", "1.2.TEXT", "1.2.1",
    "1.2.MIME", "1.2.1.MIME", "1.2.HEADER.FIELDS (SUBJECT)", "1.1.MIME")

sample("charsets", crlf("""\
From: =?KOI8-R?B?7sHUwczY0Q==?= <natalya@example.ru>
To: =?ISO-2022-JP?B?GyRCJUYlOSVIGyhC?= <tanaka@example.jp>
Subject: =?windows-1252?Q?Caf=E9_=80?=
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary=cs

--cs
Content-Type: text/plain; Charset=KOI8-R
Content-Transfer-Encoding: 8bit

\xf0\xd2\xc9\xd7\xc5\xd4
--cs
Content-Type: TEXT/HTML; CHARSET="Windows-1252"; Format=Flowed
Content-Transfer-Encoding: Quoted-Printable

Caf=E9
--cs
Content-Type: text/plain; charset=unknown-8bit
Content-Transfer-Encoding: BASE64

w6k=
--cs--
"""), "1", "2", "3", "1.MIME", "2.MIME")

sample("missing-headers", crlf("""\
Subject: no date, no from, no content-type

Just a body.
"""), "1", "1.MIME", "HEADER", "TEXT", fields=("DATE", "FROM", "SUBJECT"))

sample("no-header-at-all", crlf("""\

Only a body after an empty header.
"""), "1", "HEADER", "TEXT", "1.MIME")

sample("groups-and-routes", crlf("""\
From: Mary Smith <@relay1.example,@relay2.example:mary@x.test>
Sender: mary@x.test (Mary Smith)
To: A Group:Ed Jones <c@a.test>,joe@where.test,John <jdoe@one.test>;
Cc: Undisclosed recipients:;, "Quoted \\"Name\\"" <q@example.com>
Bcc: local-only, <no-domain>, Pete(A nice \\) chap) <pete(his account)@silly.test(his host)>
Reply-To: "Giant; \\"Big\\" Box" <sysservices@example.net>
Subject: groups
Message-ID: <groups@example.com>

body
"""), "1", fields=("From", "Bcc"))

sample("8bit-headers", crlf(
    "From: " + utf8("Jürgen Müller") + " <juergen@example.de>\n"
    "To: " + utf8("\"Zoë\"") + " <zoe@example.com>\n"
    "Subject: " + utf8("Größe: 10€ — ça marche") + "\n"
    "Content-Type: text/plain; charset=utf-8; name=" + utf8("résumé.txt") + "\n"
    "Content-Transfer-Encoding: 8bit\n"
    "\n"
    + utf8("Größe: 10€\n")), "1", "1.MIME", "HEADER", fields=("subject", "from"))

sample("malformed-params", crlf("""\
From: odd@example.com
Subject: odd parameters
Content-Type: multipart/mixed; boundary=mp; junk

--mp
Content-Type: text/plain; charset; format=flowed; =novalue; name=report(1).pdf
Content-Disposition: attachment; filename

text part
--mp
Content-Type: application/octet-stream; name="unterminated
Content-Disposition: inline; FileName="a b.bin"; SIZE=3

abc
--mp
Content-Type: text/plain; charset="us-ascii" (a comment); delsp=yes
Content-Language: en
Content-Disposition: ATTACHMENT

x
--mp--
"""), "1", "2", "3", "1.MIME", "2.MIME", "3.MIME")

sample("rfc2231", crlf("""\
From: a@example.com
Subject: long file names
Content-Type: multipart/mixed; boundary=r

--r
Content-Type: application/x-stuff;
 title*0*=us-ascii'en'This%20is%20even%20more%20;
 title*1*=%2A%2A%2Afun%2A%2A%2A%20;
 title*2="isn't it!"
Content-Disposition: attachment; filename*=utf-8''%E2%82%AC%20rates.txt

data
--r--
"""), "1", "1.MIME")

sample("spelling", crlf("""\
From: a@example.com
Subject: encodings and parameter names as written, lines without a line feed
Content-Type: Multipart/Mixed; BOUNDARY="s"

--s
Content-Type: text/plain; CharSet=us-ascii
Content-Transfer-Encoding: 7BIT

See below.
--s
Content-Type: text/plain
Content-Transfer-Encoding: 8Bit

first line
no line feed at the end either
--s
Content-Type: application/x-stuff; Title*0="Part ";
 title*1="two"; NAME*1=b; Name*0=a; name*1=c
Content-Transfer-Encoding: Base64

ZGF0YQ==
--s
Content-Type: text/plain

last part, unterminated"""), "1", "2", "3", "4", "1.MIME", "3.MIME")

sample("digest", crlf("""\
From: list@example.com
Subject: digest of the week
MIME-Version: 1.0
Content-Type: multipart/digest; boundary="---- next message ----"

preamble

------ next message ----

From: one@example.com
Subject: first

first body
------ next message ----

From: two@example.com
Subject: second
Content-Type: text/plain

second body
------ next message ----
Content-Type: text/plain

explicitly text
------ next message ------
"""), "1", "2", "3", "1.HEADER", "1.TEXT", "1.1", "2.1", "1.MIME", "3.MIME")

sample("bare-lf", (
    b"From: lf@example.com\nTo: someone@example.com\nSubject: bare line feeds\n"
    b"Content-Type: multipart/mixed; boundary=lf\n\n--lf\nContent-Type: text/plain\n\n"
    b"line one\nline two\n--lf\nContent-Type: text/plain\n\nsecond\n--lf--\n"),
    "1", "2", "1.MIME", "TEXT", "HEADER")

sample("deep", crlf("""\
From: deep@example.com
Subject: deep nesting
Content-Type: multipart/mixed; boundary=L1

--L1
Content-Type: multipart/mixed; boundary=L2

--L2
Content-Type: multipart/alternative; boundary=L3

--L3
Content-Type: text/plain

deepest plain
--L3
Content-Type: multipart/related; boundary=L4; type="text/html"

--L4
Content-Type: text/html

<img src="cid:x">
--L4
Content-Type: image/gif
Content-ID: <x>
Content-Transfer-Encoding: base64

R0lGODlhAQABAAAAACw=
--L4--
--L3--
--L2
Content-Type: text/plain

second of L2
--L2--
--L1
Content-Type: text/plain

last
--L1--
"""), "1", "1.1", "1.1.1", "1.1.2", "1.1.2.1", "1.1.2.2", "1.1.2.2.MIME", "1.2", "2",
    "1.1.2.3", "1.1.1.1", "1.1.2.MIME", "1.MIME")

sample("no-boundary", crlf("""\
From: broken@example.com
Subject: multipart without its boundary
Content-Type: multipart/mixed; boundary=never-used

this text never sees its boundary
"""), "1", "TEXT", "1.MIME")

sample("boundary-missing-param", crlf("""\
From: broken@example.com
Subject: multipart without a boundary parameter
Content-Type: multipart/alternative

text
"""), "1", "TEXT")

sample("rfc822-base64", crlf("""\
From: a@example.com
Subject: encapsulated but encoded
Content-Type: multipart/mixed; boundary=e

--e
Content-Type: message/rfc822
Content-Transfer-Encoding: base64

RnJvbTogaW5uZXJAZXhhbXBsZS5jb20NClN1YmplY3Q6IGVuY29kZWQNCg0KYm9keQ0K
--e--
"""), "1", "1.MIME", "1.HEADER", "1.TEXT", "1.1")

sample("quotes-in-strings", crlf("""\
From: "Back\\\\slash" <b@example.com>
Subject: He said "hi" \\o/
Message-ID: <"quoted"@example.com>
Content-Type: text/plain; name="a \\"quoted\\" name"

x
"""), "1")

sample("empty-and-odd-fields", crlf("""\
From:\x20
To: someone
Cc: ,,
Subject:
Date: not a date at all
Message-ID:    <spaces@example.com>\x20\x20\x20
In-Reply-To: <a@example.com> <b@example.com>
Content-Type: text/plain
Content-Transfer-Encoding: 7bit
X-Repeated: one
x-repeated: two
X-REPEATED: three

body without final newline"""), "1", "TEXT", fields=("x-repeated", "subject", "cc"))

sample("long-folded-header", crlf(
    "From: fold@example.com\n"
    "Subject: " + " ".join(f"word{i}" for i in range(40)) + "\n"
    "References: " + "\n ".join(f"<ref{i}@example.com>" for i in range(12)) + "\n"
    "Content-Type: text/plain;\n charset=utf-8;\n\tformat=flowed\n"
    "\n" + "x" * 3000 + "\n"), "1", "1.MIME", partials=((0, 2048), (3000, 500)),
    fields=("References", "content-type"))

sample("header-only", crlf("""\
From: header@example.com
Subject: a message that is all header, without the blank line
"""), "1", "HEADER", "TEXT", "1.MIME", fields=("subject",))

sample("nul-octet",
       b"From: nul@example.com\r\nSubject: a NUL in the body\r\n\r\nbefore\x00after\r\n",
       "1", "TEXT", partials=((30, 30),))

# RFC 5322 3.6 allows each of these once; a message with several To:/Cc:/Bcc: lines still
# reaches every recipient, and ENVELOPE lists them all (as Dovecot does).
sample("repeated-address-fields", crlf("""\
Date: Mon, 2 Feb 2026 10:00:00 +0000
Date: Tue, 3 Feb 2026 10:00:00 +0000
From: first@example.com
FROM: "Second, From" <second@example.com>
Sender: s1@example.com
sender: s2@example.com
Reply-To: r1@example.com
REPLY-TO: r2@example.com
To: a@example.com, B <b@example.com>
TO: grp: c@example.com, d@example.com;
to: e@example.com
Cc: a@x.test
CC: b@x.test
cc: c@x.test
Bcc: bcc1@example.com
BCC: bcc2@example.com
Subject: first subject
Subject: second subject
Message-ID: <first@example.com>
Message-ID: <second@example.com>
In-Reply-To: <irt1@example.com>
In-Reply-To: <irt2@example.com>

body
"""), "1", fields=("to", "cc", "bcc"))

sample("address-comments", crlf("""\
From: <user-from (comment)@ (comment) domain.org>
To: Joe Q (the man) <joe (c1).q @ (c2) example
 .com>, (lead) plain@example.com (trail)
Cc: "Quoted (not a comment)" <q@example.com> (real comment)
Bcc: (only a comment) bare@example.com, (before) local (inside) @ x.test (after)
Subject: comments in addresses

body
"""), "1", fields=("from", "to"))
