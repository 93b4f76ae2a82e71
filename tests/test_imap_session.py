"""IMAP transcript tests against a real imapserver process (RFC 3501 unless noted).

Each test drives a raw socket with exact command bytes and checks the responses, including the
awkward cases: pipelining, literals split across packets and inside SEARCH, LITERAL+, IDLE
ended only by DONE, nothing after LOGOUT, expunges seen by another session at NOOP.
"""

from __future__ import annotations

import imaplib
import re
import time

import pytest

from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("imap") / "store")
    make_users(data_dir, ("alice", "wonderland"), ("bob", "builder"))
    with ServerProcess(data_dir) as proc:
        yield proc


@pytest.fixture
def client(server):
    c = Client(server.port)
    yield c
    c.close()


def login(c: Client, user: str = "alice", password: str = "wonderland") -> None:
    assert c.cmd("L", f"LOGIN {user} {password}")[-1].startswith(b"L OK")


def fresh_mailbox(c: Client, name: str) -> None:
    c.cmd("fc", f"DELETE {name}")
    assert c.cmd("fc", f"CREATE {name}")[-1].startswith(b"fc OK")


def append(c: Client, mailbox: str, data: bytes, flags: str = "") -> int:
    c.send(f"ap APPEND {mailbox} {flags + ' ' if flags else ''}{{{len(data)}+}}\r\n".encode()
           + data + b"\r\n")
    lines = c.until_tagged("ap")
    m = re.search(rb"\[APPENDUID \d+ (\d+)\]", lines[-1])
    assert m, lines
    return int(m.group(1))


def test_greeting_and_capability(client):
    """6.1.1: CAPABILITY lists IMAP4rev1 and what we implement."""
    assert client.greeting.startswith(b"* OK [CAPABILITY IMAP4rev1")
    lines = client.cmd("a1", "CAPABILITY")
    caps = lines[0].split()
    for cap in (b"IMAP4rev1", b"LITERAL+", b"IDLE", b"UIDPLUS", b"MOVE", b"NAMESPACE",
                b"SPECIAL-USE", b"AUTH=PLAIN"):
        assert cap in caps
    assert lines[-1] == b"a1 OK CAPABILITY completed"


def test_login_failure_is_delayed_and_does_not_reveal_users(client):
    """6.2.3: NO on failure; the same answer for a wrong password and an unknown user."""
    start = time.monotonic()
    wrong = client.cmd("a1", "LOGIN alice nope")[-1]
    unknown = client.cmd("a2", "LOGIN nobody nope")[-1]
    assert wrong == b"a1 NO [AUTHENTICATIONFAILED] Authentication failed"
    assert unknown == b"a2 NO [AUTHENTICATIONFAILED] Authentication failed"
    assert time.monotonic() - start >= 2 * 1.9


def test_commands_are_case_insensitive_and_pipelined(client):
    """2.2.1 / 5.5: many commands in one packet, answered in order."""
    client.send(b"p1 login alice wonderland\r\np2 select inbox\r\np3 noop\r\np4 Logout\r\n")
    lines = client.until_tagged("p4")
    tagged = [ln.split()[0] for ln in lines if not ln.startswith(b"*")]
    assert tagged == [b"p1", b"p2", b"p3", b"p4"]
    assert client.closed_by_peer()


def test_nothing_is_sent_after_logout(client):
    """6.1.3: BYE, tagged OK, then the connection closes."""
    client.send(b"a1 LOGOUT\r\na2 NOOP\r\n")
    assert client.read_line() == b"* BYE Logging out"
    assert client.read_line() == b"a1 OK LOGOUT completed"
    assert client.closed_by_peer()
    assert b"a2" not in client.buffer


def test_literals_split_across_packets_and_literal_plus(client):
    """RFC 3501 4.3 synchronizing literals, RFC 7888 LITERAL+."""
    client.send(b"a1 LOGIN {5}\r\n")
    assert client.read_line() == b"+ Ready for literal data"
    client.send(b"al")
    client.send(b"ice {10+}\r\nwonder")
    client.send(b"land\r\n")
    assert client.until_tagged("a1")[-1].startswith(b"a1 OK")


