"""METADATA and METADATA-SERVER (RFC 5464) transcript tests: the RFC's examples (4.2, 4.2.1,
4.2.2, 4.3, 4.4), its response codes, the predefined entries, literal8 values, and
annotations that follow RENAME and go with DELETE.

The server runs with small limits (:data:`CONFIG`): values up to 64 octets, 4 entries per
mailbox, 300 octets per user, and a /shared/admin address.
"""

from __future__ import annotations

import re

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.imapproc import Client, ServerProcess, make_users

CONFIG = """\
[imap]
metadata_max_value_size = 64
metadata_max_entries = 4
metadata_max_user_size = 300
metadata_admin = mailto:postmaster@example.com
"""


@pytest.fixture
def server(tmp_path):
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("alice", "wonderland"), ("bob", "builder"))
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"))
    try:
        store.annotations.set_server_shared("/shared/comment", b"Shared comment")
    finally:
        store.close()
    config = tmp_path / "imapserver.conf"
    config.write_text(CONFIG)
    with ServerProcess(data_dir, config=str(config)) as proc:
        yield proc


@pytest.fixture
def client(server):
    c = Client(server.port)
    assert c.cmd("L", "LOGIN alice wonderland")[-1].startswith(b"L OK")
    yield c
    c.close()


def cmd(c: Client, tag: str, text: str) -> list[bytes]:
    return c.cmd(tag, text)


def test_capabilities(client):
    """RFC 5464 1: METADATA (mailbox and server entries) and METADATA-SERVER."""
    caps = cmd(client, "c", "CAPABILITY")[0].split()
    assert b"METADATA" in caps and b"METADATA-SERVER" in caps


def test_rfc_4_2_examples(client):
    """RFC 5464 4.2: server and mailbox entries, one entry or a list; an entry without a
    value is NIL (4.4.1 lists what was asked)."""
    assert cmd(client, "a", 'GETMETADATA "" /shared/comment') == [
        b'* METADATA "" (/shared/comment "Shared comment")', b"a OK GETMETADATA completed"]
    assert cmd(client, "b", 'SETMETADATA INBOX (/private/comment "My own comment")')[-1] \
        == b"b OK SETMETADATA completed"
    assert cmd(client, "c", "GETMETADATA INBOX /private/comment")[0] == \
        b'* METADATA INBOX (/private/comment "My own comment")'
    assert cmd(client, "d", 'GETMETADATA "INBOX" (/shared/comment /private/comment)')[0] == \
        b'* METADATA INBOX (/shared/comment NIL /private/comment "My own comment")'


def test_rfc_4_2_1_maxsize_longentries(client):
    """RFC 5464 4.2.1: entries over MAXSIZE are left out and the largest such size is
    reported in OK [METADATA LONGENTRIES n]."""
    cmd(client, "s", 'SETMETADATA INBOX (/shared/comment "' + "x" * 40 +
        '" /private/comment "My own comment")')
    text = 'GETMETADATA (MAXSIZE 20) INBOX (/shared/comment /private/comment)'
    assert cmd(client, "a", text) == [
        b'* METADATA INBOX (/private/comment "My own comment")',
        b"a OK [METADATA LONGENTRIES 40] GETMETADATA completed"]


def test_rfc_4_2_2_depth(client):
    """RFC 5464 4.2.2: DEPTH 0 (the entry), 1 (and its children), infinity (the subtree); a
    subtree's root without a value is left out (Dovecot's reading), DEPTH 0 answers NIL."""
    cmd(client, "s", 'SETMETADATA INBOX (/private/filters/values/small "SMALLER 5000" '
                     '/private/filters/values/boss "FROM \\"boss@example.com\\"")')
    cmd(client, "t", 'SETMETADATA INBOX (/private/filters/values/boss/x "deep")')
    assert cmd(client, "a", "GETMETADATA (DEPTH 1) INBOX (/private/filters/values)")[0] == (
        b'* METADATA INBOX (/private/filters/values/boss '
        b'{23}\r\nFROM "boss@example.com" /private/filters/values/small "SMALLER 5000")')
    line = cmd(client, "b", "GETMETADATA (DEPTH infinity) INBOX /private")[0]
    assert b'/private/filters/values/boss/x "deep"' in line
    assert cmd(client, "c", "GETMETADATA (DEPTH 0) INBOX /private/filters")[0] == \
        b"* METADATA INBOX (/private/filters NIL)"


