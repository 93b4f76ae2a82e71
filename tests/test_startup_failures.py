"""A server that cannot start exits at once, with a message and a non-zero status.

Every failure kind is tried on a real ``python -m imapserver.main`` (and one on ``twistd``):
a port in use (IMAP, IMAPS, LMTP after IMAP and SMTP have started, metrics), a missing or
broken certificate or key, an unreachable HBase, a data directory that cannot be used.  The
process must print ``imapserver: cannot ...`` and exit non-zero within a second or two of
saying so -- not stay up with no listener, as it did while an IMAP thread pool started before
the failing listener kept it alive (and ignored SIGTERM).  SIGTERM must stop it at any moment
of start-up too.  A server that cannot serve must not look alive: RFC 3501 7.1.5 (BYE) gives
a client nothing to talk to, and supervisors (systemd, scripts, tests) wait on the process.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from tests.tlscert import make_cert

SAID_TO_EXITED = 2.0
"""Seconds allowed between the "cannot ..." line and the exit (the requirement is one)."""
DEADLINE = 30.0
"""Seconds after which a process still running is a failure (it would never have exited)."""


WORKERS = ["1"]


@pytest.fixture(autouse=True, params=["1", "2"], ids=["one-process", "two-workers"])
def workers(request):
    """Every case with one process and with a supervisor of two workers, where the parent
    checks and binds everything before any worker exists (imapserver.workers)."""
    WORKERS[0] = request.param
    yield request.param
    WORKERS[0] = "1"


def server_cmd(data_dir, *extra: str) -> list[str]:
    return [sys.executable, "-m", "imapserver.main", "--data-dir", str(data_dir),
            "--imap-port", "auto", "--imaps-port", "0", "--smtp-port", "0", "--lmtp-port", "0",
            "--sieve-port", "0",
            "--workers", WORKERS[0], *extra]


def run_until_exit(cmd: list[str], **popen) -> tuple[int, str, float]:
    """Run ``cmd``; (exit status, its output, seconds from the "imapserver: cannot" line to
    the exit).  Kills it and fails if it has not exited by DEADLINE."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"), **popen)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    output = b""
    said = None
    deadline = time.monotonic() + DEADLINE
    try:
        while True:
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise AssertionError(f"still running after {DEADLINE}s:\n{output.decode()}")
            if sel.select(timeout=0.1):
                chunk = os.read(proc.stdout.fileno(), 65536)
                output += chunk
                if said is None and b"imapserver: cannot" in output:
                    said = time.monotonic()
                if not chunk and proc.poll() is not None:
                    break
            elif proc.poll() is not None and not sel.select(timeout=0):
                break
        exited = time.monotonic()
    finally:
        sel.close()
        proc.stdout.close()
    assert said is not None, output.decode()
    return proc.wait(), output.decode(errors="replace"), exited - said


def assert_fails_fast(cmd: list[str], message: str, **popen) -> str:
    code, output, seconds = run_until_exit(cmd, **popen)
    assert code not in (0, None), output
    assert code > 0, f"killed by signal {-code}, not an exit:\n{output}"
    assert message in output, output
    assert seconds < SAID_TO_EXITED, f"exited {seconds:.1f}s after saying why:\n{output}"
    assert "Traceback" not in output, output
    return output


@pytest.fixture
def taken():
    """A port in use on 127.0.0.1 (a listening socket held for the test)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_cert(str(tmp_path_factory.mktemp("cert")))


def tls_config(path, cert: str, key: str) -> str:
    path.write_text(f"[imap]\ntls_cert = {cert}\ntls_key = {key}\n")
    return str(path)


# -- ports in use ----------------------------------------------------------------------------

def test_imap_port_in_use(tmp_path, taken):
    """The issue's case: the IMAP port is taken; the process says so and exits 1."""
    cmd = server_cmd(tmp_path / "store")
    cmd[cmd.index("--imap-port") + 1] = str(taken)
    assert_fails_fast(cmd, f"imapserver: cannot start: Couldn't listen on 127.0.0.1:{taken}")


def test_imaps_port_in_use_after_imap_started(tmp_path, taken, certs):
    """The plain IMAP listener (and its thread pool) started before IMAPS failed: both go."""
    conf = tls_config(tmp_path / "tls.conf", *certs)
    cmd = server_cmd(tmp_path / "store", "--imaps-port", str(taken), "--config", conf)
    out = assert_fails_fast(cmd, f"Couldn't listen on 127.0.0.1:{taken}")
    assert "imap listening on" in out


def test_lmtp_port_in_use_after_imap_and_smtp(tmp_path, taken):
    """IMAP and SMTP are up when LMTP cannot bind: everything started is stopped again."""
    cmd = server_cmd(tmp_path / "store", "--smtp-port", "auto", "--lmtp-port", str(taken))
    out = assert_fails_fast(cmd, f"imapserver: cannot start: [Errno 98] Couldn't listen on "
                                 f"127.0.0.1:{taken}")
    assert "imap listening on" in out


def test_metrics_port_in_use(tmp_path, taken):
    assert_fails_fast(server_cmd(tmp_path / "store", "--metrics-port", str(taken)),
                      "imapserver: cannot start:")


# -- TLS certificate and key -----------------------------------------------------------------

def test_missing_certificate(tmp_path, certs):
    conf = tls_config(tmp_path / "tls.conf", str(tmp_path / "nowhere.pem"), certs[1])
    assert_fails_fast(server_cmd(tmp_path / "store", "--config", conf),
                      "imapserver: cannot start: [Errno 2] No such file or directory")


def test_garbage_certificate(tmp_path, certs):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    conf = tls_config(tmp_path / "tls.conf", str(bad), certs[1])
    assert_fails_fast(server_cmd(tmp_path / "store", "--config", conf),
                      "imapserver: cannot start:")


