"""COMPRESS=DEFLATE (RFC 4978) transcript tests with a client that really deflates and inflates
(Python zlib, raw DEFLATE: wbits -15), in the clear, after STARTTLS and over implicit TLS."""

from __future__ import annotations

import re
import socket
import ssl
import time
import zlib

import pytest

from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message
from tests.tlscert import make_cert

USER, PASSWORD = "alice", "wonderland"
TRANSPORTS = ("plain", "starttls", "imaps")


class DeflateSocket:
    """A socket whose traffic is raw DEFLATE both ways (RFC 4978 3), as a client does it:
    each send is one flushed block (Z_SYNC_FLUSH), received octets are inflated."""

    def __init__(self, sock):
        self.sock = sock
        self.deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
        self.inflate = zlib.decompressobj(-15)
        self.received = 0  # compressed octets read

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(self.deflate.compress(data) + self.deflate.flush(zlib.Z_SYNC_FLUSH))

    def recv(self, size: int) -> bytes:
        while True:
            data = self.sock.recv(size)
            if not data:
                return b""
            self.received += len(data)
            out = self.inflate.decompress(data)
            if out:
                return out

    def settimeout(self, timeout) -> None:
        self.sock.settimeout(timeout)

    def close(self) -> None:
        self.sock.close()


def compress(c: Client, tag: str = "a") -> list[bytes]:
    """COMPRESS DEFLATE; on OK the client's socket deflates from the next octet on."""
    reply = c.cmd(tag, "COMPRESS DEFLATE")
    if reply[-1].startswith(tag.encode() + b" OK"):
        # RFC 4978 3: the server compresses from right after the CRLF of its tagged OK and
        # sends nothing unasked before the next command.
        assert c.buffer == b""
        c.sock = DeflateSocket(c.sock)
    return reply


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_cert(str(tmp_path_factory.mktemp("cert")))


@pytest.fixture(scope="module")
def server(tmp_path_factory, certs):
    base = tmp_path_factory.mktemp("compress")
    cert, key = certs
    conf = base / "imapserver.conf"
    conf.write_text(f"[store]\nsynchronous = NORMAL\n[imap]\ntls_cert = {cert}\n"
                    f"tls_key = {key}\nplaintext_auth = loopback\nauth_failure_delay = 0.1\n")
    data_dir = str(base / "store")
    make_users(data_dir, (USER, PASSWORD), ("bob", "builder"))
    with ServerProcess(data_dir, "--imaps-port", "auto", config=str(conf)) as proc:
        yield proc
        log = proc.wait_output(rb"$", timeout=0)
        assert b"Traceback" not in log, log[-4000:].decode(errors="replace")


def connect(server, certs, transport: str = "plain", login: bool = True) -> Client:
    if transport == "imaps":
        c = Client.__new__(Client)
        raw = socket.create_connection(("127.0.0.1", server.ports["imaps"]), timeout=30)
        context = ssl.create_default_context(cafile=certs[0])
        c.sock = context.wrap_socket(raw, server_hostname="localhost")
        c.buffer = b""
        c.greeting = c.read_line()
    else:
        c = Client(server.port, timeout=30)
    if transport == "starttls":
        assert c.cmd("t", "STARTTLS")[-1].startswith(b"t OK")
        context = ssl.create_default_context(cafile=certs[0])
        c.sock = context.wrap_socket(c.sock, server_hostname="localhost")
    if login:
        assert c.cmd("l", f"LOGIN {USER} {PASSWORD}")[-1].startswith(b"l OK")
    return c


