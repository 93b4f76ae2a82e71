"""Differential scripts for STATUS=SIZE, SAVEDATE and PREVIEW against Dovecot.

Debian's Dovecot 2.3.19 advertises ``STATUS=SIZE``, ``SAVEDATE`` and ``PREVIEW`` (and the
older ``PREVIEW=FUZZY``/``SNIPPET=FUZZY``), so these are compared here.  It does not implement
OBJECTID (RFC 8474): it answers BAD to FETCH EMAILID and STATUS MAILBOXID, so there is nothing
to compare for it; the harness drops our MAILBOXID codes (docs/differential.md) and
tests/test_imap_objectid.py checks OBJECTID against the RFC's examples instead.

Differences kept on purpose (tests/differential_known.py): ``preview-stored-at-append`` (our
PREVIEW (LAZY) has the preview at once: it was computed when the message was stored; Dovecot
computes it on the first PREVIEW without LAZY) and ``dovecot-digest-preview`` (a digest's
untyped part is message/rfc822, which Dovecot's preview reads as text).  Ids and save dates
are the servers' own (save dates within a day of the run compare equal, as INTERNALDATE does).
"""

from __future__ import annotations

import pytest
from corpus import SAMPLES
from differential import Script, append, date, servers

SCRIPTS: list[Script] = []


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-objectid")) as pair:
        yield pair


def crlf(text: str) -> bytes:
    return text.replace("\n", "\r\n").encode("utf-8")


MESSAGES = [
    crlf("From: a@example.com\nSubject: hi\nMessage-ID: <m1@x>\n\n"
         "Hello   world\n> quoted\nline two\n"),
    crlf("From: a@example.com\nSubject: mp\nMIME-Version: 1.0\n"
         "Content-Type: multipart/alternative; boundary=b\n\n--b\nContent-Type: text/html\n\n"
         "<p>Hi <b>there</b> &amp; you</p>\n--b--\n"),
    crlf("From: a@example.com\nSubject: enc\nMIME-Version: 1.0\n"
         "Content-Type: text/plain; charset=iso-8859-1\n"
         "Content-Transfer-Encoding: quoted-printable\n\nCaf=E9 au lait\n\n-- \nsig here\n"),
    crlf("Subject: empty\n\n"),
    crlf("Subject: long\n\n" + "word " * 100 + "\n"),
    crlf("Subject: img\nContent-Type: image/png\n\nAAAA\n"),
    crlf("Subject: tabs\n\n\t lead\t\ttab\n\n\nnext para é\n"),
    crlf("Subject: b64\nContent-Type: text/plain; charset=utf-8\n"
         "Content-Transfer-Encoding: base64\n\nSGVsbG8gd29ybGQsIGNhZsOpIQ==\n"),
    crlf("Subject: html\nContent-Type: text/html; charset=utf-8\n\n<html><head><title>T</title>"
         "<style>x {}</style></head><body><!-- a comment --><div>Line&nbsp;one<br>Line two "
         "&lt;3 &eacute;&#233;</div><script>var x = 1;</script><p>end</p></body></html>\n"),
    crlf("Subject: utf8 long\nContent-Type: text/plain; charset=utf-8\n\n" + "é" * 300 + "\n"),
    crlf("Subject: reply\n\nOn Monday, someone wrote:\n> old text\n>> older\n  > indented\n"
         "new text\n"),
]


def seed(mailbox: str = "INBOX") -> list:
    return [("A", append(mailbox, raw, "", date(n))) for n, raw in enumerate(MESSAGES, 1)]


def script(name: str, steps: list, **kw) -> None:
    SCRIPTS.append(Script(name, steps, **kw))


script("status-size", [
    ("A", "STATUS INBOX (SIZE)"),
    *seed(),
    ("A", "STATUS INBOX (MESSAGES SIZE UIDNEXT)"),
    ("A", 'LIST "" % RETURN (STATUS (SIZE MESSAGES))'),
    ("A", "SELECT INBOX"), ("A", "COPY 1:3 Trash"), ("A", "MOVE 4 Archive"),
    ("A", "STORE 5 +FLAGS (\\Deleted)"), ("A", "EXPUNGE"),
    ("B", "STATUS INBOX (SIZE)"), ("B", "STATUS Trash (SIZE)"), ("B", "STATUS Archive (SIZE)"),
    ("B", "STATUS INBOX (SIZES)"),
], deliberate=("list-extra-attributes",),
    doc="RFC 8438 section 3: SIZE is the sum of the messages' RFC822.SIZE, in STATUS and "
        "LIST-STATUS, kept through COPY, MOVE and EXPUNGE.")

