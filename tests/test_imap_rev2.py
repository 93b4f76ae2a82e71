"""IMAP4rev2 (RFC 9051) beside IMAP4rev1: what ``ENABLE IMAP4rev2`` changes, transcript tests.

Each test pairs the IMAP4rev2 answer with the IMAP4rev1 one where both exist, so that the
switch is what is tested, and cites the section of RFC 9051 (mostly Appendix E, "Changes from
RFC 3501") that asks for the difference.  Dovecot 2.3 does not speak IMAP4rev2, so these are
judged against RFC 9051's text and examples (docs/differential.md).  UTF8=ACCEPT's own tests
are in tests/test_imap_utf8.py.
"""

from __future__ import annotations

import re

import pytest

from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message

USERS = [(f"r{i}", "pw") for i in range(20)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("rev2")
    data_dir = str(base / "store")
    make_users(data_dir, *USERS)
    with ServerProcess(data_dir) as proc:
        yield proc


_next_user = iter(USERS)


@pytest.fixture
def user():
    """A fresh account per test: no test sees another's mailboxes or \\Recent claims."""
    return next(_next_user)[0]


def login(server, user: str, rev2: bool = False) -> Client:
    c = Client(server.port)
    assert c.cmd("L", f"LOGIN {user} pw")[-1].startswith(b"L OK")
    if rev2:
        assert c.cmd("E", "ENABLE IMAP4rev2") == [b"* ENABLED IMAP4rev2",
                                                  b"E OK ENABLE completed"]
    return c


def append(c: Client, mailbox: str, msg: bytes, flags: str = "") -> None:
    flags = f" ({flags})" if flags else ""
    c.send(f"a APPEND {mailbox}{flags} {{{len(msg)}+}}\r\n".encode() + msg + b"\r\n")
    assert c.until_tagged("a")[-1].startswith(b"a OK")


@pytest.fixture
def clients():
    opened: list[Client] = []
    yield opened
    for c in opened:
        c.close()


def test_capability_lists_both_and_enable_answers(server, user, clients):
    """RFC 9051 7.2.2 and 6.3.1: a server that speaks both lists IMAP4rev1 and IMAP4rev2;
    ``ENABLE IMAP4rev2`` answers ``* ENABLED IMAP4rev2`` (RFC 5161 3.2), once per command
    even when asked twice, and is no longer listed as an unknown extension."""
    c = Client(server.port)
    clients.append(c)
    caps = c.cmd("c", "CAPABILITY")[0].split()
    assert b"IMAP4rev1" in caps and b"IMAP4rev2" in caps
    assert c.cmd("L", f"LOGIN {user} pw")[-1].startswith(b"L OK")
    assert c.cmd("e", "ENABLE imap4rev2 IMAP4REV2") == [b"* ENABLED IMAP4rev2",
                                                        b"e OK ENABLE completed"]


def test_select_without_recent_and_unseen_but_with_list(server, user, clients):
    """RFC 9051 6.3.2 (its example) and Appendix E: an IMAP4rev2 SELECT sends no ``RECENT``
    response and no ``OK [UNSEEN]`` (both removed), but a ``LIST`` response for the mailbox
    with accurate attributes.  The same SELECT in IMAP4rev1 is as before."""
    old = login(server, user)
    new = login(server, user, rev2=True)
    clients += [old, new]
    assert new.cmd("c", "CREATE Work/Reports")[-1].startswith(b"c OK")
    append(old, "Work", message(1))
    append(old, "Work", message(2), "\\Seen")
    rev2 = new.cmd("s", "SELECT Work")
    assert not any(re.match(rb"\* \d+ RECENT", line) for line in rev2)
    assert not any(b"[UNSEEN" in line for line in rev2)
    assert b'* LIST (\\HasChildren) "/" Work' in rev2
    assert b"* 2 EXISTS" in rev2 and rev2[-1] == b"s OK [READ-WRITE] SELECT completed"
    assert any(line.startswith(b"* OK [UIDNEXT 3]") for line in rev2)
    assert b'* LIST (\\HasNoChildren \\Sent) "/" Sent' in new.cmd("x", "EXAMINE Sent")
    rev1 = old.cmd("s", "SELECT Work")
    assert b"* 2 RECENT" in rev1 and b"* OK [UNSEEN 1] First unseen" in rev1
    assert not any(line.startswith(b"* LIST") for line in rev1)


def test_no_recent_flag_and_recent_left_to_rev1(server, user, clients):
    """RFC 9051 Appendix E: \\Recent is gone -- no ``\\Recent`` in FETCH FLAGS, no ``RECENT``
    when new mail is announced.  An IMAP4rev2 session does not take \\Recent either (RFC 3501
    2.3.2: only one session sees a message as recent), so an IMAP4rev1 session that looks
    later still sees the message as recent."""
    rev2 = login(server, user, rev2=True)
    rev1 = login(server, user)
    clients += [rev1, rev2]
    append(rev1, "INBOX", message(1))
    assert rev2.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    assert rev2.cmd("f", "FETCH 1 FLAGS") == [b"* 1 FETCH (FLAGS ())", b"f OK FETCH completed"]
    append(rev1, "INBOX", message(2))
    noop = rev2.cmd("n", "NOOP")
    assert b"* 2 EXISTS" in noop and not any(b"RECENT" in line for line in noop)
    assert rev2.cmd("f", "FETCH 2 FLAGS") == [b"* 2 FETCH (FLAGS ())", b"f OK FETCH completed"]
    # The IMAP4rev1 session is the first to be told of both.
    assert b"* 2 RECENT" in rev1.cmd("s", "SELECT INBOX")
    assert rev1.cmd("f", "FETCH 1 FLAGS")[0] == b"* 1 FETCH (FLAGS (\\Recent))"


def test_enable_while_selected_stops_recent(server, user, clients):
    """RFC 5161 3.1 asks clients to ENABLE before SELECT but lets servers accept it later;
    from the ENABLE on, the session is IMAP4rev2 and gets no more \\Recent (RFC 9051
    Appendix E)."""
    c = login(server, user)
    other = login(server, user)
    clients += [c, other]
    append(other, "INBOX", message(1))
    assert b"* 1 RECENT" in c.cmd("s", "SELECT INBOX")
    assert c.cmd("e", "ENABLE IMAP4rev2")[0] == b"* ENABLED IMAP4rev2"
    assert c.cmd("f", "FETCH 1 FLAGS")[0] == b"* 1 FETCH (FLAGS ())"
    append(other, "INBOX", message(2))
    idle = c.cmd("n", "NOOP")
    assert b"* 2 EXISTS" in idle and not any(b"RECENT" in line for line in idle)


def test_search_answers_esearch(server, user, clients):
    """RFC 9051 6.4.4 (and Appendix E: SEARCH responses are IMAP4rev1's): a SEARCH without
    RETURN is ``RETURN (ALL)`` and is answered by ESEARCH with the command's tag, ``UID`` for
    UID SEARCH, and ALL left out when nothing matched (RFC 9051 7.3.4's examples).  RETURN
    options work as with ESEARCH; IMAP4rev1's SEARCH is unchanged."""
    c = login(server, user, rev2=True)
    old = login(server, user)
    clients += [c, old]
    for n in range(1, 5):
        append(c, "INBOX", message(n), "\\Seen" if n in (1, 2, 4) else "")
    assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    assert c.cmd("A1", "SEARCH SEEN") == [b'* ESEARCH (TAG "A1") ALL 1:2,4',
                                          b"A1 OK SEARCH completed"]
    assert c.cmd("A2", "UID SEARCH UNSEEN") == [b'* ESEARCH (TAG "A2") UID ALL 3',
                                                b"A2 OK UID completed"]
    assert c.cmd("A3", "SEARCH DELETED") == [b'* ESEARCH (TAG "A3")',
                                             b"A3 OK SEARCH completed"]
    assert c.cmd("A4", "SEARCH RETURN (MIN COUNT) SEEN")[0] == \
        b'* ESEARCH (TAG "A4") MIN 1 COUNT 3'
    assert c.cmd("A5", "SEARCH CHARSET UTF-8 SUBJECT message")[0] == \
        b'* ESEARCH (TAG "A5") ALL 1:4'
    # A MODSEQ key (RFC 7162 3.1.5) adds the ESEARCH form of the highest MODSEQ.
    assert any(re.fullmatch(rb'\* ESEARCH \(TAG "A6"\) ALL 1:4 MODSEQ \d+', line)
               for line in c.cmd("A6", "SEARCH MODSEQ 1"))
    assert old.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    assert old.cmd("B1", "SEARCH SEEN")[0] == b"* SEARCH 1 2 4"


def test_recent_keys_and_status_recent_are_bad(server, user, clients):
    """RFC 9051 9 (search-key, status-att) and Appendix E: RECENT, NEW and OLD are no search
    keys and RECENT no STATUS item in IMAP4rev2, so they are BAD -- in SEARCH, SORT, THREAD,
    STATUS and LIST RETURN (STATUS); an IMAP4rev1 session keeps them."""
    c = login(server, user, rev2=True)
    old = login(server, user)
    clients += [c, old]
    assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    assert old.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    for command in ("SEARCH RECENT", "SEARCH NEW", "UID SEARCH OLD", "SEARCH OR SEEN NEW",
                    "SORT (DATE) UTF-8 RECENT", "THREAD REFERENCES UTF-8 NOT OLD",
                    "STATUS Sent (MESSAGES RECENT)",
                    'LIST "" "*" RETURN (STATUS (RECENT))'):
        assert c.cmd("b", command)[-1].startswith(b"b BAD"), command
        assert old.cmd("o", command)[-1].startswith(b"o OK"), command
    assert c.cmd("ok", "STATUS Sent (MESSAGES UIDNEXT UNSEEN DELETED SIZE)")[0] == \
        b"* STATUS Sent (MESSAGES 0 UIDNEXT 1 UNSEEN 0 DELETED 0 SIZE 0)"


def test_list_nonexistent_subscribed(server, user, clients):
    """RFC 9051 6.3.9 (LIST-EXTENDED is part of IMAP4rev2): a subscribed name whose mailbox
    is gone is listed ``\\NonExistent`` with ``\\Subscribed``, by LIST (SUBSCRIBED) and by
    ``LIST "" * RETURN (SUBSCRIBED)``'s selection alike."""
    c = login(server, user, rev2=True)
    clients.append(c)
    for command in ("CREATE Gone", "SUBSCRIBE Gone", "DELETE Gone"):
        assert c.cmd("c", command)[-1].startswith(b"c OK")
    lines = c.cmd("l", 'LIST (SUBSCRIBED) "" "G*"')
    assert lines[0].endswith(b' "/" Gone')
    attributes = lines[0].split(b"(")[1].split(b")")[0].split()
    assert {b"\\NonExistent", b"\\Subscribed"} <= set(attributes)


def test_rename_answers_oldname(server, user, clients):
    """RFC 9051 6.3.6 and 6.3.9 (OLDNAME, RFC 5465 5.4): after RENAME an IMAP4rev2 client
    gets the new name in a LIST response whose OLDNAME extended data item holds the old
    one; an IMAP4rev1 client's RENAME answers as before."""
    c = login(server, user, rev2=True)
    old = login(server, user)
    clients += [c, old]
    assert c.cmd("c", "CREATE Projects/Old")[-1].startswith(b"c OK")
    assert c.cmd("r", "RENAME Projects/Old Archive/2026/Old") == [
        b'* LIST () "/" Archive/2026/Old ("OLDNAME" ("Projects/Old"))',
        b"r OK RENAME completed"]
    assert c.cmd("r", 'RENAME "Archive/2026/Old" "\xc4rger"') == [
        '* LIST () "/" "\xc4rger" ("OLDNAME" ("Archive/2026/Old"))'.encode(),
        b"r OK RENAME completed"]
    assert old.cmd("c", "CREATE Plain")[-1].startswith(b"c OK")
    assert old.cmd("r", "RENAME Plain Other") == [b"r OK RENAME completed"]


def test_create_normalises_to_nfc_with_oldname(server, user, clients):
    """RFC 9051 5.1 (mailbox names are Net-Unicode, RFC 5198: NFC) and 6.3.4: a name given in
    decomposed form is created composed, and the IMAP4rev2 client is told with OLDNAME; the
    composed spelling then names the same mailbox."""
    c = login(server, user, rev2=True)
    clients.append(c)
    decomposed = "Cafe\u0301"
    lines = c.cmd("c", f'CREATE "{decomposed}"')
    assert lines == [f'* LIST () "/" "Caf\u00e9" ("OLDNAME" ("{decomposed}"))'.encode(),
                     lines[-1]]
    assert lines[-1].startswith(b"c OK [MAILBOXID")
    assert c.cmd("s", 'STATUS "Caf\u00e9" (MESSAGES)')[0] == \
        '* STATUS "Caf\u00e9" (MESSAGES 0)'.encode()
    assert c.cmd("d", 'CREATE "Caf\u00e9"')[-1].startswith(b"d NO [ALREADYEXISTS]")
    # A name the server keeps as given: no OLDNAME.
    assert c.cmd("p", "CREATE Plain")[0].startswith(b"p OK")


def test_decomposed_spelling_reaches_a_composed_name(server, user, clients):
    """RFC 9051 5.1 and RFC 6855 3 (names are Net-Unicode, RFC 5198 2: compared in NFC): the
    client that created ``Cafe\u0301`` and was told ``Caf\u00e9`` by OLDNAME may keep using
    its own spelling in SELECT, STATUS, APPEND, COPY and DELETE; a mailbox an IMAP4rev1
    client created in decomposed form (stored as given) stays reachable under that spelling."""
    c = login(server, user, rev2=True)
    old = login(server, user)
    clients += [c, old]
    decomposed = "Cafe\u0301"
    assert c.cmd("c", f'CREATE "{decomposed}"')[-1].startswith(b"c OK")
    assert c.cmd("s", f'SELECT "{decomposed}"')[-1].startswith(b"s OK")
    assert c.cmd("u", "UNSELECT")[-1].startswith(b"u OK")
    assert c.cmd("t", f'STATUS "{decomposed}" (MESSAGES)')[-1].startswith(b"t OK")
    data = b"Subject: x\r\n\r\nx\r\n"
    c.send(f'a APPEND "{decomposed}" {{{len(data)}+}}\r\n'.encode() + data + b"\r\n")
    assert c.until_tagged("a")[-1].startswith(b"a OK")
    assert c.cmd("s", 'SELECT "Caf\u00e9"')[-1].startswith(b"s OK")
    assert c.cmd("k", f'COPY 1 "{decomposed}"')[-1].startswith(b"k OK")
    assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    assert c.cmd("t", 'STATUS "Caf\u00e9" (MESSAGES)')[0] == \
        '* STATUS "Caf\u00e9" (MESSAGES 2)'.encode()
    # An IMAP4rev1 client's decomposed name is kept as given and found as given.
    assert old.cmd("c", "CREATE Re&AwE-sume&AwE-")[-1].startswith(b"c OK")
    assert old.cmd("t", "STATUS Re&AwE-sume&AwE- (MESSAGES)")[0] == \
        b"* STATUS Re&AwE-sume&AwE- (MESSAGES 0)"
    assert c.cmd("d", f'DELETE "{decomposed}"')[-1].startswith(b"d OK")
    assert c.cmd("t", 'STATUS "Caf\u00e9" (MESSAGES)')[-1].startswith(b"t NO [NONEXISTENT]")


def test_names_in_utf8_both_ways(server, user, clients):
    """RFC 9051 5.1: IMAP4rev2 names are UTF-8, with ``&`` an ordinary character; the same
    mailbox reaches an IMAP4rev1 client in modified UTF-7 (RFC 3501 5.1.3) -- in LIST, LSUB,
    STATUS, SELECT's LIST and every argument."""
    c = login(server, user, rev2=True)
    old = login(server, user)
    clients += [c, old]
    assert c.cmd("c", 'CREATE "Entw\u00fcrfe/R&D"')[-1].startswith(b"c OK")
    assert c.cmd("c", 'SUBSCRIBE "Entw\u00fcrfe/R&D"')[-1].startswith(b"c OK")
    assert old.cmd("c", "CREATE &ZeVnLIqe-")[-1].startswith(b"c OK")
    listing = c.cmd("l", 'LIST "" "*"')
    assert '* LIST (\\HasChildren) "/" "Entw\u00fcrfe"'.encode() in listing
    assert '* LIST (\\HasNoChildren) "/" "Entw\u00fcrfe/R&D"'.encode() in listing
    assert '* LIST (\\HasNoChildren) "/" "\u65e5\u672c\u8a9e"'.encode() in listing
    assert c.cmd("l", 'LSUB "" "Entw\u00fcrfe/%"')[0] == \
        '* LSUB () "/" "Entw\u00fcrfe/R&D"'.encode()
    assert old.cmd("l", 'LIST "" "Entw&APw-rfe/*"')[0] == \
        b'* LIST (\\HasNoChildren) "/" Entw&APw-rfe/R&-D'
    assert old.cmd("l", 'LSUB "" "E*"')[0] == b'* LSUB () "/" Entw&APw-rfe/R&-D'
    append(old, "Entw&APw-rfe/R&-D", message(1))
    assert c.cmd("s", 'STATUS "Entw\u00fcrfe/R&D" (MESSAGES)')[0] == \
        '* STATUS "Entw\u00fcrfe/R&D" (MESSAGES 1)'.encode()
    assert '* LIST (\\HasNoChildren) "/" "\u65e5\u672c\u8a9e"'.encode() in \
        c.cmd("s", 'SELECT "\u65e5\u672c\u8a9e"')
    # "&" is not modified UTF-7 any more: "R&D" names a mailbox of that name, which an
    # IMAP4rev1 client would have had to spell R&-D.
    assert c.cmd("s", 'SELECT "Entw\u00fcrfe/R&D"')[-1].startswith(b"s OK")
    assert c.cmd("m", 'COPY 1:* "\u65e5\u672c\u8a9e"')[-1].startswith(b"m OK [COPYUID")
    assert old.cmd("s", "STATUS &ZeVnLIqe- (MESSAGES)")[0] == \
        b"* STATUS &ZeVnLIqe- (MESSAGES 1)"
    assert c.cmd("x", "SELECT Entw&APw-rfe/R&-D")[-1].startswith(b"x NO")


def test_invalid_utf8_name_is_no(server, user, clients):
    """RFC 9051 5.1: names are UTF-8; a name that is not (here a lone 0xFF) is refused with
    NO, the command being well formed (as for a bad modified UTF-7 name in IMAP4rev1)."""
    c = login(server, user, rev2=True)
    clients.append(c)
    c.send(b'n CREATE "bad\xff"\r\n')
    lines = c.until_tagged("n")
    assert lines == [b"n NO Mailbox name is not valid UTF-8"]


def test_unauthenticate_forgets_rev2(server, user, clients):
    """RFC 8437 4.1: ENABLEd extensions end with UNAUTHENTICATE; the next login is
    IMAP4rev1 again until it enables IMAP4rev2."""
    c = login(server, user, rev2=True)
    clients.append(c)
    assert c.cmd("u", "UNAUTHENTICATE")[-1].startswith(b"u OK")
    assert c.cmd("L", f"LOGIN {user} pw")[-1].startswith(b"L OK")
    assert b"* 0 RECENT" in c.cmd("s", "SELECT INBOX")


def test_unsolicited_fetch_carries_uid(server, user, clients):
    """RFC 9051 7.5.2 (Appendix E: unsolicited FETCH responses include UID): another
    session's flag change reaches an IMAP4rev2 session as a FETCH with UID and FLAGS, without
    \\Recent."""
    c = login(server, user, rev2=True)
    other = login(server, user)
    clients += [c, other]
    append(other, "INBOX", message(1))
    assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    assert other.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    assert other.cmd("f", "STORE 1 +FLAGS.SILENT (\\Flagged)")[-1].startswith(b"f OK")
    assert c.cmd("n", "NOOP") == [b"* 1 FETCH (UID 1 FLAGS (\\Flagged))",
                                  b"n OK NOOP completed"]


def test_response_codes(server, user, clients):
    """RFC 9051 7.1 (the RFC 5530 codes it takes in, Appendix E) and Appendix E item 8: a
    missing mailbox is NONEXISTENT, an existing one ALREADYEXISTS, and COPY, MOVE and APPEND
    to a missing mailbox answer TRYCREATE without creating it."""
    c = login(server, user, rev2=True)
    clients.append(c)
    append(c, "INBOX", message(1))
    assert c.cmd("s", "SELECT Nowhere")[-1].startswith(b"s NO [NONEXISTENT]")
    assert c.cmd("s", "STATUS Nowhere (MESSAGES)")[-1].startswith(b"s NO [NONEXISTENT]")
    assert c.cmd("d", "DELETE Nowhere")[-1].startswith(b"d NO [NONEXISTENT]")
    assert c.cmd("r", "RENAME Nowhere Elsewhere")[-1].startswith(b"r NO [NONEXISTENT]")
    assert c.cmd("c", "CREATE Sent")[-1].startswith(b"c NO [ALREADYEXISTS]")
    assert c.cmd("r", "RENAME Drafts Sent")[-1].startswith(b"r NO [ALREADYEXISTS]")
    assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    for command in ("COPY 1 Nowhere", "MOVE 1 Nowhere", "UID MOVE 1 Nowhere"):
        assert c.cmd("t", command)[-1].startswith(b"t NO [TRYCREATE]"), command
    c.send(b"a APPEND Nowhere {3+}\r\nx\r\n\r\n")
    assert c.until_tagged("a")[-1].startswith(b"a NO [TRYCREATE]")
    assert c.cmd("l", 'LIST "" Nowhere') == [b"l OK LIST completed"]


def test_rev2_extensions_are_there(server, user, clients):
    """RFC 9051 Appendix E item 1: IMAP4rev2 takes in NAMESPACE, UNSELECT, UIDPLUS (UID
    EXPUNGE), ESEARCH, SEARCHRES, ENABLE, IDLE, SASL-IR, LIST-EXTENDED, LIST-STATUS, MOVE,
    LITERAL-, BINARY, CHILDREN, SPECIAL-USE and STATUS=SIZE (with DELETED): each works in an
    IMAP4rev2 session."""
    c = login(server, user, rev2=True)
    clients.append(c)
    for n in (1, 2, 3):
        append(c, "INBOX", message(n))
    # RFC 2342 with the ACL merge: the other users' and shared namespaces (docs/acl.md).
    assert c.cmd("n", "NAMESPACE")[0] == \
        b'* NAMESPACE (("" "/")) (("Other Users/" "/")) (("Shared/" "/"))'
    assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    assert c.cmd("a", "SEARCH RETURN (SAVE) 2")[-1].startswith(b"a OK")
    assert c.cmd("b", "UID FETCH $ (UID)")[0] == b"* 2 FETCH (UID 2)"
    assert c.cmd("f", "STORE 1:2 +FLAGS.SILENT (\\Deleted)")[-1].startswith(b"f OK")
    assert c.cmd("x", "UID EXPUNGE 2") == [b"* 2 EXPUNGE", b"x OK UID completed"]
    moved = c.cmd("m", "MOVE 2 Trash")  # RFC 6851 4.3: COPYUID in an untagged OK first
    assert moved[0].startswith(b"* OK [COPYUID ") and moved[1:] == [b"* 2 EXPUNGE",
                                                                   b"m OK MOVE completed"]
    assert c.cmd("y", "FETCH 1 BINARY.SIZE[1]")[0] == b"* 1 FETCH (BINARY.SIZE[1] 20)"
    assert c.cmd("u", "UNSELECT") == [b"u OK UNSELECT completed"]
    assert c.cmd("l", 'LIST (SPECIAL-USE) "" "*" RETURN (CHILDREN STATUS (MESSAGES DELETED '
                      'SIZE))')[-1].startswith(b"l OK")
    c.send(b"i IDLE\r\n")
    assert c.read_line().startswith(b"+ ")
    c.send(b"DONE\r\n")
    assert c.until_tagged("i")[-1].startswith(b"i OK")
    c.send(b"k CREATE {4095+}\r\n" + b"k" * 4095 + b"\r\n")  # LITERAL- (RFC 7888 5)
    assert c.until_tagged("k")[-1].startswith(b"k NO")  # too long a name: NO, not BAD
