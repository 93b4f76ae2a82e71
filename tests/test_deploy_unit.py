"""conf/imapserver.service is hardened, and the server works under what it restricts.

systemd-analyze (Debian's ``systemd`` package, in the Makefile's DEBIAN_TEST_PKGS) rates the
unit offline; the server is then run under the unit's own seccomp settings (system call filter,
address families: tests/sandbox.py), no capabilities, no new privileges and an unprivileged
user, and serves IMAP (STARTTLS and implicit TLS, RFC 8314 section 3.2), LMTP (RFC 2033
section 4) and metrics through all of it (issue 17, part 2).  MemoryDenyWriteExecute is left
off, and a test shows why.
"""

from __future__ import annotations

import imaplib
import os
import re
import shutil
import smtplib
import ssl
import subprocess
import sys
import tempfile
import urllib.request

import pytest

from tests.admincli import mailadmin_cmd
from tests.imapproc import ServerProcess
from tests.sandbox import unit_settings
from tests.tlscert import make_cert

ROOT = os.path.join(os.path.dirname(__file__), "..")
UNIT = os.path.join(ROOT, "conf", "imapserver.service")
NOBODY = 65534


def test_unit_rates_ok_in_systemd_analyze_security():
    """``systemd-analyze security --offline=true`` rates the unit 3.0 or below ("OK")."""
    out = subprocess.run(["systemd-analyze", "security", "--offline=true", UNIT],
                         capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for imapserver\.service: (\d+\.\d+) (\w+)",
                  out.stdout)
    assert m, out.stdout + out.stderr
    assert float(m.group(1)) <= 3.0, out.stdout
    assert m.group(2) == "OK"


def test_unit_keeps_a_private_store_in_its_state_directory():
    """The embedded store is the state directory, made 0700 under a 0077 umask: without
    ``--data-dir`` the default relative ``data`` would land under the read-only ``/``."""
    unit = unit_settings(UNIT)
    assert unit["StateDirectory"] == ["hbase-imap"]
    assert unit["StateDirectoryMode"] == ["0700"]
    assert unit["UMask"] == ["0077"]
    assert "--data-dir ${STATE_DIRECTORY}" in unit["ExecStart"][0]
    assert unit["CapabilityBoundingSet"] == [""]


