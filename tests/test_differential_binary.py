"""Differential scripts for BINARY (RFC 3516) against Dovecot.

Debian's Dovecot 2.3.19 advertises BINARY, so FETCH BINARY[]/BINARY.PEEK[]/BINARY.SIZE[] and
APPEND with literal8 are compared here: base64, quoted-printable and identity parts, nested
parts, BINARY[] of whole messages and of multipart and message/rfc822 parts (both servers
rewrite each decoded leaf's Content-Transfer-Encoding to ``binary``), partials of the decoded
octets, parts that do not exist, UNKNOWN-CTE, \\Seen, literal8 where it is not allowed, and the
1 MiB streaming threshold of a decoded part.

A literal8 and a literal compare equal when the octets do (tests/differential.py): RFC 3516
4.2 requires literal8 only for octets holding NUL, and Dovecot uses it for every decoded part;
tests/test_imap_binary.py checks that ours holds NUL exactly when it says ``~{n}``.

Differences kept on purpose (tests/differential_known.py): ``binary-append-stored-as-sent``
(BODY[] of a message APPENDed as literal8: Dovecot re-encodes its binary parts in base64, we
keep the octets sent), ``binary-section-grammar`` (BINARY[1.MIME], BINARY[HEADER],
BINARY[TEXT] and BINARY.SIZE with a partial are outside RFC 3516's grammar: BAD here, Dovecot
answers them) and ``dovecot-unknown-cte-uid`` (Dovecot answers a BINARY.SIZE it cannot decode
with a FETCH holding only the UID).
"""

from __future__ import annotations

import base64
import quopri
import random

import pytest
from differential import Script, append, date, lit, lit8, plus, servers

SCRIPTS: list[Script] = []


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-binary")) as pair:
        yield pair


def crlf(data: bytes) -> bytes:
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def b64(data: bytes) -> bytes:
    return crlf(base64.encodebytes(data))


RANDOM = random.Random(3516).randbytes(2000)
QP_TEXT = "Caf\xe9 au lait, tr\xe8s bien = ok\n\tna\xefve\x00fin\n".encode("latin-1") * 4
MESSAGES = [
    crlf(b"Subject: b64\nContent-Type: application/octet-stream\n"
         b"Content-Transfer-Encoding: base64\n\n") + b64(RANDOM),
    crlf(b"Subject: qp\nContent-Type: text/plain; charset=iso-8859-1\n"
         b"Content-Transfer-Encoding: Quoted-Printable\n\n") + crlf(quopri.encodestring(QP_TEXT)),
    crlf(b"Subject: mixed\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=b\n\n"
         b"preamble\n--b\nContent-Type: text/plain\nContent-Transfer-Encoding: base64\n\n"
         b"aGVsbG8gd29ybGQ=\n--b\nContent-Type: message/rfc822\n\nSubject: inner\n"
         b"Content-Type: multipart/alternative; boundary=c\n\n--c\n"
         b"Content-Type: text/plain\nContent-Transfer-Encoding: quoted-printable\n\n"
         b"na=C3=AFve=\nly\n--c\nContent-Type: text/html\nContent-Transfer-Encoding: 8bit\n\n"
         b"<p>gr\xc3\xbc\xc3\x9fe</p>\n--c--\n--b\nContent-Type: image/png\n"
         b"Content-Transfer-Encoding: BASE64\n\n") + b64(RANDOM[:300]) + b"--b--\r\nepilogue\r\n",
    crlf(b"Subject: plain\n\nNothing encoded here.\n"),
    crlf(b"Subject: uu\nContent-Type: text/plain\nContent-Transfer-Encoding: x-uuencode\n\n"
         b"begin 644 x\n`\nend\n"),
    crlf(b"Subject: noisy\nContent-Type: application/octet-stream\n"
         b"Content-Transfer-Encoding: base64\n\nAAEC\n  AwQF*!\nBgcI\n\nCQ=\n=\n"),
]
BINARY_MESSAGE = (b"Subject: binary\r\nContent-Type: application/octet-stream\r\n"
                  b"Content-Transfer-Encoding: binary\r\n\r\nab\x00cd\xff\xfe\x80\r\nend\r\n")


def seed() -> list:
    return [("A", append("INBOX", raw, "", date(n))) for n, raw in enumerate(MESSAGES, 1)]


def script(name: str, steps: list, **kw) -> None:
    SCRIPTS.append(Script(name, steps, **kw))


script("binary-leaf-parts", [
    *seed(), ("A", "SELECT INBOX"),
    ("A", "FETCH 1 (BINARY.PEEK[1] BINARY.SIZE[1])"),
    ("A", "FETCH 2 (BINARY.PEEK[1] BINARY.SIZE[1])"),
    ("A", "FETCH 3 (BINARY.PEEK[1] BINARY.PEEK[2.1] BINARY.PEEK[2.2] BINARY.PEEK[3] "
          "BINARY.SIZE[1] BINARY.SIZE[2.1] BINARY.SIZE[2.2] BINARY.SIZE[3])"),
    ("A", "FETCH 4 (BINARY.PEEK[1] BINARY.SIZE[1])"),
    ("A", "FETCH 6 (BINARY.PEEK[1] BINARY.SIZE[1])"),
    ("A", "UID FETCH 1:4 BINARY.SIZE[1]"),
    ("A", "FETCH 1:4 FLAGS"),
], deliberate=("dovecot-strict-base64",),
   doc="RFC 3516 4.2: BINARY of a leaf part is its body with base64 or quoted-printable "
       "undone (7bit/8bit passed through); BINARY.SIZE its decoded size; PEEK sets no \\Seen.")