def test_select_reports_what_rfc3501_requires(client):
    """6.3.1: FLAGS, EXISTS, RECENT, UIDVALIDITY, UIDNEXT, PERMANENTFLAGS, READ-WRITE."""
    login(client)
    fresh_mailbox(client, "Sel")
    append(client, "Sel", message(1), "(\\Seen)")
    append(client, "Sel", message(2))
    lines = client.cmd("s1", "SELECT Sel")
    text = b"\n".join(lines)
    assert b"* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)" in text
    # 2.3.2: this is the first session to see both messages, so both are \Recent to it.
    assert b"* 2 EXISTS" in text and b"* 2 RECENT" in text
    assert b"* OK [UNSEEN 2]" in text
    assert re.search(rb"\* OK \[UIDVALIDITY \d+\]", text)
    assert b"* OK [UIDNEXT 3]" in text
    assert b"PERMANENTFLAGS (" in text and b"\\*)" in text
    assert lines[-1] == b"s1 OK [READ-WRITE] SELECT completed"
    assert client.cmd("s2", "EXAMINE Sel")[-1] == b"s2 OK [READ-ONLY] EXAMINE completed"
    assert client.cmd("s3", "SELECT Nope")[-1].startswith(b"s3 NO [NONEXISTENT]")
    # A failed SELECT leaves nothing selected.
    assert client.cmd("s4", "EXPUNGE")[-1].startswith(b"s4 BAD")


def test_create_delete_rename_list_and_special_use(client):
    """6.3.3-6.3.5, 6.3.8; RFC 6154 special-use attributes, RFC 5258 LIST-EXTENDED."""
    login(client)
    # RFC 8474 4.1: CREATE names the new mailbox's MAILBOXID.
    assert re.fullmatch(rb"c1 OK \[MAILBOXID \(F[0-9a-f]{32}\)\] CREATE completed",
                        client.cmd("c1", "CREATE Projects/2026/Q4")[-1])
    assert client.cmd("c2", "CREATE Projects")[-1].startswith(b"c2 NO [ALREADYEXISTS]")
    lines = client.cmd("l1", 'LIST "" "Projects/%"')
    assert lines[:-1] == [b'* LIST (\\HasChildren) "/" Projects/2026']
    lines = client.cmd("l2", 'LIST "" "*"')
    assert b'* LIST (\\HasNoChildren \\Sent) "/" Sent' in lines
    assert lines[0].endswith(b" INBOX")
    assert client.cmd("l3", 'LIST "" ""')[:-1] == [b'* LIST (\\Noselect) "/" ""']
    lines = client.cmd("l4", 'LIST (SPECIAL-USE) "" "*" RETURN (SPECIAL-USE)')
    assert sorted(ln.split()[-1] for ln in lines[:-1]) == [
        b"Archive", b"Drafts", b"Junk", b"Sent", b"Trash"]
    assert client.cmd("r1", "RENAME Projects Work")[-1] == b"r1 OK RENAME completed"
    names = [ln.split()[-1] for ln in client.cmd("l5", 'LIST "" "Work*"')[:-1]]
    assert names == [b"Work", b"Work/2026", b"Work/2026/Q4"]
    assert client.cmd("d1", "DELETE Work")[-1].startswith(b"d1 NO [HASCHILDREN]")
    for tag, name in (("d2", "Work/2026/Q4"), ("d3", "Work/2026"), ("d4", "Work")):
        assert client.cmd(tag, f"DELETE {name}")[-1] == f"{tag} OK DELETE completed".encode()
    assert client.cmd("d5", "DELETE INBOX")[-1].startswith(b"d5 NO")


def test_subscribe_lsub_and_list_subscribed(client):
    """6.3.6, 6.3.7, 6.3.9; RFC 5258 LIST (SUBSCRIBED)."""
    login(client)
    client.cmd("c", "CREATE Subs")
    assert client.cmd("s1", "SUBSCRIBE Subs")[-1] == b"s1 OK SUBSCRIBE completed"
    assert b'* LSUB () "/" Subs' in client.cmd("s2", 'LSUB "" "*"')
    lines = client.cmd("s3", 'LIST (SUBSCRIBED) "" "Sub*"')
    assert lines[0] == b'* LIST (\\HasNoChildren \\Subscribed) "/" Subs'
    assert client.cmd("s4", "UNSUBSCRIBE Subs")[-1] == b"s4 OK UNSUBSCRIBE completed"


