"""The HBase path end to end over the real Thrift wire: mailadmin and imapserver with
``--backend hbase`` against the session's Thrift servers (tests/hbasetarget.py: the gateway over
the embedded store, or a real HBase's when ``HBASE_THRIFT_HOST`` is set).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from mailstore.admin.store_cmd import shell_bytes
from mailstore.schema import Layout
from tests.imapproc import Client, ServerProcess


def mailadmin(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    script = shutil.which("mailadmin", path=os.path.dirname(sys.executable))
    return subprocess.run([script, *args], input=stdin, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("api", ["thrift1", "thrift2"])
def test_init_schema_user_and_imap_over_thrift(tmp_path, hbase_store, api):
    """Both programs open the store under ``--hbase-table-prefix``: the user mailadmin adds
    is the one imapserver logs in, and nothing is created outside the prefix -- over either
    of HBase's Thrift APIs (``--hbase-api``; docs/decisions/0029), and so an APPEND (RFC 3501
    6.3.11) answers APPENDUID (RFC 4315 3) and FETCH (RFC 3501 6.4.5) returns what it stored."""
    hbase = hbase_store.args(api)
    raw = hbase_store.backend(api, pool_size=1)
    try:
        raw.delete_table("JAMES_MESSAGES")      # one table to create: cheap on a real HBase
    finally:
        raw.close()
    first = mailadmin("init-schema", "--json", *hbase)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["created"] == ["JAMES_MESSAGES"]
    again = mailadmin("init-schema", "--json", *hbase)
    assert json.loads(again.stdout)["created"] == []  # idempotent
    before = outside(hbase_store)
    added = mailadmin("user", "add", "hank", "--password-stdin", *hbase, stdin="pw\n")
    assert added.returncode == 0, added.stderr
    with ServerProcess(str(tmp_path / "unused"), *hbase) as server:
        client = Client(server.port)
        assert client.cmd("a", "LOGIN hank pw")[-1].startswith(b"a OK")
        client.send(b"b APPEND INBOX {11+}\r\nhello world\r\n")
        assert client.until_tagged("b")[-1].startswith(b"b OK [APPENDUID")
        client.cmd("c", "SELECT INBOX")
        lines = client.cmd("d", "FETCH 1 BODY.PEEK[]")
        assert lines[0] == b"* 1 FETCH (BODY[] {11}\r\nhello world)"
        client.close()
    scan = mailadmin("hbase", "scan", "JAMES_USERS", *hbase)
    # The row key is hank's salt byte, then the name (docs/decisions/0027).
    salt = shell_bytes(Layout().user_keys.salt("hank"))
    assert scan.returncode == 0 and f" {salt}hank column=a:pw" in scan.stdout
    assert outside(hbase_store) == before


def outside(lease) -> list[bytes]:
    """The server's tables that belong to no prefix of the tests' pool."""
    conn = lease.target.connection()
    try:
        return sorted(t for t in conn.tables() if not t.startswith(lease.target.base.encode()))
    finally:
        conn.close()
