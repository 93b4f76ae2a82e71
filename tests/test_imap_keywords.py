"""A keyword is announced (untagged FLAGS and PERMANENTFLAGS) before any FETCH shows it.

RFC 3501 7.2.6: FLAGS lists the flags applicable to the mailbox; 7.4.2: FETCH FLAGS shows a
message's flags; 2.3.2: keywords are defined by the server's implementation.  A client (and
the issue 11 load test) takes a keyword in a FETCH that no FLAGS listed as a protocol error.
So: in the session that sets it (STORE, .SILENT too), in every other session with the mailbox
selected on its next refresh (NOOP, IDLE, APPEND, COPY, MOVE, EXPUNGE; read-only sessions get
``PERMANENTFLAGS ()``), in another ``imapserver`` process on the same store, and when a
message brings it (APPEND, COPY, MOVE).  Each conversation is also played against Dovecot and
must give the same responses in the same order (the differential harness, tests/differential.py,
says what is normalised).

One deliberate difference: a keyword that lived only on messages expunged before a session
refreshed is never announced to it (no FETCH can show it); Dovecot keeps one keyword list per
mailbox and announces it anyway.  The scripts let such sessions refresh in between.  And where
one refresh reports both a flag change and an expunge, Dovecot sends the FETCH first (numbered
as before the EXPUNGE), we send it after (numbered after it; RFC 3501 7.4.1 allows both): the
scripts do not mix the two.
"""

from __future__ import annotations

import itertools
import random
import threading
import time

import pytest
from differential import (
    PASSWORD,
    Differential,
    Done,
    Event,
    Idle,
    Script,
    Session,
    Target,
    WaitFor,
    append,
    command_text,
    servers,
    word,
)
from dovecot import Dovecot
from imapproc import ServerProcess, make_users

MSG = b"From: a@example.com\r\nSubject: hi\r\nMessage-ID: <k@example.com>\r\n\r\nbody\r\n"


def msg(mailbox: str, flags: str = "") -> tuple:
    """APPEND of :data:`MSG` (a LITERAL+ literal)."""
    return append(mailbox, MSG, flags)


# Three messages in INBOX, one with a keyword in Other; A and B select INBOX, C examines it.
SETUP = [("A", "CREATE Other"), ("A", msg("INBOX", "\\Seen")), ("A", msg("INBOX")),
         ("A", msg("INBOX", "\\Seen")), ("A", msg("Other", "$inother")),
         ("A", "SELECT INBOX"), ("B", "SELECT INBOX"), ("C", "EXAMINE INBOX")]

SCRIPTS = [
    # STORE: the storing session hears FLAGS first, also for .SILENT and UID STORE; the
    # others on their next NOOP (C read-only: PERMANENTFLAGS ()).
    Script("store", SETUP + [
        ("A", "STORE 1 +FLAGS ($foo)"), ("A", "STORE 1 +FLAGS.SILENT ($bar)"),
        ("A", "NOOP"), ("B", "NOOP"), ("C", "NOOP"),
        ("A", "UID STORE 3 +FLAGS (baz)"), ("A", "STORE 2 FLAGS ($foo)"),
        ("A", "STORE 1 -FLAGS ($foo)"), ("B", "NOOP"), ("C", "NOOP"), ("A", "NOOP")],
        deliberate=("unsolicited-fetch-uid",)),
    # A message that brings a keyword: APPEND by another session, COPY and MOVE from another
    # mailbox, MOVE within the mailbox, EXPUNGE in the session that also learns a keyword.
    Script("arrivals", SETUP + [
        ("B", msg("INBOX", "$new1")), ("A", "NOOP"), ("C", "NOOP"),
        ("A", msg("INBOX", "$new2")), ("B", "NOOP"), ("C", "NOOP"),
        ("D", "SELECT Other"), ("D", "COPY 1 INBOX"), ("A", "NOOP"), ("B", "NOOP"),
        ("D", "STORE 1 +FLAGS ($moved)"), ("D", "UID MOVE 1 INBOX"), ("A", "NOOP"),
        ("B", "NOOP"), ("C", "NOOP"),
        ("B", "STORE 2 +FLAGS ($self \\Deleted)"), ("A", "MOVE 2 INBOX"), ("B", "NOOP"),
        ("C", "NOOP"),
        ("B", "STORE 1 +FLAGS ($gone \\Deleted)"), ("C", "NOOP"), ("A", "EXPUNGE"),
        ("B", "NOOP"), ("C", "NOOP")],
        deliberate=("unsolicited-fetch-uid",)),
    # IDLE: the push carries FLAGS before the FETCH or EXISTS that needs it.
    Script("idle", SETUP + [
        ("B", Idle()), ("A", "STORE 2 +FLAGS ($idle1)"), ("B", WaitFor(r"FETCH")),
        ("B", Done()),
        ("B", Idle()), ("A", msg("INBOX", "$idle2")), ("B", WaitFor(r"EXISTS")),
        ("B", Done()), ("C", "NOOP")],
        deliberate=("unsolicited-fetch-uid",)),
]


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("keywords")) as pair:
        yield pair