def test_status(client):
    """6.3.10: STATUS of a mailbox that is not selected."""
    login(client)
    fresh_mailbox(client, "Stat")
    append(client, "Stat", message(1))
    append(client, "Stat", message(2), "(\\Seen)")
    line = client.cmd("t1", "STATUS Stat (MESSAGES UNSEEN UIDNEXT RECENT)")[0]
    # No session has seen either message yet: both are \Recent (2.3.2), as Dovecot says.
    assert line == b"* STATUS Stat (MESSAGES 2 UNSEEN 1 UIDNEXT 3 RECENT 2)"
    assert client.cmd("t2", "STATUS Nope (MESSAGES)")[-1].startswith(b"t2 NO [NONEXISTENT]")
    assert client.cmd("t3", "STATUS Stat (BOGUS)")[-1].startswith(b"t3 BAD")


def test_append_to_missing_mailbox_says_trycreate(client):
    """6.3.11: NO [TRYCREATE] when the target does not exist."""
    login(client)
    client.send(b"a1 APPEND Missing {5+}\r\nhello\r\n")
    assert client.until_tagged("a1")[-1].startswith(b"a1 NO [TRYCREATE]")


def test_append_refuses_an_impossible_date(client):
    """RFC 3501 6.3.11 and section 9 date-time: a date that does not exist (31-Feb, 29-Feb of
    a common year, hour 24, minute 60) is BAD and nothing is stored, rather than rolled over
    into 03-Mar; a leap second is second 59 of the same day (RFC 5322 3.3)."""
    login(client)
    fresh_mailbox(client, "Dates")
    for n, when in enumerate([b"31-Feb-2026 00:00:00 +0000", b"29-Feb-2026 10:00:00 +0000",
                              b" 1-Jan-2026 24:00:00 +0000", b" 1-Jan-2026 10:60:00 +0000"]):
        client.send(b'd%d APPEND Dates "%s" {5+}\r\nhello\r\n' % (n, when))
        assert client.until_tagged(f"d{n}")[-1].startswith(b"d%d BAD" % n)
    client.send(b'd9 APPEND Dates " 1-Jan-2026 23:59:60 +0000" {5+}\r\nhello\r\n')
    assert client.until_tagged("d9")[-1].startswith(b"d9 OK")
    client.cmd("s1", "SELECT Dates")
    lines = client.cmd("f1", "FETCH 1:* INTERNALDATE")
    assert lines[:-1] == [b'* 1 FETCH (INTERNALDATE "01-Jan-2026 23:59:59 +0000")']


def test_multiappend_and_appenduid(client):
    """RFC 3502 MULTIAPPEND; RFC 4315 APPENDUID with a UID set."""
    login(client)
    fresh_mailbox(client, "Multi")
    one, two = message(1), message(2)
    client.send(b"a1 APPEND Multi (\\Seen) \"21-Nov-2026 10:00:00 +0100\" {%d+}\r\n%s"
                b" {%d+}\r\n%s\r\n" % (len(one), one, len(two), two))
    last = client.until_tagged("a1")[-1]
    assert re.fullmatch(rb"a1 OK \[APPENDUID \d+ 1:2\] APPEND completed", last)


def test_store_expunge_and_other_session_sees_it_at_noop(server, client):
    """6.4.3, 6.4.6; 7.4.1: another session learns of the expunge at NOOP."""
    login(client)
    fresh_mailbox(client, "Common")
    for i in range(3):
        append(client, "Common", message(i))
    other = Client(server.port)
    try:
        login(other)
        assert b"* 3 EXISTS" in other.cmd("o1", "SELECT Common")
        client.cmd("s", "SELECT Common")
        lines = client.cmd("s1", "STORE 2 +FLAGS (\\Deleted)")
        assert lines[0] == b"* 2 FETCH (FLAGS (\\Deleted))"
        lines = client.cmd("s2", "EXPUNGE")
        assert lines[:-1] == [b"* 2 EXPUNGE"]
        lines = other.cmd("o2", "NOOP")
        assert b"* 2 EXPUNGE" in lines
        append(client, "Common", message(9))
        assert b"* 3 EXISTS" in other.cmd("o3", "NOOP")
        client.cmd("s3", "STORE 1 FLAGS.SILENT (\\Flagged)")
        # ``other`` selected first, so message 1 is \Recent to it (RFC 3501 2.3.2).
        assert b"* 1 FETCH (UID 1 FLAGS (\\Flagged \\Recent))" in other.cmd("o4", "NOOP")
    finally:
        other.close()


