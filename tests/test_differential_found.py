"""Differences the differential harness found that were our bugs (not issue 11's).

Each script failed until its fix; all are fixed and the scripts stay as regression tests.
A new difference found to be our bug goes here until it is fixed (docs/differential.md).
"""

from __future__ import annotations

import pytest
from differential import Script, append, date, lit, servers
from mailgen import message


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-found")) as pair:
        yield pair


SCRIPTS = [
    Script("fetch-repeated-item", [
        ("A", append("INBOX", message(1), "\\Seen", date(1))),
        ("A", "EXAMINE INBOX"), ("A", "FETCH 1 (UID FLAGS UID)"),
        ("A", "FETCH 1 (FLAGS FLAGS)"), ("A", "UID FETCH 1 (UID)"),
        ("A", "FETCH 1 (BODY.PEEK[1] BODY.PEEK[1] RFC822.SIZE RFC822.SIZE)"),
        ("A", "FETCH 1 (RFC822.HEADER RFC822.HEADER ENVELOPE ENVELOPE BODY BODY)"),
    ],
        doc="RFC 3501 7.4.2: one FETCH response carries each data item once (a "
            "BODY[section] asked twice is answered twice by both servers)."),

    Script("literal-in-header-fields", [
        ("A", append("INBOX", message(1), "", date(1))),
        ("A", "EXAMINE INBOX"),
        ("A", ("FETCH 1 (BODY.PEEK[HEADER.FIELDS (", lit(b"Subject"), ")])")),
        ("A", ("FETCH 1 (BODY.PEEK[HEADER.FIELDS.NOT (From ", lit(b"To"), ")])")),
        ("A", 'FETCH 1 (BODY.PEEK[HEADER.FIELDS ("Subject" Date)])'),
        ("A", ("FETCH 1 (BODY.PEEK[HEADER.FIELDS (", lit(b"Subject"), " ", lit(b"Date"),
               ")]<0.10>)")),
    ],
        doc="RFC 3501 section 9: header-fld-name = astring, so a literal may name a field."),

    Script("list-inbox-wildcard", [
        ("A", 'LIST "" *box'), ("A", 'LIST "" *BOX'), ("A", 'LIST "" in%'),
        ("A", 'LIST "" %NBOX'), ("A", "SUBSCRIBE INBOX"), ("A", 'LSUB "" *box'),
        ("A", 'LIST "" Inbox'),
    ], doc="RFC 3501 5.1 and 6.3.8: INBOX is case-insensitive, also where a pattern "
           "matches it (Dovecot lists INBOX for '*box'; we do only for 'INBOX' spelt out)."),
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_found_difference(differential, script):
    """Our answers equal Dovecot's for a difference found by the harness."""
    differential.run(script)
