"""Differential scripts for the issue-11 defects, all fixed: each is a regression test.

Each script showed one defect against Dovecot and failed until its fix was merged.  Numbers
are issue 11's.  \\Recent (case 3) is compared in every script, here and in
tests/test_differential.py.
"""

from __future__ import annotations

import pytest
from differential import Script, append, date, lit, plus, servers
from mailgen import message
from test_differential import exact

from imapserver.imap.commands.fetch import STREAM_ABOVE


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-issue11")) as pair:
        yield pair


def crlf(text: str) -> bytes:
    return text.replace("\n", "\r\n").encode()


MULTIPART_BIG = crlf("""\
From: big@example.com
Subject: big part
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="B"

--B
Content-Type: text/plain

small
--B
Content-Type: application/octet-stream

""") + b"z" * (STREAM_ABOVE + 100) + crlf("""
--B--
""")

SCRIPTS = [
    Script("1-fetch-over-1mib", [
        ("A", append("INBOX", exact(STREAM_ABOVE + 1, 1), "", date(1))),
        ("A", append("INBOX", exact(1310720, 2), "", date(2))),
        ("A", append("INBOX", MULTIPART_BIG, "", date(3))),
        ("A", "EXAMINE INBOX"),
        ("A", "FETCH 1 BODY.PEEK[]"), ("A", "FETCH 1 RFC822"), ("A", "UID FETCH 2 BODY.PEEK[]"),
        ("A", "FETCH 2 BODY.PEEK[TEXT]"), ("A", f"FETCH 2 BODY.PEEK[]<1.{STREAM_ABOVE + 1}>"),
        ("A", "FETCH 3 BODY.PEEK[2]"), ("A", "FETCH 1:3 (RFC822.SIZE BODY.PEEK[] UID)"),
    ], doc="RFC 3501 4.3 and 7.4.2: a literal is {n} CRLF and n octets."),

    Script("3-recent", [
        ("A", append("INBOX", message(1), "\\Seen", date(1))),
        ("A", append("INBOX", message(2), "", date(2))),
        ("C", "STATUS INBOX (MESSAGES RECENT UNSEEN)"),
        ("A", "SELECT INBOX"), ("B", "SELECT INBOX"), ("C", "EXAMINE INBOX"),
        ("A", "FETCH 1:* (UID FLAGS)"), ("B", "FETCH 1:* (UID FLAGS)"),
        ("A", "SEARCH RECENT"), ("A", "SEARCH NEW"), ("A", "SEARCH OLD"),
        ("A", "UID SEARCH RECENT"), ("B", "SEARCH RECENT"), ("B", "SEARCH OLD"),
        ("C", append("INBOX", message(3), "", date(3))),
        ("A", "NOOP"), ("B", "NOOP"), ("A", "FETCH 3 FLAGS"), ("A", "SEARCH NEW"),
        ("C", "STATUS INBOX (RECENT)"),
        ("C", "CREATE Other"), ("C", append("Other", message(4), "", date(4))),
        ("C", "SELECT Other"), ("C", "COPY 1 INBOX"),
        ("A", "NOOP"), ("A", "SEARCH RECENT"), ("A", "FETCH 4 FLAGS"),
        ("A", "CLOSE"), ("A", "SELECT INBOX"), ("B", "CLOSE"), ("B", "SELECT INBOX"),
    ], deliberate=("dovecot-qresync-codes",),
        doc="RFC 3501 2.3.2, 6.3.1, 6.3.2, 6.3.10, 6.4.4, 7.3.2: exactly one session sees "
            "each new message as \\Recent."),

    Script("4-new-keyword-announced", [
        ("A", append("INBOX", message(1), "", date(1))),
        ("A", "SELECT INBOX"), ("B", "SELECT INBOX"),
        ("A", "STORE 1 +FLAGS ($foo)"), ("B", "NOOP"),
        ("B", "STORE 1 +FLAGS (bar)"), ("A", "NOOP"),
        ("A", "UID STORE 1 FLAGS ($foo bar baz)"), ("B", "NOOP"),
    ], deliberate=("unsolicited-fetch-uid",),
        doc="RFC 3501 7.2.6 and 7.4.2: FLAGS (and PERMANENTFLAGS) list a keyword before any "
            "FETCH uses it, in every session with the mailbox selected."),

    Script("5-bracket-in-atom", [
        ("A", "SELECT !#$&'+,-.0123456789:;<=>?@^_`|[}"),
        ("A", "LIST \"\" !#$&'+,-.0123456789:;<=>?@^_`|[}%*"),
        ("A", "CREATE a[b"), ("A", 'LIST "" a[*'), ("A", "STATUS a[b (MESSAGES)"),
    ],
        doc="RFC 3501 section 9: atom-specials exclude ']' but not '['.  (Written naming "
            "'optional-response-codes'; both servers answer the SELECT with NO [NONEXISTENT], "
            "so no difference is left to excuse.)"),

    Script("6-copy-move-into-selected", [
        ("A", append("INBOX", message(1), "\\Seen", date(1))),
        ("A", append("INBOX", message(2), "\\Flagged", date(2))),
        ("A", "SELECT INBOX"), ("B", "SELECT INBOX"),
        ("A", "COPY 1 INBOX"), ("A", "MOVE 2 INBOX"), ("A", "UID COPY 1 INBOX"),
        ("A", "UID MOVE 3 INBOX"), ("A", "FETCH 1:* (UID FLAGS)"), ("B", "NOOP"),
    ],
        doc="RFC 6851 3.3 and RFC 3501 6.4.7: the target may be the selected mailbox."),

    Script("7-lsub-noselect-parent", [
        ("A", "CREATE Projects"), ("A", "CREATE Projects/Alpha"),
        ("A", "CREATE Projects/Alpha/Beta"), ("A", "SUBSCRIBE Projects/Alpha/Beta"),
        ("A", 'LSUB "" Projects/%'), ("A", 'LSUB "" %'), ("A", 'LSUB "" Projects/*'),
    ], deliberate=("dovecot-lsub-special-use",),
        doc="RFC 3501 6.3.9: a parent not subscribed but with a subscribed child is listed "
            "with \\Noselect when '%' would not otherwise show it."),

    Script("8-childinfo-several-patterns", [
        ("A", "CREATE Foo"), ("A", "CREATE Foo/Bar"), ("A", "CREATE Foo/Baz"),
        ("A", "SUBSCRIBE Foo/Bar"),
        ("A", 'LIST (SUBSCRIBED RECURSIVEMATCH) "" (% Foo/%)'),
        ("A", 'LIST (SUBSCRIBED RECURSIVEMATCH) "" (Foo Foo/Bar)'),
        ("A", 'LIST (SUBSCRIBED RECURSIVEMATCH) "" %'),
    ], deliberate=("list-extra-attributes",),
        doc="RFC 5258 section 4 and its examples: no CHILDINFO for a parent whose matching "
            "child is returned itself."),

    Script("9-search-address-comments", [
        ("A", append("INBOX", crlf(
            "From: <user-from (comment)@ (comment) domain.org>\n"
            "To: Someone <user-to (x)@(y) example.net>\n"
            "Cc: (lead) user-cc@example.com (trail)\n"
            "Subject: comments\n\nbody\n"), "", date(1))),
        ("A", "EXAMINE INBOX"),
        ("A", "SEARCH FROM user-from@domain.org"),
        ("A", "SEARCH TO user-to@example.net"), ("A", "SEARCH CC user-cc@example.com"),
        ("A", ("SEARCH FROM ", lit(b"user-from@domain.org"))),
        ("A", ("UID SEARCH TO ", plus(b"user-to@example.net"))),
    ],
        doc="RFC 3501 6.4.4 (FROM/TO/CC contain the string) and RFC 5322 3.2.2 (comments)."),

    Script("10-envelope-several-address-lines", [
        ("A", append("INBOX", crlf(
            "From: a@example.com\nTo: t1@x.example\nCc: a@x.example\nTO: t2@x.example\n"
            "CC: b@x.example\ncc: c@x.example\nSubject: many\n\nbody\n"), "", date(1))),
        ("A", "EXAMINE INBOX"), ("A", "FETCH 1 ENVELOPE"), ("A", "SEARCH CC c@x.example"),
        ("A", "SEARCH TO t2@x.example"),
    ],
        doc="RFC 3501 7.4.2 ENVELOPE: every address of the field; RFC 5322 3.6 (what real "
            "mail holds)."),
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_issue11_defect(differential, script):
    """Issue 11: our answers equal Dovecot's for the defect named by the script."""
    differential.run(script)