@pytest.fixture
def data_dir(tmp_path):
    path = str(tmp_path / "data")
    make_users(path, ("setup", PASSWORD))
    return path


def unannounced_keywords(events: list[Event]) -> list[tuple[str, str, bytes]]:
    """Each FETCH response that shows a keyword its session was not told of by an earlier
    untagged FLAGS (RFC 3501 7.2.6): (session, command, response)."""
    known: dict[str, set[bytes]] = {}
    bad = []
    for e in events:
        for r in e.responses:
            if r.kind != "data" or not r.data:
                continue
            if word(r.data[0]) == b"FLAGS" and len(r.data) == 2:
                known[e.client] = set(r.data[1])
            elif len(r.data) == 3 and word(r.data[1]) == b"FETCH":
                items = r.data[2]
                shown = [f for k in range(0, len(items) - 1, 2)
                         if word(items[k]) == b"FLAGS" for f in items[k + 1]]
                if any(not f.startswith(b"\\") and f not in known.get(e.client, set())
                       for f in shown):
                    bad.append((e.client, e.sent, r.raw))
    return bad


_users = itertools.count(1)


def ours_only(pair: Differential, steps: list) -> list[Event]:
    """``steps`` played on our server alone, on a fresh account."""
    user = f"kw{next(_users)}"
    pair.ours.add_user(user, PASSWORD)
    return pair.play(pair.ours, Script("ours", steps), user)


def step(events: list[Event], client: str, text: str) -> list[bytes]:
    """The raw responses (without CRLF) of the step of ``client`` that sent ``text``."""
    found = [e for e in events if e.client == client and command_text(e) == text]
    assert len(found) == 1, (client, text)
    return [r.raw for r in found[0].responses]


def check(pair: Differential, script: Script) -> None:
    """No FETCH shows an unannounced keyword, on either server, and the transcripts agree."""
    ours, theirs = pair.transcripts(script)
    assert unannounced_keywords(ours) == []
    assert unannounced_keywords(theirs) == []   # the check itself agrees with Dovecot
    pair.compare(script, ours, theirs)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_keywords_are_announced_as_dovecot_does(differential, script):
    """RFC 3501 7.2.6, 7.4.2: no FETCH shows an unannounced keyword, and the responses, in
    order, are Dovecot's (tests/differential.py says what is normalised)."""
    check(differential, script)


def test_store_announces_the_keyword_before_its_fetch(differential):
    """RFC 3501 7.2.6 (issue 11, case 4): the exact bytes in the storing session."""
    out = ours_only(differential, SETUP + [("A", "STORE 1 +FLAGS ($foo)")])
    assert step(out, "A", "STORE 1 +FLAGS ($foo)")[:-1] == [
        b"* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft $foo)",
        b"* OK [PERMANENTFLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft $foo \\*)]"
        b" Flags permitted",
        b"* 1 FETCH (FLAGS ($foo \\Seen \\Recent))"]  # recent to this session (2.3.2)


def test_a_session_in_another_process_learns_the_keyword(data_dir, tmp_path):
    """RFC 3501 7.2.6 across processes: B is served by a second imapserver on the same store
    and learns A's new keywords on NOOP, in IDLE and from APPEND -- the same responses as two
    sessions of one Dovecot."""
    script = Script("other-process", SETUP + [
        ("A", "STORE 1 +FLAGS ($far)"), ("B", "NOOP"),
        ("B", Idle()), ("A", "STORE 3 +FLAGS ($far2)"), ("B", WaitFor(r"FETCH")),
        ("B", Done()), ("A", msg("INBOX", "$far3")), ("B", "NOOP"), ("C", "NOOP")],
        deliberate=("unsolicited-fetch-uid",))
    with ServerProcess(data_dir) as one, ServerProcess(data_dir) as two, \
            Dovecot(tmp_path / "dovecot", like_ours=True) as dovecot:
        check(Differential(
            Target("ours", one.port, lambda name, pw: make_users(data_dir, (name, pw)),
                   {"B": two.port, "C": two.port}),
            Target("dovecot", dovecot.port, dovecot.add_user)), script)


