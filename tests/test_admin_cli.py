"""mailadmin driven as a real console script in subprocesses (exit codes 0 / 1 / 2)."""

from __future__ import annotations

import json
import os

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.mailboxes import COUNT
from mailstore.schema import Layout
from mailstore.store import MailStore
from tests.admincli import run
from tests.mailgen import message


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "store")


def test_init_schema_is_idempotent(data_dir):
    first = run("init-schema", data_dir=data_dir)
    assert first.returncode == 0, first.stderr
    assert "JAMES_MESSAGES: created" in first.stdout
    second = run("init-schema", "--json", data_dir=data_dir)
    assert second.returncode == 0
    assert json.loads(second.stdout)["created"] == []


def test_init_schema_print_matches_the_checked_in_ddl(data_dir):
    out = run("init-schema", "--print", data_dir=data_dir)
    assert out.returncode == 0
    with open(os.path.join(os.path.dirname(__file__), "..", "hbase-schema", "schema.hbase")) as f:
        assert out.stdout == f.read()


def test_user_add_then_list_then_login(data_dir):
    added = run("user", "add", "Dave", "--password-stdin", data_dir=data_dir, stdin="s3cret\n")
    assert added.returncode == 0, added.stderr
    assert "created user dave" in added.stdout
    again = run("user", "add", "dave", "--password-stdin", data_dir=data_dir, stdin="x\n")
    assert again.returncode == 1 and "user already exists: dave" in again.stderr
    listed = run("user", "list", "--json", data_dir=data_dir)
    assert [u["user"] for u in json.loads(listed.stdout)] == ["dave"]
    store = MailStore(EmbeddedBackend(data_dir))
    assert store.authenticate("dave", "s3cret") == "dave"
    store.close()


def test_bad_usage_exits_2_with_a_message(data_dir):
    assert run("user", "frobnicate", data_dir=data_dir).returncode == 2
    bad = run("user", "add", "bad name", "--password-stdin", data_dir=data_dir, stdin="pw\n")
    assert bad.returncode == 1 and "invalid user name" in bad.stderr
    empty = run("user", "add", "erin", "--password-stdin", data_dir=data_dir, stdin="\n")
    assert empty.returncode == 2 and "empty password" in empty.stderr
    table = run("hbase", "scan", "NOPE", data_dir=data_dir)
    assert table.returncode == 2 and "no such table: NOPE" in table.stderr
    hexbad = run("hbase", "scan", "JAMES_USERS", "--prefix", "zz", data_dir=data_dir)
    assert hexbad.returncode == 2 and "not hex" in hexbad.stderr