@pytest.fixture
def conn(server, certs):
    clients = []

    def make(transport: str = "plain", login: bool = True) -> Client:
        clients.append(connect(server, certs, transport, login))
        return clients[-1]
    yield make
    for c in clients:
        c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_rfc_example_then_a_session_through_deflate(conn, transport):
    """RFC 4978 3 (its example: ``a COMPRESS DEFLATE`` / ``a OK``), over every transport
    (RFC 4978 4: TLS below compression): COMPRESS=DEFLATE is advertised, the tagged OK is
    sent in the clear, then commands and responses are DEFLATE both ways through LOGOUT."""
    c = conn(transport)
    assert b"COMPRESS=DEFLATE" in c.cmd("c", "CAPABILITY")[0].split()
    assert compress(c) == [b"a OK DEFLATE active"]
    assert isinstance(c.sock, DeflateSocket)
    lines = c.cmd("s", "SELECT INBOX")
    assert lines[-1].startswith(b"s OK [READ-WRITE]"), lines
    assert c.cmd("n", "NOOP")[-1] == b"n OK NOOP completed"
    bye, ok = c.cmd("z", "LOGOUT")[-2:]
    assert bye.startswith(b"* BYE") and ok.startswith(b"z OK"), (bye, ok)
    assert c.closed_by_peer()


def test_compress_twice_is_no_compressionactive(conn):
    """RFC 4978 3: COMPRESS while DEFLATE is active is NO with [COMPRESSIONACTIVE]; the
    connection goes on compressed."""
    c = conn()
    compress(c)
    reply = c.cmd("b", "COMPRESS DEFLATE")
    assert reply[-1].startswith(b"b NO [COMPRESSIONACTIVE]"), reply
    assert c.cmd("n", "NOOP")[-1] == b"n OK NOOP completed"


def test_unknown_mechanism_is_bad_and_nothing_is_compressed(conn):
    """RFC 4978 3 and 5 (``algorithm = "DEFLATE"``): another mechanism is BAD, and after a
    BAD (or NO) neither side turns compression on."""
    c = conn()
    assert c.cmd("a", "COMPRESS LZMA")[-1].startswith(b"a BAD")
    assert c.cmd("b", "COMPRESS")[-1].startswith(b"b BAD")
    assert c.cmd("n", "NOOP") == [b"n OK NOOP completed"]  # still in the clear


def test_compress_needs_authentication(conn):
    """RFC 4978 3: COMPRESS is valid in the authenticated and selected states only."""
    c = conn(login=False)
    assert c.cmd("a", "COMPRESS DEFLATE")[-1].startswith(b"a BAD")
    assert c.cmd("n", "NOOP") == [b"n OK NOOP completed"]


def test_selected_state_and_starttls_after_compress_is_refused(conn):
    """RFC 4978 3 (valid in the selected state) and 4: TLS goes below compression, never
    above it; STARTTLS reachable again after UNAUTHENTICATE is refused once DEFLATE is on."""
    c = conn()
    assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
    assert compress(c)[-1].startswith(b"a OK")
    assert c.cmd("u", "UNAUTHENTICATE")[-1].startswith(b"u OK")
    assert c.cmd("t", "STARTTLS")[-1].startswith(b"t BAD")
    assert c.cmd("l", f"LOGIN {USER} {PASSWORD}")[-1].startswith(b"l OK")


def test_compressed_command_pipelined_behind_compress(conn):
    """RFC 4978 3: compression starts with the first command after COMPRESS.  A client that
    sends that command (compressed) in the same packet as COMPRESS gets it run, not parsed as
    cleartext garbage."""
    c = conn()
    ds = DeflateSocket(c.sock)
    deflated = ds.deflate.compress(b"n NOOP\r\n") + ds.deflate.flush(zlib.Z_SYNC_FLUSH)
    c.send(b"a COMPRESS DEFLATE\r\n" + deflated)
    assert c.read_line() == b"a OK DEFLATE active"
    rest = c.buffer
    c.buffer = b""
    c.sock = ds
    if rest:
        c.buffer = ds.inflate.decompress(rest)
    assert c.until_tagged("n") == [b"n OK NOOP completed"]


def test_compress_pipelined_behind_a_store_command(conn):
    """RFC 4978 3: COMPRESS queued behind a command that waits on the store (SELECT), with a
    compressed command after it in the same packet: they run in order, the last compressed."""
    c = conn()
    ds = DeflateSocket(c.sock)
    deflated = ds.deflate.compress(b"n NOOP\r\n") + ds.deflate.flush(zlib.Z_SYNC_FLUSH)
    c.send(b"s SELECT INBOX\r\na COMPRESS DEFLATE\r\n" + deflated)
    assert c.until_tagged("s")[-1].startswith(b"s OK")
    assert c.read_line() == b"a OK DEFLATE active"
    rest, c.buffer, c.sock = c.buffer, b"", ds
    c.buffer = ds.inflate.decompress(rest) if rest else b""
    assert c.until_tagged("n")[-1] == b"n OK NOOP completed"


