"""STARTTLS on the SMTP and LMTP listeners (RFC 3207; RFC 2033 allows it for LMTP).

A real ``imapserver`` process with a throwaway certificate (``tests/tlscert.py``) is fed by
``swaks --tls`` and by stdlib ``smtplib.starttls()`` with a verifying context; what it stored
is read back over IMAP.  Raw sockets check the protocol rules: EHLO offers STARTTLS only before
TLS and only with a certificate, the session starts over after the handshake (RFC 3207 4.2),
commands pipelined behind STARTTLS in the clear are dropped (6, the CVE-2011-0411 injection),
``smtp_require_starttls`` refuses mail in the clear (4).
"""

from __future__ import annotations

import asyncio
import imaplib
import re
import smtplib
import socket
import ssl
import subprocess

import pytest

from mailstore import config as configmod
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.deliveryserver import InProcess, ServerProcess, body_of, raw_session, stored
from tests.imapproc import make_users
from tests.tlscert import make_cert

PASSWORD = "s3cret-pw"
USERS = ("alice", "bob", "carol", "dave")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_cert(str(tmp_path_factory.mktemp("cert")))


@pytest.fixture(scope="module")
def env(tmp_path_factory, certs):
    """A server process with the certificate: IMAP, SMTP and LMTP on ports the kernel picks."""
    root = tmp_path_factory.mktemp("starttls")
    data = str(root / "store")
    make_users(data, *((user, PASSWORD) for user in USERS))
    conf = root / "imapserver.conf"
    conf.write_text(f"[imap]\ntls_cert = {certs[0]}\ntls_key = {certs[1]}\n"
                    "[delivery]\ndomains = example.com\nhostname = mx.test\n")
    with ServerProcess(data, "--imap-port", "auto", config_file=str(conf)) as server:
        yield server, certs[0], root


def verifying_context(cafile: str) -> ssl.SSLContext:
    """A client context that checks the server's certificate and name, as a careful MTA does."""
    context = ssl.create_default_context(cafile=cafile)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    return context


def imap_messages(server: ServerProcess, cafile: str, user: str) -> list[bytes]:
    """Every message of ``user``'s INBOX as the IMAP server sends it (BODY.PEEK[]), over
    IMAP STARTTLS."""
    with imaplib.IMAP4("127.0.0.1", server.ports["imap"], timeout=10) as imap:
        imap.starttls(ssl_context=verifying_context(cafile))
        imap.login(user, PASSWORD)
        imap.select("INBOX", readonly=True)
        _, data = imap.uid("FETCH", "1:*", "(BODY.PEEK[])")
        return [item[1] for item in data if isinstance(item, tuple)]


def swaks(server: ServerProcess, cafile: str, *args: str, protocol: str = "ESMTP"
          ) -> subprocess.CompletedProcess:
    port = server.ports["lmtp" if protocol == "LMTP" else "smtp"]
    argv = ["swaks", "--server", "127.0.0.1", "--port", str(port), "--protocol", protocol,
            "--from", "sender@example.org", "--timeout", "10",
            "--tls", "--tls-verify", "--tls-ca-path", cafile, *args]
    return subprocess.run(argv, capture_output=True, timeout=60)


def log_line(server: ServerProcess, queue_id: str) -> str:
    """The ``delivery`` log line of ``queue_id`` (written before the reply to DATA is sent)."""
    lines = [line for line in server.stderr().splitlines()
             if " delivery " in line and f"queue_id={queue_id}" in line]
    assert len(lines) == 1, server.stderr()
    return lines[0]


def queue_id(message: bytes) -> str:
    return re.search(rb" id ([0-9A-F]{16})", message).group(1).decode()


