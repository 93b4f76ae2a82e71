"""The HBase path end to end over the real Thrift wire: mailadmin and imapserver with
``--backend hbase`` against the Thrift1 gateway (happybase's own Hbase.thrift over the embedded
store).  The same commands work against a real HBase Thrift gateway.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from mailstore.testing.thrift_gateway import ThriftGateway
from tests.imapproc import Client, ServerProcess


def mailadmin(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    script = shutil.which("mailadmin", path=os.path.dirname(sys.executable))
    return subprocess.run([script, *args], input=stdin, capture_output=True, text=True,
                          timeout=120)


def test_init_schema_user_and_imap_over_thrift(tmp_path):
    with ThriftGateway(str(tmp_path / "hbase")) as gateway:
        hbase = ["--backend", "hbase", "--hbase-host", "127.0.0.1",
                 "--hbase-port", str(gateway.port)]
        first = mailadmin("init-schema", "--json", *hbase)
        assert first.returncode == 0, first.stderr
        assert "JAMES_MESSAGES" in json.loads(first.stdout)["created"]
        again = mailadmin("init-schema", "--json", *hbase)
        assert json.loads(again.stdout)["created"] == []  # idempotent
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
        assert scan.returncode == 0 and " hank column=a:pw" in scan.stdout
