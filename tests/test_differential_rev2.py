"""UTF8=ACCEPT (RFC 6855) and IMAP4rev2 (RFC 9051) against Dovecot.

Debian's Dovecot 2.3.19 implements neither: it advertises neither capability and ignores
``ENABLE UTF8=ACCEPT IMAP4rev2`` (no ENABLED response; checked below, so that a Dovecot that
gains them fails here and gets compared directly).  Its IMAP4rev1, which both leave in
place for clients that do not enable them, judges two things instead:

* what a client that has **not** enabled UTF-8 sees of mailboxes named by one that has:
  the names in modified UTF-7 (RFC 3501 5.1.3, RFC 6855 3), in LIST, LSUB, STATUS, SELECT,
  COPY and APPEND -- ours named in UTF-8, Dovecot's (which refuses 8-bit names) in modified
  UTF-7, then the same IMAP4rev1 session compared word for word;
* that ENABLE UTF8=ACCEPT changes nothing but the spelling of names (RFC 6855 3): a session
  of ours with UTF-8 names against Dovecot's IMAP4rev1 session with the same names in
  modified UTF-7, compared after our names are spelt in modified UTF-7 -- including the
  ENVELOPE and BODYSTRUCTURE of a message with raw UTF-8 header fields, which neither server
  downgrades (RFC 6855 5 leaves it optional).

IMAP4rev2's own responses (no RECENT, ESEARCH for SEARCH, LIST at SELECT, OLDNAME) have no
judge in Dovecot 2.3: tests/test_imap_rev2.py checks them against RFC 9051's text and
examples, and tests/test_imap_rev2_clients.py with imapclient and imaplib.  What Dovecot can
judge is that IMAP4rev2 changes nothing *else*: an IMAP4rev2 session of ours, with the
differences RFC 9051 Appendix E lists undone, must match Dovecot's IMAP4rev1 session (the
last test here).
"""

from __future__ import annotations

import pytest
import twisted.mail.imap4  # noqa: F401  (registers the "imap4-utf-7" codec)
from differential import PASSWORD, Script, Session, _show, append, date, plus, servers
from mailgen import message

UTF8_HEADERS = ("From: J\u00f6rg M\u00fcller <j\u00f6rg@b\u00fccher.example>\r\n"
                "To: =?utf-8?q?Bj=C3=B6rn?= <bjorn@example.com>\r\n"
                "Subject: Gr\u00fc\u00dfe aus K\u00f6ln\r\nMessage-ID: <u8@test>\r\n"
                "Date: Sat, 21 Nov 2026 12:00:00 +0000\r\nMIME-Version: 1.0\r\n"
                "Content-Type: text/plain; charset=utf-8\r\n\r\nHall\u00f6chen\r\n").encode()

NAMES = ["Gr\u00fc\u00dfe/Tom & Jerry", "Gr\u00fc\u00dfe", "\u65e5\u672c\u8a9e",
         "R&D", "Entw\u00fcrfe"]
"""The names of the scripts, longest first where one is a prefix of another."""


CAPABILITIES_JUDGED_HERE = {"IMAP4rev2", "UTF8=ACCEPT"}
"""Advertised by us, not by Dovecot 2.3 (test_dovecot_has_neither): judged here by
translation, and by RFC-cited transcripts in tests/test_imap_rev2.py and test_imap_utf8.py."""


def mutf7(name: str) -> str:
    return name.encode("imap4-utf-7").decode("ascii")


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-rev2")) as pair:
        yield pair


def _new_user(differential, *targets) -> str:
    """A fresh account of one name on each of ``targets`` (transcripts show the LOGIN)."""
    user = f"u8-{next(differential._users)}"
    for target in targets:
        target.add_user(user, PASSWORD)
    return user