def test_config_errors_name_the_setting(data_dir, tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("[store]\nchunk_sise = 65536\n")
    out = run("user", "list", "--config", str(conf), data_dir=data_dir)
    assert out.returncode == 2 and "store.chunk_sise" in out.stderr
    conf.write_text("[store]\nchunk_size = 12\n")
    out = run("user", "list", "--config", str(conf), data_dir=data_dir)
    assert out.returncode == 2 and "store.chunk_size" in out.stderr


def test_fsck_reports_then_repairs(data_dir):
    store = MailStore(EmbeddedBackend(data_dir))
    store.create_user("frank", "pw")
    store.append("frank", "INBOX", message(1))
    inbox = store.mailbox("frank", "INBOX")
    store.mailboxes.rows.increment(inbox.id, COUNT, 3)
    store.close()
    clean_before = run("fsck", "--json", data_dir=data_dir)
    assert clean_before.returncode == 1
    problems = json.loads(clean_before.stdout)["problems"]
    assert problems == [{"kind": "counter", "where": "frank:INBOX",
                         "detail": "messages counter 4, actual 1", "repaired": False}]
    repaired = run("fsck", "--repair", data_dir=data_dir)
    assert repaired.returncode == 1 and "repaired: counter" in repaired.stdout
    after = run("fsck", "frank", data_dir=data_dir)
    assert after.returncode == 0, after.stdout
    assert "0 problem(s)" in after.stdout


def test_hbase_scan_prints_rows_like_the_shell(data_dir):
    run("user", "add", "gina", data_dir=data_dir)
    user_keys = Layout().user_keys    # a new store's: salted (docs/decisions/0027)
    out = run("hbase", "scan", "JAMES_MAILBOX_INDEX", "--prefix",
              user_keys.user_index_prefix("gina").hex(), "--limit", "2", data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["ROW", "COLUMN+CELL"]
    salt = f"\\x{user_keys.salt('gina')[0]:02X}"
    assert lines[1].startswith(f" {salt}gina\\x00Archive column=i:id, value=")
    assert lines[-1] == "2 row(s)"


# -- provisioning ---------------------------------------------------------------------------------

def open_store(data_dir: str) -> MailStore:
    return MailStore(EmbeddedBackend(data_dir))


def test_options_may_come_before_the_command(data_dir):
    assert run("user", "add", "olga", data_dir=data_dir).returncode == 0
    out = run("--data-dir", data_dir, "--json", "user", "list", data_dir=None)
    assert out.returncode == 0, out.stderr
    assert [u["user"] for u in json.loads(out.stdout)] == ["olga"]


def test_user_passwd_replaces_the_password(data_dir):
    run("user", "add", "pat", "--password-stdin", data_dir=data_dir, stdin="old\n")
    out = run("user", "passwd", "pat", "--password-stdin", data_dir=data_dir, stdin="new\n")
    assert out.returncode == 0, out.stderr
    assert "password of pat changed" in out.stdout
    store = open_store(data_dir)
    assert store.authenticate("pat", "new") == "pat"
    assert store.authenticate("pat", "old") is None
    store.close()
    # No terminal to ask on and no --password-stdin: refused, nothing read from a pipe.
    asked = run("user", "passwd", "pat", data_dir=data_dir, stdin="sneaky\n")
    assert asked.returncode == 2 and "use --password-stdin" in asked.stderr


def test_user_show_and_list_report_usage_and_limits(data_dir):
    run("user", "add", "quinn", data_dir=data_dir)
    store = open_store(data_dir)
    store.append("quinn", "INBOX", message(1, size=3000))
    store.append("quinn", "Sent", message(2, size=1000), flags=["\\Seen"])
    store.close()
    run("quota", "set", "quinn", "--storage", "1M", "--messages", "10", data_dir=data_dir)
    shown = json.loads(run("user", "show", "quinn", "--json", data_dir=data_dir).stdout)
    assert shown["messages"] == 2 and shown["mailboxes"] == 6
    assert shown["storage_limit"] == 1024 * 1024 and shown["message_limit"] == 10
    text = run("user", "show", "quinn", data_dir=data_dir).stdout
    assert "messages:      2 of 10" in text and "of 1.0 MiB" in text
    listed = run("user", "list", data_dir=data_dir).stdout.splitlines()
    assert listed[0].split()[:4] == ["USER", "MAILBOXES", "MESSAGES", "SIZE"]
    assert listed[1].split()[:3] == ["quinn", "6", "2"]
    assert listed[-1] == "1 user(s)"


def test_user_del_asks_and_removes_everything(data_dir):
    run("user", "add", "rita", data_dir=data_dir)
    run("user", "add", "sam", data_dir=data_dir)
    store = open_store(data_dir)
    store.append("rita", "INBOX", message(1))
    store.deliver([("rita", "INBOX"), ("sam", "INBOX")], message(2))
    store.close()
    refused = run("user", "del", "rita", data_dir=data_dir)
    assert refused.returncode == 2
    assert "delete user rita with 6 mailbox(es) and 2 message(s)" in refused.stderr
    assert "refusing without --yes" in refused.stderr
    done = run("user", "del", "rita", "--yes", "--json", data_dir=data_dir)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"deleted": "rita", "mailboxes": 6, "messages": 2,
                                       "bytes": len(message(1)) + len(message(2))}
    store = open_store(data_dir)
    assert [u.name for u in store.list_users()] == ["sam"]
    assert store.list_mailboxes("rita") == [] and store.subscriptions("rita") == []
    # rita's own content is gone; the content shared with sam stays, with one reference.
    assert store.stats()["contents"] == 1
    (view,) = store.newest(store.mailbox("sam", "INBOX"))
    assert store.content.refs(view.record.content) == 1
    store.close()
    assert run("fsck", data_dir=data_dir).returncode == 0
    gone = run("user", "del", "rita", "--yes", data_dir=data_dir)
    assert gone.returncode == 1 and "no such user: rita" in gone.stderr


def test_unknown_users_are_named_by_every_command(data_dir, tmp_path):
    run("init-schema", data_dir=data_dir)
    mbox = tmp_path / "in.mbox"
    mbox.write_bytes(b"From a Sat Nov 21 12:00:00 2026\nSubject: x\n\nx\n")
    for args in (["user", "show", "bob"], ["user", "passwd", "bob", "--password-stdin"],
                 ["user", "del", "bob", "--yes"], ["mailbox", "list", "bob"],
                 ["mailbox", "create", "bob", "X"], ["quota", "show", "bob"],
                 ["quota", "set", "bob", "--messages", "5"], ["import", "bob", str(mbox)],
                 ["export", "bob", str(tmp_path / "out")], ["fsck", "bob"]):
        out = run(*args, data_dir=data_dir, stdin="pw\n")
        assert out.returncode == 1, (args, out.stderr)
        assert out.stderr.strip() == "mailadmin: no such user: bob", args
    assert not (tmp_path / "out").exists()


def test_mailbox_create_list_rename_subscribe_delete(data_dir):
    run("user", "add", "tina", "--no-folders", data_dir=data_dir)
    made = run("mailbox", "create", "tina", "Work/Projects", "--special-use", "\\Archive",
               "--subscribe", data_dir=data_dir)
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "created mailbox Work/Projects of tina"
    store = open_store(data_dir)
    store.append("tina", "Work/Projects", message(1))
    store.append("tina", "Work/Projects", message(2), flags=["\\Seen"])
    store.close()
    rows = json.loads(run("mailbox", "list", "tina", "--json", data_dir=data_dir).stdout)
    assert [r["name"] for r in rows] == ["INBOX", "Work", "Work/Projects"]
    projects = rows[2]
    assert (projects["messages"], projects["unseen"], projects["uidnext"]) == (2, 1, 3)
    assert projects["special_use"] == "\\Archive" and projects["subscribed"] is True
    assert rows[1]["subscribed"] is False and rows[0]["subscribed"] is True
    header = run("mailbox", "list", "tina", data_dir=data_dir).stdout.splitlines()[0]
    assert header.split() == ["NAME", "MESSAGES", "UNSEEN", "SIZE", "UIDVALIDITY", "UIDNEXT",
                              "SPECIAL-USE", "SUBSCRIBED"]

    renamed = run("mailbox", "rename", "tina", "Work", "Job", "--json", data_dir=data_dir)
    assert json.loads(renamed.stdout)["renamed"] == ["Job", "Job/Projects"]
    rows = json.loads(run("mailbox", "list", "tina", "--json", data_dir=data_dir).stdout)
    moved = {r["name"]: r for r in rows}["Job/Projects"]
    assert moved["uidvalidity"] == projects["uidvalidity"] and moved["uidnext"] == 3

    assert run("mailbox", "subscribe", "tina", "Job", data_dir=data_dir).returncode == 0
    assert run("mailbox", "unsubscribe", "tina", "INBOX", data_dir=data_dir).returncode == 0
    again = run("mailbox", "unsubscribe", "tina", "INBOX", data_dir=data_dir)
    assert again.returncode == 1 and "not subscribed: INBOX" in again.stderr
    store = open_store(data_dir)
    assert store.subscriptions("tina") == ["Job", "Work/Projects"]
    store.close()

    refused = run("mailbox", "delete", "tina", "Job/Projects", data_dir=data_dir)
    assert refused.returncode == 2 and "with 2 message(s)" in refused.stderr
    empty = run("mailbox", "delete", "tina", "Job", data_dir=data_dir)  # empty: no question
    assert empty.returncode == 0, empty.stderr
    gone = run("mailbox", "delete", "tina", "Job/Projects", "--yes", data_dir=data_dir)
    assert gone.returncode == 0 and "(2 message(s))" in gone.stdout
    assert run("fsck", data_dir=data_dir).returncode == 0


def test_bad_mailbox_names_and_attributes(data_dir):
    run("user", "add", "uma", data_dir=data_dir)
    for name, why in (("a//b", "empty level"), ("x*", "forbidden character"),
                      ("../up", "'..' level")):
        out = run("mailbox", "create", "uma", name, data_dir=data_dir)
        assert out.returncode == 1 and why in out.stderr, (name, out.stderr)
    dup = run("mailbox", "create", "uma", "Sent", data_dir=data_dir)
    assert dup.returncode == 1 and "mailbox already exists: Sent" in dup.stderr
    bad_use = run("mailbox", "create", "uma", "Z", "--special-use", "\\Nope", data_dir=data_dir)
    assert bad_use.returncode == 2 and "unknown special-use attribute: \\Nope" in bad_use.stderr
    inbox = run("mailbox", "delete", "uma", "INBOX", "--yes", data_dir=data_dir)
    assert inbox.returncode == 1 and "INBOX cannot be deleted" in inbox.stderr
    missing = run("mailbox", "rename", "uma", "Nope", "Other", data_dir=data_dir)
    assert missing.returncode == 1 and "no such mailbox: Nope" in missing.stderr


def test_quota_set_show_and_enforced_by_the_store(data_dir):
    run("user", "add", "vera", data_dir=data_dir)
    out = run("quota", "set", "vera", "--storage", "8K", "--messages", "3", "--json",
              data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"user": "vera", "storage": {"used": 0, "limit": 8192},
                                      "messages": {"used": 0, "limit": 3}}
    store = open_store(data_dir)
    store.append("vera", "INBOX", message(1, size=3000))
    store.append("vera", "INBOX", message(2, size=3000))
    from mailstore.errors import OverQuota
    with pytest.raises(OverQuota, match="storage quota exceeded for vera"):
        store.append("vera", "INBOX", message(3, size=3000))
    store.close()
    # Only --messages given: the storage limit stays.
    run("quota", "set", "vera", "--messages", "unlimited", data_dir=data_dir)
    shown = run("quota", "show", "vera", data_dir=data_dir).stdout.splitlines()
    assert shown[0] == "quota of vera"
    used = len(message(1, size=3000)) + len(message(2, size=3000))
    assert shown[2].split()[0] == "STORAGE"
    assert shown[2].split()[-3:] == ["8.0", "KiB", f"{100 * used / 8192:.0f}%"]
    assert shown[3].split() == ["MESSAGES", "2", "unlimited", "-"]
    for bad in (["--storage", "12X"], ["--messages", "many"], ["--storage", "-5"], []):
        out = run("quota", "set", "vera", *bad, data_dir=data_dir)
        assert out.returncode == 2, (bad, out.stderr)
    assert "not a size: '12X'" in run("quota", "set", "vera", "--storage", "12X",
                                      data_dir=data_dir).stderr


def test_stats_counts_bytes_saved_by_shared_content(data_dir):
    run("user", "add", "wes", data_dir=data_dir)
    run("user", "add", "xia", data_dir=data_dir)
    store = open_store(data_dir)
    shared = message(1, size=5000)
    store.deliver([("wes", "INBOX"), ("xia", "INBOX"), ("xia", "Archive")], shared)
    store.append("wes", "Sent", message(2, size=1000))
    store.close()
    stats = json.loads(run("stats", "--json", data_dir=data_dir).stdout)
    assert stats == {"users": 2, "mailboxes": 12, "messages": 4,
                     "message_bytes": 3 * len(shared) + len(message(2, size=1000)),
                     "contents": 2, "content_bytes": len(shared) + len(message(2, size=1000)),
                     "bytes_saved": 2 * len(shared)}
    text = run("stats", data_dir=data_dir).stdout
    assert f"saved by sharing: {2 * len(shared) / 1024:.1f} KiB" in text
