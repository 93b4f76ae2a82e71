"""REPLACE (RFC 8508) against Dovecot.

Debian's Dovecot 2.3.19 does not implement REPLACE: it does not advertise it and answers
``BAD Unknown command`` (checked below, so that a Dovecot that gains it fails here and gets
the scripts compared directly).  Until then Dovecot judges REPLACE's *outcome*: RFC 8508 1
describes REPLACE as the one-command form of APPEND, STORE ``\\Deleted`` and (UID) EXPUNGE, so
each script is played on our server with REPLACE and on Dovecot with those three commands in
its place, and everything the sessions see *afterwards* -- another session's NOOP (EXPUNGE,
EXISTS), the mailboxes' messages, UIDs, flags and octets, STATUS -- must be the same.  The
responses to REPLACE itself are judged by RFC 8508's examples in tests/test_imap_replace.py.
"""

from __future__ import annotations

import re

import pytest
from differential import PASSWORD, Session, append, plus, servers, transcript_lines

from tests.mailgen import message

NEW = message(99, subject="saved again")


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-replace")) as pair:
        yield pair


def setup(selected: str) -> list:
    return [("A", append("Drafts", message(1), "\\Draft")),
            ("A", append("Drafts", message(2), "\\Draft")),
            ("A", append("Drafts", message(3), "\\Draft")),
            ("A", f"SELECT {selected}"), ("B", f"SELECT {selected}"), ("C", "SELECT Sent")]


AFTER = [("B", "NOOP"), ("C", "NOOP"), ("A", "NOOP"),
         ("A", "FETCH 1:* (UID FLAGS BODY.PEEK[])"), ("B", "FETCH 1:* (UID FLAGS)"),
         ("C", "FETCH 1:* (UID FLAGS BODY.PEEK[])"),
         # Each STATUS from a session on the other mailbox: STATUS of the selected one is
         # CLIENTBUG to Dovecot (RFC 9051 6.3.11 advises against it).
         ("C", "STATUS Drafts (MESSAGES UIDNEXT UNSEEN)"),
         ("A", "STATUS Sent (MESSAGES UIDNEXT UNSEEN)")]

# (name, mailbox selected, REPLACE command up to its literal, UID of the replaced message,
#  target mailbox)
CASES = [
    ("seq-same-mailbox", "Drafts", "REPLACE 2 Drafts (\\Seen \\Draft) ", 2, "Drafts"),
    ("uid-same-mailbox", "Drafts", "UID REPLACE 3 Drafts (\\Draft) ", 3, "Drafts"),
    ("uid-to-sent", "Drafts", "UID REPLACE 1 Sent (\\Seen) ", 1, "Sent"),
    ("seq-to-sent-dated", "Drafts",
     'REPLACE 1 Sent (\\Seen) "01-Jan-2015 00:05:00 -0500" ', 1, "Sent"),
]


def equivalent(command: str, uid: int, target: str) -> list:
    """RFC 8508 1: what a client without REPLACE sends instead."""
    rest = command.split(" ", 3 if command.startswith("UID") else 2)[-1]
    extras = rest[len(target):].strip()
    head = f"APPEND {target}" + (f" {extras}" if extras else "") + " "
    return [("A", (head, plus(NEW))),
            ("A", f"UID STORE {uid} +FLAGS.SILENT (\\Deleted)"),
            ("A", f"UID EXPUNGE {uid}")]


def untagged(lines: list[str]) -> list[str]:
    return [re.sub(r"\b([ABC])\d+ ", r"\1 ", line) for line in lines]


def play(differential, target, steps: list) -> list:
    from differential import Script
    user = f"r{next(differential._users)}"
    target.add_user(user, PASSWORD)
    return differential.play(target, Script("replace", steps), user)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_outcome_matches_dovecot(differential, case):
    """RFC 8508 1, 3.4: after REPLACE (ours) and after APPEND + STORE \\Deleted + UID EXPUNGE
    (Dovecot), every session sees the same thing."""
    _name, selected, command, uid, target = case
    ours = play(differential, differential.ours,
                setup(selected) + [("A", (command, plus(NEW)))] + AFTER)
    theirs = play(differential, differential.dovecot,
                  setup(selected) + equivalent(command, uid, target) + AFTER)
    assert ours[-len(AFTER) - 1].responses[-1].status == b"OK", transcript_lines(ours)
    from differential import Script
    a, b = differential.normalised(Script("replace", []), ours[-len(AFTER):],
                                   theirs[-len(AFTER):])
    # The tags differ (Dovecot's session sent two commands more): numbered from here on.
    assert untagged(a) == untagged(b)


def test_dovecot_does_not_implement_replace(differential):
    """Why REPLACE's own responses are not compared: Debian's Dovecot 2.3.19 does not advertise
    REPLACE (RFC 8508 3.1) and answers BAD to it.  Should a newer one implement it, this fails
    and the scripts above should play REPLACE on both servers."""
    differential.dovecot.add_user("replace-caps", PASSWORD)
    session = Session("A", differential.dovecot.port)
    session.conn.read_response()
    session.play(f"LOGIN replace-caps {PASSWORD}")
    caps = session.play("CAPABILITY")
    session.play("SELECT INBOX")
    answer = session.play(("REPLACE 1 INBOX ", plus(NEW)))
    session.conn.close()
    line = next(r for r in caps.responses if r.kind == "data")
    assert b"REPLACE" not in line.data[1:]
    assert [r.status for r in answer.responses if r.kind == "tagged"] == [b"BAD"]