def test_failed_compress_pipelined_leaves_the_rest_in_the_clear(conn):
    """RFC 4978 3: after BAD (or NO) the client MUST NOT compress; commands pipelined behind
    the failed COMPRESS are read in the clear and answered."""
    c = conn()
    c.send(b"a COMPRESS LZMA\r\nn NOOP\r\n")
    assert c.until_tagged("a")[-1].startswith(b"a BAD")
    assert c.until_tagged("n") == [b"n OK NOOP completed"]


def test_corrupt_deflate_input_closes_with_bye(conn):
    """RFC 4978 3 leaves no way to resynchronise a broken DEFLATE stream: the server says BYE
    (compressed) and closes, with no traceback."""
    c = conn()
    compress(c)
    c.sock.sock.sendall(b"\xff" * 64)  # not a valid DEFLATE block
    assert c.read_line().startswith(b"* BYE")
    assert c.closed_by_peer()


def big_sessions(server, size: int) -> list[tuple[int, int]]:
    """(bytes_in, bytes_out) of the ended sessions that received ``size`` octets or more."""
    log = server.wait_output(rb"$", timeout=0)
    found = re.findall(rb"bytes_in=(\d+) bytes_out=(\d+) end=", log)
    return [(int(i), int(o)) for i, o in found if int(i) >= size]


@pytest.mark.parametrize("transport", ("plain", "imaps"))
def test_fetch_of_a_large_body_byte_for_byte(server, conn, transport):
    """RFC 4978 3 with RFC 3501 7.4.2: a body over 1 MiB (streamed as a literal in chunks)
    arrives byte for byte through DEFLATE, and compressed (RFC 4978 4: text compresses); the
    session's log line counts the octets as sent, compressed."""
    c = conn(transport)
    body = b"".join(b"Line %06d of a large message body, fairly compressible.\r\n" % i
                    for i in range(20000))
    data = message(subject="large", body=body)
    assert len(data) > 1024 * 1024
    assert c.cmd("c", "CREATE big")[-1].startswith(b"c OK")
    c.send(b"p APPEND big {%d+}\r\n" % len(data) + data + b"\r\n")
    assert c.until_tagged("p")[-1].startswith(b"p OK")
    compress(c)
    assert c.cmd("s", "SELECT big")[-1].startswith(b"s OK")
    lines = c.cmd("f", "FETCH 1 BODY.PEEK[]")
    assert lines[-1] == b"f OK FETCH completed"
    head, rest = lines[0].split(b"\r\n", 1)
    assert head.endswith(b"{%d}" % len(data))
    assert rest == data + b")"
    assert c.sock.received < len(data) // 4
    assert c.cmd("d", "DELETE big")[-1].startswith(b"d OK")
    before = len(big_sessions(server, len(data)))
    c.cmd("z", "LOGOUT")
    # The session's log line counts octets as they were sent: compressed (docs/logs.md).
    deadline = time.monotonic() + 10
    while len(sessions := big_sessions(server, len(data))) == before:
        assert time.monotonic() < deadline, "no session line"
        time.sleep(0.05)
    received, sent = sessions[-1]
    assert received > len(data) > 4 * sent, (received, sent)