def test_dovecot_has_neither(differential):
    """Why the scripts below compare by translation: Debian's Dovecot 2.3.19 advertises
    neither IMAP4rev2 nor UTF8=ACCEPT, and its ENABLE of them enables nothing (RFC 5161 3.1:
    no ENABLED for capabilities it does not know).  Ours advertises both and enables both."""
    answers = {}
    for target in (differential.dovecot, differential.ours):
        user = _new_user(differential, target)
        session = Session("A", target.port)
        session.conn.read_response()
        session.play(f"LOGIN {user} {PASSWORD}")
        caps = next(r for r in session.play("CAPABILITY").responses if r.kind == "data")
        enable = session.play("ENABLE UTF8=ACCEPT IMAP4rev2")
        session.conn.close()
        answers[target.name] = (set(caps.data[1:]), [
            r.data for r in enable.responses if r.kind == "data"])
    caps, enabled = answers["dovecot"]
    assert not caps & {b"IMAP4rev2", b"UTF8=ACCEPT"} and enabled == []
    caps, enabled = answers["ours"]
    assert {b"IMAP4rev2", b"UTF8=ACCEPT"} <= caps
    assert enabled == [[b"ENABLED", b"UTF8=ACCEPT", b"IMAP4rev2"]]


def _quoted(name: str, utf8: bool) -> str:
    return '"' + (octets(name) if utf8 else mutf7(name)) + '"'


def octets(text: str) -> str:
    """``text`` as the harness sends it (it writes commands as latin-1): its UTF-8 octets."""
    return text.encode("utf-8").decode("latin-1")


def _to_utf8(steps: list) -> list:
    return [(label, octets(action) if isinstance(action, str) else action)
            for label, action in steps]


def naming_steps(utf8: bool) -> list:
    """Session U names mailboxes: in UTF-8 after ENABLE on ours, in modified UTF-7 on
    Dovecot (which ignores the ENABLE)."""
    tom, gruss, japan, rd = (_quoted(n, utf8) for n in NAMES[:4])
    return [("U", "ENABLE UTF8=ACCEPT"),
            ("U", f"CREATE {gruss}"),  # not a placeholder parent on Dovecot's side
            ("U", f"CREATE {tom}"),
            ("U", f"CREATE {japan}"),
            ("U", f"CREATE {rd}"),
            ("U", f"SUBSCRIBE {tom}"),
            ("U", f"SUBSCRIBE {rd}"),
            ("U", append(rd, message(1), "\\Seen", date(1))),
            ("U", append(rd, UTF8_HEADERS, "", date(2)))]


REV1_VIEW = [
    ("A", 'LIST "" "*"'),
    ("A", 'LIST "" "Gr&APwA3w-e/%"'),
    ("A", 'LSUB "" "*"'),
    ("A", 'LIST (SUBSCRIBED) "" "*"'),
    ("A", 'LIST "" "%" RETURN (STATUS (MESSAGES UNSEEN))'),
    ("A", 'STATUS "R&-D" (MESSAGES UIDNEXT UNSEEN)'),
    ("A", 'STATUS "&ZeVnLIqe-" (MESSAGES)'),
    ("A", 'SELECT "R&-D"'),
    ("A", "FETCH 1:* (FLAGS ENVELOPE BODYSTRUCTURE)"),
    ("A", 'COPY 1:2 "&ZeVnLIqe-"'),
    ("A", 'STATUS "&ZeVnLIqe-" (MESSAGES)'),
    ("A", append('"Gr&APwA3w-e/Tom &- Jerry"', message(3), "", date(3))),
    ("A", 'STATUS "Gr&APwA3w-e/Tom &- Jerry" (MESSAGES UIDNEXT)'),
    ("A", 'SELECT "R&D"'),
    ("A", 'RENAME "&ZeVnLIqe-" "Entw&APw-rfe"'),
    ("A", 'LIST "" "Entw*"'),
]


LIST_DIFFERENCES = ("list-extra-attributes", "dovecot-marked",
                    "dovecot-lsub-special-use")
"""The general LIST differences of docs/differential.md (none is new here)."""


