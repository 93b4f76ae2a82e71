"""CREATE-SPECIAL-USE (RFC 6154 section 3) transcript tests."""

from __future__ import annotations

import pytest

from tests.imapproc import Client, ServerProcess, make_users


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("createuse") / "store")
    make_users(data_dir, ("alice", "wonderland"))
    with ServerProcess(data_dir) as proc:
        yield proc


@pytest.fixture
def client(server):
    c = Client(server.port)
    assert c.cmd("L", "LOGIN alice wonderland")[-1].startswith(b"L OK")
    yield c
    c.close()


def listing(c: Client, name: str) -> list[bytes]:
    return [line for line in c.cmd("l", f'LIST "" {name} RETURN (SPECIAL-USE)')
            if line.startswith(b"* LIST")]


def test_advertised(client):
    """RFC 6154 3: a server that supports the USE parameter advertises CREATE-SPECIAL-USE."""
    assert b"CREATE-SPECIAL-USE" in client.cmd("c", "CAPABILITY")[0].split()


def test_create_with_a_use(client):
    """RFC 6154 3 (its example: CREATE MySpecial (USE (\\Drafts \\Sent)) gives the attributes
    to the new mailbox): the mailbox is created with the use, shown by LIST; the attribute
    is case-insensitive."""
    done = client.cmd("c", "CREATE Old/Archive2 (USE (\\Archive))")[-1]
    assert done.startswith(b"c OK [MAILBOXID (") and done.endswith(b"CREATE completed")
    assert listing(client, "Old/Archive2") == [b'* LIST (\\HasNoChildren \\Archive) "/" '
                                               b"Old/Archive2"]
    assert client.cmd("c2", "CREATE Bin (USE (\\trash))")[-1].startswith(b"c2 OK")
    assert listing(client, "Bin") == [b'* LIST (\\HasNoChildren \\Trash) "/" Bin']


def test_empty_use_is_a_plain_create(client):
    """RFC 6154 6: use-attr list may be empty: a mailbox without a special use."""
    assert client.cmd("c", "CREATE Plain (USE ())")[-1].startswith(b"c OK")
    assert listing(client, "Plain") == [b'* LIST (\\HasNoChildren) "/" Plain']


@pytest.mark.parametrize("attrs", ["\\Bogus", "\\All", "\\Flagged", "\\Sent \\Drafts"])
def test_use_we_cannot_give_is_useattr_and_creates_nothing(client, attrs):
    """RFC 6154 3: if the mailbox cannot be created with the designated use, the server MUST
    NOT create it and answers NO, with USEATTR when the use is the reason: an unknown
    attribute, the virtual \\All and \\Flagged (we keep no such mailbox's contents), and more
    than one use (a mailbox of ours has one)."""
    last = client.cmd("c", f"CREATE Refused (USE ({attrs}))")[-1]
    assert last.startswith(b"c NO [USEATTR]"), last
    assert listing(client, "Refused") == []


@pytest.mark.parametrize("params", ["(FOO)", "(USE)", "(USE \\Archive)", "(USE (Archive))",
                                    "USE", "(USE (\\Archive)) extra"])
def test_malformed_parameters_are_bad(client, params):
    """RFC 4466 create-params, RFC 6154 6: anything but (USE (attrs)) is BAD, nothing made."""
    last = client.cmd("c", f"CREATE Malformed {params}")[-1]
    assert last.startswith(b"c BAD"), last
    assert listing(client, "Malformed") == []
