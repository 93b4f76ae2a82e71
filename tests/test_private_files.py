"""The embedded store is private to its owner: directory 0700, every file 0600, whatever the
umask, and a store the group or others can reach is refused unless the config allows it.

No RFC governs file modes; the yardstick is Dovecot, which creates mail files 0600, and the
store holds every user's mail and password hash (issue 17, part 1).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from tests.admincli import mailadmin_cmd
from tests.imapproc import Client, ServerProcess

UMASK = 0o022  # Debian's default: files 0644, directories 0755


def mailadmin(*args: str, data_dir: str, stdin: str | None = None,
              config: str | None = None) -> subprocess.CompletedProcess:
    extra = ("--config", config) if config else ()
    return subprocess.run([*mailadmin_cmd(), *args, "--data-dir", data_dir, *extra],
                          input=stdin, capture_output=True, text=True, timeout=120,
                          umask=UMASK)


def server(data_dir: str, config: str | None = None) -> subprocess.CompletedProcess:
    """Run the server to completion: it is expected to refuse to start."""
    cmd = [sys.executable, "-m", "imapserver.main", "--data-dir", data_dir,
           "--imap-port", "auto", "--imaps-port", "0", "--smtp-port", "0", "--lmtp-port", "0",
           "--sieve-port", "0"]
    if config:
        cmd += ["--config", config]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, umask=UMASK)


def modes(root: str) -> dict[str, int]:
    """Every path under ``root`` (and root itself) with its permission bits."""
    found = {root: stat.S_IMODE(os.stat(root).st_mode)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            found[path] = stat.S_IMODE(os.lstat(path).st_mode)
    return found


def assert_private(root: str) -> None:
    for path, mode in modes(root).items():
        wanted = 0o700 if os.path.isdir(path) else 0o600
        assert mode == wanted, f"{path}: {mode:04o}, expected {wanted:04o}"


def test_server_creates_a_private_store_whatever_the_umask(tmp_path):
    """A server started with umask 022 on a fresh directory makes it 0700, the database 0600,
    and SQLite's -wal and -shm (created while it runs, by it and by a mailadmin beside it)
    0600 too."""
    data_dir = str(tmp_path / "store")
    with ServerProcess(data_dir, umask=UMASK) as proc:
        added = mailadmin("user", "add", "pat", "--password-stdin", data_dir=data_dir,
                          stdin="secret\n")
        assert added.returncode == 0, added.stderr
        client = Client(proc.port)
        assert client.cmd("a", "LOGIN pat secret")[-1].startswith(b"a OK")
        assert client.cmd("b", "CREATE Projects")[-1].startswith(b"b OK")
        # Over the content table's MOB threshold: a chunk file and its directories (0028).
        big = b"Subject: big\r\n\r\n" + b"x" * 200_000
        client.send(b"c APPEND INBOX {%d+}\r\n" % len(big) + big + b"\r\n")
        assert client.until_tagged("c")[-1].startswith(b"c OK")
        client.close()
        names = set(os.listdir(data_dir))
        assert {"store.sqlite3", "store.sqlite3-wal", "store.sqlite3-shm", "mob"} <= names
        assert_private(data_dir)
    assert_private(data_dir)


def test_mailadmin_creates_a_private_store_whatever_the_umask(tmp_path):
    """``mailadmin user add`` with umask 022 on a directory that does not exist yet (nested,
    so makedirs also creates a parent) leaves the store 0700/0600."""
    data_dir = str(tmp_path / "srv" / "store")
    added = mailadmin("user", "add", "pat", "--password-stdin", data_dir=data_dir,
                      stdin="secret\n")
    assert added.returncode == 0, added.stderr
    assert os.listdir(data_dir)
    assert_private(data_dir)


@pytest.mark.parametrize("shared", ["directory", "file"])
def test_a_shared_store_is_refused_by_name_unless_allowed(tmp_path, shared):
    """An existing 0755 store directory, or a 0644 database in a 0700 one, stops the server
    and mailadmin with a message naming the path and its mode; ``[store]
    allow_shared_permissions = yes`` lets both through, and nothing is chmod-ed."""
    data_dir = str(tmp_path / "store")
    assert mailadmin("user", "add", "pat", data_dir=data_dir).returncode == 0
    target = data_dir if shared == "directory" else os.path.join(data_dir, "store.sqlite3")
    mode = 0o755 if shared == "directory" else 0o644
    os.chmod(target, mode)

    refused = server(data_dir)
    assert refused.returncode != 0
    assert f"{target} is accessible to other users (mode {mode:04o})" in refused.stderr
    assert "allow_shared_permissions" in refused.stderr
    assert "listening" not in refused.stdout
    listed = mailadmin("user", "list", data_dir=data_dir)
    assert listed.returncode == 1
    assert f"{target} is accessible to other users (mode {mode:04o})" in listed.stderr

    conf = tmp_path / "shared.conf"
    conf.write_text("[store]\nallow_shared_permissions = yes\n")
    allowed = mailadmin("user", "list", data_dir=data_dir, config=str(conf))
    assert allowed.returncode == 0, allowed.stderr
    assert "pat" in allowed.stdout
    with ServerProcess(data_dir, config=str(conf), umask=UMASK) as proc:
        client = Client(proc.port)
        assert client.greeting.startswith(b"* OK")
        client.close()
    assert stat.S_IMODE(os.stat(target).st_mode) == mode


def test_a_shared_write_ahead_log_is_refused(tmp_path):
    """SQLite's companion files are checked too: a -wal the group can read (while a server
    keeps it open) stops mailadmin, naming it."""
    data_dir = str(tmp_path / "store")
    with ServerProcess(data_dir, umask=UMASK):
        wal = os.path.join(data_dir, "store.sqlite3-wal")
        assert os.path.exists(wal)
        os.chmod(wal, 0o640)
        refused = mailadmin("user", "list", data_dir=data_dir)
        assert refused.returncode == 1
        assert f"{wal} is accessible to other users (mode 0640)" in refused.stderr
        os.chmod(wal, 0o600)
        assert mailadmin("user", "list", data_dir=data_dir).returncode == 0