def test_key_that_does_not_match_the_certificate(tmp_path, certs):
    other = make_cert(str(tmp_path))  # a second key pair
    conf = tls_config(tmp_path / "tls.conf", certs[0], other[1])
    assert_fails_fast(server_cmd(tmp_path / "store", "--imaps-port", "auto", "--config", conf),
                      "imapserver: cannot start:")


def test_delivery_alone_checks_the_certificate(tmp_path, certs):
    """The SMTP/LMTP STARTTLS (RFC 3207) loads the [imap] pair too: with IMAP off, a key that
    does not match the certificate still stops start-up, before any port is announced."""
    other = make_cert(str(tmp_path))
    conf = tls_config(tmp_path / "tls.conf", certs[0], other[1])
    cmd = server_cmd(tmp_path / "store", "--imap-port", "0", "--lmtp-port", "auto",
                     "--config", conf)
    output = assert_fails_fast(cmd, "imapserver: cannot start:")
    assert "listening on" not in output


def test_require_starttls_without_a_certificate(tmp_path):
    """smtp_require_starttls = yes without [imap] tls_cert cannot be honoured: it stops
    start-up rather than serve SMTP in the clear."""
    conf = tmp_path / "req.conf"
    conf.write_text("[delivery]\nsmtp_require_starttls = yes\n")
    assert_fails_fast(server_cmd(tmp_path / "store", "--smtp-port", "auto", "--config",
                                 str(conf)),
                      "imapserver: cannot start: [delivery] smtp_require_starttls = yes needs")


# -- the store -------------------------------------------------------------------------------

def test_unreachable_hbase(tmp_path):
    """``--backend hbase`` with nothing listening on the Thrift port (a bound socket that does
    not listen refuses connections)."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    try:
        port = closed.getsockname()[1]
        assert_fails_fast(server_cmd(tmp_path / "store", "--backend", "hbase", "--hbase-host",
                                     "127.0.0.1", "--hbase-port", str(port)),
                          "imapserver: cannot open the store: cannot reach the HBase")
    finally:
        closed.close()


def test_data_dir_under_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    out = assert_fails_fast(server_cmd(tmp_path / "file" / "store"),
                            "imapserver: cannot open the store: cannot open "
                            f"{tmp_path / 'file' / 'store'}")
    assert str(tmp_path / "file") in out  # the message names what is in the way


def test_data_dir_that_is_a_file(tmp_path):
    (tmp_path / "store").write_text("")
    assert_fails_fast(server_cmd(tmp_path / "store"), "imapserver: cannot open the store:")


def test_read_only_data_dir():
    """A data directory the server's user may not write (as root, the server runs as nobody
    so that the permission applies)."""
    base = tempfile.mkdtemp(prefix="imap-ro-")
    try:
        os.chmod(base, 0o755)
        readonly = os.path.join(base, "ro")
        os.mkdir(readonly, 0o555)
        os.chmod(readonly, 0o555)
        popen = {}
        if os.geteuid() == 0:
            popen = {"user": 65534, "group": 65534, "extra_groups": [], "cwd": base}
        assert_fails_fast(server_cmd(os.path.join(readonly, "store")),
                          "imapserver: cannot open the store: cannot open "
                          f"{os.path.join(readonly, 'store')}",
                          **popen)
    finally:
        os.chmod(os.path.join(base, "ro"), 0o755)
        os.rmdir(os.path.join(base, "ro"))
        os.rmdir(base)


# -- twistd ----------------------------------------------------------------------------------

def test_twistd_with_its_port_in_use(tmp_path, taken):
    """``twistd imapserver``: the service cannot start, twistd exits non-zero (it used to stay
    up without a listener)."""
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    cmd = [twistd, "-n", "--reactor=asyncio", "--pidfile=", "imapserver", "--data-dir",
           str(tmp_path / "store"), "--imap-port", str(taken), "--imaps-port", "0",
           "--smtp-port", "0", "--lmtp-port", "0", "--sieve-port", "0"]
    code, output, seconds = run_until_exit(cmd, cwd=tmp_path)
    assert code > 0, output
    assert f"imapserver: cannot start: Couldn't listen on 127.0.0.1:{taken}" in output
    assert seconds < SAID_TO_EXITED, output


# -- SIGTERM during start-up -----------------------------------------------------------------

def wait_exit(proc: subprocess.Popen, timeout: float = 10.0) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError("SIGTERM did not stop the process") from None


def test_sigterm_while_the_store_is_being_opened(tmp_path):
    """An HBase that accepts the connection and never answers holds start-up in open_store:
    SIGTERM still ends the process at once."""
    blackhole = socket.socket()
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(8)
    port = blackhole.getsockname()[1]
    proc = subprocess.Popen(server_cmd(tmp_path / "store", "--backend", "hbase", "--hbase-host",
                                       "127.0.0.1", "--hbase-port", str(port)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        blackhole.settimeout(30)
        conn, _ = blackhole.accept()  # the server is inside open_store now
        proc.send_signal(signal.SIGTERM)
        assert wait_exit(proc) != 0
        conn.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        blackhole.close()


@pytest.mark.parametrize("after", ["spawn", "first output"])
def test_sigterm_at_start_up_stops_the_process(tmp_path, after):
    """SIGTERM right after spawning (imports, config) and as soon as the first listener is
    announced (start-up still running): the process ends either way."""
    proc = subprocess.Popen(server_cmd(tmp_path / "store", "--smtp-port", "auto",
                                       "--lmtp-port", "auto"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        if after == "first output":
            assert proc.stdout.readline()
        proc.send_signal(signal.SIGTERM)
        wait_exit(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