def test_unit_passes_systemd_analyze_verify(tmp_path):
    """``systemd-analyze verify`` finds nothing to say (it warns, and still exits 0, on an
    unknown key or a bad value, so its output is what is checked).  ExecStart must name an
    existing program for verify: this test's own imapserver stands in for /opt's."""
    with open(UNIT) as f:
        text = f.read()
    script = os.path.join(os.path.dirname(sys.executable), "imapserver")
    assert os.path.exists(script)
    local = tmp_path / "imapserver.service"
    local.write_text(text.replace("/opt/hbase-imap/.venv/bin/imapserver", script))
    out = subprocess.run(["systemd-analyze", "verify", "--man=no", str(local)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "" and out.stdout.strip() == "", out.stderr + out.stdout


@pytest.fixture
def unprivileged_dir():
    """A directory the unprivileged user owns (pytest's tmp_path sits under root's 0700
    directory, which that user cannot enter)."""
    path = tempfile.mkdtemp(prefix="imap-unit-")
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def restricted() -> list[str]:
    """The command prefix that applies the unit's restrictions: setpriv for the user (when
    root), capabilities and no_new_privs, tests/sandbox.py for the seccomp filters."""
    # Dropping from the bounding set needs CAP_SETPCAP: as another user the process holds no
    # capabilities anyway, and no_new_privs keeps file capabilities from granting any.
    root = (["--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups",
             "--inh-caps=-all", "--bounding-set=-all"] if os.geteuid() == 0 else [])
    return ["setpriv", *root, "--no-new-privs",
            sys.executable, "-m", "tests.sandbox", UNIT, "--"]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_server_works_under_the_units_restrictions(unprivileged_dir, workers):
    """Under the unit's system call filter, RestrictAddressFamilies, an empty capability
    bounding set and an unprivileged user: mailadmin creates a user, then the
    server delivers over LMTP, serves IMAP with STARTTLS and on the implicit-TLS port, serves
    metrics, and stops cleanly on SIGTERM.  A filtered system call would kill it (SIGSYS).
    As one process and as the default (workers = auto) runs on this 2-core machine: a
    supervisor that starts its workers (fork, exec) and forwards signals under the filter."""
    base = unprivileged_dir
    cert, key = make_cert(base)
    conf = os.path.join(base, "imapserver.conf")
    with open(conf, "w") as f:
        f.write(f"[imap]\ntls_cert = {cert}\ntls_key = {key}\n[store]\nsynchronous = NORMAL\n")
    if os.geteuid() == 0:
        for path in (cert, key, conf):
            os.chown(path, NOBODY, NOBODY)
    data_dir = os.path.join(base, "store")
    added = subprocess.run([*restricted(), *mailadmin_cmd(), "user", "add", "una",
                            "--password-stdin", "--data-dir", data_dir, "--config", conf],
                           input="pw\n", capture_output=True, text=True, timeout=120)
    assert added.returncode == 0, added.stderr

    server = ServerProcess(data_dir, "--imaps-port", "auto", "--lmtp-port", "auto",
                           "--metrics-port", "auto", "--workers", workers, config=conf,
                           wrapper=restricted())
    server.start()
    try:
        if workers != "1":
            assert server.wait_output(rb"workers_ready", timeout=30).count(b"worker_ready") == 2
        pid = server.proc.pid
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":\t", 1) for line in f.read().splitlines())
        assert status["Seccomp"].strip() == "2"  # filter mode
        assert int(status["Seccomp_filters"]) == 2  # system calls, address families
        assert status["NoNewPrivs"].strip() == "1"
        assert int(status["CapEff"], 16) == 0
        if os.geteuid() == 0:
            assert int(status["CapBnd"], 16) == 0
            assert status["Uid"].split()[0] == str(NOBODY)

        lmtp = smtplib.LMTP("127.0.0.1", server.ports["lmtp"])
        assert lmtp.sendmail("bob@example.com", ["una@localhost"],
                             b"Subject: delivered\r\n\r\nover LMTP\r\n") == {}
        lmtp.quit()

        tls = ssl.create_default_context(cafile=cert)
        imap = imaplib.IMAP4("127.0.0.1", server.port)
        imap.starttls(tls)
        assert imap.login("una", "pw")[0] == "OK"
        assert imap.append("INBOX", None, None, b"Subject: appended\r\n\r\nx\r\n")[0] == "OK"
        assert imap.select("INBOX") == ("OK", [b"2"])
        typ, data = imap.fetch("1:2", "(BODY[HEADER.FIELDS (SUBJECT)])")
        assert typ == "OK" and b"delivered" in data[0][1] and b"appended" in data[2][1]
        imap.logout()

        implicit = imaplib.IMAP4_SSL("127.0.0.1", server.ports["imaps"], ssl_context=tls)
        assert implicit.login("una", "pw")[0] == "OK"
        implicit.logout()

        with urllib.request.urlopen(f"http://127.0.0.1:{server.ports['metrics']}/metrics",
                                    timeout=10) as reply:
            assert reply.status == 200
    finally:
        code = server.stop()
    assert code == 0  # SIGTERM: a clean stop, not SIGSYS (-31) from the filter
    output = bytes(server.captured).decode(errors="replace")
    assert "Traceback" not in output, output


def test_memory_deny_write_execute_would_break_tls(tmp_path):
    """Why the unit leaves MemoryDenyWriteExecute off: Twisted's TLS (RFC 8314) sets a
    pyOpenSSL info callback on every context, and pyOpenSSL's callbacks are cffi
    ``ffi.callback``s, which need writable and executable memory.  Should that change (cffi
    static trampolines, pyOpenSSL without callbacks), this test fails: then turn it on."""
    unit = tmp_path / "mdwe.service"
    unit.write_text("[Service]\nMemoryDenyWriteExecute=yes\n")
    probe = ("from OpenSSL import SSL\n"
             "SSL.Context(SSL.TLS_METHOD).set_info_callback(lambda *args: None)\n")
    out = subprocess.run([sys.executable, "-m", "tests.sandbox", str(unit), "--",
                          sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0
    assert "Cannot allocate write+execute memory for ffi.callback()" in out.stderr
    assert unit_settings(UNIT)["MemoryDenyWriteExecute"] == ["no"]
