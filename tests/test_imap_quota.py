"""QUOTA (RFC 9208) transcript tests: the limits of ``mailadmin quota set`` as IMAP reports and
enforces them, and the STATUS items DELETED and DELETED-STORAGE that come with them.

``alice`` has 10 KiB and 5 messages; ``bob`` has no limits.  Limits are set through the store
on the data directory the server shares, as ``mailadmin quota set`` does.
"""

from __future__ import annotations

import re

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message

STORAGE = 10 * 1024
MESSAGES = 5


def set_quota(data_dir: str, user: str, storage: int | None, messages: int | None) -> None:
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"))
    try:
        store.set_quota(user, storage, messages)
    finally:
        store.close()


@pytest.fixture
def server(tmp_path):
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("alice", "wonderland"), ("bob", "builder"))
    set_quota(data_dir, "alice", STORAGE, MESSAGES)
    with ServerProcess(data_dir) as proc:
        proc.data_dir = data_dir
        yield proc


@pytest.fixture
def connect(server):
    """``connect(user, password)``: a logged-in Client, closed after the test."""
    opened = []

    def open_client(user: str = "alice", password: str = "wonderland",
                    login: bool = True) -> Client:
        c = Client(server.port)
        opened.append(c)
        if login:
            assert c.cmd("L", f"LOGIN {user} {password}")[-1].startswith(b"L OK")
        return c
    yield open_client
    for c in opened:
        c.close()


def append(c: Client, mailbox: str, data: bytes, tag: str = "ap") -> bytes:
    c.send(f"{tag} APPEND {mailbox} {{{len(data)}+}}\r\n".encode() + data + b"\r\n")
    return c.until_tagged(tag)[-1]


def test_capabilities_name_the_resources_and_not_quotaset(server, connect):
    """RFC 9208 1 and 5: QUOTA with a QUOTA=RES- capability for each resource handled; no
    QUOTASET, since SETQUOTA is not implemented for users (4.1.3)."""
    c = connect()
    caps = c.cmd("c", "CAPABILITY")[0].split()
    assert {b"QUOTA", b"QUOTA=RES-STORAGE", b"QUOTA=RES-MESSAGE"} <= set(caps)
    assert b"QUOTASET" not in caps
    assert not [cap for cap in caps if cap.startswith(b"QUOTA=RES-") and cap not in (
        b"QUOTA=RES-STORAGE", b"QUOTA=RES-MESSAGE")]


def test_thunderbird_exchange(server, connect):
    """The exchange Thunderbird's quota bar makes (RFC 9208 4.1.2): after SELECT it sends
    GETQUOTAROOT "INBOX" and reads QUOTAROOT and QUOTA; STORAGE is in units of 1024 octets
    (5.1), MESSAGE counts messages (5.2), and both follow what is stored."""
    c = connect()
    assert c.cmd("s", 'SELECT "INBOX"')[-1].startswith(b"s OK [READ-WRITE]")
    assert c.cmd("q", 'GETQUOTAROOT "INBOX"') == [
        b'* QUOTAROOT INBOX "User quota"',
        b'* QUOTA "User quota" (STORAGE 0 10 MESSAGE 0 5)',
        b"q OK GETQUOTAROOT completed"]
    raw = message(1, size=3000)
    assert append(c, "INBOX", raw).startswith(b"ap OK")
    lines = c.cmd("q2", 'GETQUOTAROOT "INBOX"')
    kib = (len(raw) + 1023) // 1024  # rounded up
    assert lines[1] == b'* QUOTA "User quota" (STORAGE %d 10 MESSAGE 1 5)' % kib
    assert c.cmd("g", 'GETQUOTA "User quota"') == [
        lines[1], b"g OK GETQUOTA completed"]


def test_quotaroot_of_any_mailbox_name(server, connect):
    """RFC 9208 4.1.2: the mailbox need not exist (which root a new mailbox would get); the
    name is echoed as given (4.2.2)."""
    c = connect()
    lines = c.cmd("q", "GETQUOTAROOT Not/Yet")
    assert lines[0] == b'* QUOTAROOT Not/Yet "User quota"'
    assert c.cmd("q2", "GETQUOTAROOT inbox")[0] == b'* QUOTAROOT inbox "User quota"'


