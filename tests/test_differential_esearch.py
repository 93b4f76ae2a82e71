"""Differential scripts for ESEARCH, SEARCHRES, WITHIN and CONTEXT=SEARCH, against Dovecot.

Dovecot 2.3 implements all four (RFC 4731, 5182, 5032, 5267 section 4), so each script is
played on both servers and the transcripts must agree (tests/differential.py; the deliberate
differences named are the general ones of docs/differential.md, none is new).  Tags are the
harness's ``<client><n>``, the login being n=1, which the ``TAG`` correlators and
CANCELUPDATE name.

Not compared here, because Dovecot 2.3 differs by design rather than by mistake: negative
PARTIAL ranges (RFC 9394, which Dovecot 2.3 predates and refuses with BAD); those are in
tests/test_imap_esearch.py.
"""

from __future__ import annotations

import pytest
from differential import Done, Idle, Pipelined, Script, WaitFor, append, date, servers
from mailgen import message


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-esearch")) as pair:
        yield pair


def seed(n: int = 6) -> list:
    """n messages, odd ones \\Seen, the third \\Flagged, on distinct days of 2026."""
    steps = []
    for i in range(1, n + 1):
        flags = " ".join(f for f, on in (("\\Seen", i % 2), ("\\Flagged", i == 3)) if on)
        steps.append(("A", append("INBOX", message(i), flags, date(i))))
    return steps