def test_fetch_announces_a_keyword_set_by_another_session(differential):
    """RFC 3501 7.2.6, 7.4.2: B FETCHes the flags of a message A gave a new keyword, before
    any refresh told B of it: FLAGS (and PERMANENTFLAGS) come before that FETCH, and B's
    next NOOP does not announce it again.  (Dovecot also refreshes the other session's flag
    changes during FETCH and so repeats the FETCH; we report that change on NOOP instead,
    as RFC 3501 5.2 allows; only the announcement is checked here.)"""
    out = ours_only(differential, SETUP + [
        ("A", "STORE 2 +FLAGS ($elsewhere)"), ("B", "FETCH 1:3 (FLAGS)"), ("B", "NOOP"),
        ("C", "FETCH 2 (UID FLAGS)"), ("A", "STORE 2 +FLAGS ($seen_by_fetch)"),
        ("B", "FETCH 2 BODY[]")])
    assert unannounced_keywords(out) == []
    fetch = step(out, "B", "FETCH 1:3 (FLAGS)")
    assert fetch[0].startswith(b"* FLAGS (") and b"$elsewhere" in fetch[0]
    assert fetch[1].startswith(b"* OK [PERMANENTFLAGS (") and b"$elsewhere" in fetch[1]
    assert fetch[2:-1] == [b"* 1 FETCH (FLAGS (\\Seen))", b"* 2 FETCH (FLAGS ($elsewhere))",
                           b"* 3 FETCH (FLAGS (\\Seen))"]
    assert not any(r.startswith(b"* FLAGS") for r in step(out, "B", "NOOP"))
    examine = step(out, "C", "EXAMINE INBOX")
    assert examine[1] == b"* OK [PERMANENTFLAGS ()] Read-only mailbox"
    # FETCH BODY[] sets \Seen and so shows the flags: the keyword is announced first too.
    body = step(out, "B", "FETCH 2 BODY[]")
    assert b"$seen_by_fetch" in body[0] and body[2].startswith(b"* 2 FETCH (")
    assert b"FLAGS (" in body[2] and b"$seen_by_fetch" in body[2]


def _load(port: int, plan: list, deadline: float) -> list[Event]:
    """``plan`` (commands) played by one session until ``deadline``."""
    session = Session("S", port)
    session.conn.read_response()
    events = [session.play(f"LOGIN setup {PASSWORD}")]
    try:
        for action in plan:
            if len(events) > 1 and time.monotonic() > deadline:
                break
            events.append(session.play(action))
    finally:
        session.conn.close()
    return events


def test_no_unannounced_keyword_under_a_random_load(data_dir):
    """RFC 3501 7.2.6 under load (issue 11: every protocol error of its 20-client run was
    this): six sessions on two server processes store, fetch, append, copy and move (into
    the mailbox itself too) with random keywords for a few seconds; no FETCH of any session
    shows a keyword its session was not told of first."""
    rng = random.Random(11)
    plans = []
    for _ in range(6):
        steps: list = ["SELECT INBOX"]
        for _ in range(300):
            kw, uid = f"$k{rng.randrange(12)}", rng.randint(1, 40)
            steps.append(rng.choice([
                f"UID STORE {uid} +FLAGS ({kw})", f"UID STORE {uid} +FLAGS.SILENT ({kw})",
                f"UID STORE {uid} -FLAGS ({kw})", "FETCH 1:* (FLAGS)", "NOOP",
                msg("INBOX", kw), f"UID MOVE {uid} INBOX", f"UID COPY {uid} INBOX",
                f"UID FETCH {uid} (UID FLAGS)", "NOOP"]))
        plans.append(steps)
    results: list = [None] * len(plans)
    with ServerProcess(data_dir) as one, ServerProcess(data_dir) as two:
        _load(one.port, [msg("INBOX")] * 5, time.monotonic() + 60)
        deadline = time.monotonic() + 3.0   # a few seconds of load in all

        def run(i: int) -> None:
            results[i] = _load((one, two)[i % 2].port, plans[i], deadline)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(plans))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert all(r is not None for r in results)
    assert sum(len(r) for r in results) > 60           # the load did run
    for transcript in results:
        assert unannounced_keywords(transcript) == []
        tagged = [r for e in transcript for r in e.responses if r.kind == "tagged"]
        assert all(r.status == b"OK" for r in tagged), [r.raw for r in tagged]


@pytest.mark.parametrize("log_kept", [True, False])
def test_a_refresh_announces_new_keywords_once(tmp_path, log_kept):
    """RFC 3501 7.2.6 in the session's refresh, both when the change log reaches back and
    when it was trimmed and the session rescans the mailbox: keywords new to the session are
    returned (all announced ones, sorted) before the FETCH that shows them, and only once."""
    from imapserver.imap.selected import SelectedMailbox
    from mailstore.backends.embedded import EmbeddedBackend
    from mailstore.store import MailStore
    from tests.mailgen import message

    store = MailStore(EmbeddedBackend(str(tmp_path / "s")))
    store.create_user("u", "pw")
    for i in range(3):
        store.append("u", "INBOX", message(i), flags=["$old"] if i == 0 else [])
    inbox = store.mailbox("u", "INBOX")
    session = SelectedMailbox(store, inbox, readonly=False)
    session.load()
    assert session.announced == {"$old"}
    uids = list(session.uids)
    store.store_flags(inbox, [uids[1]], ["$b"], "add")
    store.append("u", "INBOX", message(9), flags=["$a"])
    if not log_kept:
        store.changes.trim(inbox.id, store.changes.marks(inbox.id)[1] + 1)
        assert store.changes_since(inbox, session.index.marks) is None
    changes = session.refresh()
    assert changes.keywords == ["$a", "$b", "$old"]
    assert [(seq, names) for seq, _uid, names, _m in changes.flags] == [(2, {"$b"})]
    assert session.refresh().keywords is None
    assert session.new_keywords(["$b", "\\Seen"]) is None
    assert session.new_keywords(["$c"]) == ["$a", "$b", "$c", "$old"]
    store.close()