def test_user_without_limits_has_no_quota_root(server, connect):
    """RFC 9208 4.2.2 (the comp.mail.mime example): a mailbox without a quota root answers
    QUOTAROOT with no root, and so no QUOTA (whose list needs a resource, section 7);
    GETQUOTA of the root answers NO (4.1.1: no such quota root)."""
    c = connect("bob", "builder")
    assert c.cmd("q", 'GETQUOTAROOT "INBOX"') == [
        b"* QUOTAROOT INBOX", b"q OK GETQUOTAROOT completed"]
    assert c.cmd("g", 'GETQUOTA "User quota"')[-1].startswith(b"g NO [NONEXISTENT]")


def test_only_the_limited_resource_is_listed(server, connect):
    """RFC 9208 4.2.1: resources not named in the list are not limited."""
    set_quota(server.data_dir, "bob", 2048, None)
    c = connect("bob", "builder")
    assert c.cmd("g", 'GETQUOTA "User quota"')[0] == b'* QUOTA "User quota" (STORAGE 0 2)'
    set_quota(server.data_dir, "bob", None, 7)
    assert c.cmd("g", 'GETQUOTA "User quota"')[0] == b'* QUOTA "User quota" (MESSAGE 0 7)'


def test_getquota_of_an_unknown_root(server, connect):
    """RFC 9208 4.1.1: NO for no such quota root; the name is opaque and compared exactly."""
    c = connect()
    assert c.cmd("g", 'GETQUOTA ""')[-1].startswith(b"g NO [NONEXISTENT]")
    assert c.cmd("g2", 'GETQUOTA "user quota"')[-1].startswith(b"g2 NO [NONEXISTENT]")
    assert c.cmd("g3", "GETQUOTA")[-1].startswith(b"g3 BAD")
    assert c.cmd("g4", "GETQUOTA (x)")[-1].startswith(b"g4 BAD")


def test_setquota_is_refused(server, connect):
    """RFC 9208 4.1.3 and 3.2: SETQUOTA may fail; limits are the administrator's here (NO,
    limits unchanged); a malformed one is BAD."""
    c = connect()
    assert c.cmd("s", 'SETQUOTA "User quota" (STORAGE 99999)')[-1].startswith(
        b"s NO [NOPERM]")
    assert c.cmd("s2", 'SETQUOTA "User quota" STORAGE')[-1].startswith(b"s2 BAD")
    assert c.cmd("g", 'GETQUOTA "User quota"')[0].endswith(b"(STORAGE 0 10 MESSAGE 0 5)")


def test_quota_commands_need_authentication(server, connect):
    """RFC 9208 8: no quota information to anonymous users (RFC 3501 3: BAD before login)."""
    c = connect(login=False)
    assert c.cmd("q", "GETQUOTAROOT INBOX")[-1].startswith(b"q BAD")
    assert c.cmd("g", 'GETQUOTA "User quota"')[-1].startswith(b"g BAD")


def test_append_over_quota_is_overquota(server, connect):
    """RFC 9208 4.3.1: APPEND that would take the user over a limit is NO [OVERQUOTA], and
    nothing is stored; MULTIAPPEND (RFC 3502) stores none of its messages then."""
    c = connect()
    assert append(c, "INBOX", message(1, size=STORAGE + 100)).startswith(b"ap NO [OVERQUOTA]")
    big, small = message(2, size=6000), message(3, size=500)
    c.send(b"m APPEND INBOX {%d+}\r\n%s {%d+}\r\n%s {%d+}\r\n%s\r\n" % (
        len(small), small, len(big), big, len(big), big))
    assert c.until_tagged("m")[-1].startswith(b"m NO [OVERQUOTA]")
    assert c.cmd("st", "STATUS INBOX (MESSAGES)")[0] == b"* STATUS INBOX (MESSAGES 0)"
    for n in range(MESSAGES):
        assert append(c, "INBOX", message(10 + n, size=200)).startswith(b"ap OK")
    assert append(c, "INBOX", message(20, size=200)).startswith(b"ap NO [OVERQUOTA]")
    assert c.cmd("q", 'GETQUOTA "User quota"')[0].endswith(b"MESSAGE 5 5)")


