"""The server closes connections it ends, over plain TCP, STARTTLS and implicit TLS.

RFC 3501 6.1.3 / RFC 9051 6.1.3 (LOGOUT): "the server MUST send a BYE untagged response before
the (tagged) OK response, and then close the network connection".  RFC 3501 5.4 (autologout)
and 7.1.5 / RFC 9051 7.1.5 (BYE: "the server is closing the connection") apply to the idle
timer and to a connection refused because there are too many.  Over TLS the close is a TLS
close (RFC 8446 6.1 close_notify), which the clients here require: they use
``suppress_ragged_eofs=False``, so a TCP close without close_notify fails the test too.

Twisted's TLS layer sends close_notify only once no producer is registered on the transport;
these tests failed while the connection's output gate stayed registered.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import ssl
import subprocess
import time

import pytest

from tests.imapproc import ServerProcess, make_users
from tests.mailgen import message
from tests.tlscert import make_cert

TRANSPORTS = ["plain", "starttls", "imaps"]
CLOSE_WITHIN = 5.0


class Conn:
    """A raw IMAP connection that can switch to TLS and tell a TLS close from a TCP one."""

    def __init__(self, server, certs, transport: str, login: bool = True):
        self.context = ssl.create_default_context(cafile=certs[0])
        port = server.ports["imaps" if transport == "imaps" else "imap"]
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if transport == "imaps":
            self._wrap()
        self.buffer = b""
        self.greeting = self.line()
        if transport == "starttls":
            assert self.cmd("t", "STARTTLS") == [b"t OK Begin TLS negotiation now"]
            self._wrap()
        if login:
            assert self.cmd("l", "LOGIN ann annpw")[-1].startswith(b"l OK")

    def _wrap(self) -> None:
        self.sock = self.context.wrap_socket(self.sock, server_hostname="localhost",
                                             suppress_ragged_eofs=False)

    def line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            assert chunk, f"closed; buffer {self.buffer!r}"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def cmd(self, tag: str, text: str) -> list[bytes]:
        self.sock.sendall(f"{tag} {text}\r\n".encode())
        lines = []
        while not lines or not lines[-1].startswith(tag.encode() + b" "):
            lines.append(self.line())
        return lines

    def until_closed(self, timeout: float = CLOSE_WITHIN) -> bytes:
        """Everything the server sends until it closes the connection (a TLS close_notify
        over TLS).  Fails if it does not close within ``timeout`` or if a TLS connection ends
        without close_notify (ssl.SSLEOFError)."""
        self.sock.settimeout(timeout)
        data = self.buffer
        deadline = time.monotonic() + timeout
        while True:
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                raise AssertionError(f"not closed within {timeout}s; got {len(data)} octets "
                                     f"ending {data[-200:]!r}") from None
            if not chunk:
                return data
            data += chunk
            assert time.monotonic() < deadline, f"still sending after {timeout}s"

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_cert(str(tmp_path_factory.mktemp("cert")))


def start(base, certs, **imap) -> ServerProcess:
    conf = base / "imapserver.conf"
    keys = {"tls_cert": certs[0], "tls_key": certs[1], "auth_failure_delay": 0.2, **imap}
    conf.write_text("[store]\nsynchronous = NORMAL\n[imap]\n"
                    + "".join(f"{k} = {v}\n" for k, v in keys.items()))
    data_dir = str(base / "store")
    make_users(data_dir, ("ann", "annpw"))
    return ServerProcess(data_dir, "--imaps-port", "auto", config=str(conf)).start()


@pytest.fixture(scope="module")
def server(tmp_path_factory, certs):
    proc = start(tmp_path_factory.mktemp("close"), certs)
    yield proc
    proc.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_logout_closes_the_connection(server, certs, transport):
    """RFC 3501 6.1.3 / RFC 9051 6.1.3: LOGOUT answers BYE, then the tagged OK, then the server
    closes the connection (over TLS: close_notify, then the TCP close)."""
    c = Conn(server, certs, transport)
    try:
        c.sock.sendall(b"o LOGOUT\r\n")
        started = time.monotonic()
        assert c.until_closed() == b"* BYE Logging out\r\no OK LOGOUT completed\r\n"
        assert time.monotonic() - started < CLOSE_WITHIN
    finally:
        c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_logout_after_a_large_fetch_closes_the_connection(server, certs, transport):
    """RFC 3501 6.1.3: also after a FETCH large enough to fill the socket buffers (the output
    gate was paused and resumed on the way)."""
    c = Conn(server, certs, transport)
    try:
        c.cmd("c", "CREATE Big")
        data = message(1, size=3 * 1024 * 1024)
        c.sock.sendall(b"a APPEND Big {%d+}\r\n" % len(data) + data + b"\r\n")
        while not c.line().startswith(b"a "):
            pass
        c.cmd("s", "SELECT Big")
        c.sock.sendall(b"f FETCH 1 BODY.PEEK[]\r\no LOGOUT\r\n")
        out = c.until_closed(15)
        assert out.endswith(b"* BYE Logging out\r\no OK LOGOUT completed\r\n")
        assert data in out
        c2 = Conn(server, certs, "plain")
        c2.cmd("d", "DELETE Big")
        c2.close()
    finally:
        c.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_autologout_closes_the_connection_and_frees_its_slot(tmp_path, certs, transport):
    """RFC 3501 5.4 / RFC 9051 5.4 and 7.1.5: the autologout timer sends BYE and closes the
    connection, also over TLS, even when the client stays silent (sends nothing, never answers
    the close): with ``max_connections = 1`` a new client is served right after, instead of
    getting "BYE Too many connections"."""
    server = start(tmp_path, certs, idle_timeout=1, max_connections=1)
    try:
        silent = Conn(server, certs, transport)
        started = time.monotonic()
        assert silent.until_closed() == b"* BYE Autologout; idle for too long\r\n"
        assert time.monotonic() - started < 1 + CLOSE_WITHIN
        # The silent client still holds its socket open; the server must not need it closed.
        deadline = time.monotonic() + CLOSE_WITHIN
        while True:
            fresh = Conn(server, certs, transport, login=False)
            if fresh.greeting.startswith(b"* OK"):
                break
            assert fresh.greeting == b"* BYE Too many connections, try again later"
            fresh.close()
            assert time.monotonic() < deadline, "the silent client's slot was not freed"
            time.sleep(0.1)
        assert fresh.cmd("l", "LOGIN ann annpw")[-1].startswith(b"l OK")
        fresh.close()
        silent.close()
    finally:
        server.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_too_many_connections_bye_closes_the_connection(tmp_path, certs, transport):
    """RFC 3501 7.1.5 / RFC 9051 7.1.5: a connection refused with BYE (over the connection
    limit) is closed by the server, over TLS too (implicit TLS: the BYE waits for the
    handshake, then close_notify)."""
    server = start(tmp_path, certs, max_connections=1)
    try:
        first = Conn(server, certs, "plain" if transport == "starttls" else transport)
        if transport == "starttls":
            # The refusal comes before any STARTTLS can be sent: a plain BYE and close.
            second = Conn(server, certs, "plain", login=False)
        else:
            second = Conn(server, certs, transport, login=False)
        assert second.greeting == b"* BYE Too many connections, try again later"
        assert second.until_closed() == b""
        second.close()
        first.close()
    finally:
        server.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_shutdown_bye_closes_the_connection(tmp_path, certs, transport):
    """RFC 3501 7.1.5: on SIGTERM every session gets BYE and a proper close (close_notify over
    TLS) before the process exits."""
    server = start(tmp_path, certs)
    try:
        c = Conn(server, certs, transport)
        server.proc.send_signal(signal.SIGTERM)
        assert c.until_closed(15) == b"* BYE Server shutting down\r\n"
        c.close()
        assert server.proc.wait(timeout=30) == 0
    finally:
        server.stop()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_failure_inside_a_streamed_literal_closes_the_connection(tmp_path, certs, transport):
    """RFC 3501 4.3: once ``{n}`` is sent, n octets must follow; if the content cannot be read
    half way (a chunk missing from the store), the literal cannot be completed nor the stream
    resynchronised, so the server closes the connection -- over TLS too (close_notify), and
    without writing a BYE line into the literal."""
    server = start(tmp_path, certs)
    try:
        c = Conn(server, certs, transport)
        data = message(3, size=3 * 1024 * 1024)
        c.sock.sendall(b"a APPEND INBOX {%d+}\r\n" % len(data) + data + b"\r\n")
        while not c.line().startswith(b"a "):
            pass
        # Remove a chunk past the first MiB of the content, behind the server's back.
        db = sqlite3.connect(os.path.join(server.data_dir, "store.sqlite3"))
        table = next(name for (name,) in db.execute("SELECT name FROM sqlite_master")
                     if name.endswith("JAMES_CONTENT"))
        assert db.execute(f'DELETE FROM "{table}" WHERE col = ?', (b"c:6",)).rowcount == 1
        db.commit()
        db.close()
        assert c.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
        c.sock.sendall(b"f FETCH 1 (BODY.PEEK[])\r\n")
        out = c.until_closed(15)
        head = b"* 1 FETCH (BODY[] {%d}\r\n" % len(data)
        assert out.startswith(head)
        sent = out[len(head):]
        assert len(sent) < len(data)
        assert data.startswith(sent), sent[-200:]  # cut short, with nothing else inside
        c.close()
    finally:
        server.stop()


# -- a real client: mbsync -----------------------------------------------------------------------

MBSYNCRC = """\
IMAPAccount test
Host localhost
Port {port}
User ann
Pass annpw
SSLType {ssltype}
CertificateFile {cert}
AuthMechs LOGIN
Timeout 20

