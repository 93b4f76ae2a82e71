"""A big body to a slow reader: the server's memory stays bounded, the octets arrive exactly.

FETCH streams a section over ``STREAM_ABOVE`` octets (imapserver/imap/commands/fetch.py): it
reads ``STREAM_HOP`` octets per thread-pool round trip and keeps one read in flight while the
previous one drains (issue 14).  Whatever the client's pace, the server must hold a few hops,
never the message: RFC 3501 7.4.2 puts no limit on a literal's size, so a client that reads
slowly (or stops) could otherwise grow the server by every message it asks for.  Checked on a
real server process, over plain TCP and implicit TLS, with its peak RSS (VmHWM, reset first
through /proc/PID/clear_refs) while a client with a small receive buffer stops reading, then
reads in small steps; then the literal is compared octet for octet (RFC 3501 4.3).
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import time

import pytest

from imapserver.imap.commands.fetch import STREAM_HOP
from tests.imapproc import Client, ServerProcess, make_users
from tests.tlscert import make_cert

USER, PASSWORD = "alice", "wonderland"
SIZE = 24 * 1024 * 1024 + 7   # 24 hops and a bit: far above what the server may hold
BOUND_KIB = 12 * 1024         # growth allowed: a few hops, TLS buffers, allocator slack


def big_message() -> bytes:
    head = (b"From: a@example.org\r\nTo: alice@example.org\r\nSubject: big\r\n"
            b"Date: Sat, 21 Nov 2026 12:00:00 +0000\r\nMessage-ID: <big@test>\r\n\r\n")
    lines = b"".join(b"%08d line of the big body, each one different\r\n" % i
                     for i in range(SIZE // 40))
    return (head + lines)[:SIZE]


MESSAGE = big_message()


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def reset_peak(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("bigbody")
    cert, key = make_cert(str(base))
    conf = base / "imapserver.conf"
    conf.write_text(f"[store]\nsynchronous = NORMAL\n[imap]\ntls_cert = {cert}\n"
                    f"tls_key = {key}\nplaintext_auth = loopback\n")
    data_dir = str(base / "store")
    make_users(data_dir, (USER, PASSWORD))
    with ServerProcess(data_dir, "--imaps-port", "auto", config=str(conf)) as proc:
        proc.cafile = cert
        c = Client(proc.port, timeout=60)
        assert c.cmd("l", f"LOGIN {USER} {PASSWORD}")[-1].startswith(b"l OK")
        c.send(b"a APPEND INBOX {%d+}\r\n" % len(MESSAGE) + MESSAGE + b"\r\n")
        assert c.until_tagged("a")[-1].startswith(b"a OK")
        c.close()
        yield proc
        log = proc.wait_output(rb"$", timeout=0)
        assert b"Traceback" not in log, log[-4000:].decode(errors="replace")


def connect(server, transport: str) -> Client:
    """A client whose receive buffer is small (64 KiB), as over a slow network."""
    port = server.ports["imaps"] if transport == "imaps" else server.port
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    raw.settimeout(60)
    raw.connect(("127.0.0.1", port))
    c = Client.__new__(Client)
    c.sock = raw
    if transport == "imaps":
        context = ssl.create_default_context(cafile=server.cafile)
        c.sock = context.wrap_socket(raw, server_hostname="localhost")
    c.buffer = b""
    c.greeting = c.read_line()
    assert c.cmd("l", f"LOGIN {USER} {PASSWORD}")[-1].startswith(b"l OK")
    assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    return c


def read_exactly(c: Client, n: int, digest) -> None:
    """n octets of the literal into ``digest`` (the client's buffered octets first)."""
    take = c.buffer[:n]
    c.buffer = c.buffer[n:]
    digest.update(take)
    left = n - len(take)
    while left:
        chunk = c.sock.recv(min(left, 262144))
        if not chunk:
            raise ConnectionError("closed inside the literal")
        digest.update(chunk)
        left -= len(chunk)


@pytest.mark.parametrize("transport", ["plain", "imaps"])
def test_a_slow_reader_of_a_big_body_does_not_grow_the_server(server, transport):
    """RFC 3501 7.4.2 / 4.3: ``FETCH 1 BODY.PEEK[]`` of a 24 MB message to a client that
    does not read for a second, then reads 64 KiB every 10 ms for a second: the server's peak
    RSS grows by less than 12 MiB (half the message) meanwhile; then every octet arrives, in
    order, and the tagged OK follows the literal's closing parenthesis."""
    assert SIZE > 20 * STREAM_HOP
    c = connect(server, transport)
    pid = server.proc.pid
    reset_peak(pid)
    before = peak_rss_kib(pid)
    c.send(b"f FETCH 1 BODY.PEEK[]\r\n")
    head = c.read_line()
    assert head == b"* 1 FETCH (BODY[] {%d}" % SIZE
    digest = hashlib.sha256()
    time.sleep(1.0)  # a client that does not read: the server must stop, not buffer
    stalled = peak_rss_kib(pid) - before
    deadline = time.monotonic() + 1.0
    read = 0
    while time.monotonic() < deadline:  # then a slow one: 64 KiB per 10 ms
        read_exactly(c, 65536, digest)
        read += 65536
        time.sleep(0.01)
    slow = peak_rss_kib(pid) - before
    read_exactly(c, SIZE - read, digest)
    assert digest.digest() == hashlib.sha256(MESSAGE).digest()
    assert c.read_line() == b")"
    assert c.read_line() == b"f OK FETCH completed"
    assert stalled < BOUND_KIB and slow < BOUND_KIB, (stalled, slow)
    c.close()
