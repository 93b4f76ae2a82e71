"""ACL (RFC 4314), LIST-MYRIGHTS (RFC 8440) and the namespaces (RFC 2342) over IMAP: the
RFCs' examples as transcripts, and the exchange Thunderbird's folder "Sharing" tab sends."""

from __future__ import annotations

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.imapproc import Client, ServerProcess
from tests.mailgen import message


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("imap-acl") / "store")
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"))
    for user in ("alice", "bob", "carol"):
        store.create_user(user, "pw", default_folders=False)
    store.create_mailbox("alice", "Team")
    store.append("alice", "Team", message(1))
    store.close()
    with ServerProcess(data_dir) as srv:
        yield srv


def login(server, user: str) -> Client:
    c = Client(server.port)
    assert c.cmd("l", f"LOGIN {user} pw")[-1].startswith(b"l OK")
    return c


@pytest.fixture
def alice(server):
    c = login(server, "alice")
    yield c
    c.close()


@pytest.fixture
def bob(server):
    c = login(server, "bob")
    yield c
    c.close()


def test_capabilities_and_namespace(alice):
    """RFC 4314 2.1.1 and 6: ACL with RIGHTS=texk; RFC 8440 2: LIST-MYRIGHTS; RFC 2342 5:
    NAMESPACE names the personal, other users' and shared namespaces."""
    caps = alice.cmd("c", "CAPABILITY")[0].split()
    assert {b"ACL", b"RIGHTS=texk", b"LIST-MYRIGHTS", b"NAMESPACE"} <= set(caps)
    assert alice.cmd("n", "NAMESPACE") == [
        b'* NAMESPACE (("" "/")) (("Other Users/" "/")) (("Shared/" "/"))',
        b"n OK NAMESPACE completed"]


def test_thunderbird_sharing_tab(alice, bob):
    """The exchange Thunderbird's folder properties "Sharing" tab makes (RFC 4314 3.5, 3.3,
    3.1, 3.2; its commands are those of RFC 4314's examples): MYRIGHTS and GETACL when the
    tab opens, SETACL with full rights to share, DELETEACL to stop; the other user's client
    finds the folder through NAMESPACE and LIST."""
    assert alice.cmd("a1", 'MYRIGHTS "Team"') == [
        b"* MYRIGHTS Team lrwstipekxacd", b"a1 OK MYRIGHTS completed"]
    assert alice.cmd("a2", 'GETACL "Team"') == [
        b"* ACL Team alice lrwstipekxacd", b"a2 OK GETACL completed"]
    assert alice.cmd("a3", 'SETACL "Team" "bob" lrswipkxtea') == [b"a3 OK SETACL completed"]
    assert alice.cmd("a4", 'GETACL "Team"') == [
        b"* ACL Team bob lrwstipekxacd alice lrwstipekxacd", b"a4 OK GETACL completed"]
    assert bob.cmd("b1", 'LIST "" "Other Users/%"') == [
        b'* LIST (\\Noselect \\HasChildren) "/" "Other Users/alice"', b"b1 OK LIST completed"]
    assert bob.cmd("b2", 'LIST "" "Other Users/alice/%"') == [
        b'* LIST (\\HasNoChildren) "/" "Other Users/alice/Team"', b"b2 OK LIST completed"]
    assert bob.cmd("b3", 'MYRIGHTS "Other Users/alice/Team"') == [
        b'* MYRIGHTS "Other Users/alice/Team" lrwstipekxacd', b"b3 OK MYRIGHTS completed"]
    lines = bob.cmd("b4", 'SELECT "Other Users/alice/Team"')
    assert b"* 1 EXISTS" in lines and lines[-1] == b"b4 OK [READ-WRITE] SELECT completed"
    assert alice.cmd("a5", 'DELETEACL "Team" "bob"') == [b"a5 OK DELETEACL completed"]
    assert bob.cmd("b5", 'LIST "" "Other Users/*"') == [b"b5 OK LIST completed"]
    assert bob.cmd("b6", 'MYRIGHTS "Other Users/alice/Team"') == [
        b'b6 NO [NONEXISTENT] no such mailbox: Other Users/alice/Team']


def test_rfc4314_setacl_modes_obsolete_rights_and_errors(alice):
    """RFC 4314 3.1: ``+``/``-`` add and remove, otherwise replace; 2.1.1: ``c`` and ``d``
    stand for kx and te and are shown whenever one of those is there; an unknown right is
    BAD (3.1 example: "A036 BAD The q right is not supported")."""
    assert alice.cmd("s1", "SETACL Team carol lr")[-1] == b"s1 OK SETACL completed"
    assert alice.cmd("s2", "SETACL Team carol +cd")[-1] == b"s2 OK SETACL completed"
    assert alice.cmd("g1", "GETACL Team")[0] == \
        b"* ACL Team carol lrtekxcd alice lrwstipekxacd"
    assert alice.cmd("s3", "SETACL Team carol -x")[-1] == b"s3 OK SETACL completed"
    assert alice.cmd("g2", "GETACL Team")[0] == b"* ACL Team carol lrtekcd alice lrwstipekxacd"
    assert alice.cmd("s4", "SETACL Team -carol w")[-1] == b"s4 OK SETACL completed"
    assert alice.cmd("g3", "GETACL Team")[0] == \
        b"* ACL Team -carol w carol lrtekcd alice lrwstipekxacd"
    assert alice.cmd("s5", "SETACL Team carol lrqswicda")[-1].startswith(b"s5 BAD")
    assert alice.cmd("s6", "SETACL Team carol \"\"")[-1] == b"s6 OK SETACL completed"
    assert alice.cmd("d1", "DELETEACL Team -carol")[-1] == b"d1 OK DELETEACL completed"
    assert alice.cmd("g4", "GETACL Team")[0] == b"* ACL Team alice lrwstipekxacd"
    assert alice.cmd("l1", "LISTRIGHTS Team carol") == [
        b'* LISTRIGHTS Team carol "" l r w s t p i e k x a c d',
        b"l1 OK LISTRIGHTS completed"]
    assert alice.cmd("x1", "GETACL Nope") == [b"x1 NO [NONEXISTENT] no such mailbox: Nope"]


