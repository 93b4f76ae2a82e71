"""mailadmin metadata: the server's /shared annotations (RFC 5464 METADATA-SERVER), written
by the administrator and read by every user with GETMETADATA "" (docs/metadata.md)."""

from __future__ import annotations

import json

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.admincli import run


def test_metadata_set_show_unset(tmp_path):
    """RFC 5464 3.2.2: server /shared entries are the administrator's: set, listed, removed;
    /shared/admin comes from [imap] metadata_admin and cannot be set here; a bad entry name
    (3.2.1) or a /private entry is refused with exit status 1."""
    data_dir = str(tmp_path / "store")
    assert run("user", "add", "vera", "--password-stdin", data_dir=data_dir,
               stdin="pw\n").returncode == 0
    out = run("metadata", "set", "/shared/Comment", "Maintenance at 22:00 UTC", "--json",
              data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"/shared/comment": "Maintenance at 22:00 UTC"}
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"))
    try:
        assert store.get_metadata("vera", None, ["/shared/comment"])[1] == [
            ("/shared/comment", b"Maintenance at 22:00 UTC")]
    finally:
        store.close()
    config = tmp_path / "imapserver.conf"
    config.write_text("[imap]\nmetadata_admin = mailto:postmaster@example.com\n")
    out = run("metadata", "show", "--config", str(config), data_dir=data_dir)
    assert out.stdout.split("\n")[0].split() == ["ENTRY", "VALUE"]
    assert "/shared/admin    mailto:postmaster@example.com" in out.stdout
    assert "/shared/comment  Maintenance at 22:00 UTC" in out.stdout
    for bad in ("/shared/admin", "/private/x", "/shared/a*"):
        out = run("metadata", "set", bad, "x", data_dir=data_dir)
        assert out.returncode == 1 and out.stderr.startswith("mailadmin: "), (bad, out)
    out = run("metadata", "unset", "/shared/comment", "--json", data_dir=data_dir)
    assert json.loads(out.stdout) == {}