TRACE = (rb"Return-Path: <sender@example\.org>\r\nDelivered-To: {0}@example\.com\r\n"
         rb"Received: from \S+ \(\[127\.0\.0\.1\]\)\r\n"
         rb"\t\(using TLSv1\.[23] with cipher [A-Z0-9_-]+ \((\d+)/\1 bits\)\)\r\n"
         rb"\tby mx\.test with {1} id [0-9A-F]{{16}}\r\n\tfor <{0}@example\.com>; [^\r\n]+\r\n")


@pytest.mark.parametrize("protocol,user,keyword", [("ESMTP", "alice", b"ESMTPS"),
                                                   ("LMTP", "bob", b"LMTPS")])
def test_swaks_tls_delivery_read_back_over_imap_byte_for_byte(env, tmp_path, protocol, user,
                                                              keyword):
    """RFC 3207 (RFC 2033 for LMTP): swaks --tls --tls-verify negotiates STARTTLS with the
    certificate of [imap] and delivers; IMAP returns exactly the trace fields (RFC 5321 4.4,
    ``with ESMTPS``/``LMTPS`` of RFC 3848, the cipher as Postfix writes it) followed by the
    octets swaks sent."""
    server, cafile, _ = env
    raw = (b"From: <sender@example.org>\r\nSubject: over TLS\r\n"
           b"Content-Type: text/plain; charset=utf-8\r\n\r\n"
           + "8-bit: çà ü 日本\r\n".encode() + b"line two\r\n")
    eml = tmp_path / "m.eml"
    eml.write_bytes(raw + b".\r\n")
    done = swaks(server, cafile, "--to", f"{user}@example.com", "--no-data-fixup",
                 "--data", f"@{eml}", protocol=protocol)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert "<-  220 Ready to start TLS" in out and "TLS started with cipher" in out, out
    got = imap_messages(server, cafile, user)[-1]
    header = re.match(TRACE.replace(b"{0}", user.encode()).replace(b"{1}", keyword)
                      .replace(b"{{16}}", b"{16}"), got)
    assert header, got[:400]
    assert got[header.end():] == raw
    assert " tls=true " in log_line(server, queue_id(got))


def test_smtplib_starttls_with_a_verifying_context(env):
    """RFC 3207 4.2: EHLO offers STARTTLS before TLS and not after; the client must EHLO again
    on the new session.  Python's smtplib with certificate and host name checks."""
    server, cafile, _ = env
    with smtplib.SMTP("localhost", server.ports["smtp"], timeout=10) as client:
        client.ehlo("client.example.org")
        assert client.has_extn("starttls") and client.has_extn("pipelining")
        code, _ = client.starttls(context=verifying_context(cafile))
        assert code == 220
        client.ehlo("client.example.org")
        assert not client.has_extn("starttls")
        assert not client.has_extn("auth")  # no AUTH to offer: nobody logs in here
        assert client.sock.version() in ("TLSv1.2", "TLSv1.3")
        client.sendmail("sender@example.org", ["carol@example.com"],
                        b"Subject: smtplib over TLS\r\n\r\nHello Carol.\r\n")
    got = imap_messages(server, cafile, "carol")[-1]
    assert b"with ESMTPS id" in got and b"\r\n\t(using TLSv1." in got
    assert body_of(got) == b"Subject: smtplib over TLS\r\n\r\nHello Carol.\r\n"
    assert " tls=true " in log_line(server, queue_id(got))


def test_plain_delivery_is_logged_without_tls(env):
    """The same listener in the clear: ``with ESMTP`` and ``tls=false`` (docs/logs.md)."""
    server, cafile, _ = env
    with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as client:
        client.sendmail("sender@example.org", ["dave@example.com"], b"Subject: plain\r\n\r\nx\r\n")
    got = imap_messages(server, cafile, "dave")[-1]
    assert b"with ESMTP id" in got and b"using TLS" not in got
    assert " tls=false " in log_line(server, queue_id(got))


# -- the protocol rules, on raw sockets -------------------------------------------------------

