"""\\Recent over IMAP (RFC 3501 2.3.2, 6.3.1, 6.3.2, 6.3.10, 6.4.4, 6.4.5, 6.4.7, 7.3.2), with
several sessions on one server and on two ``imapserver`` processes sharing one store.

RFC 3501 2.3.2: a message is \\Recent in exactly one session, the first to be told of it --
at SELECT or in an untagged update while it has the mailbox selected -- and in no other;
EXAMINE (6.3.2) must not take \\Recent away from anyone.  SELECT reports the count (6.3.1),
RECENT updates accompany EXISTS when the count changes (7.3.2), FETCH FLAGS shows the flag,
SEARCH RECENT/NEW/OLD (6.4.4) select by it, STATUS RECENT (6.3.10) counts it, COPY sets it on
the copy (6.4.7), and STORE cannot (it is not in PERMANENTFLAGS).  The last test plays the same
conversation against Dovecot and compares the answers.
"""

from __future__ import annotations

import re
import threading
import time

import pytest

from tests.dovecot import Dovecot, RawImap
from tests.imapproc import ServerProcess, make_users
from tests.mailgen import message

USER, PASSWORD = "test", "secret"  # as tests/dovecot.py's RawImap logs in


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("recent") / "store")
    make_users(path, (USER, PASSWORD))
    return path


@pytest.fixture(scope="module")
def server(data_dir):
    with ServerProcess(data_dir) as proc:
        yield proc


_names = iter(range(1_000_000))


@pytest.fixture
def box(server):
    """A fresh mailbox name for each test: \\Recent is state of the mailbox."""
    name = f"R{next(_names)}"
    session = connect(server.port)
    session.command(b"CREATE " + name.encode())
    session.close()
    return name


def connect(port: int) -> RawImap:
    session = RawImap(port)
    session.login()
    return session


def close_all(*sessions: RawImap) -> None:
    for session in sessions:
        try:
            session.close()
        except (OSError, AssertionError):  # a test that failed may leave one mid-command
            session.sock.close()


def lines(responses: list[bytes]) -> list[bytes]:
    return [r.rstrip(b"\r\n") for r in responses]


def ok(session: RawImap, text: str, literal: bytes | None = None) -> list[bytes]:
    return lines(session.command(text.encode(), literal))


def add(session: RawImap, name: str, n: int, flags: str = "") -> list[bytes]:
    return ok(session, f"APPEND {name}{' (' + flags + ')' if flags else ''}", message(n))


def flags_of(session: RawImap) -> dict[int, bytes]:
    """uid -> the FLAGS list as sent, from FETCH 1:* (UID FLAGS)."""
    out = {}
    for line in ok(session, "FETCH 1:* (UID FLAGS)"):
        m = re.fullmatch(rb"\* \d+ FETCH \(UID (\d+) FLAGS \((.*)\)\)", line)
        assert m, line
        out[int(m.group(1))] = m.group(2)
    return out


def recent_count(responses: list[bytes]) -> int | None:
    found = [int(m.group(1)) for r in responses if (m := re.fullmatch(rb"\* (\d+) RECENT", r))]
    assert len(found) <= 1, responses
    return found[0] if found else None