IMAPStore remote
Account test

MaildirStore local
Path {maildir}/
Inbox {maildir}/INBOX
SubFolders Verbatim

Channel everything
Far :remote:
Near :local:
Patterns *
Create Near
SyncState *
"""


@pytest.mark.parametrize("ssltype", ["IMAPS", "STARTTLS"])
def test_mbsync_over_tls_finishes(server, certs, tmp_path, ssltype):
    """RFC 3501 6.1.3: mbsync ends its session with LOGOUT and waits for the server to close;
    over IMAPS and STARTTLS it used to hang there until killed.  Now it exits 0 promptly
    with the message it synced."""
    c = Conn(server, certs, "plain")
    data = message(7, subject="mbsync over TLS")
    c.sock.sendall(b"a APPEND INBOX {%d+}\r\n" % len(data) + data + b"\r\n")
    while not c.line().startswith(b"a "):
        pass
    c.close()
    maildir = tmp_path / "mail"
    maildir.mkdir()
    port = server.ports["imaps" if ssltype == "IMAPS" else "imap"]
    rc = tmp_path / "mbsyncrc"
    rc.write_text(MBSYNCRC.format(port=port, ssltype=ssltype, cert=certs[0], maildir=maildir))
    started = time.monotonic()
    done = subprocess.run(["mbsync", "-c", str(rc), "-a"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < 20
    found = []
    for sub in ("new", "cur"):
        for name in os.listdir(maildir / "INBOX" / sub):
            found.append((maildir / "INBOX" / sub / name).read_bytes())
    assert any(re.search(rb"Subject: mbsync over TLS", f) for f in found), found