def _compare_tail(differential, name: str, ours, theirs, tail: int, deliberate=()) -> None:
    """Compare the last ``tail`` events of both transcripts, normalised."""
    script = Script(name, [], deliberate=deliberate)
    a, b = differential.normalised(script, ours[-tail:], theirs[-tail:])
    assert a == b, "\n".join(difflib_lines(b, a))


def difflib_lines(b: list[str], a: list[str]) -> list[str]:
    import difflib
    return list(difflib.unified_diff(b, a, "dovecot", "ours", n=3, lineterm=""))


def test_rev1_client_sees_utf8_names_in_modified_utf7(differential):
    """RFC 6855 3 and RFC 3501 5.1.3: mailboxes a UTF-8 session named are seen by an
    IMAP4rev1 session (not enabled) exactly as Dovecot shows the same names created in
    modified UTF-7: LIST, LSUB, LIST-STATUS, STATUS, SELECT, FETCH, COPY, APPEND, RENAME."""
    ours_user = theirs_user = _new_user(differential, differential.ours, differential.dovecot)
    ours = differential.play(differential.ours,
                             Script("rev1-view", naming_steps(True) + REV1_VIEW), ours_user)
    theirs = differential.play(differential.dovecot,
                               Script("rev1-view", naming_steps(False) + REV1_VIEW),
                               theirs_user)
    # The naming session on ours answered OK throughout (Dovecot's is the reference run).
    assert all(r.status == b"OK" for e in ours[:len(naming_steps(True)) + 2]
               for r in e.responses if r.kind == "tagged"), ours
    _compare_tail(differential, "rev1-view", ours, theirs, len(REV1_VIEW) + 2,
                  deliberate=LIST_DIFFERENCES)


def _translated(events) -> list:
    """Our events with every UTF-8 name spelt in modified UTF-7 -- in what was sent and in
    every string and atom of the responses -- and the ``* ENABLED UTF8=ACCEPT`` that Dovecot
    does not send dropped."""
    pairs = [(n.encode(), mutf7(n).encode()) for n in NAMES]

    def token(t):
        if isinstance(t, list):
            return [token(x) for x in t]
        if isinstance(t, bytes):
            for utf8, wire in pairs:
                if t == utf8:
                    return wire
                if t.startswith(utf8 + b"/"):
                    return wire + token(t[len(utf8):])
        return t

    for e in events:
        for utf8, wire in pairs:
            e.sent = e.sent.replace(_show(utf8), _show(wire))
        e.responses[:] = [r for r in e.responses
                          if not (r.kind == "data" and r.data and r.data[0] == b"ENABLED")]
        for r in e.responses:
            if r.data:
                r.data = token(r.data)
    return events


UTF8_SESSION = [
    ("U", 'LIST "" "*"'),
    ("U", 'LIST "" "Gr\u00fc\u00dfe/%"'),
    ("U", 'LSUB "" "*"'),
    ("U", 'LIST (SUBSCRIBED) "" "*" RETURN (STATUS (MESSAGES))'),
    ("U", 'STATUS "R&D" (MESSAGES UIDNEXT UNSEEN)'),
    ("U", 'SELECT "R&D"'),
    ("U", "FETCH 1:* (FLAGS ENVELOPE BODYSTRUCTURE BODY.PEEK[HEADER.FIELDS (FROM SUBJECT)])"),
    ("U", "SEARCH UNSEEN"),
    ("U", 'COPY 1:2 "\u65e5\u672c\u8a9e"'),
    ("U", 'STATUS "\u65e5\u672c\u8a9e" (MESSAGES)'),
    ("U", 'RENAME "\u65e5\u672c\u8a9e" "Entw\u00fcrfe"'),
    ("U", 'LIST "" "Entw*"'),
    ("U", 'DELETE "Gr\u00fc\u00dfe/Tom & Jerry"'),
    ("U", 'LIST "" "Gr*"'),
    ("U", 'SELECT "Entw\u00fcrfe"'),
]


