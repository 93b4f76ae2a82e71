"""UNAUTHENTICATE (RFC 8437) transcript tests: back to the not authenticated state on the same
connection, nothing of the old login left behind."""

from __future__ import annotations

import pytest

from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("unauth")
    conf = base / "imapserver.conf"
    # One session per user: UNAUTHENTICATE must give the slot back (RFC 8437 3: the
    # connection can be reused, and the user may log in elsewhere).
    conf.write_text("[imap]\nmax_connections_per_user = 1\nauth_failure_delay = 0.1\n")
    data_dir = str(base / "store")
    make_users(data_dir, ("alice", "wonderland"), ("bob", "builder"))
    with ServerProcess(data_dir, config=str(conf)) as proc:
        yield proc


@pytest.fixture
def client(server):
    c = Client(server.port)
    yield c
    c.close()


def caps(c: Client) -> list[bytes]:
    return c.cmd("c", "CAPABILITY")[0].split()


def test_advertised_once_authenticated(client):
    """RFC 8437 3: a server MAY advertise UNAUTHENTICATE only after authentication; before it
    the command is BAD (not valid in the not authenticated state)."""
    assert b"UNAUTHENTICATE" not in caps(client)
    assert client.cmd("u", "UNAUTHENTICATE")[-1].startswith(b"u BAD")
    assert client.cmd("L", "LOGIN alice wonderland")[-1].startswith(b"L OK [CAPABILITY")
    assert b"UNAUTHENTICATE" in caps(client)


def test_back_to_not_authenticated(client):
    """RFC 8437 3: OK, then the not authenticated state: commands of the authenticated state
    are BAD, the capabilities are those before login, and LOGIN works again -- as another
    user, pipelined right behind UNAUTHENTICATE."""
    assert client.cmd("L", "LOGIN alice wonderland")[-1].startswith(b"L OK")
    before = set(caps(client))
    assert client.cmd("u", "UNAUTHENTICATE") == [b"u OK UNAUTHENTICATE completed"]
    assert client.cmd("s", "SELECT INBOX")[-1].startswith(b"s BAD")
    after = set(caps(client))
    assert b"UNAUTHENTICATE" not in after and b"AUTH=PLAIN" in after
    assert before - after == {b"UNAUTHENTICATE"}
    client.send("L2 LOGIN alice wonderland\r\nu2 UNAUTHENTICATE\r\nL3 LOGIN bob builder\r\n"
                "n NAMESPACE\r\n")
    lines = client.until_tagged("n")
    assert [line.split(b" ", 2)[:2] for line in lines if not line.startswith(b"*")] == [
        [b"L2", b"OK"], [b"u2", b"OK"], [b"L3", b"OK"], [b"n", b"OK"]]
    # Bob's INBOX now, not alice's.
    client.send(b"a APPEND INBOX {%d+}\r\n%s\r\n" % (len(message(1)), message(1)))
    assert client.until_tagged("a")[-1].startswith(b"a OK")
    other = Client(client.sock.getpeername()[1])
    try:
        assert other.cmd("L", "LOGIN alice wonderland")[-1].startswith(b"L OK")
        assert other.cmd("st", "STATUS INBOX (MESSAGES)")[0] == b"* STATUS INBOX (MESSAGES 0)"
    finally:
        other.close()


def test_selected_mailbox_closed_without_expunge(server, client):
    """RFC 8437 3: the selected mailbox ceases to be selected, but no expunge happens (unlike
    CLOSE): a message marked \\Deleted is still there afterwards."""
    assert client.cmd("L", "LOGIN bob builder")[-1].startswith(b"L OK")
    assert client.cmd("cr", "CREATE Keep")[-1].startswith(b"cr OK")
    client.send(b"a APPEND Keep (\\Deleted) {%d+}\r\n%s\r\n" % (len(message(2)), message(2)))
    assert client.until_tagged("a")[-1].startswith(b"a OK")
    assert client.cmd("s", "SELECT Keep")[-1].startswith(b"s OK [READ-WRITE]")
    assert client.cmd("u", "UNAUTHENTICATE") == [b"u OK UNAUTHENTICATE completed"]
    assert client.cmd("f", "FETCH 1 FLAGS")[-1].startswith(b"f BAD")
    assert client.cmd("L", "LOGIN bob builder")[-1].startswith(b"L OK")
    assert client.cmd("st", "STATUS Keep (MESSAGES)")[0] == b"* STATUS Keep (MESSAGES 1)"
    assert client.cmd("f2", "FETCH 1 FLAGS")[-1].startswith(b"f2 BAD")  # nothing selected
    assert client.cmd("d", "DELETE Keep")[-1].startswith(b"d OK")


def test_gives_back_the_users_session(server, client):
    """RFC 8437 1: the connection is reused for another identity, so the old one's session
    ends: with one session allowed per user, alice can log in elsewhere after it."""
    assert client.cmd("L", "LOGIN alice wonderland")[-1].startswith(b"L OK")
    other = Client(server.port)
    try:
        assert other.cmd("L", "LOGIN alice wonderland")[-1].startswith(b"L NO [LIMIT]")
        assert client.cmd("u", "UNAUTHENTICATE")[-1].startswith(b"u OK")
        assert other.cmd("L2", "LOGIN alice wonderland")[-1].startswith(b"L2 OK")
    finally:
        other.close()


def test_takes_no_arguments(client):
    """RFC 8437 6: unauthenticate = "UNAUTHENTICATE" (BAD for arguments; never NO, 3)."""
    assert client.cmd("L", "LOGIN alice wonderland")[-1].startswith(b"L OK")
    assert client.cmd("u", "UNAUTHENTICATE now")[-1].startswith(b"u BAD")
    assert client.cmd("n", "NAMESPACE")[-1].startswith(b"n OK")  # still logged in