def test_copy_move_and_uid_commands(client):
    """6.4.7 COPY with COPYUID (RFC 4315), RFC 6851 MOVE, 6.4.8 UID forms."""
    login(client)
    fresh_mailbox(client, "Src")
    fresh_mailbox(client, "Dst")
    for i in range(5):
        append(client, "Src", message(i))
    client.cmd("s", "SELECT Src")
    last = client.cmd("c1", "COPY 1:2 Dst")[-1]
    assert re.fullmatch(rb"c1 OK \[COPYUID \d+ 1:2 1:2\] COPY completed", last)
    lines = client.cmd("m1", "UID MOVE 2,4 Dst")
    assert re.fullmatch(rb"\* OK \[COPYUID \d+ 2,4 3:4\] Moved", lines[0])
    assert lines[1:3] == [b"* 4 EXPUNGE", b"* 2 EXPUNGE"]
    assert lines[-1] == b"m1 OK MOVE completed"
    assert client.cmd("c2", "COPY 1 Nowhere")[-1].startswith(b"c2 NO [TRYCREATE]")
    lines = client.cmd("u1", "UID STORE 5 +FLAGS (\\Deleted)")
    assert lines[0] == b"* 3 FETCH (UID 5 FLAGS (\\Deleted \\Recent))"  # 2.3.2: ours
    client.cmd("u2", "STORE 1 +FLAGS (\\Deleted)")
    lines = client.cmd("u3", "UID EXPUNGE 5")
    assert lines[:-1] == [b"* 3 EXPUNGE",   # only UID 5, though UID 1 is \Deleted too
                          b"* 2 RECENT"]    # 7.3.2: one \Recent fewer (Dovecot says so too)
    lines = client.cmd("u5", "UID EXPUNGE 3")     # UID 3 is not \Deleted: nothing goes
    assert lines[-1].startswith(b"u5 OK") and not any(ln.endswith(b"EXPUNGE") for ln in lines)
    assert client.cmd("u6", "UID SEARCH ALL")[0] == b"* SEARCH 1 3"
    assert client.cmd("u4", "UID SEARCH DELETED")[0] == b"* SEARCH 1"


def test_search_with_literal_and_charset(client):
    """6.4.4: SEARCH keys, literals inside SEARCH, BADCHARSET."""
    login(client)
    fresh_mailbox(client, "Find")
    append(client, "Find", message(1, subject="hello world"))
    append(client, "Find", message(2, subject="other"), "(\\Seen)")
    client.cmd("s", "SELECT Find")
    assert client.cmd("f1", "SEARCH UNSEEN")[0] == b"* SEARCH 1"
    client.send(b"f2 SEARCH CHARSET UTF-8 SUBJECT {5}\r\n")
    assert client.read_line().startswith(b"+")
    client.send(b"hello\r\n")
    assert client.until_tagged("f2")[0] == b"* SEARCH 1"
    assert client.cmd("f3", "SEARCH CHARSET KOI8-R ALL")[-1].startswith(
        b"f3 NO [BADCHARSET (US-ASCII UTF-8)]")
    assert client.cmd("f4", "SEARCH FROBNICATE")[-1].startswith(b"f4 BAD")


def test_idle_pushes_changes_and_ends_only_on_done(server, client):
    """RFC 2177: + idling, pushed EXISTS, only DONE ends IDLE."""
    login(client)
    fresh_mailbox(client, "Idle")
    client.cmd("s", "SELECT Idle")
    client.send(b"i1 IDLE\r\n")
    assert client.read_line() == b"+ idling"
    client.send(b"NOOP\r\n")
    assert client.read_line() == b"* BAD Expected DONE to end IDLE"
    other = Client(server.port)
    try:
        login(other)
        append(other, "Idle", message(1))
        start = time.monotonic()  # from the APPEND's OK
        assert client.read_line() == b"* 1 EXISTS"
        assert client.read_line() == b"* 1 RECENT"  # RFC 3501 7.3.2: it is ours
        assert time.monotonic() - start < 1.5
    finally:
        other.close()
    client.send(b"DONE\r\n")
    assert client.read_line() == b"i1 OK IDLE completed"