def test_copy_over_quota_and_move_within_it(server, connect):
    """RFC 9208 4.3.1: COPY that would exceed a limit is NO [OVERQUOTA] with nothing copied;
    MOVE between one user's mailboxes adds nothing to the quota root, so it works at the
    limit."""
    c = connect()
    for n in range(3):
        assert append(c, "INBOX", message(n, size=1000)).startswith(b"ap OK")
    assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    assert c.cmd("c", "COPY 1:3 Archive")[-1].startswith(b"c NO [OVERQUOTA]")
    assert c.cmd("st", "STATUS Archive (MESSAGES)")[0] == b"* STATUS Archive (MESSAGES 0)"
    assert c.cmd("c2", "COPY 1:2 Archive")[-1].startswith(b"c2 OK [COPYUID")
    assert c.cmd("c3", "COPY 3 Archive")[-1].startswith(b"c3 NO [OVERQUOTA]")
    assert c.cmd("m", "MOVE 3 Archive")[-1].startswith(b"m OK")
    assert c.cmd("q", 'GETQUOTA "User quota"')[0].endswith(b"MESSAGE 5 5)")


def test_status_deleted_and_deleted_storage(server, connect):
    """RFC 9208 4.1.4 (required with QUOTA=RES-MESSAGE and QUOTA=RES-STORAGE, 5.1, 5.2):
    DELETED counts messages with \\Deleted, DELETED-STORAGE adds up their RFC822.SIZE; also
    through LIST-STATUS (RFC 5819), and for the selected mailbox after its own STORE."""
    set_quota(server.data_dir, "alice", None, None)
    c = connect()
    raws = [message(n, size=700 + 300 * n) for n in range(4)]
    for raw in raws:
        assert append(c, "INBOX", raw).startswith(b"ap OK")
    assert c.cmd("st", "STATUS INBOX (MESSAGES DELETED DELETED-STORAGE)")[0] == \
        b"* STATUS INBOX (MESSAGES 4 DELETED 0 DELETED-STORAGE 0)"
    assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    assert c.cmd("f", "STORE 2,4 +FLAGS.SILENT (\\Deleted)")[-1].startswith(b"f OK")
    sizes = [int(m) for m in re.findall(
        rb"RFC822\.SIZE (\d+)", b" ".join(c.cmd("r", "FETCH 2,4 RFC822.SIZE")))]
    assert c.cmd("st2", "STATUS INBOX (DELETED-STORAGE DELETED)")[0] == \
        b"* STATUS INBOX (DELETED-STORAGE %d DELETED 2)" % sum(sizes)
    lines = c.cmd("l", 'LIST "" INBOX RETURN (STATUS (DELETED MESSAGES))')
    assert b"* STATUS INBOX (DELETED 2 MESSAGES 4)" in lines
    assert c.cmd("x", "EXPUNGE")[-1].startswith(b"x OK")
    assert c.cmd("st3", "STATUS INBOX (DELETED DELETED-STORAGE)")[0] == \
        b"* STATUS INBOX (DELETED 0 DELETED-STORAGE 0)"


def test_stdlib_imaplib_reads_the_quota(server):
    """A real client library: imaplib's getquotaroot/getquota (RFC 2087 names, which RFC 9208
    keeps) parse our QUOTAROOT and QUOTA responses; setquota gets NO."""
    import imaplib

    with imaplib.IMAP4("127.0.0.1", server.port) as m:
        m.login("alice", "wonderland")
        typ, data = m.getquotaroot("INBOX")
        assert typ == "OK"
        assert data == [[b'INBOX "User quota"'], [b'"User quota" (STORAGE 0 10 MESSAGE 0 5)']]
        assert m.getquota('"User quota"') == (
            "OK", [b'"User quota" (STORAGE 0 10 MESSAGE 0 5)'])
        typ, data = m.setquota('"User quota"', "(STORAGE 1)")
        assert typ == "NO" and data[0].startswith(b"[NOPERM]")