def test_rfc_4_3_literal_and_nil(client):
    """RFC 5464 4.3: a value as a literal (two lines), then NIL removes the entry."""
    client.send(b"a SETMETADATA INBOX (/private/comment {33}\r\n")
    assert client.read_line().startswith(b"+")
    client.send(b"My new comment across\r\ntwo lines." + b")\r\n")
    assert client.until_tagged("a")[-1] == b"a OK SETMETADATA completed"
    got = cmd(client, "b", "GETMETADATA INBOX /private/comment")[0]
    assert got == b"* METADATA INBOX (/private/comment {33}\r\nMy new comment across\r\n" \
        b"two lines.)"
    assert cmd(client, "c", "SETMETADATA INBOX (/private/comment NIL)")[-1].startswith(b"c OK")
    assert cmd(client, "d", "GETMETADATA INBOX /private/comment")[0] == \
        b"* METADATA INBOX (/private/comment NIL)"


def test_literal8_value_with_nul(client):
    """RFC 5464 5: value = nstring / literal8; a value holding NUL is answered as literal8
    (RFC 3516 4.2), octet for octet."""
    value = b"a\x00b\xff"
    client.send(b"a SETMETADATA INBOX (/private/vendor/vendor.example/blob ~{4+}\r\n" +
                value + b")\r\n")
    assert client.until_tagged("a")[-1].startswith(b"a OK")
    assert cmd(client, "b", "GETMETADATA INBOX /private/vendor/vendor.example/blob")[0] == \
        b"* METADATA INBOX (/private/vendor/vendor.example/blob ~{4}\r\n" + value + b")"
    # The entry name is never a literal8.
    client.send(b"c SETMETADATA INBOX (~{1+}\r\nx NIL)\r\n")
    assert re.match(rb"c BAD .*literal8", client.until_tagged("c")[-1])


def test_rfc_4_3_response_codes(client):
    """RFC 5464 4.3: [METADATA MAXSIZE n] for a value too large, [METADATA TOOMANY] past the
    entry limit -- and nothing of the command is set; the per-user octet limit is
    [OVERQUOTA]; the server's /shared entries are read-only ([CANNOT], as Dovecot)."""
    assert cmd(client, "a", 'SETMETADATA INBOX (/private/a "1" /private/b "' + "x" * 65 +
               '")')[-1] == b"a NO [METADATA MAXSIZE 64] Metadata value too large"
    assert cmd(client, "b", "GETMETADATA INBOX /private/a")[0].endswith(b"NIL)")
    cmd(client, "c", 'SETMETADATA INBOX (/private/a "1" /private/b "2" /shared/c "3" '
                     '/shared/d "4")')
    assert cmd(client, "d", 'SETMETADATA INBOX (/private/e "5")')[-1] == \
        b"d NO [METADATA TOOMANY] Too many metadata entries"
    big = "y" * 60  # INBOX holds 42 octets (names count); the user may have 300
    assert cmd(client, "e", f'SETMETADATA Sent (/private/big1 "{big}" /private/big2 "{big}")'
               )[-1].startswith(b"e OK")
    assert cmd(client, "f", f'SETMETADATA Trash (/private/big1 "{big}")')[-1] \
        .startswith(b"f OK")
    assert cmd(client, "h", f'SETMETADATA Archive (/private/big "{big}")')[-1] == \
        b"h NO [OVERQUOTA] Metadata storage limit reached"
    assert cmd(client, "h2", "SETMETADATA Sent (/private/big2 NIL)")[-1].startswith(b"h2 OK")
    assert cmd(client, "h3", f'SETMETADATA Archive (/private/big "{big}")')[-1] \
        .startswith(b"h3 OK")
    for tag, entry in (("i", "/shared/admin"), ("j", "/shared/comment")):
        assert cmd(client, tag, f'SETMETADATA "" ({entry} "x")')[-1].startswith(
            tag.encode() + b" NO [CANNOT]")