def test_malformed_input_gets_bad_and_the_session_goes_on(client):
    """Every malformed command gets a tagged BAD with a reason; nothing drops the session."""
    for line, expect in ((b"a1 FROB", b"a1 BAD Unknown command FROB"),
                         (b'a2 LOGIN "unterminated', b"a2 BAD Parse error"),
                         (b"a3 SELECT INBOX", b"a3 BAD SELECT requires authentication"),
                         (b"a4 LOGIN a b c", b"a4 BAD LOGIN takes 2 argument(s)"),
                         (b"(bad", b"* BAD")):
        client.send(line + b"\r\n")
        got = client.read_line()
        assert got.startswith(expect), (line, got)
    client.send(b"a5 " + b"X" * 70000 + b"\r\n")
    assert client.read_line().startswith(b"a5 BAD line too long")
    assert client.cmd("a6", "NOOP")[-1] == b"a6 OK NOOP completed"


def test_too_large_literal_refused_before_it_is_read(client):
    """RFC 7889 APPENDLIMIT: a synchronizing literal over the limit is refused at once."""
    login(client)
    client.send(b"a1 APPEND INBOX {999999999999}\r\n")
    assert client.read_line().startswith(b"a1 NO [TOOBIG]")
    assert client.cmd("a2", "NOOP")[-1] == b"a2 OK NOOP completed"


def test_imaplib_round_trip(server):
    """The stdlib client end to end: login, append, select, fetch, logout."""
    with imaplib.IMAP4("127.0.0.1", server.port) as imap:
        imap.login("bob", "builder")
        data = message(42, size=5000)
        status, _ = imap.append("INBOX", "(\\Flagged)", None, data)
        assert status == "OK"
        status, _ = imap.select("INBOX")
        assert status == "OK"
        status, fetched = imap.fetch("1", "(UID FLAGS RFC822.SIZE BODY.PEEK[])")
        assert status == "OK"
        assert fetched[0][1] == data
        assert b"\\Flagged" in fetched[0][0]
        imap.logout()


def test_reselecting_an_unchanged_mailbox_matches_a_fresh_read(server, client):
    """A second SELECT may reuse the process's cached index only while nothing changed (6.3.1)."""
    login(client)
    fresh_mailbox(client, "Snap")
    for i in range(3):
        append(client, "Snap", message(i), "(\\Seen)" if i == 0 else "")
    first = client.cmd("s1", "SELECT Snap")
    second = client.cmd("s2", "SELECT Snap")
    # RFC 3501 2.3.2: the first SELECT took the \Recent of all three; none is left for the
    # second (as in Dovecot).  Everything else is the same.
    assert b"* 3 RECENT" in first and b"* 0 RECENT" in second
    # RFC 7162 3.2.11: the second SELECT closes the first mailbox ([CLOSED]).
    assert second[0] == b"* OK [CLOSED] Previous mailbox closed"
    assert [ln for ln in first[:-1] if not ln.endswith(b" RECENT")] == \
        [ln for ln in second[1:-1] if not ln.endswith(b" RECENT")]
    client.cmd("s3", "STORE 2 +FLAGS (\\Seen $Later)")
    third = client.cmd("s4", "SELECT Snap")
    assert b"* OK [UNSEEN 3] First unseen" in third
    assert any(b"$Later" in line for line in third if line.startswith(b"* FLAGS"))