def test_select_takes_recent_and_no_other_session_gets_it(server, box):
    """2.3.2, 6.3.1, 6.3.2, 6.3.10: the first SELECT gets the messages as \\Recent; EXAMINE
    before and after sees them too but takes nothing; a later SELECT gets none."""
    a, b, c = connect(server.port), connect(server.port), connect(server.port)
    try:
        add(a, box, 1)
        add(a, box, 2, "\\Seen")
        assert ok(a, f"STATUS {box} (MESSAGES RECENT)")[0] == \
            f"* STATUS {box} (MESSAGES 2 RECENT 2)".encode()
        listed = ok(a, f'LIST "" {box} RETURN (STATUS (RECENT))')   # RFC 5819 LIST-STATUS
        assert listed[-1] == f"* STATUS {box} (RECENT 2)".encode()
        examined = ok(c, f"EXAMINE {box}")
        assert recent_count(examined) == 2
        assert flags_of(c) == {1: b"\\Recent", 2: b"\\Seen \\Recent"}
        selected = ok(a, f"SELECT {box}")
        assert recent_count(selected) == 2      # EXAMINE took nothing (6.3.2)
        # \Recent is not in FLAGS or PERMANENTFLAGS (RFC 3501's example and Dovecot agree).
        assert b"* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)" in selected
        assert not any(b"PERMANENTFLAGS" in r and b"\\Recent" in r for r in selected)
        assert flags_of(a) == {1: b"\\Recent", 2: b"\\Seen \\Recent"}
        # STATUS of one's own selected mailbox counts one's own \Recent; another session's
        # STATUS counts what nobody has taken (6.3.10).
        assert ok(a, f"STATUS {box} (RECENT)")[0] == f"* STATUS {box} (RECENT 2)".encode()
        assert ok(b, f"STATUS {box} (RECENT)")[0] == f"* STATUS {box} (RECENT 0)".encode()
        listed = ok(b, f'LIST "" {box} RETURN (STATUS (RECENT))')
        assert listed[-1] == f"* STATUS {box} (RECENT 0)".encode()
        assert recent_count(ok(b, f"SELECT {box}")) == 0
        assert flags_of(b) == {1: b"", 2: b"\\Seen"}
        assert flags_of(c) == {1: b"\\Recent", 2: b"\\Seen \\Recent"}  # EXAMINE keeps its view
        # A second SELECT in the same session: the first one took them (as in Dovecot).
        assert recent_count(ok(a, f"SELECT {box}")) == 0
    finally:
        close_all(a, b, c)


def test_mail_arriving_while_selected_is_recent_to_the_first_session_told(server, box):
    """2.3.2, 7.3.2: new mail is reported with EXISTS and RECENT to the session that learns of
    it first (at NOOP here), and with EXISTS alone to the others; the appending session, when
    it has the mailbox selected, is told at once and so takes it."""
    a, b, writer = connect(server.port), connect(server.port), connect(server.port)
    try:
        add(writer, box, 1)
        assert recent_count(ok(a, f"SELECT {box}")) == 1
        assert recent_count(ok(b, f"SELECT {box}")) == 0
        add(writer, box, 2)
        assert ok(b, "NOOP") == [b"* 2 EXISTS", b"* 1 RECENT"]
        assert ok(a, "NOOP") == [b"* 2 EXISTS"]          # b was first; a's count is unchanged
        assert flags_of(a) == {1: b"\\Recent", 2: b""}
        assert flags_of(b) == {1: b"", 2: b"\\Recent"}
        # The appender has the mailbox selected: its APPEND's own update takes the message.
        ok(writer, f"SELECT {box}")
        assert add(writer, box, 3) == [b"* 3 EXISTS", b"* 1 RECENT"]
        assert ok(a, "NOOP") == [b"* 3 EXISTS"]
        assert ok(b, "NOOP") == [b"* 3 EXISTS"]
    finally:
        close_all(a, b, writer)


def test_idle_reports_recent_beside_exists(server, box):
    """RFC 2177 with 7.3.2: an IDLE session told of new mail first gets it as \\Recent."""
    a, writer = connect(server.port), connect(server.port)
    try:
        ok(a, f"SELECT {box}")
        a.sock.sendall(b"i IDLE\r\n")
        assert a.file.readline() == b"+ idling\r\n"
        add(writer, box, 1)
        assert a.file.readline() == b"* 1 EXISTS\r\n"
        assert a.file.readline() == b"* 1 RECENT\r\n"
        a.sock.sendall(b"DONE\r\n")
        assert a.file.readline().startswith(b"i OK")
        assert flags_of(a) == {1: b"\\Recent"}
    finally:
        close_all(a, writer)


