"""End to end: mail sent over SMTP (RFC 5321) or LMTP (RFC 2033) reaches an IMAP client in IDLE
(RFC 2177) within a second, and is fetched intact -- with IMAP in the same process as the
listener, and in another process on the same store.
"""

from __future__ import annotations

import smtplib
import time

from tests.imapproc import Client, ServerProcess, make_users


def idle_until_exists(client: Client, deadline: float) -> bytes:
    """The next update pushed but RECENT: the one session told first of a message also gets
    ``* n RECENT`` (RFC 3501 2.3.2, 7.3.2), and which one that is is a race."""
    while True:
        client.sock.settimeout(max(0.1, deadline - time.monotonic()))
        line = client.read_line()
        if not line.endswith(b" RECENT"):
            return line


def test_smtp_and_lmtp_delivery_pushed_to_idle_clients(tmp_path):
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("ivy", "pw"))
    body = ("From: sender@example.org\r\nTo: ivy@localhost\r\nSubject: pushed\r\n"
            "Message-ID: <push-1@example.org>\r\n\r\n8-bit: caf\xe9\r\n").encode("latin-1")
    with ServerProcess(data_dir, "--smtp-port", "auto", "--lmtp-port", "auto") as both, \
            ServerProcess(data_dir) as imap_only:
        watchers = []
        for server in (both, imap_only):
            client = Client(server.port)
            assert client.cmd("a", "LOGIN ivy pw")[-1].startswith(b"a OK")
            client.cmd("b", "SELECT INBOX")
            client.send(b"i IDLE\r\n")
            assert client.read_line() == b"+ idling"
            watchers.append(client)
        with smtplib.SMTP("127.0.0.1", both.ports["smtp"], timeout=10) as smtp:
            smtp.sendmail("sender@example.org", ["ivy@localhost"], body)
            # From the delivery's 250, as for LMTP below: the SMTP session's own time (a
            # busy machine stretches it) is not the push's.
            start = time.monotonic()
        for client in watchers:
            assert idle_until_exists(client, start + 1.5) == b"* 1 EXISTS"
        assert time.monotonic() - start < 1.5
        with smtplib.LMTP("127.0.0.1", both.ports["lmtp"], timeout=10) as lmtp:
            lmtp.sendmail("sender@example.org", ["ivy@localhost"], body)
        for client in watchers:
            assert idle_until_exists(client, time.monotonic() + 1.5) == b"* 2 EXISTS"
        for client in watchers:
            client.sock.settimeout(10)
            client.send(b"DONE\r\n")
            assert client.until_tagged("i")[-1] == b"i OK IDLE completed"
            lines = client.cmd("f", "FETCH 1 BODY.PEEK[TEXT]")
            assert lines[0] == b"* 1 FETCH (BODY[TEXT] {13}\r\n8-bit: caf\xe9\r\n)"
            stored = client.cmd("g", "FETCH 1 BODY.PEEK[HEADER.FIELDS (SUBJECT MESSAGE-ID)]")
            assert b"Subject: pushed\r\nMessage-ID: <push-1@example.org>\r\n\r\n" in stored[0]
            client.close()