def read_line(sock) -> bytes:
    """One reply line, read octet by octet: nothing after it is taken from the socket, so
    that the TLS handshake starts exactly where the server's 220 ends."""
    line = b""
    while not line.endswith(b"\r\n"):
        octet = sock.recv(1)
        assert octet, f"connection closed after {line!r}"
        line += octet
    return line


def read_reply(sock) -> list[bytes]:
    lines = [read_line(sock)]
    while lines[-1][3:4] == b"-":
        lines.append(read_line(sock))
    return lines


def greet(sock, hello: bytes) -> list[bytes]:
    read_line(sock)  # 220 greeting
    sock.sendall(hello + b" client.example.org\r\n")
    return read_reply(sock)


@pytest.mark.parametrize("name,hello", [("smtp", b"EHLO"), ("lmtp", b"LHLO")])
def test_commands_pipelined_behind_starttls_are_discarded(env, name, hello):
    """RFC 3207 6 (CVE-2011-0411): "STARTTLS\\r\\nRSET\\r\\n" in one packet.  The server answers
    STARTTLS with 220 and nothing more in the clear (else the handshake would read the extra
    reply as TLS and fail), and never answers the RSET inside TLS either: the first reply in
    TLS is the one to the client's own first command."""
    server, cafile, _ = env
    context = verifying_context(cafile)
    with socket.create_connection(("127.0.0.1", server.ports[name]), timeout=10) as sock:
        assert b"250-STARTTLS\r\n" in greet(sock, hello)
        sock.sendall(b"STARTTLS\r\nRSET\r\n")
        assert read_line(sock) == b"220 Ready to start TLS\r\n"
        with context.wrap_socket(sock, server_hostname="localhost") as tls:
            tls.sendall(hello + b" client.example.org\r\n")
            first = read_reply(tls)
            assert first[0] == b"250-mx.test\r\n", first  # not RSET's "250 OK"
            assert b"250-STARTTLS\r\n" not in first
            tls.sendall(b"NOOP\r\n")
            assert read_reply(tls) == [b"250 OK\r\n"]  # nothing else was queued before it


def test_the_session_starts_over_after_starttls(env):
    """RFC 3207 4.2: after the handshake the server discards what it knew from the client
    (the EHLO, a transaction begun in the clear); MAIL needs a new EHLO, RCPT a new MAIL.  A
    second STARTTLS is refused (Dovecot's reply)."""
    server, cafile, _ = env
    with socket.create_connection(("127.0.0.1", server.ports["smtp"]), timeout=10) as sock:
        greet(sock, b"EHLO")
        sock.sendall(b"MAIL FROM:<sender@example.org>\r\n")
        assert read_line(sock).startswith(b"250")
        sock.sendall(b"STARTTLS\r\n")
        assert read_line(sock) == b"220 Ready to start TLS\r\n"
        with verifying_context(cafile).wrap_socket(sock, server_hostname="localhost") as tls:
            tls.sendall(b"MAIL FROM:<sender@example.org>\r\n")
            assert read_line(tls).startswith(b"503 ")  # EHLO first
            tls.sendall(b"EHLO client.example.org\r\n")
            read_reply(tls)
            tls.sendall(b"RCPT TO:<alice@example.com>\r\n")
            assert read_line(tls).startswith(b"503 ")  # the clear MAIL is gone
            tls.sendall(b"STARTTLS\r\n")
            assert read_line(tls) == b"502 5.5.1 TLS is already active\r\n"
            tls.sendall(b"QUIT\r\n")
            assert read_line(tls).startswith(b"221")


def test_a_failed_handshake_closes_quietly(env):
    """A client that answers 220 with something that is not TLS loses its connection; the
    server logs ``tls_failed`` (no traceback) and goes on serving."""
    server, cafile, _ = env
    with socket.create_connection(("127.0.0.1", server.ports["lmtp"]), timeout=10) as sock:
        greet(sock, b"LHLO")
        sock.sendall(b"STARTTLS\r\n")
        assert read_line(sock) == b"220 Ready to start TLS\r\n"
        sock.sendall(b"MAIL FROM:<plain@example.org>\r\n" * 4)
        try:
            rest = sock.recv(4096)
            while rest and b"250" not in rest:
                rest = sock.recv(4096)
        except ConnectionResetError:
            rest = b""
        assert b"250" not in rest
    with smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=10) as client:
        assert client.noop()[0] == 250
    assert " tls_failed " in server.stderr()
    assert "Traceback" not in server.stderr()