def test_idle_push_arrives_promptly_through_deflate(conn):
    """RFC 4978 4 (the server flushes, so the client never waits for buffered output) with
    RFC 2177 3: while compressed IDLE waits, a message delivered by another session is
    announced within seconds, and DONE ends IDLE."""
    c = conn()
    assert c.cmd("c", "CREATE idlebox")[-1].startswith(b"c OK")
    compress(c)
    assert c.cmd("s", "SELECT idlebox")[-1].startswith(b"s OK")
    c.send("i IDLE\r\n")
    assert c.read_line().startswith(b"+ ")
    other = conn()
    data = message(subject="pushed")
    other.send(b"p APPEND idlebox {%d+}\r\n" % len(data) + data + b"\r\n")
    assert other.until_tagged("p")[-1].startswith(b"p OK")
    started = time.monotonic()
    c.sock.settimeout(10)
    line = c.read_line()
    assert line == b"* 1 EXISTS", line
    assert time.monotonic() - started < 5
    c.send("DONE\r\n")
    assert c.until_tagged("i")[-1].startswith(b"i OK")
    assert other.cmd("d", "DELETE idlebox")[-1].startswith(b"d OK")


def peak_rss_kib(pid: int) -> int:
    """The process's peak RSS (VmHWM) since it was last reset (reset_peak)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def reset_peak(pid: int) -> None:
    """Start VmHWM again from the current RSS (proc(5), clear_refs "5")."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def test_decompression_bomb_does_not_grow_the_server(server, conn):
    """RFC 4978 6 (security: compression must not open a new denial of service): 100 MB of
    zeros, about 100 KB compressed, as one endless line.  The server inflates it in bounded
    steps against its line limit: its peak RSS (not only the RSS afterwards: inflated data is
    freed again) stays within a few MB, the line is answered BAD when its CRLF comes, and the
    session goes on."""
    c = conn()
    compress(c)
    assert c.cmd("n", "NOOP")[-1] == b"n OK NOOP completed"
    reset_peak(server.proc.pid)
    before = peak_rss_kib(server.proc.pid)
    deflate = c.sock.deflate
    zeros = b"\0" * (1024 * 1024)
    for _ in range(100):
        c.sock.sock.sendall(deflate.compress(zeros))
    c.sock.sock.sendall(deflate.compress(b"\r\n") + deflate.flush(zlib.Z_SYNC_FLUSH))
    reply = c.read_line()
    assert reply == b"* BAD line too long", reply
    after = peak_rss_kib(server.proc.pid)
    assert after - before < 16 * 1024, (before, after)
    assert c.cmd("n", "NOOP")[-1] == b"n OK NOOP completed"


@pytest.mark.slow  # ~20 s; test_imap_limits' uncompressed twin always runs
def test_a_compressed_client_that_does_not_read_cannot_grow_server_memory(server, conn):
    """RFC 4978 4 with the output gate (protocol.py): compression keeps backpressure -- six
    pipelined FETCH 1:* BODY.PEEK[] of 30 hardly compressible 200 KB messages (36 MB of
    responses) left unread for two seconds do not grow the server by more than a few MB, and
    everything arrives once the client reads."""
    import base64
    import os
    writer = conn()
    assert writer.cmd("c", "CREATE Noise")[-1].startswith(b"c OK")
    for i in range(30):
        body = base64.encodebytes(os.urandom(150_000)).replace(b"\n", b"\r\n")
        data = message(i, body=body)
        writer.send(b"p%d APPEND Noise {%d+}\r\n" % (i, len(data)) + data + b"\r\n")
    assert writer.until_tagged("p29")[-1].startswith(b"p29 OK")
    reader = conn()
    compress(reader)
    assert reader.cmd("s", "SELECT Noise")[-1].startswith(b"s OK")
    pid = server.proc.pid
    reset_peak(pid)
    before = peak_rss_kib(pid)
    reader.send(b"".join(b"f%d FETCH 1:* BODY.PEEK[]\r\n" % i for i in range(6)))
    time.sleep(2)  # the client does not read
    assert peak_rss_kib(pid) - before < 30 * 1024
    lines = reader.until_tagged("f5")
    assert [line for line in lines if line.startswith(b"f")] == [
        b"f%d OK FETCH completed" % i for i in range(6)]
    assert sum(b" FETCH (BODY[] {" in line for line in lines) == 6 * 30
    assert reader.sock.received < 36_000_000
    # The clean-up is no part of the test: DELETE of these 30 random-text messages, whose
    # text-index entries go too, took 14-24 s with the 2 cores busy.
    writer.sock.settimeout(300)
    assert writer.cmd("d", "DELETE Noise")[-1].startswith(b"d OK")