def test_copy_and_move_into_the_selected_mailbox_are_recent(server, box):
    """6.4.7: "the \\Recent flag SHOULD be set" on a copy; RFC 6851 MOVE likewise.  A COPY
    into the selected mailbox itself reports it in the COPY's own updates; a copy or move by
    another session into it is reported at the next NOOP."""
    a, b = connect(server.port), connect(server.port)
    other = box + "o"
    try:
        ok(b, f"CREATE {other}")
        for n in range(3):
            add(b, other, n, "\\Seen" if n == 0 else "")
        add(a, box, 10)
        ok(a, f"SELECT {box}")
        copied = ok(a, f"COPY 1 {box}")
        assert copied == [b"* 2 EXISTS", b"* 2 RECENT"]
        ok(b, f"SELECT {other}")
        ok(b, f"COPY 1 {box}")
        ok(b, f"MOVE 2 {box}")
        assert ok(a, "NOOP") == [b"* 4 EXISTS", b"* 4 RECENT"]
        assert flags_of(a) == {1: b"\\Recent", 2: b"\\Recent", 3: b"\\Seen \\Recent",
                               4: b"\\Recent"}
        assert ok(b, f"STATUS {box} (RECENT)")[0] == f"* STATUS {box} (RECENT 0)".encode()
    finally:
        close_all(a, b)


def test_search_recent_new_old_and_unseen(server, box):
    """6.4.4: RECENT, NEW (= RECENT UNSEEN), OLD (= NOT RECENT), and with other keys."""
    a, b = connect(server.port), connect(server.port)
    try:
        add(b, box, 1)
        add(b, box, 2, "\\Seen")
        ok(b, f"SELECT {box}")                      # b takes 1 and 2
        ok(a, f"SELECT {box}")
        add(a, box, 3)                              # a takes 3 and 4 (its own APPENDs)
        add(a, box, 4, "\\Seen")
        assert ok(a, "SEARCH RECENT") == [b"* SEARCH 3 4"]
        assert ok(a, "SEARCH NEW") == [b"* SEARCH 3"]
        assert ok(a, "SEARCH OLD") == [b"* SEARCH 1 2"]
        assert ok(a, "SEARCH UNSEEN RECENT") == [b"* SEARCH 3"]
        assert ok(a, "SEARCH OR NEW SEEN") == [b"* SEARCH 2 3 4"]
        assert ok(a, "SEARCH NOT OLD SEEN") == [b"* SEARCH 4"]
        assert ok(a, "UID SEARCH RECENT SUBJECT message") == [b"* SEARCH 3 4"]
        assert ok(b, "NOOP") == [b"* 4 EXISTS"]
        assert ok(b, "SEARCH RECENT") == [b"* SEARCH 1 2"]
        assert ok(b, "SEARCH OLD") == [b"* SEARCH 3 4"]
    finally:
        close_all(a, b)


def test_recent_cannot_be_stored_and_shows_in_store_and_expunge_updates(server, box):
    """6.4.6: \\Recent cannot be set or cleared by STORE (BAD, as Dovecot); STORE's FETCH
    shows it; EXPUNGE of recent messages is followed by the new RECENT count (7.3.2)."""
    a = connect(server.port)
    try:
        add(a, box, 1)
        add(a, box, 2)
        ok(a, f"SELECT {box}")
        for text in ("STORE 1 +FLAGS (\\Recent)", "STORE 1 FLAGS (\\Recent)",
                     "STORE 1 -FLAGS (\\Recent)"):
            _, tagged = a.run(text.encode())
            assert tagged.split()[1] == b"BAD", tagged
        _, tagged = a.run(f"APPEND {box} (\\Recent)".encode(), message(3))
        assert tagged.split()[1] == b"BAD", tagged         # Dovecot refuses it too
        assert ok(a, "STORE 1 +FLAGS (\\Deleted)") == [b"* 1 FETCH (FLAGS (\\Deleted \\Recent))"]
        assert ok(a, "EXPUNGE") == [b"* 1 EXPUNGE", b"* 1 RECENT"]
        assert ok(a, "FETCH 1 (FLAGS)") == [b"* 1 FETCH (FLAGS (\\Recent))"]
    finally:
        close_all(a)


