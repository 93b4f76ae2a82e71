"""Real IMAP clients against a real ``imapserver`` process.

* ``imapclient`` (PyPI): folders, APPEND, SEARCH, FETCH of ENVELOPE/BODYSTRUCTURE/partials,
  flags, COPY/MOVE (RFC 6851), UID EXPUNGE (RFC 4315), IDLE (RFC 2177) and a client that drops
  the connection in the middle of IDLE;
* ``mbsync`` (Debian's isync): a two-way sync of every folder with a Maildir, then changes on
  both sides, then an incremental run that must find nothing to do;
* ``fetchmail`` (Debian): retrieves unseen mail over IMAP into files, keeps it on the server and
  marks it \\Seen, so that the next poll fetches only what is new (RFC 3501 2.3.2, 6.4.4).

The stdlib ``imaplib`` is used for seeding and checking (and has its own round trip in
test_imap_session.py).  The Makefile installs isync and fetchmail (``DEBIAN_TEST_PKGS``).
"""

from __future__ import annotations

import email
import imaplib
import os
import re
import shutil
import subprocess
import threading

import pytest
from imapclient import IMAPClient

from tests.imapproc import ServerProcess, make_users
from tests.mailgen import message

CLIENT_TIMEOUT = 60


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("clients") / "store")
    make_users(data_dir, ("ivy", "imapclient-pw"), ("carol", "mbsync-pw"),
               ("dave", "fetchmail-pw"))
    with ServerProcess(data_dir) as proc:
        yield proc


def imap_session(server, user: str, password: str) -> imaplib.IMAP4:
    imap = imaplib.IMAP4("127.0.0.1", server.port, timeout=10)
    imap.login(user, password)
    return imap


def server_messages(server, user: str, password: str, mailbox: str) -> dict[bytes, set[str]]:
    """{Message-ID: flags} of a mailbox, read with the stdlib client."""
    imap = imap_session(server, user, password)
    try:
        status, _ = imap.select(f'"{mailbox}"', readonly=True)
        assert status == "OK", mailbox
        status, data = imap.uid("FETCH", "1:*", "(FLAGS BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])")
        assert status == "OK"
        found = {}
        for item in data:
            if not isinstance(item, tuple):
                continue
            flags = set(re.search(rb"FLAGS \(([^)]*)\)", item[0]).group(1).decode().split())
            msgid = re.search(rb"<[^>]+>", item[1]).group(0)
            found[msgid] = flags
        return found
    finally:
        imap.logout()


# -- imapclient ----------------------------------------------------------------------------------

@pytest.fixture
def ivy(server):
    client = IMAPClient("127.0.0.1", port=server.port, ssl=False, timeout=10)
    client.login("ivy", "imapclient-pw")
    yield client
    try:
        client.logout()
    except (IMAPClient.Error, OSError):
        pass


def test_imapclient_folders_append_search_fetch_flags(ivy):
    """RFC 3501 6.3 / 6.4 through imapclient: CREATE, LIST, STATUS, APPEND with flags and date,
    SEARCH, FETCH of ENVELOPE, BODYSTRUCTURE, a partial body, and STORE."""
    assert ivy.has_capability("IDLE") and ivy.has_capability("UIDPLUS")
    ivy.create_folder("Projects/Alpha")
    folders = {name for _flags, _delim, name in ivy.list_folders()}
    assert {"INBOX", "Projects", "Projects/Alpha", "Sent", "Trash"} <= folders
    assert ivy.find_special_folder(b"\\Sent") == "Sent"
    first = message(1, subject="alpha report", size=3000)
    second = message(2, subject="beta notes")
    ivy.append("Projects/Alpha", first, flags=[b"\\Flagged"])
    ivy.append("Projects/Alpha", second)
    assert ivy.folder_status("Projects/Alpha", ["MESSAGES", "UNSEEN"]) == {
        b"MESSAGES": 2, b"UNSEEN": 2}
    ivy.select_folder("Projects/Alpha")
    assert ivy.search(["SUBJECT", "alpha"]) == [1]
    assert ivy.search(["FLAGGED"]) == [1]
    data = ivy.fetch([1, 2], ["ENVELOPE", "BODYSTRUCTURE", "RFC822.SIZE", "BODY.PEEK[]<0.40>",
                              "FLAGS"])
    assert data[1][b"ENVELOPE"].subject == b"alpha report"
    assert data[1][b"ENVELOPE"].message_id == b"<m1@test>"
    assert data[1][b"RFC822.SIZE"] == len(first)
    assert data[1][b"BODY[]<0>"] == first[:40]
    assert data[2][b"BODYSTRUCTURE"][:2] == (b"text", b"plain")
    assert data[2][b"FLAGS"] == (b"\\Recent",)  # ivy's SELECT was the first (RFC 3501 2.3.2)
    ivy.add_flags([2], [b"\\Seen", b"$Important"])
    assert set(ivy.get_flags([2])[2]) == {b"\\Seen", b"$Important", b"\\Recent"}
    ivy.remove_flags([1], [b"\\Flagged"])
    assert ivy.search(["FLAGGED"]) == []
    full = ivy.fetch([1], ["BODY[]"])[1][b"BODY[]"]
    assert full == first
    assert b"\\Seen" in ivy.get_flags([1])[1]