script("binary-whole-and-nested", [
    *seed(), ("A", "SELECT INBOX"),
    ("A", "FETCH 1 (BINARY.PEEK[] BINARY.SIZE[])"),
    ("A", "FETCH 3 (BINARY.PEEK[] BINARY.SIZE[])"),
    ("A", "FETCH 3 (BINARY.PEEK[2] BINARY.SIZE[2])"),
    ("A", "FETCH 4 BINARY.PEEK[]"),
    ("A", "FETCH 3 (BINARY.PEEK[4] BINARY.PEEK[2.3] BINARY.PEEK[1.1] BINARY.SIZE[9])"),
], deliberate=("dovecot-binary-rfc822-part",),
   doc="RFC 3516 section 8: section-binary may be empty; BINARY[] of a message (and of a "
       "message/rfc822 part) is the entity with each encoded leaf decoded and labelled "
       "binary, as Dovecot answers; a part that does not exist is the empty string.")

script("binary-partial", [
    *seed(), ("A", "SELECT INBOX"),
    ("A", "FETCH 1 (BINARY.PEEK[1]<0.10> BINARY.PEEK[1]<1990.100> BINARY.PEEK[1]<2000.5>)"),
    ("A", "FETCH 2 BINARY.PEEK[1]<5.20>"),
    ("A", "FETCH 3 BINARY.PEEK[]<100.50>"),
], doc="RFC 3516 4.2: <origin.length> counts the decoded octets.")

script("binary-seen", [
    *seed(), ("A", "SELECT INBOX"),
    ("A", "FETCH 1 BINARY[1]<0.4>"), ("A", "FETCH 2 BINARY.SIZE[1]"), ("A", "FETCH 1:2 FLAGS"),
    ("B", "EXAMINE INBOX"), ("B", "FETCH 4 BINARY[1]"), ("B", "FETCH 4 FLAGS"),
], doc="RFC 3516 4.2: BINARY sets \\Seen as BODY[] does (not in a read-only mailbox); "
       "BINARY.SIZE does not.")

script("binary-unknown-cte", [
    *seed(), ("A", "SELECT INBOX"),
    ("A", "FETCH 5 BINARY.PEEK[1]"),
    ("A", "FETCH 4:5 BINARY.PEEK[1]"),
    ("A", "FETCH 5 BINARY.SIZE[1]"),
    ("A", "FETCH 5 BINARY.PEEK[]"),
    ("A", "FETCH 5 BODY.PEEK[1]"),
], deliberate=("dovecot-unknown-cte-uid",),
   doc="RFC 3516 4.2: an encoding the server cannot decode: NO [UNKNOWN-CTE]; the other "
       "messages are answered.")

script("binary-bad-sections", [
    *seed(), ("A", "SELECT INBOX"),
    ("A", "FETCH 3 BINARY.PEEK[1.MIME]"), ("A", "FETCH 3 BINARY.PEEK[HEADER]"),
    ("A", "FETCH 3 BINARY.PEEK[TEXT]"), ("A", "FETCH 1 BINARY.SIZE[1]<0.2>"),
    ("A", "FETCH 1 BINARY[x]"), ("A", "FETCH 1:3 FLAGS"),
], deliberate=("binary-section-grammar",),
   doc="RFC 3516 section 8: section-binary is [section-part] only; BINARY.SIZE takes no "
       "partial.")

script("binary-append-literal8", [
    ("A", ("APPEND INBOX ", lit8(BINARY_MESSAGE))),
    ("A", ("APPEND INBOX (\\Seen) ", lit8(MESSAGES[0], plus=True))),
    ("A", "SELECT INBOX"),
    ("A", "FETCH 1 (BINARY.PEEK[] BINARY.PEEK[1] BINARY.SIZE[1] BINARY.SIZE[])"),
    ("A", "FETCH 1 (BODY.PEEK[] RFC822.SIZE)"),
    ("A", "FETCH 2 (BINARY.PEEK[1] BODY.PEEK[1])"),
], deliberate=("binary-append-stored-as-sent",),
   doc="RFC 3516 4.3: APPEND takes a literal8 holding binary content (NUL included); BINARY "
       "gives the octets back.")

script("binary-literal8-elsewhere", [
    ("A", ("SEARCH TEXT ", lit8(b"x", plus=True))),
    ("B", ("LIST \"\" ", lit8(b"*", plus=True))),
    ("C", ("SELECT ", lit8(b"INBOX"))),
    ("D", ("APPEND INBOX ", lit(b"Subject: x\r\n\r\nplain\r\n"))),
    ("D", "NOOP"),
], deliberate=("refuse-after-literal",),
   doc="RFC 3516 section 8 (RFC 4466 2.3): literal8 only as APPEND's message; elsewhere BAD.")


def big(size: int, seed: int) -> bytes:
    payload = random.Random(seed).randbytes(size)
    return (crlf(b"Subject: big\nContent-Type: application/octet-stream\n"
                 b"Content-Transfer-Encoding: base64\n\n") + b64(payload))


script("binary-stream-threshold", [
    ("A", ("APPEND INBOX ", plus(big(1024 * 1024, 1)))),
    ("A", ("APPEND INBOX ", plus(big(1024 * 1024 + 1, 2)))),
    ("A", "SELECT INBOX"),
    ("A", "FETCH 1:2 (BINARY.SIZE[1] BINARY.PEEK[1])"),
    ("A", "FETCH 2 BINARY.PEEK[1]<1048575.10>"),
], doc="Both sides of our 1 MiB streaming threshold for a decoded part (1,048,576 and "
       "1,048,577 octets): the same octets as Dovecot's.")


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_script(differential, script):
    """Our answers equal Dovecot's, after normalising what the RFCs leave to the server."""
    differential.run(script)