def test_spooled_value_over_maxsize(client):
    """RFC 5464 4.3: a value far over the limit -- a 2 MiB literal, which the receiver spools
    to disk -- is refused with [METADATA MAXSIZE n] and the session goes on."""
    client.send(b"a SETMETADATA INBOX (/private/big {%d+}\r\n" % (2 << 20) + b"x" * (2 << 20)
                + b")\r\n")
    assert client.until_tagged("a")[-1] == b"a NO [METADATA MAXSIZE 64] Metadata value too large"
    assert cmd(client, "b", "GETMETADATA INBOX /private/big")[0].endswith(b"NIL)")


def test_server_entries(client, server):
    """RFC 5464 3.1, 6.2.2: /shared/admin from the configuration; private server entries
    are each user's own."""
    assert cmd(client, "a", 'GETMETADATA "" /shared/admin')[0] == \
        b'* METADATA "" (/shared/admin "mailto:postmaster@example.com")'
    assert cmd(client, "b", 'SETMETADATA "" (/private/vendor/vendor.example/theme "dark")'
               )[-1].startswith(b"b OK")
    other = Client(server.port)
    try:
        assert other.cmd("L", "LOGIN bob builder")[-1].startswith(b"L OK")
        assert other.cmd("a", 'GETMETADATA "" /private/vendor/vendor.example/theme')[0] == \
            b'* METADATA "" (/private/vendor/vendor.example/theme NIL)'
        # Another user's mailbox of the same name is their own, bare.
        cmd(client, "c", 'SETMETADATA INBOX (/shared/comment "alice")')
        assert other.cmd("b", "GETMETADATA INBOX /shared/comment")[0] == \
            b"* METADATA INBOX (/shared/comment NIL)"
    finally:
        other.close()


@pytest.mark.parametrize("entry", ["private/x", "/private/", "/private//x", "/private/*",
                                   "/shared/a%", "/other/x"])
def test_bad_entry_names(client, entry):
    """RFC 5464 3.2.1: malformed entry names are BAD, for GET and SET alike."""
    assert cmd(client, "a", f'GETMETADATA INBOX "{entry}"')[-1].startswith(b"a BAD")
    assert cmd(client, "b", f'SETMETADATA INBOX ({entry} "x")')[-1].startswith(b"b BAD")


@pytest.mark.parametrize("text", ["GETMETADATA INBOX", "GETMETADATA (DEPTH 2) INBOX /private",
                                  "GETMETADATA (MAXSIZE x) INBOX /private",
                                  "GETMETADATA (FOO 1) INBOX /private",
                                  "GETMETADATA INBOX (MAXSIZE 3) /private",
                                  "GETMETADATA INBOX ()", "SETMETADATA INBOX ()",
                                  "SETMETADATA INBOX (/private/x)",
                                  "SETMETADATA INBOX (/private/x FOO)",
                                  "SETMETADATA INBOX /private/x NIL"])
def test_malformed_commands(client, text):
    """RFC 5464 5's grammar: anything else is BAD, never a traceback."""
    assert cmd(client, "a", text)[-1].startswith(b"a BAD")


def test_case_insensitive_names(client):
    """RFC 5464 3.2.1: entry names are case-insensitive (answered lower case)."""
    cmd(client, "a", 'SETMETADATA INBOX (/Private/Comment "x")')
    assert cmd(client, "b", "GETMETADATA INBOX /PRIVATE/COMMENT")[0] == \
        b'* METADATA INBOX (/private/comment "x")'


def test_missing_mailbox(client):
    """A mailbox that does not exist: NO [NONEXISTENT] for both commands."""
    for tag, text in (("a", "GETMETADATA Nope /private/comment"),
                      ("b", 'SETMETADATA Nope (/private/comment "x")')):
        assert cmd(client, tag, text)[-1].startswith(tag.encode() + b" NO [NONEXISTENT]")