def test_imapclient_copy_move_expunge(ivy):
    """RFC 3501 6.4.7 COPY, RFC 6851 MOVE, RFC 4315 UID EXPUNGE, through imapclient."""
    for name in ("From", "To"):
        if ivy.folder_exists(name):
            ivy.delete_folder(name)
        ivy.create_folder(name)
    for k in range(4):
        ivy.append("From", message(10 + k))
    ivy.select_folder("From")
    ivy.copy([1], "To")
    ivy.move([2, 3], "To")
    assert ivy.search() == [1, 4]
    ivy.delete_messages([4])
    ivy.uid_expunge([4])
    assert ivy.search() == [1]
    ivy.select_folder("To", readonly=True)
    ids = [env[b"ENVELOPE"].message_id for env in
           ivy.fetch(ivy.search(), ["ENVELOPE"]).values()]
    assert sorted(ids) == [b"<m10@test>", b"<m11@test>", b"<m12@test>"]


def test_imapclient_idle_push_and_vanishing_during_idle(server, ivy):
    """RFC 2177 IDLE through imapclient: another session's APPEND is pushed as EXISTS; then a
    client drops its connection in the middle of IDLE, and the server goes on serving."""
    if ivy.folder_exists("Watch"):
        ivy.delete_folder("Watch")
    ivy.create_folder("Watch")
    ivy.select_folder("Watch")
    ivy.idle()
    other = IMAPClient("127.0.0.1", port=server.port, ssl=False, timeout=10)
    try:
        other.login("ivy", "imapclient-pw")
        other.append("Watch", message(99))
        responses = ivy.idle_check(timeout=5)
        assert (1, b"EXISTS") in responses
        ivy.idle_done()
        # A client that vanishes during IDLE, without DONE or LOGOUT.
        gone = IMAPClient("127.0.0.1", port=server.port, ssl=False, timeout=10)
        gone.login("ivy", "imapclient-pw")
        gone.select_folder("Watch")
        gone.idle()
        gone.shutdown()
        other.append("Watch", message(100))
        assert (2, b"EXISTS") in ivy.noop()[1]
        assert other.folder_status("Watch", ["MESSAGES"])[b"MESSAGES"] == 2
    finally:
        other.logout()


# -- mbsync (isync) -------------------------------------------------------------------------------

MBSYNCRC = """\
IMAPAccount test
Host 127.0.0.1
Port {port}
User carol
Pass mbsync-pw
# Loopback test server without TLS: isync 1.4 wants both spelled out to send LOGIN in the clear.
SSLType None
AuthMechs LOGIN
Timeout 20

IMAPStore remote
Account test

MaildirStore local
Path {maildir}/
Inbox {maildir}/INBOX
SubFolders Verbatim

Channel everything
Far :remote:
Near :local:
Patterns *
Create Both
Expunge Both
SyncState *
"""