SCRIPTS = [
    Script("esearch-return-options", [
        *seed(),
        ("A", "SELECT INBOX"),
        ("A", "SEARCH RETURN (MIN MAX COUNT ALL) 1:*"),
        ("A", "UID SEARCH RETURN (ALL COUNT MAX MIN) UNSEEN"),
        ("A", "SEARCH RETURN () SEEN"),
        ("A", "UID SEARCH RETURN () 2:4"),
        ("A", "SEARCH RETURN (MIN) DELETED"),
        ("A", "SEARCH RETURN (COUNT) DELETED"),
        ("A", "SEARCH RETURN (MAX) SINCE 4-Feb-2026"),
        ("A", "search return (min count) charset utf-8 unseen"),
        ("A", "SEARCH RETURN (CONTEXT COUNT) FLAGGED"),
        ("A", "SEARCH RETURN (BOGUS) SEEN"),
        ("A", "SEARCH RETURN MIN SEEN"),
        ("A", "SEARCH RETURN (MIN) CHARSET X-NOSUCH SEEN"),
        ("A", "SEARCH RETURN (ALL) NOSUCHKEY"),
    ], deliberate=("optional-response-codes",),
        doc="RFC 4731 3.1: MIN/MAX/ALL absent when nothing matched, COUNT always; () is ALL; "
           "ALL as a sequence-set; UID SEARCH says UID."),

    Script("esearch-partial", [
        *seed(),
        ("A", "SELECT INBOX"),
        ("A", "SEARCH RETURN (PARTIAL 2:3) ALL"),
        ("A", "SEARCH RETURN (PARTIAL 3:2) UNSEEN"),
        ("A", "UID SEARCH RETURN (PARTIAL 2:100) ALL"),
        ("A", "SEARCH RETURN (PARTIAL 10:20) ALL"),
        ("A", "SEARCH RETURN (PARTIAL 1:2 COUNT MIN) ALL"),
        ("A", "SEARCH RETURN (PARTIAL 0:20) ALL"),
        ("A", "SEARCH RETURN (PARTIAL 1:*) ALL"),
        ("A", "SEARCH RETURN (PARTIAL 1:2 ALL) ALL"),
        ("A", "SEARCH RETURN (PARTIAL) ALL"),
    ], doc="RFC 5267 4.4: PARTIAL low:high (500:400 is 400:500), NIL past the end, not with "
           "ALL; the partial-range grammar (no 0, no *)."),

    Script("searchres-save", [
        *seed(),
        ("A", "SELECT INBOX"),
        ("A", "FETCH $ FLAGS"),
        ("A", "SEARCH $"),
        ("A", "SEARCH RETURN (SAVE) SEEN"),
        ("A", "FETCH $ (FLAGS)"),
        ("A", "UID FETCH $ (FLAGS)"),
        ("A", "SEARCH $"),
        ("A", "UID SEARCH UID $"),
        ("A", "SEARCH RETURN (SAVE MIN) UNSEEN"),
        ("A", "FETCH $ FLAGS"),
        ("A", "SEARCH RETURN (SAVE MIN MAX) UNSEEN"),
        ("A", "FETCH $ FLAGS"),
        ("A", "SEARCH RETURN (SAVE MIN COUNT) UNSEEN"),
        ("A", "FETCH $ FLAGS"),
        ("A", "SEARCH RETURN (SAVE PARTIAL 2:3) ALL"),
        ("A", "FETCH $ FLAGS"),
        ("A", "SEARCH RETURN (SAVE PARTIAL 2:3 MIN) ALL"),
        ("A", "UID FETCH $ FLAGS"),
        ("A", "SEARCH RETURN (SAVE PARTIAL 5:3 MAX) UNSEEN"),
        ("A", "FETCH $ FLAGS"),
        ("A", "SEARCH RETURN (SAVE PARTIAL 2:3 COUNT) ALL"),
        ("A", "FETCH $ FLAGS"),
        ("A", "SEARCH RETURN (SAVE PARTIAL 20:30) ALL"),
        ("A", "FETCH $ FLAGS"),
        ("A", "SEARCH RETURN (SAVE ALL) 2:4"),
        ("A", "SEARCH RETURN (SAVE) OR $ 6"),
        ("A", "FETCH $ FLAGS"),
        ("A", "SEARCH RETURN (SAVE) FOO"),
        ("A", "FETCH $ FLAGS"),
        ("A", "SEARCH RETURN (SAVE) CHARSET FOO SEEN"),
        ("A", "FETCH $ FLAGS"),
        ("A", "SEARCH $,1"),
        ("A", "FETCH $,1 FLAGS"),
    ], deliberate=("optional-response-codes",),
        doc="RFC 5182 2.1: SAVE alone sends no ESEARCH; with MIN/MAX only those are saved "
            "(and with PARTIAL its range, RFC 9394 3.1); "
           "$ in FETCH, UID FETCH, SEARCH and UID SEARCH UID; empty before any SAVE; a NO "
           "empties it, a BAD leaves it; $ only alone."),

    Script("searchres-lifetime", [
        *seed(),
        ("A", "SELECT INBOX"),
        ("A", "SEARCH RETURN (SAVE) 2:5"),
        ("A", "STORE $ +FLAGS (\\Answered)"),
        ("A", "UID STORE $ -FLAGS.SILENT (\\Answered)"),
        ("A", "CREATE Other"),
        ("A", "COPY $ Other"),
        ("A", "STORE 3 +FLAGS.SILENT (\\Deleted)"),
        ("B", "SELECT INBOX"), ("B", "EXPUNGE"),
        ("A", "NOOP"),
        ("A", "FETCH $ (UID)"),
        ("A", append("INBOX", message(7), "", date(7))),
        ("A", "FETCH $ (UID)"),
        ("A", "UID MOVE $ Other"),
        ("A", "SEARCH $"),
        ("A", "SEARCH RETURN (SAVE) ALL"),
        ("A", "EXAMINE INBOX"),
        ("A", "FETCH $ (UID)"),
        ("A", "SELECT Other"),
        ("A", "SEARCH RETURN (SAVE) 1:2"),
        ("A", "UID EXPUNGE $"),
        ("A", "STORE $ +FLAGS.SILENT (\\Deleted)"),
        ("A", "UID EXPUNGE $"),
        ("A", "FETCH 1:* (UID)"),
    ], deliberate=("dovecot-qresync-codes",),
        doc="RFC 5182 2.1: $ in STORE, COPY, MOVE, UID EXPUNGE; expunged messages leave it, "
           "new ones do not join it; SELECT/EXAMINE empty it."),

    Script("within", [
        *seed(3),
        ("A", append("INBOX", message(9))),    # INTERNALDATE: now
        ("A", "SELECT INBOX"),
        ("A", "SEARCH YOUNGER 3600"),
        ("A", "SEARCH OLDER 3600"),
        ("A", "UID SEARCH NOT OLDER 86400"),
        ("A", "SEARCH OR YOUNGER 600 SEEN"),
        ("A", "SEARCH RETURN (COUNT) OLDER 1800"),  # not 1: the new message may be 1 s old
        ("A", "SEARCH OLDER 0"),
        ("A", "SEARCH YOUNGER -1"),
        ("A", "SEARCH YOUNGER"),
        ("A", "SEARCH YOUNGER x"),
    ], doc="RFC 5032 3: OLDER/YOUNGER n seconds against INTERNALDATE; n is an nz-number."),

    Script("context-update", [
        *seed(),
        ("A", "SELECT INBOX"),
        ("A", "SEARCH RETURN (UPDATE) UNSEEN"),
        ("A", "SEARCH RETURN (UPDATE COUNT) UNSEEN"),
        ("A", "UID SEARCH RETURN (UPDATE ALL) UNSEEN"),
        ("A", "UID SEARCH RETURN (UPDATE) FLAGGED"),
        ("B", "SELECT INBOX"),
        ("B", "STORE 1 -FLAGS (\\Seen)"),
        ("B", "STORE 2 +FLAGS (\\Seen)"),
        ("A", "NOOP"),
        ("B", "STORE 4 +FLAGS (\\Deleted)"),
        ("B", "EXPUNGE"),
        ("A", "NOOP"),
        ("A", "STORE 3 -FLAGS (\\Seen)"),
        ("A", "STORE 3 +FLAGS (\\Seen)"),
        ("B", append("INBOX", message(8), "", date(8))),
        ("B", append("INBOX", message(9), "\\Flagged \\Seen", date(9))),
        ("A", "NOOP"),
        ("A", "STORE 1 +FLAGS (\\Deleted)"),
        ("A", "EXPUNGE"),
        ("A", "CANCELUPDATE \"A9\""),
        ("A", "CANCELUPDATE \"A9\""),
        ("A", "CANCELUPDATE A10"),
        ("B", "NOOP"),
        ("B", "STORE 1:* -FLAGS (\\Seen)"),
        ("A", "NOOP"),
        ("A", "SEARCH RETURN (UPDATE) FLAGGED"),
        ("A", "UNSELECT"),
        ("A", "SELECT INBOX"),
        ("B", "STORE 1:* +FLAGS (\\Seen)"),
        ("A", "NOOP"),
    ], deliberate=("unsolicited-fetch-uid", "store-reports-unchanged"),
        doc="RFC 5267 4.3: ADDTO/REMOVEFROM as other sessions' and our own changes arrive, "
           "REMOVEFROM before the EXPUNGE, ADDTO after EXISTS; CANCELUPDATE; contexts end "
           "with the selection."),

    Script("searchres-pipelined", [
        *seed(),
        ("A", "SELECT INBOX"),
        ("A", Pipelined("SEARCH RETURN (SAVE) UNSEEN", "FETCH $ (FLAGS)",
                        "STORE $ +FLAGS (\\Flagged)", "UID SEARCH RETURN (COUNT) UID $",
                        "SEARCH FLAGGED")),
    ], doc="RFC 5182 2.1: a command using $ pipelined after SEARCH RETURN (SAVE) sees the "
           "result that SEARCH saved."),

    Script("context-update-own-changes", [
        *seed(),
        ("A", "SELECT INBOX"),
        ("A", "CREATE Other"),
        ("A", "SEARCH RETURN (UPDATE) UNSEEN"),
        ("A", "UID SEARCH RETURN (UPDATE COUNT) UNSEEN"),
        ("A", "MOVE 2 Other"),
        ("A", "COPY 3 INBOX"),
        ("A", "STORE 3 -FLAGS.SILENT (\\Seen)"),
        ("A", append("INBOX", message(7), "", date(7))),
        ("A", "UID STORE 6 +FLAGS.SILENT (\\Deleted)"),
        ("A", "UID EXPUNGE 6"),
        ("A", "SEARCH RETURN (SAVE) UNSEEN"),
        ("A", "UID MOVE $ Other"),
        ("A", "NOOP"),
    ], doc="RFC 5267 4.3: our own MOVE, COPY, STORE, APPEND and UID EXPUNGE update the "
            "contexts too, REMOVEFROM before the EXPUNGE, ADDTO after the EXISTS."),

    Script("context-update-frozen-numbers", [
        *seed(5),
        ("A", "SELECT INBOX"), ("B", "SELECT INBOX"),
        ("A", "UID SEARCH RETURN (UPDATE ALL) 4:* UNSEEN"),
        ("A", "SEARCH RETURN (UPDATE ALL) UID 2:*"),
        ("B", "STORE 1 +FLAGS.SILENT (\\Deleted)"), ("B", "EXPUNGE"),
        ("B", append("INBOX", message(6), "", date(6))),
        ("A", "NOOP"),
        ("B", "STORE 1:* +FLAGS.SILENT (\\Seen)"),
        ("A", "NOOP"),
    ], deliberate=("unsolicited-fetch-uid",),
        doc="RFC 5267 4.3: sequence numbers (and *) in an UPDATE search are evaluated when "
            "the command is received, so later messages do not join through them."),

    Script("esearch-edges", [
        ("A", "SELECT INBOX"),
        ("A", "SEARCH RETURN (MIN MAX COUNT ALL) ALL"),
        ("A", "UID SEARCH RETURN (PARTIAL 1:10) ALL"),
        ("A", "search return (save) all"),
        ("A", "fetch $ flags"),
        ("A", "SEARCH RETURN (UPDATE COUNT) ALL"),
        ("A", "UID SEARCH RETURN (UPDATE MIN MAX) SEEN"),
        *seed(4),
        ("A", "NOOP"),
        ("A", "UID SEARCH RETURN (MIN ALL) UID 3:*"),
        ("A", "SEARCH RETURN (COUNT) OR YOUNGER 60 OLDER 60"),
        ("A", "UID SEARCH RETURN (SAVE) SEEN"),
        ("A", "UID SEARCH RETURN (ALL SAVE) UID $ 2:*"),
        ("A", "SEARCH RETURN (ALL) $"),
        ("A", 'CANCELUPDATE "A7" "A8"'),
        ("A", 'CANCELUPDATE "A7" "A8"'),
        ("A", "EXAMINE INBOX"),
        ("A", "SEARCH RETURN (UPDATE ALL) UNSEEN"),
        ("B", "SELECT INBOX"), ("B", "STORE 1:* +FLAGS.SILENT (\\Seen)"),
        ("A", "NOOP"),
    ], deliberate=("unsolicited-fetch-uid", "dovecot-qresync-codes"),
        doc="RFC 4731 3.1, RFC 5182 2.1, RFC 5267 4.3.5: an empty mailbox, case, $ inside a "
            "program, UPDATE in an empty mailbox filled later, CANCELUPDATE of two tags, "
            "UPDATE on a mailbox opened with EXAMINE."),

    Script("context-update-idle", [
        *seed(3),
        ("A", "SELECT INBOX"),
        ("A", "UID SEARCH RETURN (UPDATE) UNSEEN"),
        ("B", "SELECT INBOX"),
        ("A", Idle()),
        ("B", "STORE 1 -FLAGS (\\Seen)"),
        ("A", WaitFor(r"ESEARCH")),
        ("B", "STORE 2 +FLAGS (\\Deleted)"),
        ("B", "EXPUNGE"),
        ("A", WaitFor(r"EXPUNGE")),
        ("A", Done()),
    ], deliberate=("unsolicited-fetch-uid",),
        doc="RFC 5267 4.3.2: updates also while the client IDLEs."),
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_script(differential, script):
    """Our answers equal Dovecot's, after normalising what RFC 3501 leaves to the server."""
    differential.run(script)


def test_script_names_are_unique():
    names = [s.name for s in SCRIPTS]
    assert len(names) == len(set(names))
