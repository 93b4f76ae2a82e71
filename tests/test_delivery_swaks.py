"""The real ``imapserver`` process fed by ``swaks`` (Debian's SMTP/LMTP test client) and
stdlib ``smtplib``: ports on the command line, SMTP and LMTP side by side, the usual traps.

One server process serves the module (users alice, bob; 64 KiB message limit); each test
uses its own recipients' mailboxes or counts what it added.
"""

from __future__ import annotations

import shutil
import smtplib
import subprocess
import sys

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.deliveryserver import ServerProcess, body_of, stored

LIMIT = 64 * 1024
USERS = ("alice", "bob", "carol", "dave", "erin", "frank")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("swaks")
    store = MailStore(EmbeddedBackend(str(root / "store")))
    for user in USERS:
        store.create_user(user, None)
    conf = root / "imapserver.conf"
    conf.write_text(f"[store]\nmax_message_size = {LIMIT}\n"
                    "[delivery]\ndomains = example.com, localhost\nhostname = mx.test\n")
    with ServerProcess(str(root / "store"), config_file=str(conf)) as server:
        yield server, store, root
    store.close()


def swaks(server: ServerProcess, *args: str, protocol: str = "SMTP", data: bytes | None = None,
          ) -> subprocess.CompletedProcess:
    port = server.ports["lmtp" if protocol == "LMTP" else "smtp"]
    argv = ["swaks", "--server", "127.0.0.1", "--port", str(port), "--protocol",
            "LMTP" if protocol == "LMTP" else "ESMTP", "--from", "sender@example.org",
            "--timeout", "10", *args]
    return subprocess.run(argv, capture_output=True, timeout=60)


def test_swaks_is_installed_by_the_makefile():
    assert shutil.which("swaks"), "make installs swaks (DEBIAN_TEST_PKGS)"


def test_swaks_smtp_single_recipient(env):
    """RFC 5321 3.3: a plain SMTP transaction; swaks exits 0 when DATA got 250."""
    server, store, _ = env
    done = swaks(server, "--to", "alice@example.com", "--h-Subject", "hello from swaks",
                 "--body", "Hi Alice.")
    assert done.returncode == 0, done.stdout.decode()
    got = stored(store, "alice")[-1]
    assert got.startswith(b"Return-Path: <sender@example.org>\r\nDelivered-To: "
                          b"alice@example.com\r\nReceived: from ")
    assert b"by mx.test with ESMTP id" in got
    assert b"Subject: hello from swaks\r\n" in got and b"\r\n\r\nHi Alice.\r\n" in got


def test_swaks_lmtp_multiple_recipients_and_an_unknown_one(env):
    """RFC 2033 4.2: one DATA reply per accepted recipient; the unknown one was refused at
    RCPT with 550 5.1.1 and gets none."""
    server, store, _ = env
    done = swaks(server, "--to", "bob@example.com,nobody@example.com,carol@localhost",
                 "--body", "To three.", protocol="LMTP")
    out = done.stdout.decode()
    assert "<** 550 5.1.1 <nobody@example.com>" in out, out
    assert out.count("<-  250 2.0.0 <") == 2, out
    for user in ("bob", "carol"):
        assert b"\r\n\r\nTo three.\r\n" in stored(store, user)[-1]


def test_swaks_unknown_user_only(env):
    server, _, _ = env
    done = swaks(server, "--to", "nobody@example.com")
    assert done.returncode == 24, done.stdout.decode()  # swaks: no RCPTs accepted
    assert b"550 5.1.1" in done.stdout


def test_swaks_over_the_size_limit(env):
    """RFC 1870 6.3: 552 when the message exceeds the fixed maximum size; nothing kept."""
    server, store, root = env
    before = len(stored(store, "dave"))
    big = root / "big.txt"
    big.write_bytes((b"z" * 70 + b"\n") * 1000)
    done = swaks(server, "--to", "dave@example.com", "--body", f"@{big}")
    assert done.returncode == 26, done.stdout.decode()  # swaks: mail refused after DATA
    assert b"552 5.3.4" in done.stdout
    assert len(stored(store, "dave")) == before


def test_swaks_dot_stuffing_bare_lf_and_8bit(env):
    """RFC 5321 4.5.2 (transparency), 2.3.8 (a bare LF is no line end), RFC 6152 (8-bit):
    the data is sent untouched (--no-data-fixup).  The store holds it unstuffed, with CRLF
    line ends and its 8-bit octets; a dot after a bare LF is not at the start of a line, so
    it is not a stuffed dot and stays."""
    server, store, root = env
    raw = root / "raw.eml"
    raw.write_bytes(b"Subject: raw\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
                    b"..leading dot\r\nbare lf\n.dot after it\n" + "çà ü 日本\r\n".encode()
                    + b"..\r\nlast\r\n.\r\n")
    done = swaks(server, "--to", "erin@example.com", "--no-data-fixup", "--data", f"@{raw}")
    assert done.returncode == 0, done.stdout.decode()
    assert body_of(stored(store, "erin")[-1]) == (
        b"Subject: raw\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
        b".leading dot\r\nbare lf\r\n.dot after it\r\n" + "çà ü 日本\r\n".encode()
        + b".\r\nlast\r\n")


def test_smtplib_against_the_process_sees_the_message_at_once(env):
    """RFC 5321 4.1.1.4: the 250 comes after the commit, so the store shows the message to
    any reader (an IMAP session in another process) as soon as the sender has its reply."""
    server, store, _ = env
    with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as smtp:
        for n in range(3):
            before = len(store.uids(store.mailbox("frank", "INBOX")))
            smtp.sendmail("s@example.org", ["frank@example.com"],
                          f"Subject: {n}\r\n\r\nnumber {n}\r\n".encode())
            assert len(store.uids(store.mailbox("frank", "INBOX"))) == before + 1


def test_ports_auto_and_zero(tmp_path):
    """``--smtp-port auto`` binds a free port and announces it; ``0`` disables a listener;
    SIGTERM stops the process cleanly."""
    store = MailStore(EmbeddedBackend(str(tmp_path / "store")))
    store.close()
    argv = [sys.executable, "-m", "imapserver.main", "--data-dir", str(tmp_path / "store"),
            "--imap-port", "0", "--imaps-port", "0", "--smtp-port", "auto", "--lmtp-port", "0",
            "--sieve-port", "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = proc.stdout.readline().decode()
    assert line.startswith("smtp listening on 127.0.0.1:"), line
    port = int(line.rsplit(":", 1)[1])
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp:
        assert smtp.noop()[0] == 250
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()
    assert b"lmtp" not in out