def mbsync(rc: str) -> str:
    done = subprocess.run(["mbsync", "-c", rc, "-a"], capture_output=True, text=True,
                          timeout=CLIENT_TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def maildir_messages(folder: str) -> dict[bytes, str]:
    """{Message-ID: maildir info flags} of a Maildir folder (new/ and cur/)."""
    found = {}
    for sub in ("new", "cur"):
        directory = os.path.join(folder, sub)
        for name in os.listdir(directory):
            with open(os.path.join(directory, name), "rb") as f:
                msg = email.message_from_binary_file(f)
            info = name.split(":2,", 1)[1] if ":2," in name else ""
            found[msg["Message-ID"].encode()] = info
    return found


def maildir_file(folder: str, msgid: bytes) -> str:
    for sub in ("new", "cur"):
        for name in os.listdir(os.path.join(folder, sub)):
            with open(os.path.join(folder, sub, name), "rb") as f:
                if b"Message-ID: " + msgid in f.read():
                    return os.path.join(folder, sub, name)
    raise FileNotFoundError(msgid)


def snapshot(maildir: str) -> dict[str, list[str]]:
    tree = {}
    for root, _dirs, files in os.walk(maildir):
        tree[os.path.relpath(root, maildir)] = sorted(files)
    return tree


def test_mbsync_two_way_then_incremental(server, tmp_path):
    """isync's mbsync against the server: a first sync pulls every folder (hierarchy and flags)
    into a Maildir; then new mail and flag changes on both sides and deletions on both sides
    travel both ways (APPEND with flags and APPENDUID, UID FETCH of ranges, UID STORE, EXPUNGE,
    RFC 3501 6.3.11 / 6.4 and RFC 4315); a third run changes nothing on either side."""
    carol = ("carol", "mbsync-pw")
    imap = imap_session(server, *carol)
    imap.create("Lists/Python")
    imap.append("INBOX", "(\\Seen)", None, message(1))
    imap.append("INBOX", None, None, message(2))
    imap.append("INBOX", "(\\Flagged)", None, message(3, size=150_000))
    imap.append("Lists/Python", None, None, message(4))
    imap.logout()
    maildir = str(tmp_path / "Mail")
    os.makedirs(maildir)
    rc = str(tmp_path / "mbsyncrc")
    with open(rc, "w") as f:
        f.write(MBSYNCRC.format(port=server.port, maildir=maildir))

    # 1. Far to near: everything arrives, with its flags.
    mbsync(rc)
    inbox = os.path.join(maildir, "INBOX")
    assert maildir_messages(inbox) == {b"<m1@test>": "S", b"<m2@test>": "", b"<m3@test>": "F"}
    assert maildir_messages(os.path.join(maildir, "Lists", "Python")) == {b"<m4@test>": ""}
    assert os.path.isdir(os.path.join(maildir, "Sent", "cur"))
    with open(maildir_file(inbox, b"<m3@test>"), "rb") as f:
        # mbsync marks what it propagates with an X-TUID header and keeps LF line ends.
        pulled = re.sub(rb"X-TUID: \S+\n", b"", f.read())
    assert pulled == message(3, size=150_000).replace(b"\r\n", b"\n")

    # 2. Changes on both sides.
    # Near: a new message (flagged), m2 read, m1 deleted, a new folder with one message.
    with open(os.path.join(inbox, "cur", "1700000000.local1.host:2,F"), "wb") as f:
        f.write(message(5).replace(b"\r\n", b"\n"))
    m2 = maildir_file(inbox, b"<m2@test>")
    os.rename(m2, os.path.join(inbox, "cur", os.path.basename(m2).split(":2,")[0] + ":2,S"))
    os.remove(maildir_file(inbox, b"<m1@test>"))
    local_only = os.path.join(maildir, "Local")
    for sub in ("new", "cur", "tmp"):
        os.makedirs(os.path.join(local_only, sub))
    with open(os.path.join(local_only, "new", "1700000001.local2.host"), "wb") as f:
        f.write(message(6).replace(b"\r\n", b"\n"))
    # Far: a new message, m3 unflagged and answered, m4 expunged.
    imap = imap_session(server, *carol)
    imap.append("INBOX", None, None, message(7))
    imap.select("INBOX")
    imap.uid("STORE", "3", "FLAGS", "(\\Answered)")
    imap.select("Lists/Python")
    imap.store("1", "+FLAGS", "(\\Deleted)")
    imap.expunge()
    imap.logout()

    mbsync(rc)
    assert server_messages(server, *carol, "INBOX") == {
        b"<m2@test>": {"\\Seen"}, b"<m3@test>": {"\\Answered"}, b"<m5@test>": {"\\Flagged"},
        b"<m7@test>": set()}
    assert server_messages(server, *carol, "Local") == {b"<m6@test>": set()}
    assert server_messages(server, *carol, "Lists/Python") == {}
    assert maildir_messages(inbox) == {b"<m2@test>": "S", b"<m3@test>": "R",
                                       b"<m5@test>": "F", b"<m7@test>": ""}
    assert maildir_messages(os.path.join(maildir, "Lists", "Python")) == {}

    # 3. Incremental: nothing to do, nothing changes on either side.
    before_near = snapshot(maildir)
    imap = imap_session(server, *carol)
    before_far = {name: imap.status(f'"{name}"', "(MESSAGES UIDNEXT UIDVALIDITY)")[1]
                  for name in ("INBOX", "Local", "Lists/Python")}
    imap.logout()
    mbsync(rc)
    assert snapshot(maildir) == before_near
    imap = imap_session(server, *carol)
    after_far = {name: imap.status(f'"{name}"', "(MESSAGES UIDNEXT UIDVALIDITY)")[1]
                 for name in ("INBOX", "Local", "Lists/Python")}
    imap.logout()
    assert after_far == before_far


# -- fetchmail -----------------------------------------------------------------------------------

FETCHMAILRC = """\
set no syslog
poll 127.0.0.1 service {port} protocol IMAP auth password timeout 20
  user "dave" there with password "fetchmail-pw" is "{local_user}" here
  folder "INBOX"
  keep
  sslproto ''
  mda "{deliver} {outbox}"
"""

DELIVER = """#!/bin/sh
# One delivered message per file, named by a counter (fetchmail runs the MDA once per message).
n=$(ls "$1" | wc -l)
cat > "$1/msg.$n"
"""


def fetchmail(home: str) -> tuple[int, str]:
    env = dict(os.environ, HOME=home, FETCHMAILHOME=home)
    done = subprocess.run(["fetchmail", "-v", "-f", os.path.join(home, "fetchmailrc"),
                           "--idfile", os.path.join(home, "ids"),
                           "--pidfile", os.path.join(home, "pid")],
                          capture_output=True, text=True, timeout=CLIENT_TIMEOUT, env=env,
                          stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout + done.stderr


def delivered(outbox: str) -> dict[bytes, bytes]:
    found = {}
    for name in sorted(os.listdir(outbox)):
        with open(os.path.join(outbox, name), "rb") as f:
            data = f.read()
        found[re.search(rb"Message-ID: (<[^>]+>)", data).group(1)] = data
    return found


def test_fetchmail_retrieves_new_mail_incrementally(server, tmp_path):
    """fetchmail over IMAP: fetches the unseen messages intact (header and body, a 300 KB one
    included), keeps them on the server marked \\Seen (RFC 3501 6.4.5), and on the next poll
    finds nothing (exit 1, "no mail"); after a new delivery, fetches exactly that one."""
    home = str(tmp_path)
    outbox = os.path.join(home, "out")
    os.makedirs(outbox)
    deliver = os.path.join(home, "deliver")
    with open(deliver, "w") as f:
        f.write(DELIVER)
    os.chmod(deliver, 0o755)
    rc = os.path.join(home, "fetchmailrc")
    with open(rc, "w") as f:
        f.write(FETCHMAILRC.format(port=server.port, deliver=deliver, outbox=outbox,
                                   local_user=os.environ.get("USER") or "root"))
    os.chmod(rc, 0o600)  # fetchmail refuses a password file others can read
    dave = ("dave", "fetchmail-pw")
    originals = {b"<m%d@test>" % k: message(k, size=300_000 if k == 22 else 0)
                 for k in (21, 22, 23)}
    imap = imap_session(server, *dave)
    imap.append("INBOX", None, None, originals[b"<m21@test>"])
    imap.append("INBOX", None, None, originals[b"<m22@test>"])
    imap.append("INBOX", "(\\Seen)", None, message(20))  # already read: not fetched
    imap.append("INBOX", None, None, originals[b"<m23@test>"])
    imap.logout()

    code, log = fetchmail(home)
    assert code == 0, log
    got = delivered(outbox)
    assert set(got) == set(originals), log
    for msgid, data in got.items():
        # fetchmail prepends its Received: header and hands the MDA LF line ends.
        assert data.endswith(originals[msgid].replace(b"\r\n", b"\n")), msgid
    assert server_messages(server, *dave, "INBOX") == {
        b"<m20@test>": {"\\Seen"}, b"<m21@test>": {"\\Seen"}, b"<m22@test>": {"\\Seen"},
        b"<m23@test>": {"\\Seen"}}

    code, log = fetchmail(home)
    assert code == 1, log  # 1: no mail
    assert len(os.listdir(outbox)) == 3

    imap = imap_session(server, *dave)
    imap.append("INBOX", None, None, message(24))
    imap.logout()
    code, log = fetchmail(home)
    assert code == 0, log
    assert set(delivered(outbox)) == set(originals) | {b"<m24@test>"}


def test_client_tools_are_installed():
    """The Makefile installs these (DEBIAN_TEST_PKGS); the tests must not silently skip."""
    for tool in ("mbsync", "fetchmail"):
        assert shutil.which(tool), f"{tool} missing: run make test (installs DEBIAN_TEST_PKGS)"


def test_concurrent_imapclient_sessions(server):
    """Several imapclient sessions of one user at once, each appending and reading its own
    folder, while the others do the same (the per-connection command queue, RFC 3501 5.5)."""
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            c = IMAPClient("127.0.0.1", port=server.port, ssl=False, timeout=20)
            c.login("ivy", "imapclient-pw")
            name = f"Worker{k}"
            if c.folder_exists(name):
                c.delete_folder(name)
            c.create_folder(name)
            for j in range(5):
                c.append(name, message(1000 * k + j))
            c.select_folder(name)
            ids = sorted(v[b"ENVELOPE"].message_id for v in
                         c.fetch(c.search(), ["ENVELOPE"]).values())
            assert ids == sorted(b"<m%d@test>" % (1000 * k + j) for j in range(5))
            c.logout()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(CLIENT_TIMEOUT)
    assert not errors, errors
