"""mailadmin acl set|delete|show and mailbox create --shared (docs/mailadmin.md, "Access
control and shared mailboxes"), checked over IMAP: what the administrator grants is what the
user gets (RFC 4314 3.5 MYRIGHTS, RFC 2342 namespaces)."""

from __future__ import annotations

import json

from tests.admincli import run
from tests.imapproc import Client, ServerProcess


def ok(result):
    assert result.returncode == 0, result.stderr
    return result


def test_acl_set_show_delete_and_shared_mailboxes(tmp_path):
    data_dir = str(tmp_path / "store")
    for user in ("alice", "bob"):
        ok(run("user", "add", user, "--password-stdin", data_dir=data_dir, stdin="pw\n"))
    ok(run("mailbox", "create", "alice", "Team", data_dir=data_dir))
    assert ok(run("mailbox", "create", "--shared", "News", data_dir=data_dir)).stdout == \
        "created shared mailbox Shared/News\n"
    assert ok(run("acl", "set", "alice", "Team", "bob", "lrs", data_dir=data_dir)).stdout == \
        "bob has lrs on Team of alice\n"
    assert ok(run("acl", "set", "alice", "Team", "bob", "+w", data_dir=data_dir)).stdout == \
        "bob has lrws on Team of alice\n"
    ok(run("acl", "set", "--shared", "News", "anyone", "lr", data_dir=data_dir))
    shown = json.loads(ok(run("acl", "show", "alice", "Team", "--json",
                              data_dir=data_dir)).stdout)
    assert shown == [{"identifier": "bob", "rights": "lrws"},
                     {"identifier": "alice", "rights": "lrwstipekxacd"}]
    with ServerProcess(data_dir) as server:
        c = Client(server.port)
        assert c.cmd("l", "LOGIN bob pw")[-1].startswith(b"l OK")
        assert c.cmd("m", 'MYRIGHTS "Other Users/alice/Team"')[0] == \
            b'* MYRIGHTS "Other Users/alice/Team" lrws'
        assert c.cmd("n", 'MYRIGHTS "Shared/News"')[0] == b'* MYRIGHTS Shared/News lr'
        ok(run("acl", "delete", "alice", "Team", "bob", data_dir=data_dir))
        assert c.cmd("m", 'MYRIGHTS "Other Users/alice/Team"')[-1].startswith(
            b"m NO [NONEXISTENT]")
        c.close()
    # Usage errors exit 2 with a message; a missing mailbox is a failure (1).
    bad = run("acl", "set", "alice", "Team", "bob", "lrz", data_dir=data_dir)
    assert bad.returncode == 2 and "Invalid ACL right: z" in bad.stderr
    assert run("acl", "set", "--shared", "alice", "News", "bob", "l",
               data_dir=data_dir).returncode == 2
    assert run("acl", "show", "alice", "Nope", data_dir=data_dir).returncode == 1
    assert run("mailbox", "create", "--shared", data_dir=data_dir).returncode == 2
