"""Differential scripts for CONDSTORE and QRESYNC (RFC 7162), against Dovecot 2.3.

MOD-SEQUENCE values are each server's own (``modseq-values``): the values a script sends
(CHANGEDSINCE, UNCHANGEDSINCE, SEARCH MODSEQ, QRESYNC's) are taken from the same server's
earlier answers with :class:`differential.Recall`, so both are asked the same question.
``{FIRSTMODSEQ}`` is the first HIGHESTMODSEQ of the conversation, ``{HIGHESTMODSEQ}`` the
latest.  Every script first makes Dovecot keep MODSEQs for the mailbox (a CONDSTORE-enabling
command), as ours always does (``dovecot-lazy-highestmodseq``).
"""

from __future__ import annotations

import pytest
from differential import Recall, Script, append, date, servers
from test_differential import SEED, s, seed

MODSEQ = ("modseq-values",)
STORED = (("STORED", r"MODSEQ \((\d+)\)", 0),)

SCRIPTS = [
    Script("condstore-enable-select-status", [
        *seed(),
        *s("A", "ENABLE CONDSTORE", "SELECT INBOX", "ENABLE CONDSTORE",
           "EXAMINE INBOX (CONDSTORE)", "SELECT INBOX (CONDSTORE)", "SELECT INBOX (FOO)",
           "SELECT INBOX (QRESYNC (1 2))", "STATUS INBOX (HIGHESTMODSEQ MESSAGES)",
           "STATUS Sent (HIGHESTMODSEQ UIDNEXT)"),
        # A session that never enabled anything: HIGHESTMODSEQ at SELECT all the same
        # (RFC 7162 3.1.2.1), no MODSEQ in its FETCH responses.
        *s("B", "SELECT INBOX", "STORE 1 +FLAGS (\\Flagged)", "FETCH 1 (FLAGS)"),
        # ENABLE with a mailbox selected: its HIGHESTMODSEQ first.
        *s("C", "SELECT INBOX", "ENABLE CONDSTORE"),
    ], deliberate=MODSEQ),

    Script("condstore-store-fetch-search", [
        *seed(),
        *s("A", "SELECT INBOX", "ENABLE CONDSTORE", "FETCH 1:* (MODSEQ)",
           "STORE 1 +FLAGS (\\Flagged)", "STORE 2 +FLAGS.SILENT (\\Seen)",
           "STORE 1:3 (UNCHANGEDSINCE 0) +FLAGS (\\Answered)"),
        # UNCHANGEDSINCE the HIGHESTMODSEQ of before these STOREs: 1 and 2 changed since.
        ("A", Recall("STORE 1:5 (UNCHANGEDSINCE {FIRSTMODSEQ}) -FLAGS (\\Draft)")),
        ("A", Recall("UID STORE 1:5 (UNCHANGEDSINCE {FIRSTMODSEQ}) +FLAGS.SILENT ($Mark)")),
        ("A", Recall("FETCH 1:* (FLAGS) (CHANGEDSINCE {FIRSTMODSEQ})")),
        ("A", Recall("UID FETCH 2:4 (UID) (CHANGEDSINCE {FIRSTMODSEQ})")),
        ("A", Recall("SEARCH MODSEQ {FIRSTMODSEQ}")),
        ("A", Recall('UID SEARCH MODSEQ "/flags/\\\\draft" all {FIRSTMODSEQ} UNSEEN')),
        ("A", "SEARCH MODSEQ 9223372036854775807"),
        ("A", "SEARCH MODSEQ x"),
        ("A", "FETCH 1 (FLAGS) (CHANGEDSINCE x)"),
        ("A", "STORE 1 (UNCHANGEDSINCE) +FLAGS (\\Seen)"),
        # Another session's change reaches A with its MODSEQ (RFC 7162 3.1.4.1).
        *s("B", "SELECT INBOX", "STORE 4 -FLAGS (\\Seen)"),
        ("A", "NOOP"),
    ], deliberate=(*MODSEQ, "store-reports-unchanged", "unsolicited-fetch-uid")),

    Script("qresync-select-and-vanished", [
        *seed(),
        *s("C", "ENABLE QRESYNC", "SELECT INBOX"),
        # Changes by another session while C looks away: 2 and 4 (\Deleted in the seed)
        # expunged, 3 flagged.
        *s("B", "SELECT INBOX", "STORE 2 +FLAGS (\\Deleted)", "STORE 3 +FLAGS (\\Flagged)",
           "EXPUNGE"),
        ("C", "UNSELECT"),
        ("C", Recall("SELECT INBOX (QRESYNC ({UIDVALIDITY} {FIRSTMODSEQ}))")),
        ("C", Recall("EXAMINE INBOX (QRESYNC ({UIDVALIDITY} {FIRSTMODSEQ} 1:3))")),
        ("C", Recall("SELECT INBOX (QRESYNC ({UIDVALIDITY} {FIRSTMODSEQ} 1:5 (1:3 1,3,5)))")),
        ("C", Recall("SELECT INBOX (QRESYNC ({UIDVALIDITY} {HIGHESTMODSEQ} 1:5))")),
        ("C", Recall("UID FETCH 1:* (FLAGS) (CHANGEDSINCE {FIRSTMODSEQ} VANISHED)")),
        ("C", Recall("UID FETCH 3:4 (FLAGS) (CHANGEDSINCE {FIRSTMODSEQ} VANISHED)")),
        # Once QRESYNC is on, expunges are VANISHED, for the session itself and for others.
        ("C", "STORE 1 +FLAGS (\\Deleted)"),
        ("C", "EXPUNGE"),
        ("B", "NOOP"),
        ("A", "SELECT INBOX"),
        ("A", "STORE 1 +FLAGS (\\Deleted)"),
        ("A", "EXPUNGE"),
        ("C", "NOOP"),
        # A UIDVALIDITY that is not the mailbox's: a plain SELECT.
        ("C", "SELECT INBOX (QRESYNC (1 1))"),
        # Errors (RFC 7162 3.2.5, 3.2.6).
        ("C", "SELECT INBOX (QRESYNC (1))"),
        ("C", "SELECT INBOX (QRESYNC (1 1 1:*))"),
        ("C", "SELECT INBOX"),
        ("C", "FETCH 1:* (FLAGS) (CHANGEDSINCE 1 VANISHED)"),
        ("C", "UID FETCH 1:* (FLAGS) (VANISHED)"),
        ("D", "SELECT INBOX"),
        ("D", "UID FETCH 1:* (FLAGS) (CHANGEDSINCE 1 VANISHED)"),
    ], deliberate=(*MODSEQ, "dovecot-qresync-codes")),

    Script("qresync-move-and-idle", [
        *seed(),
        ("A", append("INBOX", SEED[0][0], "", date(6))),
        *s("C", "ENABLE QRESYNC", "SELECT INBOX"),
        ("C", "MOVE 1 Sent"),
        ("C", "UID MOVE 5 Archive"),
        *s("B", "SELECT INBOX", "STORE 2 +FLAGS (\\Deleted)", "UID EXPUNGE 3"),
        ("C", "NOOP"),
        ("C", "STORE 1:* +FLAGS (\\Deleted)"),
        ("C", "UID EXPUNGE 4"),
        ("C", "CLOSE"),
        # A message that arrived after the client's MODSEQ is reported too (3.2.5.2).
        ("B", append("INBOX", SEED[1][0], "$New", date(7))),
        ("C", Recall("SELECT INBOX (QRESYNC ({UIDVALIDITY} {FIRSTMODSEQ}))")),
    ], deliberate=(*MODSEQ, "store-reports-unchanged")),

    # With the extensions beside CONDSTORE/QRESYNC: REMOVEFROM before VANISHED (RFC 5267
    # 4.3.4, RFC 7162 3.2.10), MOVE into the selected mailbox (RFC 6851 3.3), STATUS SIZE
    # beside HIGHESTMODSEQ.
    Script("qresync-updates-and-move-into-self", [
        *seed(),
        *s("C", "ENABLE QRESYNC", "SELECT INBOX", "STORE 5 +FLAGS (\\Seen)",
           "STORE 3 +FLAGS (\\Seen)"),
        ("C", "SEARCH RETURN (UPDATE) UNDELETED"),
        ("C", "STORE 2 +FLAGS.SILENT (\\Deleted)"),
        ("C", "EXPUNGE"),
        ("C", "UID MOVE 1 INBOX"),
        ("C", "STATUS Sent (SIZE HIGHESTMODSEQ)"),
    ], deliberate=MODSEQ),

    # ESEARCH's MODSEQ (RFC 4731 3.2, RFC 7162 3.1.5): the highest of the messages returned.
    Script("condstore-esearch-modseq", [
        *seed(),
        *s("C", "ENABLE CONDSTORE", "SELECT INBOX", "STORE 5 +FLAGS (\\Seen)",
           "STORE 3 +FLAGS (\\Seen)"),
        # {STORED}: the MODSEQ the first of those STOREs gave, on each server.
        ("C", Recall("SEARCH RETURN (ALL) MODSEQ {STORED}", STORED)),
        ("C", Recall("UID SEARCH RETURN (MAX COUNT) MODSEQ {STORED}", STORED)),
        ("C", Recall("SEARCH RETURN (MIN) MODSEQ {STORED}", STORED)),
        ("C", Recall("SEARCH RETURN (SAVE MAX) MODSEQ {STORED}", STORED)),
        ("C", Recall("SEARCH RETURN (MIN MAX) MODSEQ {STORED}", STORED)),
        ("C", Recall("SEARCH RETURN () MODSEQ {STORED}", STORED)),
        ("C", "SEARCH RETURN (COUNT) MODSEQ 9223372036854775807"),
    ], deliberate=MODSEQ),
]


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-condstore")) as pair:
        yield pair


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_script(differential, script):
    """RFC 7162 3.1 (CONDSTORE) and 3.2 (QRESYNC): the same answers as Dovecot's."""
    differential.run(script)