def test_rights_shape_select(alice, bob):
    """RFC 4314 4: SELECT needs "r"; a user with nothing to change gets [READ-ONLY]; the
    PERMANENTFLAGS of a read-write SELECT list only the flags the rights let the user change
    (\\Seen with "s", \\Deleted with "t", the rest and new keywords with "w")."""
    alice.cmd("s", "SETACL Team bob lr")
    lines = bob.cmd("s1", 'SELECT "Other Users/alice/Team"')
    assert b"* OK [PERMANENTFLAGS ()] Read-only mailbox" in lines
    assert lines[-1] == b"s1 OK [READ-ONLY] SELECT completed"
    alice.cmd("s", "SETACL Team bob lrs")
    lines = bob.cmd("s2", 'SELECT "Other Users/alice/Team"')
    assert b"* OK [PERMANENTFLAGS (\\Seen)] Flags permitted" in lines
    assert lines[-1] == b"s2 OK [READ-WRITE] SELECT completed"
    alice.cmd("s", "SETACL Team bob lrstw")
    lines = bob.cmd("s3", 'SELECT "Other Users/alice/Team"')
    assert b"* OK [PERMANENTFLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft \\*)] " \
           b"Flags permitted" in lines
    alice.cmd("s", "SETACL Team bob l")
    assert bob.cmd("s4", 'SELECT "Other Users/alice/Team"')[-1] == \
        b"s4 NO [NOPERM] Permission denied"
    alice.cmd("s", "DELETEACL Team bob")


def test_list_myrights(alice, bob):
    """RFC 8440 2 (its example): ``RETURN (MYRIGHTS)`` adds a MYRIGHTS response after each
    mailbox's LIST response, none for names that are no mailbox (\\Noselect)."""
    alice.cmd("s", "SETACL Team bob lrs")
    lines = bob.cmd("m", 'LIST "" "*" RETURN (MYRIGHTS)')
    assert lines == [
        b'* LIST (\\HasNoChildren) "/" INBOX', b"* MYRIGHTS INBOX lrwstipekxacd",
        b'* LIST (\\NonExistent) "/" "Other Users"',
        b'* LIST (\\NonExistent) "/" "Other Users/alice"',
        b'* LIST (\\HasNoChildren) "/" "Other Users/alice/Team"',
        b'* MYRIGHTS "Other Users/alice/Team" lrs',
        b"m OK LIST completed"]
    alice.cmd("s", "DELETEACL Team bob")


def test_lsub_and_status_of_a_shared_mailbox(alice, bob):
    """RFC 3501 6.3.9 with RFC 4314 4: a subscribed mailbox of another user's shows in LSUB
    while it can be listed; STATUS needs "r" and names it as the user does."""
    alice.cmd("s", "SETACL Team bob lr")
    assert bob.cmd("u", 'SUBSCRIBE "Other Users/alice/Team"')[-1].startswith(b"u OK")
    assert bob.cmd("l", 'LSUB "" "Other*"') == [
        b'* LSUB () "/" "Other Users/alice/Team"', b"l OK LSUB completed"]
    assert bob.cmd("l", 'LSUB "" "Other Users/%"') == [
        b'* LSUB (\\Noselect) "/" "Other Users/alice"', b"l OK LSUB completed"]
    assert bob.cmd("t", 'STATUS "Other Users/alice/Team" (MESSAGES)')[0] == \
        b'* STATUS "Other Users/alice/Team" (MESSAGES 1)'
    alice.cmd("s", "DELETEACL Team bob")
    bob.cmd("u", 'UNSUBSCRIBE "Other Users/alice/Team"')


def test_getquotaroot_of_another_users_mailbox_names_no_root(alice, bob):
    """RFC 9208 4.1.2 with RFC 4314: a mailbox of another user's is on its owner's quota,
    which is not bob's to see; the answer is the same whether it exists or not."""
    alice.cmd("s", "SETACL Team bob lr")
    for name in ("Other Users/alice/Team", "Other Users/alice/Nope"):
        assert bob.cmd("q", f'GETQUOTAROOT "{name}"') == [
            f'* QUOTAROOT "{name}"'.encode(), b"q OK GETQUOTAROOT completed"]
    alice.cmd("s", "DELETEACL Team bob")