# -- require_starttls and no certificate: listeners in this process -----------------------------

@pytest.fixture
def store(tmp_path):
    store = MailStore(EmbeddedBackend(str(tmp_path / "store")))
    store.create_user("alice", None)
    yield store
    store.close()


def delivery_config(imap: dict, **delivery) -> configmod.Config:
    values = {"smtp_port": "auto", "lmtp_port": "auto", "domains": ["example.com"], **delivery}
    return configmod.load(None, {"imap": imap, "delivery": values})


def test_require_starttls_refuses_mail_in_the_clear(store, certs):
    """RFC 3207 4: with smtp_require_starttls, commands other than NOOP, EHLO, STARTTLS and
    QUIT get 530 before TLS; after it the message is taken.  The LMTP listener (its client is
    the local MTA) does not require it."""
    cfg = delivery_config({"tls_cert": certs[0], "tls_key": certs[1]},
                          smtp_require_starttls=True)
    with InProcess(store, cfg) as server:
        replies = raw_session(server.ports["smtp"], [
            b"EHLO client.example.org\r\n", b"NOOP\r\n", b"MAIL FROM:<sender@example.org>\r\n",
            b"RCPT TO:<alice@example.com>\r\n", b"QUIT\r\n"])
        assert b"250-STARTTLS\r\n" in replies
        assert replies[-4:] == [b"250 OK\r\n",
                                b"530 5.7.0 Must issue a STARTTLS command first\r\n",
                                b"530 5.7.0 Must issue a STARTTLS command first\r\n",
                                b"221 Bye\r\n"]
        with smtplib.SMTP("localhost", server.ports["smtp"], timeout=10) as client:
            client.starttls(context=verifying_context(certs[0]))
            client.sendmail("sender@example.org", ["alice@example.com"], b"Subject: s\r\n\r\n")
        with smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=10) as client:
            client.sendmail("sender@example.org", ["alice@example.com"], b"Subject: l\r\n\r\n")
    assert [body_of(m) for m in stored(store, "alice")] == [b"Subject: s\r\n\r\n",
                                                             b"Subject: l\r\n\r\n"]


@pytest.mark.parametrize("name,hello", [("smtp", b"EHLO"), ("lmtp", b"LHLO")])
def test_without_a_certificate_no_starttls(store, name, hello):
    """RFC 3207 4: STARTTLS is not offered without a certificate, and refused if tried
    (502 5.5.1, Dovecot's answer; aiosmtpd's 454 would mean "try again")."""
    with InProcess(store, delivery_config({})) as server:
        replies = raw_session(server.ports[name], [hello + b" client.example.org\r\n",
                                                   b"STARTTLS\r\n"])
        assert not any(b"STARTTLS" in line for line in replies[:-1])
        assert replies[-1] == b"502 5.5.1 TLS is not available\r\n"
        with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as client:
            with pytest.raises(smtplib.SMTPNotSupportedError):
                client.starttls()


def test_require_starttls_without_a_certificate_stops_start_up(store):
    """A requirement aiosmtpd would silently drop (no certificate) is a start-up error, raised
    before any port is bound."""
    from imapserver import delivery

    loop = asyncio.new_event_loop()
    announced = []
    try:
        with pytest.raises(ValueError, match="smtp_require_starttls = yes needs"):
            delivery.start(store, delivery_config({}, smtp_require_starttls=True), None, loop,
                           lambda *args: announced.append(args))
    finally:
        loop.close()
    assert announced == []