def _to_mutf7(steps: list) -> list:
    out = []
    for label, action in steps:
        for name in NAMES:
            action = action.replace(f'"{name}', f'"{mutf7(name)}') if isinstance(
                action, str) else action
        out.append((label, action))
    return out


def test_utf8_session_differs_only_in_name_spelling(differential):
    """RFC 6855 3: enabling UTF8=ACCEPT changes how names are spelt, nothing else.  Our
    UTF-8 session and Dovecot's IMAP4rev1 session play the same commands (names in UTF-8 on
    ours, in modified UTF-7 on Dovecot); with our names respelt they agree word for word --
    the ENVELOPE of UTF-8 header fields included (RFC 6855 5: not downgraded by either)."""
    ours_user = theirs_user = _new_user(differential, differential.ours, differential.dovecot)
    ours = differential.play(differential.ours,
                             Script("utf8-session",
                                    naming_steps(True) + _to_utf8(UTF8_SESSION)),
                             ours_user)
    theirs = differential.play(differential.dovecot,
                               Script("utf8-session",
                                      naming_steps(False) + _to_mutf7(UTF8_SESSION)),
                               theirs_user)
    _compare_tail(differential, "utf8-session", _translated(ours), theirs,
                  len(naming_steps(True)) + len(UTF8_SESSION),
                  deliberate=LIST_DIFFERENCES)


def test_utf8_names_without_enable_stay_as_before(differential):
    """Without ENABLE the modified UTF-7 rules are unchanged (RFC 3501 5.1.3): ``&-`` is
    ``&``, a name that is not valid modified UTF-7 is refused, and the answers match
    Dovecot's (a plain differential script)."""
    from differential import Script as S
    differential.run(S("mutf7-unchanged", [
        ("A", 'CREATE "Tom &- Jerry"'),
        ("A", 'LIST "" "Tom*"'),
        ("A", 'CREATE "bad&name"'),
        ("A", 'CREATE "&Jjo-"'),
        ("A", 'LIST "" "&Jjo-"'),
        ("A", ('APPEND "&Jjo-" ', plus(UTF8_HEADERS))),
        ("A", 'EXAMINE "&Jjo-"'),
        ("A", "FETCH 1 (ENVELOPE BODY.PEEK[HEADER.FIELDS (SUBJECT)])"),
    ]))


# -- IMAP4rev2 by translation ------------------------------------------------------------------

def _expand(sequence_set: bytes) -> list[bytes]:
    out = []
    for part in sequence_set.split(b","):
        low, _, high = part.partition(b":")
        out += [b"%d" % n for n in range(int(low), int(high or low) + 1)]
    return out


def _verb(event) -> str:
    words = event.sent.split(" ")
    return words[1].upper() if len(words) > 1 else ""


def _without_recent(events) -> list:
    """RECENT responses and \\Recent flags dropped (IMAP4rev2 has neither, and which session
    of the two is told of a message first differs once one of them is IMAP4rev2)."""
    for e in events:
        e.responses[:] = [r for r in e.responses
                          if not (r.kind == "data" and r.data[1:2] == [b"RECENT"])]
        for r in e.responses:
            if r.kind == "data" and r.data[1:2] == [b"FETCH"] and isinstance(r.data[2], list):
                items = r.data[2]
                for i in range(0, len(items) - 1, 2):
                    if items[i] == b"FLAGS" and isinstance(items[i + 1], list):
                        items[i + 1] = [f for f in items[i + 1] if f != b"\\Recent"]
    return events


def _rev1_view_of_rev2(events) -> list:
    """Our IMAP4rev2 transcript as IMAP4rev1 would have it (RFC 9051 Appendix E, undone):
    no ENABLED (Dovecot enables nothing), no LIST at SELECT/EXAMINE or after RENAME/CREATE,
    ESEARCH (TAG ...) [UID] ALL set back into SEARCH n..."""
    for e in events:
        kept = []
        for r in e.responses:
            if r.kind == "data" and r.data[:1] == [b"ENABLED"]:
                continue
            if r.kind == "data" and r.data[:1] == [b"LIST"] and _verb(e) in (
                    "SELECT", "EXAMINE", "RENAME", "CREATE"):
                continue
            if r.kind == "data" and r.data[:1] == [b"ESEARCH"] and " RETURN " not in \
                    e.sent.upper():
                rest = [t for t in r.data[1:] if not isinstance(t, list) and t != b"UID"]
                numbers = _expand(rest[1]) if rest[:1] == [b"ALL"] else []
                r.data = [b"SEARCH", *numbers]
            kept.append(r)
        e.responses[:] = kept
    return _without_recent(events)