def test_reselect_after_appends_extends_the_cached_index_correctly(server, client):
    """6.3.1: after new messages only, SELECT shows them (EXISTS, UIDNEXT, first UNSEEN)."""
    login(client)
    fresh_mailbox(client, "Grow")
    for i in range(3):
        append(client, "Grow", message(i), "(\\Seen)")
    client.cmd("s1", "SELECT Grow")
    client.cmd("u", "UNSELECT")
    uid = append(client, "Grow", message(9), "($Fresh)")
    lines = client.cmd("s2", "SELECT Grow")
    assert b"* 4 EXISTS" in lines
    assert b"* OK [UNSEEN 4] First unseen" in lines
    assert b"* OK [UIDNEXT %d] Predicted next UID" % (uid + 1) in lines
    assert any(b"$Fresh" in line for line in lines if line.startswith(b"* FLAGS"))
    assert client.cmd("f", "FETCH 4 (UID)")[0] == b"* 4 FETCH (UID %d)" % uid


def test_small_extensions_do_what_they_advertise(client):
    """RFC 2971 ID, RFC 2342 NAMESPACE, RFC 5161 ENABLE, RFC 3691 UNSELECT, RFC 5819
    LIST-STATUS, RFC 4959 SASL-IR (AUTHENTICATE PLAIN with an initial response)."""
    import base64
    assert client.cmd("i", 'ID ("name" "test")')[0] == (
        b'* ID ("name" "hbase-imap" "vendor" "hbase-imap project")')
    assert client.cmd("i2", "ID NIL")[-1] == b"i2 OK ID completed"
    assert client.cmd("i3", 'ID ("odd")')[-1].startswith(b"i3 BAD")
    token = base64.b64encode(b"\x00alice\x00wonderland").decode()
    assert client.cmd("a", f"AUTHENTICATE PLAIN {token}")[-1].startswith(b"a OK [CAPABILITY")
    assert client.cmd("n", "NAMESPACE")[0] == \
        b'* NAMESPACE (("" "/")) (("Other Users/" "/")) (("Shared/" "/"))'
    assert client.cmd("e", "ENABLE X-UNKNOWN")[0] == b"* ENABLED"  # RFC 5161 3.1: ignored
    fresh_mailbox(client, "Listed")
    append(client, "Listed", message(1))
    lines = client.cmd("l", 'LIST "" "Listed" RETURN (STATUS (MESSAGES UIDNEXT UNSEEN))')
    assert lines[0] == b'* LIST (\\HasNoChildren) "/" Listed'
    assert lines[1] == b"* STATUS Listed (MESSAGES 1 UIDNEXT 2 UNSEEN 1)"
    client.cmd("s", "SELECT Listed")
    client.cmd("d", "STORE 1 +FLAGS (\\Deleted)")
    assert client.cmd("u", "UNSELECT")[-1] == b"u OK UNSELECT completed"
    # UNSELECT does not expunge (unlike CLOSE).
    assert b"MESSAGES 1" in client.cmd("t", "STATUS Listed (MESSAGES)")[0]
    client.cmd("s2", "SELECT Listed")
    assert client.cmd("c", "CLOSE")[-1] == b"c OK CLOSE completed"
    assert b"MESSAGES 0" in client.cmd("t2", "STATUS Listed (MESSAGES)")[0]


def test_idle_ended_at_once_still_reports_what_its_refresh_found(server, client):
    """RFC 2177 / RFC 3501 7.4.1: IDLE's wake-up refresh may still run when DONE arrives; what
    it found (an EXPUNGE by another session) must reach the client before the next command,
    or sequence numbers drift (FETCH 2 would answer for another message)."""
    login(client)
    fresh_mailbox(client, "Race")
    uids = [append(client, "Race", message(i)) for i in range(3)]
    other = Client(server.port)
    try:
        login(other)
        client.cmd("s", "SELECT Race")
        other.cmd("s", "SELECT Race")
        other.cmd("d", "STORE 2 +FLAGS.SILENT (\\Deleted)")
        assert other.cmd("e", "EXPUNGE")[0] == b"* 2 EXPUNGE"
        client.send(b"i IDLE\r\nDONE\r\n")             # DONE pipelined behind IDLE
        idle = client.until_tagged("i")
        noop = client.cmd("n", "NOOP")
        assert [ln for ln in idle + noop if ln.endswith(b"EXPUNGE")] == [b"* 2 EXPUNGE"]
        assert client.cmd("f", "FETCH 2 (UID)")[0] == b"* 2 FETCH (UID %d)" % uids[2]
    finally:
        other.close()
