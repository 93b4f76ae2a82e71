"""IMAP4rev2 (RFC 9051) and UTF8=ACCEPT (RFC 6855) with real client libraries.

* Python's ``imaplib`` has UTF8=ACCEPT support of its own: ``IMAP4.enable("UTF8=ACCEPT")``
  switches it to sending UTF-8, so a mailbox with a non-ASCII name is created, listed,
  selected and read the way a program using the standard library does it.  Its APPEND is
  not used in that mode: imaplib (3.11) puts ``UTF8 (`` and ``)`` *inside* the literal it
  announces, so a server that follows RFC 6855 4 stores those octets as part of the message
  (the test shows it); the message is appended by a session that has not enabled UTF-8;
* ``imapclient`` (PyPI) enables IMAP4rev2 and works with ``folder_encode`` off, as a client
  that speaks UTF-8 names does: its SELECT parser must cope with the LIST response and the
  missing RECENT, its FLAGS with no \\Recent.
"""

from __future__ import annotations

import imaplib

import pytest
import twisted.mail.imap4  # noqa: F401  (registers the "imap4-utf-7" codec)
from imapclient import IMAPClient

from tests.imapproc import ServerProcess, make_users
from tests.mailgen import message

NAME = "Entw\u00fcrfe/\u65e5\u672c\u8a9e"
UTF8_MESSAGE = ("From: J\u00f6rg <j\u00f6rg@example.com>\r\nTo: bob@example.com\r\n"
                "Subject: Gr\u00fc\u00dfe\r\nMessage-ID: <lib1@test>\r\n"
                "Date: Sat, 21 Nov 2026 12:00:00 +0000\r\n\r\nHall\u00f6chen\r\n").encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("rev2-clients") / "store")
    make_users(data_dir, ("lib", "lib-pw"), ("ic", "ic-pw"))
    with ServerProcess(data_dir) as proc:
        yield proc


def test_imaplib_utf8_mailbox(server):
    """RFC 6855 3 through imaplib: ENABLE, then CREATE, LIST, SELECT, FETCH and STATUS on a
    mailbox named in UTF-8; an imaplib session that has not enabled UTF8=ACCEPT fills it and
    lists it in modified UTF-7 (RFC 3501 5.1.3)."""
    with imaplib.IMAP4("127.0.0.1", server.port, timeout=10) as imap:
        imap.login("lib", "lib-pw")
        assert imap.enable("UTF8=ACCEPT")[0] == "OK"
        assert imap.utf8_enabled
        assert imap.create(f'"{NAME}"')[0] == "OK"
        wire = NAME.encode("imap4-utf-7").decode()
        with imaplib.IMAP4("127.0.0.1", server.port, timeout=10) as plain:
            plain.login("lib", "lib-pw")
            typ, data = plain.append(wire, "(\\Flagged)", None, UTF8_MESSAGE)
            assert typ == "OK" and data[0].startswith(b"[APPENDUID")
        typ, listing = imap.list('""', '"Entw*"')
        assert typ == "OK"
        assert f'(\\HasNoChildren) "/" "{NAME}"'.encode() in listing
        typ, data = imap.select(f'"{NAME}"')
        assert (typ, data) == ("OK", [b"1"])
        typ, data = imap.fetch("1", "(FLAGS BODY.PEEK[])")
        assert typ == "OK" and data[0][1] == UTF8_MESSAGE
        typ, data = imap.status(f'"{NAME}"', "(MESSAGES UNSEEN)")
        assert data == [f'"{NAME}" (MESSAGES 1 UNSEEN 1)'.encode()]
        # imaplib's own UTF8 APPEND: the literal it announces holds "UTF8 (...)" itself, so
        # that is what a literal-respecting server stores (a client bug, kept visible here).
        typ, data = imap.append(f'"{NAME}"', None, None, UTF8_MESSAGE)
        assert typ == "OK"
        typ, data = imap.fetch("2", "(BODY.PEEK[])")
        assert data[0][1] == b"UTF8 (" + UTF8_MESSAGE + b")"

    with imaplib.IMAP4("127.0.0.1", server.port, timeout=10) as plain:
        plain.login("lib", "lib-pw")
        typ, listing = plain.list('""', "Entw*")
        assert f'(\\HasNoChildren) "/" {wire}'.encode() in listing
        assert plain.select(wire, readonly=True) == ("OK", [b"2"])
        typ, data = plain.fetch("1", "(BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
        assert data[0][1] == "Subject: Gr\u00fc\u00dfe\r\n\r\n".encode()


def test_imapclient_rev2_session(server):
    """imapclient with IMAP4rev2 enabled (RFC 9051 6.3.1): select_folder parses the rev2
    SELECT (LIST instead of RECENT and UNSEEN, 6.3.2), get_flags sees no \\Recent (Appendix
    E), and with ``folder_encode`` off folder names are sent and read as they are: ``R&D``
    is a name, not modified UTF-7 (RFC 9051 5.1), while a second, IMAP4rev1 imapclient that
    encodes folder names sees the same folder."""
    client = IMAPClient("127.0.0.1", port=server.port, ssl=False, timeout=10)
    client.login("ic", "ic-pw")
    assert b"IMAP4REV2" in client.capabilities()
    assert client.enable("IMAP4rev2") == [b"IMAP4rev2"]
    client.folder_encode = False
    client.create_folder("R&D")
    assert b"R&D" in [name for _flags, _delim, name in client.list_folders()]
    client.append("R&D", message(1))
    selected = client.select_folder("R&D")
    assert selected[b"EXISTS"] == 1 and b"RECENT" not in selected
    assert selected[b"UIDNEXT"] == 2
    assert client.get_flags([1]) == {1: ()}
    client.logout()

    rev1 = IMAPClient("127.0.0.1", port=server.port, ssl=False, timeout=10)
    rev1.login("ic", "ic-pw")
    assert "R&D" in [name for _flags, _delim, name in rev1.list_folders()]
    assert rev1.select_folder("R&D")[b"EXISTS"] == 1
    # The message was never reported as recent to the IMAP4rev2 session: it is to this one.
    assert rev1.get_flags([1]) == {1: (b"\\Recent",)}
    rev1.logout()