script("savedate", [
    *seed(),
    ("A", "SELECT INBOX"),
    ("A", "FETCH 1:* (SAVEDATE INTERNALDATE)"), ("A", "UID FETCH 1:2 SAVEDATE"),
    ("A", "SEARCH SAVEDATESUPPORTED"), ("A", "SEARCH SAVEDBEFORE 1-Jan-2020"),
    ("A", "SEARCH SAVEDSINCE 1-Jan-2020"), ("A", "SEARCH SAVEDON 1-Jan-2020"),
    ("A", "SEARCH NOT SAVEDSINCE 1-Jan-2020"), ("A", "SEARCH OR SAVEDON 1-Jan-2020 1:2"),
    ("A", "SEARCH SAVEDSINCE 1-Jan-2020 BEFORE 1-Jan-2020"),
    ("A", "COPY 1 Trash"), ("A", "SELECT Trash"), ("A", "FETCH 1 (SAVEDATE INTERNALDATE)"),
    ("A", "SEARCH SAVEDBEFORE 1-Feb-2026"), ("A", "SEARCH SAVEDBEFORE foo"),
    ("A", "SEARCH SAVEDON"),
], deliberate=("dovecot-qresync-codes",),
    doc="RFC 8514 sections 3-5: SAVEDATE is when the message came into this mailbox (a copy "
        "gets its own); SAVEDBEFORE/SAVEDON/SAVEDSINCE and SAVEDATESUPPORTED.")

script("preview", [
    *seed(),
    ("A", "EXAMINE INBOX"),
    ("A", "FETCH 1:* (PREVIEW)"), ("A", "FETCH 1:* PREVIEW"),
    ("A", "FETCH 1 (PREVIEW (LAZY))"), ("A", "FETCH 1 PREVIEW (LAZY)"),
    ("A", "FETCH 2:3 (UID PREVIEW (LAZY) RFC822.SIZE)"),
    ("A", "FETCH 1 (PREVIEW (FOO))"), ("A", "FETCH 1 (PREVIEW ())"),
    ("A", "FETCH 1 (FLAGS)"),
], doc="RFC 8970 sections 3-6: the preview of the first text part (quoted lines left out, "
       "HTML as text, white space collapsed); PREVIEW (LAZY) once the preview exists; "
       "modifiers other than LAZY are a BAD; PREVIEW does not set \\Seen.")

script("preview-lazy-first", [
    *seed(),
    ("A", "EXAMINE INBOX"),
    ("A", "FETCH 1:3 (PREVIEW (LAZY))"), ("A", "FETCH 1:3 PREVIEW"),
    ("A", "FETCH 1:3 PREVIEW (LAZY)"),
], deliberate=("preview-stored-at-append",),
    doc="RFC 8970 section 3.1: with LAZY a server may answer NIL while no preview is at hand; "
        "ours always is (computed when the message was stored).")


script("preview-corpus", [
    *[("A", append("INBOX", sample.raw, "", date(n))) for n, sample in enumerate(SAMPLES, 1)
      # Bare LF is turned into CRLF by Dovecot (bare-lf-kept); the digest has its own script.
      if b"\r\n" in sample.raw and sample.name != "digest"],
    ("A", "EXAMINE INBOX"), ("A", "FETCH 1:* (PREVIEW RFC822.SIZE)"),
    ("A", "STATUS INBOX (SIZE)"),
], deliberate=("dovecot-qresync-codes",),
    doc="RFC 8970 section 3 over the rendering corpus (tests/corpus.py): multipart, digest, "
        "message/rfc822, odd encodings and charsets, 8-bit headers.")


script("preview-digest", [
    ("A", append("INBOX", next(s.raw for s in SAMPLES if s.name == "digest"), "", date(1))),
    ("A", "EXAMINE INBOX"), ("A", "FETCH 1 PREVIEW"),
], deliberate=("dovecot-digest-preview",),
    doc="RFC 2046 5.1.5: a digest's parts are message/rfc822 by default.")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_script(differential, script):
    """Our answers equal Dovecot's, after normalising what the RFCs leave to the server."""
    differential.run(script)
