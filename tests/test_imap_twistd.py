"""The twistd plugin runs the same server (``twistd -n --reactor=asyncio imapserver``)."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import time

from tests.imapproc import Client, make_users


def test_twistd_plugin_serves_imap(tmp_path):
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("tess", "pw"))
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    proc = subprocess.Popen([twistd, "-n", "--reactor=asyncio", "--pidfile=", "imapserver",
                             "--data-dir", data_dir, "--imap-port", "auto", "--imaps-port",
                             "0", "--smtp-port", "0", "--lmtp-port", "0", "--sieve-port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    port, output = None, b""
    deadline = time.monotonic() + 30
    try:
        while port is None and time.monotonic() < deadline and proc.poll() is None:
            if sel.select(timeout=0.5):
                output += os.read(proc.stdout.fileno(), 4096)
                m = re.search(rb"imap listening on [\d.]+:(\d+)", output)
                port = int(m.group(1)) if m else None
        assert port, output.decode(errors="replace")
        client = Client(port)
        assert client.cmd("a", "LOGIN tess pw")[-1].startswith(b"a OK")
        assert client.cmd("b", "LOGOUT")[-1] == b"b OK LOGOUT completed"
        client.close()
    finally:
        sel.close()
        proc.terminate()
        proc.wait(timeout=20)
        proc.stdout.close()
    # twistd shuts down cleanly on SIGTERM, then re-raises it so its exit status tells why.
    assert proc.returncode in (0, -15)
