"""mailadmin against a running imapserver: a user provisioned (and mail imported) by the
console script logs in over IMAP; quotas set by it are refused over IMAP and SMTP."""

from __future__ import annotations

import imaplib
import json
import os
import selectors
import smtplib
import subprocess
import sys
import tempfile
import time

import pytest

from tests.admincli import generate, mbox_bytes, run
from tests.mailgen import message

START_TIMEOUT = 30.0


class Server:
    """``python -m imapserver.main`` with IMAP and SMTP on ports the kernel picks, learnt from
    its ``<name> listening on host:port`` lines."""

    def __init__(self, data_dir: str):
        self.argv = [sys.executable, "-m", "imapserver.main", "--data-dir", data_dir,
                     "--imap-port", "auto", "--imaps-port", "0", "--smtp-port", "auto",
                     "--lmtp-port", "0", "--sieve-port", "0"]
        self.ports: dict[str, int] = {}

    def __enter__(self) -> Server:
        self.errors = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self.errors,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))
        deadline = time.monotonic() + START_TIMEOUT
        buffer = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while not {"imap", "smtp"} <= set(self.ports):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.__exit__()
                    raise RuntimeError(f"imapserver did not start: {self.stderr}")
                if not sel.select(timeout=0.5):
                    continue
                buffer += os.read(self.proc.stdout.fileno(), 4096)
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    words = line.decode().split()
                    if len(words) == 4 and words[1:3] == ["listening", "on"]:
                        self.ports[words[0]] = int(words[3].rsplit(":", 1)[1])
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(START_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.errors.seek(0)
        self.stderr = self.errors.read().decode(errors="replace")
        self.errors.close()

    def imap(self) -> imaplib.IMAP4:
        return imaplib.IMAP4("127.0.0.1", self.ports["imap"], timeout=10)


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "store")


def test_provisioned_user_logs_in_and_sees_imported_mail(data_dir, tmp_path):
    added = run("user", "add", "eve", "--password-stdin", data_dir=data_dir, stdin="pw1\n")
    assert added.returncode == 0, added.stderr
    run("mailbox", "create", "eve", "Projects/2026", "--subscribe", data_dir=data_dir)
    messages = generate(5, seed=20)
    (tmp_path / "old.mbox").write_bytes(mbox_bytes(messages))
    imported = run("import", "eve", str(tmp_path / "old.mbox"), "--mailbox", "Old",
                   data_dir=data_dir)
    assert imported.returncode == 0, imported.stderr
    with Server(data_dir) as server:
        client = server.imap()
        with pytest.raises(imaplib.IMAP4.error):
            client.login("eve", "wrong")
        client.logout()
        client = server.imap()
        assert client.login("eve", "pw1")[0] == "OK"
        status, listed = client.list()
        names = {line.decode().rsplit(" ", 1)[1].strip('"') for line in listed}
        assert {"INBOX", "Sent", "Old", "Projects", "Projects/2026"} <= names
        status, lsub = client.lsub()
        assert any(b"Projects/2026" in line for line in lsub)
        status, data = client.select("Old", readonly=True)
        assert status == "OK" and int(data[0]) == 5
        status, fetched = client.uid("FETCH", "1:*", "(FLAGS INTERNALDATE)")
        seen = [b"\\Seen" in item for item in fetched if isinstance(item, bytes)]
        assert seen == ["\\Seen" in m.flags for m in messages]
        status, body = client.uid("FETCH", "3", "(BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
        assert b"Subject: message 2" in body[0][1]
        # The mbox had LF line ends; IMAP serves the message with CRLF, as delivered mail.
        status, body = client.uid("FETCH", "3", "(BODY.PEEK[])")
        assert body[0][1] == messages[2].stored
        client.logout()

        # A password changed by mailadmin holds at the next login, without a restart.
        changed = run("user", "passwd", "eve", "--password-stdin", data_dir=data_dir,
                      stdin="pw2\n")
        assert changed.returncode == 0, changed.stderr
        client = server.imap()
        assert client.login("eve", "pw2")[0] == "OK"
        client.logout()


def test_quota_set_by_mailadmin_is_refused_over_imap_and_smtp(data_dir):
    run("user", "add", "fay", "--password-stdin", data_dir=data_dir, stdin="pw\n")
    out = run("quota", "set", "fay", "--messages", "1", data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    with Server(data_dir) as server:
        client = server.imap()
        client.login("fay", "pw")
        assert client.append("INBOX", None, None, message(1))[0] == "OK"
        status, data = client.append("INBOX", None, None, message(2))
        assert status == "NO" and b"[OVERQUOTA]" in data[0]

        with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as smtp:
            with pytest.raises((smtplib.SMTPRecipientsRefused, smtplib.SMTPDataError)) as err:
                smtp.sendmail("a@example.org", ["fay@localhost"], message(3))
        refused = err.value
        codes = ([c for c, _ in refused.recipients.values()]
                 if isinstance(refused, smtplib.SMTPRecipientsRefused) else [refused.smtp_code])
        assert codes == [452]

        shown = run("quota", "show", "fay", data_dir=data_dir).stdout
        assert shown.splitlines()[3].split() == ["MESSAGES", "1", "1", "100%"]
        run("quota", "set", "fay", "--messages", "unlimited", data_dir=data_dir)
        assert client.append("INBOX", None, None, message(2))[0] == "OK"
        with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as smtp:
            assert smtp.sendmail("a@example.org", ["fay@localhost"], message(3)) == {}
        client.logout()
    listed = run("mailbox", "list", "fay", "--json", data_dir=data_dir).stdout
    assert {r["name"]: r["messages"] for r in json.loads(listed)}["INBOX"] == 3