def test_rename_and_delete(client):
    """RFC 5464 3.1: a mailbox's annotations follow RENAME and go with DELETE."""
    cmd(client, "a", "CREATE Old")
    cmd(client, "b", 'SETMETADATA Old (/shared/comment "kept" /private/comment "mine")')
    assert cmd(client, "c", "RENAME Old New")[-1].startswith(b"c OK")
    assert cmd(client, "d", "GETMETADATA New (/shared/comment /private/comment)")[0] == \
        b'* METADATA New (/shared/comment "kept" /private/comment "mine")'
    cmd(client, "e", "DELETE New")
    cmd(client, "f", "CREATE New")
    assert cmd(client, "g", "GETMETADATA New /shared/comment")[0] == \
        b"* METADATA New (/shared/comment NIL)"


def test_specialuse_entry(client):
    """RFC 6154 3: /private/specialuse reflects the mailbox's special use, and setting it
    changes what LIST (SPECIAL-USE) shows; an attribute this server cannot give is
    NO [USEATTR]."""
    assert cmd(client, "a", "GETMETADATA Sent /private/specialuse")[0] == \
        b"* METADATA Sent (/private/specialuse {5}\r\n\\Sent)"
    cmd(client, "b", "CREATE Outbox")
    assert cmd(client, "c", 'SETMETADATA Outbox (/private/specialuse "\\\\Drafts")'
               )[-1].startswith(b"c OK")
    assert b'* LIST (\\HasNoChildren \\Drafts) "/" Outbox' in \
        cmd(client, "d", 'LIST "" Outbox RETURN (SPECIAL-USE)')
    assert cmd(client, "e", 'SETMETADATA Outbox (/private/specialuse "\\\\All")'
               )[-1].startswith(b"e NO [USEATTR]")
    assert cmd(client, "f", "SETMETADATA Outbox (/private/specialuse NIL)")[-1] \
        .startswith(b"f OK")
    assert cmd(client, "g", "GETMETADATA Outbox /private/specialuse")[0].endswith(b"NIL)")


def test_not_authenticated(server):
    """RFC 5464 4: both commands need an authenticated state."""
    c = Client(server.port)
    try:
        assert c.cmd("a", 'GETMETADATA "" /shared/admin')[-1].startswith(b"a BAD")
    finally:
        c.close()


def test_real_clients(server):
    """RFC 5464 through real libraries: imapclient (4.x has no METADATA methods) finds both
    capabilities; the stdlib's imaplib sends GETMETADATA and SETMETADATA as extension
    commands (``xatom``), and imapclient's response parser reads the METADATA responses
    (4.4.1), NIL included."""
    import imaplib

    from imapclient import IMAPClient
    from imapclient.response_parser import parse_response

    client = IMAPClient("127.0.0.1", port=server.port, ssl=False)
    try:
        client.login("alice", "wonderland")
        assert client.has_capability("METADATA") and client.has_capability("METADATA-SERVER")
    finally:
        client.logout()
    imap = imaplib.IMAP4("127.0.0.1", server.port)
    try:
        imap.login("bob", "builder")
        typ, _ = imap.xatom("SETMETADATA", 'INBOX (/private/comment "from imaplib" '
                                           '/shared/comment "shared")')
        assert typ == "OK"
        typ, _ = imap.xatom("GETMETADATA", "(DEPTH 1)", "INBOX",
                            "(/private/comment /shared /shared/none)")
        assert typ == "OK"
        _, data = imap.response("METADATA")
        assert parse_response(data) == (b"INBOX", (b"/private/comment", b"from imaplib",
                                                   b"/shared/comment", b"shared"))
        typ, _ = imap.xatom("GETMETADATA", '""', "/shared/admin")
        _, data = imap.response("METADATA")
        assert parse_response(data) == (b"", (b"/shared/admin",
                                              b"mailto:postmaster@example.com"))
    finally:
        imap.logout()


def test_unsolicited_metadata_line():
    """RFC 5464 4.4.2: the unsolicited form lists entries without values and without
    parentheses (for NOTIFY's MailboxMetadataChange, RFC 5465 5.4)."""
    from imapserver.imap.commands.metadata import unsolicited_metadata

    assert unsolicited_metadata("INBOX", ["/shared/comment", "/private/comment"]) == \
        b"METADATA INBOX /shared/comment /private/comment"
    assert unsolicited_metadata(None, ["/shared/admin"]) == b'METADATA "" /shared/admin'
    assert unsolicited_metadata("Caf\u00e9", ["/private/x"]) == b"METADATA Caf&AOk- /private/x"
