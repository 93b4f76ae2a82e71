"""NOTIFY (RFC 5465) over the wire: transcripts of real ``imapserver`` processes, events made by
a second session (or a second process over the same store, on both backends), IDLE, the
command's errors.  Dovecot's answers are compared in tests/test_differential_notify.py.

The RFC's own examples (3.1) put the events of a group without parentheses, against its formal
syntax (8: ``events = ( "(" event *(SP event) ")" ) / "NONE"``) and its rule that MessageNew
and MessageExpunge go together (5); Dovecot follows the syntax, and so do we: the examples are
played here in the form section 8 gives them.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message
from tests.test_imap_condstore import two_servers

_OPEN: list[Client] = []


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    while _OPEN:
        _OPEN.pop().close()


@pytest.fixture
def server(tmp_path):
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("cora", "pw"))
    with ServerProcess(data_dir) as proc:
        yield proc


def login(server, user: str = "cora") -> Client:
    client = Client(server.port)
    _OPEN.append(client)
    assert client.cmd("l", f"LOGIN {user} pw")[-1].startswith(b"l OK")
    return client


def append(client: Client, mailbox: str, n: int = 0) -> None:
    data = message(n)
    client.send(b"ap APPEND %s {%d+}\r\n" % (mailbox.encode(), len(data)) + data + b"\r\n")
    assert client.until_tagged("ap")[-1].startswith(b"ap OK")


def unsolicited(client: Client, until: bytes, timeout: float = 5.0) -> list[bytes]:
    """Lines the server sends with no command in progress, up to and including the first
    that contains ``until`` (the poller's tick is 0.25 s; a delivery follows within it)."""
    lines = []
    deadline = time.monotonic() + timeout
    client.sock.settimeout(timeout)
    try:
        while time.monotonic() < deadline:
            line = client.read_response_line()
            lines.append(line)
            if until in line:
                return lines
    except TimeoutError:
        pass
    finally:
        client.sock.settimeout(10.0)
    raise AssertionError(f"no {until!r} within {timeout}s; got {lines!r}")


def quiet(client: Client, timeout: float) -> list[bytes]:
    """What the server sends unasked within ``timeout`` seconds (expected: nothing)."""
    lines = []
    deadline = time.monotonic() + timeout
    client.sock.settimeout(0.25)
    try:
        while time.monotonic() < deadline:
            try:
                lines.append(client.read_response_line())
            except TimeoutError:
                pass
    finally:
        client.sock.settimeout(10.0)
    return lines


def test_notify_is_advertised_after_login(server):
    """RFC 5465 3: a server that supports NOTIFY advertises the NOTIFY capability."""
    client = login(server)
    caps = client.cmd("c", "CAPABILITY")[0].split()
    assert b"NOTIFY" in caps


def test_rfc5465_3_1_example(server):
    """RFC 5465 3.1's example, in section 8's syntax: STATUS for every watched mailbox
    before the tagged OK (3.1), then STATUS (UIDNEXT MESSAGES...) for a message delivered to
    a watched mailbox (5.2), EXISTS followed by a FETCH of the MessageNew fetch-atts for one
    delivered to the selected mailbox (5.2), EXPUNGE for one expunged there (5.3) -- all
    with no command in progress."""
    other = login(server)
    for name in ("Lists", "Lists/Lemonade", "misc"):
        other.cmd("c", f"CREATE {name}")
    append(other, "Lists/Lemonade", 1)
    client = login(server)
    client.cmd("s", "SELECT INBOX")
    lines = client.cmd("a", "NOTIFY SET STATUS (selected (MessageNew (UID "
                            "BODY.PEEK[HEADER.FIELDS (FROM TO SUBJECT)]) MessageExpunge)) "
                            "(subtree Lists (MessageNew MessageExpunge))")
    assert lines[-1] == b"a OK NOTIFY completed"
    statuses = sorted(line for line in lines if line.startswith(b"* STATUS"))
    assert [re.sub(rb"UIDVALIDITY \d+", b"UIDVALIDITY v", s) for s in statuses] == [
        b"* STATUS Lists (MESSAGES 0 UIDNEXT 1 UIDVALIDITY v UNSEEN 0)",
        b"* STATUS Lists/Lemonade (MESSAGES 1 UIDNEXT 2 UIDVALIDITY v UNSEEN 1)"]

    append(other, "Lists/Lemonade", 2)
    assert unsolicited(client, b"STATUS") == [
        b"* STATUS Lists/Lemonade (MESSAGES 2 UIDNEXT 3 UNSEEN 2)"]
    append(other, "misc", 3)      # not watched: nothing
    append(other, "INBOX", 4)
    got = unsolicited(client, b"FETCH")
    assert got[0] == b"* 1 EXISTS"
    assert re.fullmatch(rb"\* 1 FETCH \(UID 1 BODY\[HEADER\.FIELDS \(FROM TO SUBJECT\)\] "
                        rb"\{\d+\}\r\n(.|\r\n)*\)", got[-1]), got
    assert b"Subject:" in got[-1] and b"Date:" not in got[-1]
    assert client.cmd("f", "UID FETCH 1 FLAGS")[0] == b"* 1 FETCH (UID 1 FLAGS (\\Recent))"

    other.cmd("s", "SELECT INBOX")
    other.cmd("t", "STORE 1 +FLAGS (\\Deleted)")
    other.cmd("x", "EXPUNGE")
    assert unsolicited(client, b"RECENT") == [b"* 1 EXPUNGE", b"* 0 RECENT"]
    # Nothing about misc came: the next command's answer is its own.
    assert client.cmd("n", "NOOP") == [b"n OK NOOP completed"]


def test_status_carries_highestmodseq_with_condstore_and_flag_changes(server):
    """RFC 5465 5.2, 5.3: with CONDSTORE enabled, HIGHESTMODSEQ is in the STATUS; 5.1:
    a flag change in another mailbox is reported by STATUS (UNSEEN and HIGHESTMODSEQ)."""
    other = login(server)
    other.cmd("c", "CREATE Work")
    client = login(server)
    client.cmd("e", "ENABLE CONDSTORE")
    assert client.cmd("a", "NOTIFY SET (mailboxes Work (MessageNew MessageExpunge "
                           "FlagChange))")[-1].startswith(b"a OK")
    append(other, "Work")
    line = unsolicited(client, b"STATUS")[-1]
    assert re.fullmatch(rb"\* STATUS Work \(MESSAGES 1 UIDNEXT 2 UNSEEN 1 HIGHESTMODSEQ \d+\)",
                        line), line
    other.cmd("s", "SELECT Work")
    other.cmd("t", "STORE 1 +FLAGS (\\Seen)")
    line = unsolicited(client, b"STATUS")[-1]
    assert re.fullmatch(rb"\* STATUS Work \(UNSEEN 0 HIGHESTMODSEQ \d+\)", line), line
    other.cmd("t", "STORE 1 +FLAGS ($Keyword)")  # UNSEEN stays: only HIGHESTMODSEQ tells
    line2 = unsolicited(client, b"STATUS")[-1]
    assert re.fullmatch(rb"\* STATUS Work \(UNSEEN 0 HIGHESTMODSEQ \d+\)", line2), line2
    assert line2 != line


def test_mailbox_name_and_subscription_changes(server):
    """RFC 5465 5.4: LIST for a mailbox created, LIST with OLDNAME for one renamed (and for
    its children), LIST (\\NonExistent) for one deleted; 5.5: LIST with \\Subscribed iff the
    name is subscribed after the change."""
    other = login(server)
    client = login(server)
    assert client.cmd("a", "NOTIFY SET (personal (MailboxName SubscriptionChange))"
                      )[-1].startswith(b"a OK")
    other.cmd("c", "CREATE Projects")
    assert unsolicited(client, b"LIST") == [b'* LIST (\\HasNoChildren) "/" Projects']
    other.cmd("c", "CREATE Projects/One")
    assert unsolicited(client, b"LIST") == [b'* LIST (\\HasNoChildren) "/" Projects/One']
    other.cmd("r", "RENAME Projects Done")
    got = unsolicited(client, b"Done/One")
    assert got == [b'* LIST (\\HasChildren) "/" Done ("OLDNAME" (Projects))',
                   b'* LIST (\\HasNoChildren) "/" Done/One ("OLDNAME" (Projects/One))']
    other.cmd("d", "DELETE Done/One")
    assert unsolicited(client, b"LIST") == [b'* LIST (\\NonExistent) "/" Done/One']
    other.cmd("s", "SUBSCRIBE Done")
    assert unsolicited(client, b"LIST") == [b'* LIST (\\Subscribed \\HasNoChildren) "/" Done']
    other.cmd("s", "UNSUBSCRIBE Done")
    assert unsolicited(client, b"LIST") == [b'* LIST (\\HasNoChildren) "/" Done']
    other.cmd("s", "SUBSCRIBE Ghost")
    assert unsolicited(client, b"LIST") == [b'* LIST (\\NonExistent \\Subscribed) "/" Ghost']


def test_own_changes_are_not_reported_back(server):
    """RFC 5465 5: "The server SHOULD omit notifying the client if the event is caused by
    this client" -- its own CREATE, SUBSCRIBE and APPEND; another session's still are."""
    other = login(server)
    other.cmd("c", "CREATE Box")
    client = login(server)
    client.cmd("a", "NOTIFY SET (personal (MessageNew MessageExpunge MailboxName "
                    "SubscriptionChange))")
    client.cmd("c", "CREATE Mine")
    client.cmd("s", "SUBSCRIBE Mine")
    append(client, "Box")
    other.cmd("c", "CREATE Theirs")  # the sentinel: reported once everything before it is
    assert unsolicited(client, b"LIST") == [b'* LIST (\\HasNoChildren) "/" Theirs']
    append(other, "Box")
    assert unsolicited(client, b"STATUS") == [b"* STATUS Box (MESSAGES 2 UIDNEXT 3 UNSEEN 2)"]


@pytest.mark.parametrize("command, reason", [
    ("NOTIFY", b"NOTIFY takes SET or NONE"),
    ("NOTIFY BOGUS", b"NOTIFY takes SET or NONE"),
    ("NOTIFY NONE extra", b"NOTIFY takes 1 argument(s)"),
    ("NOTIFY SET", b"NOTIFY SET needs at least one event group"),
    ("NOTIFY SET STATUS", b"NOTIFY SET needs at least one event group"),
    ("NOTIFY SET personal", b"Expected an event group"),
    ("NOTIFY SET (nowhere (MessageNew MessageExpunge))", b"Unknown NOTIFY mailbox filter"),
    ("NOTIFY SET (personal MessageNew)", b"expects a list of events or NONE"),
    ("NOTIFY SET (personal ())", b"expects a list of events or NONE"),
    ("NOTIFY SET (subtree (MessageNew MessageExpunge))", b"takes mailbox names"),
    ("NOTIFY SET (mailboxes () (MessageNew MessageExpunge))", b"at least one mailbox"),
    # RFC 5465 5: MessageNew and MessageExpunge together; FlagChange only with both.
    ("NOTIFY SET (personal (MessageNew))", b"must be given together (RFC 5465 5)"),
    ("NOTIFY SET (selected (MessageExpunge))", b"must be given together (RFC 5465 5)"),
    ("NOTIFY SET (personal (FlagChange))", b"FlagChange needs MessageNew"),
    # RFC 5465 6.1: one of SELECTED / SELECTED-DELAYED, message events only.
    ("NOTIFY SET (selected (MessageNew MessageExpunge)) (selected-delayed NONE)",
     b"Only one of SELECTED and SELECTED-DELAYED"),
    ("NOTIFY SET (selected (MailboxName))", b"not allowed with SELECTED (RFC 5465 6.1)"),
    # RFC 5465 5.2: fetch-atts are for the selected mailbox, and must be fetch-atts.
    ("NOTIFY SET (personal (MessageNew (UID) MessageExpunge))", b"only for SELECTED"),
    ("NOTIFY SET (selected (MessageNew (NOSUCHITEM) MessageExpunge))",
     b"Invalid MessageNew fetch attribute"),
])
def test_malformed_notify_is_bad_with_a_reason(server, command, reason):
    """RFC 5465 8 (syntax), 5 and 6.1 (composition rules: "the server MUST respond with the
    tagged BAD response"): BAD, with the reason in its text; the session goes on."""
    client = login(server)
    last = client.cmd("a", command)[-1]
    assert last.startswith(b"a BAD ") and reason in last, last
    assert client.cmd("n", "NOOP")[-1] == b"n OK NOOP completed"


def test_unsupported_events_are_no_badevent(server):
    """RFC 5465 3.1: an event the server does not support is refused with a tagged NO (not
    BAD) whose BADEVENT code lists all the events the server supports (8:
    ``"BADEVENT" SP "(" event *(SP event) ")"``).  AnnotationChange needs ANNOTATE; an
    unknown event-ext is unsupported too.  The metadata events are supported (5.7, 5.8)."""
    client = login(server)
    supported = (b"[BADEVENT (MessageNew MessageExpunge FlagChange MailboxName SubscriptionChange"
                 b" MailboxMetadataChange ServerMetadataChange)]")
    for events in ("MessageNew MessageExpunge AnnotationChange", "XSomethingElse"):
        last = client.cmd("a", f"NOTIFY SET (personal ({events}))")[-1]
        assert last.startswith(b"a NO " + supported), last
    # A refused NOTIFY SET leaves no notification in force.
    other = login(server)
    other.cmd("c", "CREATE Quiet")
    assert client.cmd("n", "NOOP") == [b"n OK NOOP completed"]


def test_notify_none_and_a_new_set_replace_what_was_watched(server):
    """RFC 5465 3.1: NOTIFY SET replaces the list of events, NOTIFY NONE empties it."""
    other = login(server)
    other.cmd("c", "CREATE A")
    other.cmd("c", "CREATE B")
    client = login(server)
    client.cmd("1", "NOTIFY SET (mailboxes A (MessageNew MessageExpunge))")
    client.cmd("2", "NOTIFY SET (mailboxes B (MessageNew MessageExpunge))")
    append(other, "A")
    append(other, "B")
    assert unsolicited(client, b"STATUS") == [b"* STATUS B (MESSAGES 1 UIDNEXT 2 UNSEEN 1)"]
    assert client.cmd("3", "NOTIFY NONE") == [b"3 OK NOTIFY completed"]
    append(other, "B")
    client.cmd("4", "NOTIFY SET (mailboxes A (MailboxName))")  # a sentinel for "nothing"
    other.cmd("c", "DELETE A")
    assert unsolicited(client, b"LIST") == [b'* LIST (\\NonExistent) "/" A']


def test_idle_delivers_notify_events(server):
    """RFC 5465 4: while the client is in IDLE the server sends the events NOTIFY asked for
    -- STATUS of other mailboxes -- beside the selected mailbox's EXISTS, and DONE ends IDLE
    as usual."""
    other = login(server)
    other.cmd("c", "CREATE Lists")
    client = login(server)
    client.cmd("s", "SELECT INBOX")
    client.cmd("a", "NOTIFY SET (subtree Lists (MessageNew MessageExpunge))")
    client.send("i IDLE\r\n")
    assert client.read_line() == b"+ idling"
    append(other, "Lists")
    assert unsolicited(client, b"STATUS") == [b"* STATUS Lists (MESSAGES 1 UIDNEXT 2 UNSEEN 1)"]
    append(other, "INBOX")
    assert unsolicited(client, b"EXISTS")[-1] == b"* 1 EXISTS"
    client.send("DONE\r\n")
    assert client.until_tagged("i")[-1] == b"i OK IDLE completed"
    # After IDLE, NOTIFY goes on between commands.
    append(other, "Lists")
    assert unsolicited(client, b"STATUS") == [b"* STATUS Lists (MESSAGES 2 UIDNEXT 3 UNSEEN 2)"]


def test_selected_delayed_keeps_expunges_for_a_command(server):
    """RFC 5465 6.1.2 (SELECTED-DELAYED) and RFC 3501 7.4.1 ("An EXPUNGE response MUST NOT
    be sent when no command is in progress"): new messages are reported at once, expunges
    only with the next command that may report them; with SELECTED (6.1.1) at once."""
    other = login(server)
    other.cmd("c", "CREATE Flag")
    append(other, "INBOX", 1)
    append(other, "INBOX", 2)
    client = login(server)
    client.cmd("s", "SELECT INBOX")
    client.cmd("a", "NOTIFY SET (selected-delayed (MessageNew MessageExpunge FlagChange)) "
                    "(mailboxes Flag (MessageNew MessageExpunge))")
    other.cmd("s", "SELECT INBOX")
    other.cmd("t", "STORE 1 +FLAGS (\\Deleted)")
    other.cmd("x", "EXPUNGE")
    append(other, "INBOX", 3)
    append(other, "Flag")  # the sentinel: its STATUS comes after the INBOX refresh
    got = unsolicited(client, b"STATUS Flag")
    assert not any(b"EXPUNGE" in line for line in got), got
    assert b"* 3 EXISTS" in got  # the new message, still numbered after the expunged one
    noop = client.cmd("n", "NOOP")
    assert [line for line in noop if b"EXPUNGE" in line] == [b"* 1 EXPUNGE"]
    assert noop[0] == b"* 1 EXPUNGE" and noop[-1] == b"n OK NOOP completed"

    client.cmd("b", "NOTIFY SET (selected (MessageNew MessageExpunge))")
    other.cmd("t", "STORE 1 +FLAGS (\\Deleted)")
    other.cmd("x", "EXPUNGE")
    assert unsolicited(client, b"EXPUNGE") == [b"* 1 EXPUNGE"]


def test_qresync_gets_vanished_for_the_selected_mailbox(server):
    """RFC 5465 5.3: expunges in the selected mailbox are reported with VANISHED once
    QRESYNC is enabled (RFC 7162 3.2.10)."""
    other = login(server)
    for n in range(3):
        append(other, "INBOX", n)
    client = login(server)
    client.cmd("e", "ENABLE QRESYNC")
    client.cmd("s", "SELECT INBOX")
    client.cmd("a", "NOTIFY SET (selected (MessageNew MessageExpunge))")
    other.cmd("s", "SELECT INBOX")
    other.cmd("t", "STORE 1:2 +FLAGS (\\Deleted)")
    other.cmd("x", "EXPUNGE")
    assert unsolicited(client, b"VANISHED") == [b"* VANISHED 1:2"]


def test_inboxes_are_every_mailbox_plus_addressing_can_reach(server):
    """RFC 5465 6.3: INBOXES is every mailbox an MDA may deliver to -- with plus-addressing
    on (the default), any folder (``cora+Lists@``), so all of them."""
    other = login(server)
    other.cmd("c", "CREATE Lists")
    client = login(server)
    lines = client.cmd("a", "NOTIFY SET STATUS (inboxes (MessageNew MessageExpunge))")
    names = {line.split()[2] for line in lines if line.startswith(b"* STATUS")}
    assert names == {b"INBOX", b"Lists", b"Drafts", b"Sent", b"Trash", b"Junk", b"Archive"}


def test_notify_set_is_an_implicit_noop(server):
    """RFC 5465 3.1: "a successful NOTIFY SET command implies an implicit NOOP": changes to
    the selected mailbox come before its tagged OK."""
    other = login(server)
    client = login(server)
    client.cmd("s", "SELECT INBOX")
    append(other, "INBOX")
    lines = client.cmd("a", "NOTIFY SET (personal (MailboxName))")
    assert lines[:2] == [b"* 1 EXISTS", b"* 1 RECENT"] and lines[-1].startswith(b"a OK")


@pytest.mark.parametrize("backend", ["embedded", "hbase"])
def test_events_from_another_process(tmp_path, backend, request):
    """Issue 13: NOTIFY is fed by the store, not by process memory -- a second imapserver
    process on the same store appending, creating and subscribing triggers the STATUS and
    LIST responses in the first (RFC 5465 5.2, 5.4, 5.5), on both backends."""
    lease = request.getfixturevalue("hbase_store") if backend == "hbase" else None
    with two_servers(tmp_path, backend, lease) as (one, two):
        writer = login(two)
        writer.cmd("c", "CREATE Remote")
        client = login(one)
        client.cmd("s", "SELECT INBOX")
        assert client.cmd("a", "NOTIFY SET (selected (MessageNew (UID FLAGS) MessageExpunge)) "
                               "(personal (MessageNew MessageExpunge MailboxName "
                               "SubscriptionChange))")[-1].startswith(b"a OK")
        append(writer, "Remote")
        assert unsolicited(client, b"STATUS") == [
            b"* STATUS Remote (MESSAGES 1 UIDNEXT 2 UNSEEN 1)"]
        append(writer, "INBOX")
        assert unsolicited(client, b"FETCH") == [b"* 1 EXISTS", b"* 1 RECENT",
                                                  b"* 1 FETCH (UID 1 FLAGS (\\Recent))"]
        writer.cmd("c", "CREATE Elsewhere")
        assert unsolicited(client, b"LIST") == [b'* LIST (\\HasNoChildren) "/" Elsewhere']
        writer.cmd("u", "SUBSCRIBE Elsewhere")
        assert unsolicited(client, b"LIST") == [
            b'* LIST (\\Subscribed \\HasNoChildren) "/" Elsewhere']


@pytest.fixture
def two_users(tmp_path):
    data_dir = str(tmp_path / "store2")
    make_users(data_dir, ("cora", "pw"), ("dan", "pw"))
    with ServerProcess(data_dir) as proc:
        yield proc


def test_metadata_changes_are_reported(two_users):
    """RFC 5465 5.6, 5.7 with RFC 5464 4.4.2: a SETMETADATA that changes an entry of a
    watched mailbox gives ``* METADATA mailbox entry`` (no value), a server entry ``*
    METADATA "" entry``; a change that changes nothing, or the session's own (5: SHOULD
    NOT be reported), gives nothing.  dan, with ``lr`` on cora's INBOX, sets its shared
    comment: cora hears of it too (the entries are hers to see)."""
    client = login(two_users)
    other = login(two_users)
    assert client.cmd("a", "NOTIFY SET (personal (MailboxMetadataChange ServerMetadataChange))"
                      )[-1].startswith(b"a OK")
    assert other.cmd("m", 'SETMETADATA INBOX (/private/comment "one")')[-1].startswith(b"m OK")
    assert unsolicited(client, b"METADATA") == [b"* METADATA INBOX /private/comment"]
    assert other.cmd("m", 'SETMETADATA "" (/private/motd "hi")')[-1].startswith(b"m OK")
    assert unsolicited(client, b"METADATA") == [b'* METADATA "" /private/motd']
    # Nothing changed, and the session's own change: no METADATA.
    assert other.cmd("m", 'SETMETADATA INBOX (/private/comment "one")')[-1].startswith(b"m OK")
    assert client.cmd("m", 'SETMETADATA INBOX (/shared/x "1")')[-1].startswith(b"m OK")
    assert quiet(client, 1.0) == []  # four poller ticks: a report would have come by now
    # Another user's change of a shared entry of cora's mailbox.
    assert other.cmd("s", "SETACL INBOX dan lr")[-1].startswith(b"s OK")
    dan = login(two_users, "dan")
    assert dan.cmd("m", 'SETMETADATA "Other Users/cora/INBOX" (/shared/comment "d")'
                   )[-1].startswith(b"m OK")
    assert unsolicited(client, b"METADATA") == [b"* METADATA INBOX /shared/comment"]


def test_metadata_event_names_follow_utf8_accept(server):
    """RFC 6855 3 / RFC 9051 5.1: once the session enabled UTF8=ACCEPT its notifications
    spell mailbox names in UTF-8, and NOTIFY's MAILBOXES takes UTF-8 names."""
    client = login(server)
    other = login(server)
    assert other.cmd("c", "CREATE Caf&AOk-")[-1].startswith(b"c OK")
    assert client.cmd("e", "ENABLE UTF8=ACCEPT")[-1].startswith(b"e OK")
    assert client.cmd("a", 'NOTIFY SET (mailboxes "Caf\u00e9" (MailboxMetadataChange))'
                      )[-1].startswith(b"a OK")
    assert other.cmd("m", 'SETMETADATA Caf&AOk- (/private/c "1")')[-1].startswith(b"m OK")
    assert unsolicited(client, b"METADATA") == ['* METADATA "Caf\u00e9" /private/c'.encode()]


def test_a_grant_to_anyone_is_heard_by_running_sessions(two_users):
    """RFC 5465 5.4 and 5.9 with RFC 4314 2 (``anyone`` is every user): when dan grants
    ``anyone`` the right to see his mailbox, cora's running NOTIFY on his namespace hears of
    the mailbox at once, as she would of a grant naming her, without a new NOTIFY SET."""
    cora = login(two_users)
    dan = login(two_users, "dan")
    assert dan.cmd("c", "CREATE Team")[-1].startswith(b"c OK")
    assert cora.cmd("n", 'NOTIFY SET (subtree "Other Users/dan" (MailboxName))'
                    )[-1].startswith(b"n OK")
    assert dan.cmd("s", "SETACL Team anyone lr")[-1].startswith(b"s OK")
    assert unsolicited(cora, b"Team") == [b'* LIST (\\HasNoChildren) "/" "Other Users/dan/Team"']


def test_mailadmin_server_metadata_is_heard_by_running_sessions(two_users):
    """RFC 5465 5.8 (ServerMetadataChange) with RFC 5464 3.2 (server /shared entries are every
    user's to read): ``mailadmin metadata set`` and ``unset``, run as another process over the
    same store, reach a running NOTIFY session as ``* METADATA "" entry``."""
    from tests.admincli import run
    cora = login(two_users)
    assert cora.cmd("n", "NOTIFY SET (personal (ServerMetadataChange))")[-1].startswith(b"n OK")
    out = run("metadata", "set", "/shared/comment", "Maintenance", data_dir=two_users.data_dir)
    assert out.returncode == 0, out.stderr
    assert unsolicited(cora, b"METADATA") == [b'* METADATA "" /shared/comment']
    out = run("metadata", "unset", "/shared/comment", data_dir=two_users.data_dir)
    assert out.returncode == 0, out.stderr
    assert unsolicited(cora, b"METADATA") == [b'* METADATA "" /shared/comment']