def test_two_processes_share_one_recent_watermark(tmp_path):
    """2.3.2 across frontends: sessions on two ``imapserver`` processes over one store.  Each
    message is \\Recent to exactly one of them, whether it is taken by SELECT or by an update."""
    data = str(tmp_path / "store")
    make_users(data, (USER, PASSWORD))
    with ServerProcess(data) as one, ServerProcess(data) as two:
        a, b, writer = connect(one.port), connect(two.port), connect(one.port)
        try:
            ok(writer, "CREATE Common")
            for n in range(3):
                add(writer, "Common", n)
            assert recent_count(ok(b, "SELECT Common")) == 3
            assert recent_count(ok(a, "SELECT Common")) == 0
            add(writer, "Common", 3)
            got_b, got_a = ok(b, "NOOP"), ok(a, "NOOP")
            assert (recent_count(got_a), recent_count(got_b)) == (None, 4)
            # Delivered through the other process while both have it selected: whoever looks
            # first, exactly one of them gets it.
            other_writer = connect(two.port)
            add(other_writer, "Common", 4)
            other_writer.close()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and b"* 5 EXISTS" not in ok(a, "NOOP"):
                time.sleep(0.05)
            ok(b, "NOOP")
            recent_a = [u for u, f in flags_of(a).items() if b"\\Recent" in f]
            recent_b = [u for u, f in flags_of(b).items() if b"\\Recent" in f]
            assert recent_a == [5] and recent_b == [1, 2, 3, 4]
            assert ok(writer, "STATUS Common (RECENT)")[0] == b"* STATUS Common (RECENT 0)"
        finally:
            close_all(a, b, writer)


def test_sessions_racing_on_two_processes_split_every_message_between_them(tmp_path):
    """2.3.2 under contention: four sessions, two on each of two processes, SELECT at once and
    then NOOP at once after each delivery.  Every message ends up \\Recent in exactly one of
    them, and each session's RECENT count agrees with its FETCH FLAGS."""
    data = str(tmp_path / "store")
    make_users(data, (USER, PASSWORD))
    with ServerProcess(data) as one, ServerProcess(data) as two:
        writer = connect(one.port)
        sessions = [connect(server.port) for server in (one, two, one, two)]
        try:
            ok(writer, "CREATE Race")
            for n in range(4):
                add(writer, "Race", n)

            def all_at_once(command: str) -> None:
                errors: list[BaseException] = []

                def run(session: RawImap) -> None:
                    try:
                        ok(session, command)
                    except BaseException as exc:  # reported below
                        errors.append(exc)
                threads = [threading.Thread(target=run, args=(s,)) for s in sessions]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
                assert not errors, errors

            all_at_once("SELECT Race")
            for n in range(4, 10, 2):
                add(writer, "Race", n)
                add(writer, "Race", n + 1)
                all_at_once("NOOP")
            owned = [{u for u, f in flags_of(s).items() if b"\\Recent" in f} for s in sessions]
            assert sorted(u for got in owned for u in got) == list(range(1, 11)), owned
            for session, got in zip(sessions, owned, strict=True):
                assert ok(session, "STATUS Race (RECENT)")[0] == \
                    b"* STATUS Race (RECENT %d)" % len(got)
        finally:
            close_all(writer, *sessions)


# -- the same conversation with Dovecot --------------------------------------------------------

SCRIPT = [
    # (session, command, message literal or None)
    ("A", "CREATE box", None),
    ("A", "APPEND box", 1),
    ("A", "APPEND box (\\Seen)", 2),
    ("A", "STATUS box (MESSAGES RECENT UNSEEN)", None),
    ("C", "EXAMINE box", None),
    ("C", "FETCH 1:* (FLAGS)", None),
    ("C", "SEARCH RECENT", None),
    ("A", "SELECT box", None),
    ("A", "FETCH 1:* (FLAGS)", None),
    ("A", "STATUS box (RECENT)", None),
    ("C", "NOOP", None),
    ("C", "SEARCH RECENT", None),
    ("B", "SELECT box", None),
    ("B", "APPEND box", 3),
    ("A", "NOOP", None),
    ("C", "NOOP", None),
    ("C", "FETCH 1:* (FLAGS)", None),
    ("A", "FETCH 1:* (UID FLAGS)", None),
    ("B", "FETCH 1:* (UID FLAGS)", None),
    ("A", "SEARCH RECENT", None),
    ("A", "SEARCH NEW", None),
    ("A", "SEARCH OLD", None),
    ("A", "SEARCH UNSEEN RECENT", None),
    ("A", "STORE 3 +FLAGS (\\Flagged)", None),
    ("A", "STORE 1 +FLAGS (\\Flagged)", None),
    ("A", "STORE 3 +FLAGS (\\Recent)", None),
    ("A", "COPY 1 box", None),
    ("A", "FETCH 1:* (UID FLAGS)", None),
    ("B", "NOOP", None),
    ("A", "STATUS box (RECENT)", None),
    ("B", "CLOSE", None),
    ("A", "CLOSE", None),
    ("A", "STATUS box (RECENT MESSAGES)", None),
    ("B", "APPEND box", 4),
    ("B", "STATUS box (RECENT MESSAGES)", None),
    ("C", "NOOP", None),
    ("C", "FETCH 1:* (FLAGS)", None),
    ("B", "EXAMINE box", None),
    ("A", "SELECT box", None),
    ("A", "STORE 1:* +FLAGS (\\Deleted)", None),
    ("A", "EXPUNGE", None),
]


