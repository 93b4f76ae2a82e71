"""CATENATE (RFC 4469) and URLAUTH (RFC 4467) against Dovecot.

Dovecot 2.3 speaks CATENATE out of the box; its URLAUTH needs ``imap_urlauth_host`` and a
mailbox attribute dict for the keys (:data:`DOVECOT_URLAUTH`).  With those, GENURLAUTH,
RESETKEY and URLFETCH by the URL's own user work and are compared here.  A URLFETCH by
*another* user goes through Dovecot's imap-urlauth service, whose login process panics in
Debian's 2.3.19 (``sasl_server_auth_begin: assertion failed: (!private || (mech->flags &
MECH_SEC_PRIVATE) != 0)``) -- so access identifiers, submit+ and CATENATE with another user's
URLAUTH URL are judged by RFC 4467/4469 in tests/test_imap_urlauth.py instead (see
docs/differential.md).  Each script runs on one account, as the harness's do.

Verifiers are each server's own secret (RFC 4467 3.4.1; Dovecot's also carry a version octet):
they read ``<verifier>`` on both sides, and a URL a server made is sent back to that same
server (``Recall``).
"""

from __future__ import annotations

import pytest
from differential import Recall, Script, append, lit, plus, servers

from tests.mailgen import message

DOVECOT_URLAUTH = """\
imap_urlauth_host = localhost
mail_attribute_dict = file:%h/dovecot-attributes
"""

CAPABILITIES_JUDGED_HERE = {"URLAUTH"}
"""Advertised by the Dovecot of this module only (the plain one of tests/test_differential.py
has no imap_urlauth_host); CATENATE and URL-PARTIAL both advertise anyway."""

BOUNDARY = b"--------------030308070208000400050907"
DRAFT = (b"From: Fred Foobar <foobar@Blurdybloop.example.COM>\r\n"
         b"Subject: afternoon meeting\r\nTo: mooch@owatagu.example.net\r\n"
         b"Message-Id: <B27397-0100000@Blurdybloop.example.COM>\r\nMIME-Version: 1.0\r\n"
         b"Content-Type: multipart/mixed;\r\n"
         b" boundary=\"------------030308070208000400050907\"\r\n\r\n"
         + BOUNDARY + b"\r\nContent-Type: TEXT/PLAIN; CHARSET=US-ASCII\r\n\r\n"
         b"Hello Joe, do you think we can meet at 3:30 tomorrow?\r\n\r\n"
         + BOUNDARY + b"\r\nContent-Type: text/plain; name=\"notes.txt\"\r\n\r\n"
         b"agenda: lunch\r\n\r\n" + BOUNDARY + b"--\r\n")
FORWARDED = message(30, subject="the forwarded one")
GENERATED = ("URL", r"GENURLAUTH \"?(imap://[^\s\"]+)")
DRAFTS_VALIDITY = ("V", r"UIDVALIDITY (\d+)\)")


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-catenate"), DOVECOT_URLAUTH) as pair:
        yield pair


def seeded() -> list:
    return [("A", append("Drafts", DRAFT, "\\Draft")), ("A", append("Drafts", FORWARDED)),
            ("A", "STATUS Drafts (UIDVALIDITY)")]


AFTER = [("A", "EXAMINE Drafts"), ("A", "FETCH 1:* (UID FLAGS RFC822.SIZE BODY.PEEK[])"),
         ("A", "UNSELECT")]

