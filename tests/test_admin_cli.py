"""mailadmin driven as a real console script in subprocesses (exit codes 0 / 1 / 2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from mailstore import keys
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.mailboxes import COUNT
from mailstore.store import MailStore
from tests.mailgen import message


def mailadmin_cmd() -> list[str]:
    script = shutil.which("mailadmin", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "mailstore.admin.cli"]


def run(*args: str, data_dir: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*mailadmin_cmd(), *args, "--data-dir", data_dir], input=stdin,
                          capture_output=True, text=True, timeout=120)


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
    out = run("hbase", "scan", "JAMES_MAILBOX_INDEX", "--prefix",
              keys.user_index_prefix("gina").hex(), "--limit", "2", data_dir=data_dir)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["ROW", "COLUMN+CELL"]
    assert lines[1].startswith(" gina\\x00Archive column=i:id, value=")
    assert lines[-1] == "2 row(s)"