def normalise(response: bytes) -> bytes:
    """What may differ between servers: tags and the text after a tagged status word, the
    text after an untagged OK's response code, UIDVALIDITY values, the order of flags in a
    FETCH FLAGS list (a set, RFC 3501 7.4.2) and of the items of a STATUS response (6.3.10:
    Dovecot answers in an order of its own, we in the order asked)."""
    line = response.rstrip(b"\r\n")
    if not line.startswith(b"* "):
        return line.split(b" ")[1]                      # the status word alone
    line = re.sub(rb"(UIDVALIDITY) \d+", rb"\1 N", line)
    line = re.sub(rb"^(\* (?:OK|NO|BAD) \[[^\]]*\]).*", rb"\1", line)
    line = re.sub(rb"^(\* STATUS \S+ )\((.*)\)$", lambda m: m.group(1) + b"(" + b" ".join(
        sorted(re.findall(rb"\S+ \d+", m.group(2)))) + b")", line)
    return re.sub(rb"FLAGS \(([^)]*)\)",
                  lambda m: b"FLAGS (" + b" ".join(sorted(m.group(1).split())) + b")", line)


def unsolicited(untagged: list[bytes]) -> list[bytes]:
    """A NOOP's updates with two freedoms RFC 3501 leaves taken out: we add UID to an
    unsolicited FETCH (7.4.2 allows it), and Dovecot reports flag changes before EXISTS, we
    after (any order is allowed; RECENT must still follow EXISTS, which is compared)."""
    fetches = [re.sub(rb" FETCH \(UID \d+ ", b" FETCH (", r) for r in untagged
               if b" FETCH " in r]
    return fetches + [r for r in untagged if b" FETCH " not in r]


def play(port: int) -> list[tuple[str, str, list[bytes]]]:
    sessions = {name: connect(port) for name in "ABC"}
    out = []
    try:
        for who, text, literal in SCRIPT:
            untagged, tagged = sessions[who].run(
                text.encode(), None if literal is None else message(literal))
            # RFC 7162 3.1.2.1: HIGHESTMODSEQ at every SELECT here, at Dovecot's only once a
            # client used CONDSTORE on the mailbox: not compared. RFC 8474 MAILBOXID: the id
            # is the server's choice; Dovecot 2.3.19 sends none.  RFC 4467 8.1 URLMECH: this
            # Dovecot has no URLAUTH.
            untagged = [normalise(r) for r in untagged
                        if not r.startswith((b"* OK [HIGHESTMODSEQ ", b"* OK [MAILBOXID ",
                                             b"* OK [URLMECH "))]
            if text == "NOOP":
                untagged = unsolicited(untagged)
            out.append((who, text, untagged + [normalise(tagged)]))
    finally:
        close_all(*sessions.values())
    return out


def test_the_recent_conversation_matches_dovecot(tmp_path):
    """2.3.2, 6.3.1, 6.3.2, 6.3.10, 6.4.4, 6.4.7, 7.3.2 as Dovecot reads them: three sessions
    (two read-write, one EXAMINE) through SELECT, delivery, COPY, STATUS, SEARCH, STORE and
    EXPUNGE give the same responses in the same order from both servers."""
    (tmp_path / "dovecot").mkdir()
    with Dovecot(tmp_path / "dovecot") as dovecot:
        theirs = play(dovecot.port)
    data = str(tmp_path / "store")
    make_users(data, (USER, PASSWORD))
    with ServerProcess(data) as ours_server:
        ours = play(ours_server.port)
    differences = [(who, text, t, o) for (who, text, t), (_, _, o)
                   in zip(theirs, ours, strict=True) if t != o]
    assert differences == []