SCRIPTS = [
    Script("rfc4469-example", [
        *seeded(),
        # RFC 4469 6, synchronizing literals: each TEXT waits for its continuation.
        ("A", ("APPEND Drafts (\\Seen \\Draft $MDNSent) CATENATE (URL "
               "\"/Drafts/;UID=1/;section=HEADER\" TEXT ", lit(b"\r\n" + BOUNDARY + b"\r\n"),
               " URL \"/Drafts/;UID=1/;section=1.MIME\" URL \"/Drafts/;UID=1/;section=1\" "
               "TEXT ", lit(b"\r\n" + BOUNDARY + b"\r\nContent-Type: message/rfc822\r\n\r\n"),
               " URL \"/Drafts/;UID=2\" TEXT ", lit(b"\r\n" + BOUNDARY + b"--\r\n"), ")")),
        *AFTER,
        ("A", "EXAMINE Drafts"), ("A", "FETCH 3 (BODYSTRUCTURE BODY.PEEK[2.HEADER])"),
    ]),
    Script("sections-partials-literal-plus", [
        *seeded(),
        ("A", ("APPEND Drafts CATENATE (TEXT ", plus(b"X-Lead: yes\r\n"),
               " URL \"/Drafts/;UID=1/;SECTION=HEADER.FIELDS%20(SUBJECT%20TO)\""
               " URL \"/Drafts/;UID=1/;SECTION=TEXT/;PARTIAL=10.30\""
               " URL \"/Drafts/;UID=2/;PARTIAL=5\" URL \"/Drafts/;UID=1/;SECTION=2.MIME\")")),
        ("A", Recall("APPEND Drafts CATENATE (URL \"/Drafts;UIDVALIDITY={V}/;UID=2"
                     "/;SECTION=1\")", (DRAFTS_VALIDITY,))),
        ("A", "SELECT Drafts"),
        ("A", "APPEND Drafts CATENATE (URL \";UID=1/;SECTION=1\" URL \";uid=2\")"),
        *AFTER,
    ]),
    Script("multiappend-with-catenate", [
        *seeded(),
        ("A", ("APPEND Drafts CATENATE (URL \"/Drafts/;UID=2\") (\\Seen) ", plus(message(1)),
               " CATENATE (TEXT ", plus(b"ab\r\n"), " URL \"/Drafts/;UID=1/;SECTION=1\")")),
        *AFTER,
    ]),
    Script("catenate-bad-urls", [
        *seeded(),
        ("A", "APPEND Drafts CATENATE (URL \"/Drafts;UIDVALIDITY=1/;UID=1\")"),
        ("A", "APPEND Drafts CATENATE (URL \"/Drafts/;UID=9\")"),
        ("A", "APPEND Drafts CATENATE (URL \"/Nowhere/;UID=1\")"),
        ("A", "APPEND Drafts CATENATE (URL \";UID=1\")"),  # nothing selected
        ("A", "APPEND Drafts CATENATE (URL \"/Drafts/;UID=0\")"),
        ("A", "APPEND Drafts CATENATE (URL \"http://example.com/\")"),
        # MULTIAPPEND: the bad URL of the second message fails the first one too (RFC 3502).
        ("A", ("APPEND Drafts ", plus(message(3)), " CATENATE (URL \"/Drafts/;UID=9\")")),
        ("A", "STORE 2 +FLAGS (\\Deleted)"), ("A", "SELECT Drafts"),
        ("A", "STORE 2 +FLAGS (\\Deleted)"), ("A", "EXPUNGE"),
        ("A", "APPEND Drafts CATENATE (URL \";UID=2\")"),   # expunged
        ("A", "APPEND Drafts CATENATE ()"),
        ("A", "STATUS INBOX (MESSAGES)"), *AFTER,
        # Last: Dovecot answers an untagged BAD to the next command after this one.
        ("A", "APPEND Drafts CATENATE (TEXT \"quoted\")"),
    ]),
    Script("catenate-bad-url-before-literal", [
        *seeded(),
        # RFC 4469 3: a bad URL before a synchronizing TEXT literal; Dovecot refuses at that
        # literal, we once the command is in (refuse-after-literal); nothing is appended.
        ("A", ("APPEND Drafts CATENATE (URL \"/Drafts/;UID=9\" TEXT ", lit(b"ab\r\n"),
               " URL \"/Drafts/;UID=1\")")),
        ("A", "STATUS Drafts (MESSAGES)"),
    ], deliberate=("refuse-after-literal",)),
    Script("catenate-section-must-exist", [
        *seeded(),
        ("A", "APPEND Drafts CATENATE (URL \"/Drafts/;UID=1/;SECTION=7\")"),
    ], deliberate=("catenate-unknown-section",)),
    Script("catenate-absolute-own-url", [
        *seeded(),
        ("A", lambda user: f"APPEND Drafts CATENATE (URL \"imap://{user}@localhost/Drafts/"
                           f";UID=1/;SECTION=1\")"),
    ], deliberate=("catenate-absolute-url",)),
    Script("genurlauth-urlfetch-resetkey", [
        *seeded(),
        ("A", lambda user: f"GENURLAUTH \"imap://{user}@localhost/Drafts/;uid=1/;section=1"
                           f";urlauth=user+{user}\" INTERNAL"),
        ("A", Recall("URLFETCH \"{URL}\"", (GENERATED,))),
        ("A", lambda user: f"GENURLAUTH \"imap://{user}@localhost/Drafts/;UID=2;URLAUTH="
                           f"anonymous\" INTERNAL \"imap://{user}@localhost/Drafts/;UID=1"
                           f"/;SECTION=1.MIME;URLAUTH=authuser\" INTERNAL"),
        ("A", Recall("URLFETCH \"{URL}\"", (GENERATED,))),
        ("A", "RESETKEY Drafts"),
        ("A", Recall("URLFETCH \"{URL}\"", (GENERATED,))),  # revoked
        ("A", lambda user: f"GENURLAUTH \"imap://{user}@localhost/Drafts/;uid=1;urlauth=user+"
                           f"{user}\" INTERNAL"),
        ("A", "RESETKEY Drafts INTERNAL"),
        ("A", Recall("URLFETCH \"{URL}\"", (GENERATED,))),
        ("A", lambda user: f"GENURLAUTH \"imap://{user}@localhost/Drafts/;uid=1;urlauth=user+"
                           f"{user}\" INTERNAL"),
        ("A", "RESETKEY"),
        ("A", Recall("URLFETCH \"{URL}\"", (GENERATED,))),
        ("A", lambda user: f"URLFETCH \"imap://{user}@localhost/Drafts/;uid=1\""),
    ], deliberate=("urlauth-verifier", "dovecot-urlfetch-notice")),
    Script("genurlauth-refusals", [
        *seeded(),
        ("A", "GENURLAUTH \"imap://someone@localhost/Drafts/;uid=1;urlauth=anonymous\" "
              "INTERNAL"),
        ("A", lambda user: f"GENURLAUTH \"imap://{user}@localhost/Drafts/;uid=1;urlauth="
                           f"anonymous\" FOO"),
        ("A", "GENURLAUTH \"/Drafts/;uid=1;urlauth=anonymous\" INTERNAL"),
        ("A", lambda user: f"GENURLAUTH \"imap://{user}@localhost/Nope/;uid=1;urlauth="
                           f"anonymous\" INTERNAL"),
        ("A", lambda user: f"GENURLAUTH \"imap://{user}@localhost/Drafts/;uid=99;urlauth="
                           f"anonymous\" INTERNAL"),
        ("A", lambda user: f"GENURLAUTH \"imap://{user}@localhost/Drafts;UIDVALIDITY=1/;uid=1"
                           f";urlauth=anonymous\" INTERNAL"),
        ("A", lambda user: f"GENURLAUTH \"imap://{user}@localhost/Drafts\" INTERNAL"),
        ("A", lambda user: f"GENURLAUTH \"imap://{user}@localhost/Drafts/;uid=1;urlauth="
                           f"anonymous:internal:{'0' * 40}\" INTERNAL"),
        ("A", lambda user: f"GENURLAUTH \"imap://{user}@localhost/Drafts/;uid=1;expire="
                           f"2001-01-01T00:00:00Z;urlauth=anonymous\" INTERNAL"),
        ("A", "RESETKEY Drafts FOO"), ("A", "RESETKEY Nope"),
        ("A", lambda user: f"URLFETCH \"imap://{user}@localhost/Drafts/;uid=1;urlauth="
                           f"anonymous:internal:{'0' * 40}\""),
    ], deliberate=("dovecot-urlfetch-notice",)),
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_script(differential, script):
    lines = differential.run(script)
    assert not any(line.startswith("!:") for line in lines), lines  # the script itself ran