def _without_unseen_code(events) -> list:
    """Dovecot's IMAP4rev1 SELECT/EXAMINE says OK [UNSEEN n]; IMAP4rev2 has no such line
    (session A's only: B is IMAP4rev1 on both servers)."""
    for e in events:
        if e.client == "A" and _verb(e) in ("SELECT", "EXAMINE"):
            e.responses[:] = [r for r in e.responses
                              if not (r.kind == "status" and r.code and r.code[0] == b"UNSEEN")]
    return _without_recent(events)


REV2_SESSION = [
    ("A", "ENABLE IMAP4rev2"),
    *[("B", append("INBOX", message(n), "\\Seen" if n % 2 else "", date(n)))
      for n in range(1, 6)],
    ("A", "SELECT INBOX"),
    ("A", "FETCH 1:* (UID FLAGS)"),
    ("A", "SEARCH UNSEEN"),
    ("A", "UID SEARCH SEEN"),
    ("A", "SEARCH DELETED"),
    ("A", "SEARCH RETURN (MIN MAX COUNT) ALL"),
    ("A", "SEARCH CHARSET UTF-8 SUBJECT message"),
    ("B", "SELECT INBOX"),
    ("B", append("INBOX", message(6), "", date(6))),
    ("A", "NOOP"),
    ("A", "STORE 2 +FLAGS (\\Deleted \\Flagged)"),
    ("B", "NOOP"),
    ("A", "EXPUNGE"),
    ("B", "NOOP"),
    ("A", "UID SEARCH ALL"),
    ("A", "STATUS Sent (MESSAGES UIDNEXT UNSEEN)"),
    ("A", "CREATE Work/Reports"),
    ("A", "RENAME Work/Reports Work/Done"),
    ("A", 'LIST "" "Work*"'),
    ("A", "EXAMINE Work/Done"),
    ("A", "SELECT INBOX"),
    ("A", "MOVE 1 Trash"),
    ("A", "UID EXPUNGE 1:*"),
    ("A", "FETCH 1:* (FLAGS)"),
]


def test_rev2_session_differs_only_as_rfc9051_says(differential):
    """RFC 9051 Appendix E against Dovecot's IMAP4rev1: an IMAP4rev2 session of ours and
    Dovecot's IMAP4rev1 session play the same commands (Dovecot ignores the ENABLE); with
    the differences Appendix E lists undone -- RECENT and \\Recent (dropped on both sides,
    for both sessions: which one is told first differs), OK [UNSEEN] (Dovecot's), the LIST
    at SELECT and after RENAME/CREATE and ESEARCH instead of SEARCH (ours) -- the
    transcripts agree word for word, so IMAP4rev2 changes nothing else."""
    user = _new_user(differential, differential.ours, differential.dovecot)
    ours = differential.play(differential.ours, Script("rev2", REV2_SESSION), user)
    theirs = differential.play(differential.dovecot, Script("rev2", REV2_SESSION), user)
    # The responses really were IMAP4rev2's before the translation.
    flat = [r.data[:1] for e in ours for r in e.responses if r.kind == "data"]
    assert [b"ESEARCH"] in flat and [b"LIST"] in flat and [b"SEARCH"] not in flat
    _compare_tail(differential, "rev2", _rev1_view_of_rev2(ours),
                  _without_unseen_code(theirs), len(ours),
                  deliberate=("implicit-parents", "unsolicited-fetch-uid"))
