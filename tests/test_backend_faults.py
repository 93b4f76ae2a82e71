"""Surviving an HBase outage: the Thrift gateway killed and restarted under a live imapserver.

The gateway runs as its own process (``python -m mailstore.testing.thrift_gateway DATA_DIR
PORT``) on a fixed port, so it can be SIGKILLed and started again on the same port and data, as
a Thrift server or RegionServer outage looks to the frontends.  While it is down IMAP answers
``NO [UNAVAILABLE]`` (RFC 5530 3) on the same connection, LMTP answers ``451 4.3.0`` (RFC 3463
3.4: temporary, so the MTA keeps the message and retries; RFC 2033 4.2); nothing half-written
shows; once it is back every connection works again without restarting anything, and
``mailadmin fsck`` finds nothing.
"""

from __future__ import annotations

import re
import signal
import smtplib
import socket
import time

import pytest

from mailstore.backends.hbase import HBaseBackend
from mailstore.schema import create_schema
from mailstore.store import MailStore
from tests.deliveryserver import lmtp_send
from tests.gatewayproc import (
    EXTERNAL_SKIP,
    GatewayProcess,
    free_port,
    fsck,
    fsck_after_kills_mid_call,
    hbase_args,
)
from tests.imapproc import Client, ServerProcess

pytestmark = EXTERNAL_SKIP

MESSAGE = b"From: a@example.org\r\nSubject: %s\r\n\r\nbody %s\r\n"


@pytest.fixture
def gateway(tmp_path):
    """A gateway subprocess holding the schema and the user ``ann`` (password ``pw``)."""
    gw = GatewayProcess(str(tmp_path / "hbase"), free_port()).start()
    try:
        backend = HBaseBackend(host="127.0.0.1", port=gw.port, pool_size=1)
        try:
            create_schema(backend)
            MailStore(backend).create_user("ann", "pw")
        finally:
            backend.close()
        yield gw
    finally:
        gw.stop()


def poll(attempt, timeout: float = 10.0, what: str = "recovery"):
    """Call ``attempt`` until it returns something true; that value, or fail after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        found = attempt()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.1)


def append(client: Client, tag: str, subject: str) -> bytes:
    data = MESSAGE % (subject.encode(), subject.encode())
    client.send(f"{tag} APPEND INBOX {{{len(data)}+}}\r\n".encode() + data + b"\r\n")
    return client.until_tagged(tag)[-1]


def subjects(client: Client, tag: str) -> list[bytes]:
    lines = client.cmd(tag, "UID FETCH 1:* (BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
    assert lines[-1].startswith(tag.encode() + b" OK"), lines
    return sorted(re.findall(rb"Subject: (\S+)", b"\n".join(lines)))


def test_imap_append_and_fetch_answer_unavailable_then_recover(tmp_path, gateway):
    """RFC 5530 3 (UNAVAILABLE): with the store down, APPEND and FETCH get a tagged
    ``NO [UNAVAILABLE]`` on a connection that stays usable; the failed APPEND leaves nothing
    (RFC 3501 6.3.11: an APPEND that fails adds no message); after the gateway is back the same
    session works again and fsck finds nothing."""
    with ServerProcess(str(tmp_path / "unused"), *hbase_args(gateway)) as server:
        client = Client(server.port)
        assert client.cmd("a", "LOGIN ann pw")[-1].startswith(b"a OK")
        assert append(client, "b", "before").startswith(b"b OK")
        assert client.cmd("c", "SELECT INBOX")[-1].startswith(b"c OK")

        gateway.kill()
        answer = append(client, "d", "during")
        assert re.match(rb"d NO \[UNAVAILABLE\] ", answer), answer
        # The client is told to come back later; where HBase lives is for the operator's log.
        assert str(gateway.port).encode() not in answer
        server.wait_output(b"store_unavailable command=APPEND user=ann")
        lines = client.cmd("e", "FETCH 1 BODY[]")
        assert re.match(rb"e NO \[UNAVAILABLE\] ", lines[-1]), lines
        assert not any(b"Traceback" in line for line in lines)
        assert client.cmd("f", "NOOP")[-1].startswith(b"f ")      # still connected

        gateway.start()
        poll(lambda: append(client, "g", "after").startswith(b"g OK"), what="APPEND")
        assert subjects(client, "h") == [b"after", b"before"]
        # The NO'd FETCH set no \Seen; the one now does, and is answered in full.
        lines = client.cmd("i", "FETCH 1 (BODY[TEXT])")
        assert lines[-1].startswith(b"i OK") and b"body before" in lines[0], lines
        client.close()
    status, report = fsck(gateway)
    assert status == 0, report


def test_lmtp_answers_451_while_down_and_delivers_after(tmp_path, gateway):
    """RFC 2033 4.2 / RFC 3463 3.4 (X.3.0): a delivery the store cannot take is refused with a
    temporary ``451 4.3.0``, so the MTA keeps the message and retries; the retry after the
    gateway is back is delivered exactly once, by the same server process."""
    with ServerProcess(str(tmp_path / "unused"), "--lmtp-port", "auto",
                       *hbase_args(gateway)) as server:
        data = MESSAGE % (b"lmtp", b"lmtp")
        gateway.kill()
        lmtp = smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=15)
        try:
            rcpt, answers = lmtp_send(lmtp, "a@example.org", ["ann@localhost"], data)
            replies = rcpt + answers
            assert any(code == 451 and text.startswith(b"4.3.0") for code, text in replies), \
                replies
            assert all(code in (250, 451) for code, _ in replies), replies
            lmtp.rset()
        finally:
            lmtp.close()

        gateway.start()

        def deliver():
            with smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=15) as again:
                rcpt, answers = lmtp_send(again, "a@example.org", ["ann@localhost"], data)
                return [c for c, _ in rcpt + answers] == [250, 250]
        poll(deliver, what="delivery")
        client = Client(server.port)
        assert client.cmd("a", "LOGIN ann pw")[-1].startswith(b"a OK")
        client.cmd("b", "SELECT INBOX")
        assert subjects(client, "c") == [b"lmtp"]      # the refused attempt left nothing
        client.close()
    status, report = fsck(gateway)
    assert status == 0, report


def test_idle_survives_the_outage_and_reports_later_mail(tmp_path, gateway):
    """RFC 2177 3: an IDLE session is not dropped when the store goes away; once it is back, a
    message delivered by another connection is announced as EXISTS to the same IDLE."""
    with ServerProcess(str(tmp_path / "unused"), *hbase_args(gateway)) as server:
        idler = Client(server.port)
        assert idler.cmd("a", "LOGIN ann pw")[-1].startswith(b"a OK")
        assert idler.cmd("b", "SELECT INBOX")[-1].startswith(b"b OK")
        idler.send(b"c IDLE\r\n")
        assert idler.read_line().startswith(b"+ ")

        gateway.kill()
        time.sleep(1.0)     # let the change watchers meet the outage at least once
        gateway.start()

        writer = Client(server.port)
        assert writer.cmd("a", "LOGIN ann pw")[-1].startswith(b"a OK")
        poll(lambda: append(writer, "b", "late").startswith(b"b OK"), what="APPEND")
        writer.close()
        idler.sock.settimeout(10)
        assert idler.read_line() == b"* 1 EXISTS"
        idler.send(b"DONE\r\n")
        assert idler.until_tagged("c")[-1].startswith(b"c OK")
        idler.close()


def test_hung_gateway_answers_unavailable_within_timeout(tmp_path, gateway):
    """RFC 5530 3 (UNAVAILABLE): a Thrift server that stops answering (SIGSTOP: the socket stays
    open, nothing comes back) must not hold the command forever: after ``[hbase] timeout_ms``
    the client gets ``NO [UNAVAILABLE]``, and once the server answers again the same session
    recovers (the timed-out connection was replaced, not reused half-read)."""
    config = tmp_path / "imapserver.conf"
    config.write_text("[hbase]\ntimeout_ms = 1000\npool_size = 1\n")
    with ServerProcess(str(tmp_path / "unused"), *hbase_args(gateway),
                       config=str(config)) as server:
        client = Client(server.port, timeout=15)
        assert client.cmd("a", "LOGIN ann pw")[-1].startswith(b"a OK")
        assert client.cmd("b", "SELECT INBOX")[-1].startswith(b"b OK")
        other = Client(server.port, timeout=15)
        assert other.cmd("a", "LOGIN ann pw")[-1].startswith(b"a OK")
        gateway.proc.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            answer = append(client, "c", "hung")
            # The second session waits for the only pooled connection, then for the server.
            lines = other.cmd("b", "STATUS INBOX (MESSAGES)")
            assert re.match(rb"c NO \[UNAVAILABLE\] ", answer), answer
            assert re.match(rb"b NO \[UNAVAILABLE\] ", lines[-1]), lines
            assert time.monotonic() - started < 8
        finally:
            gateway.proc.send_signal(signal.SIGCONT)
        poll(lambda: append(client, "d", "after").startswith(b"d OK"), what="APPEND")
        # The hung APPEND may or may not have reached the store before the timeout: either way
        # it is whole or absent, and the session's view agrees with the store's.
        found = subjects(client, "e")
        assert found in ([b"after"], [b"after", b"hung"]), found
        client.close()
        other.close()
    status, report = fsck(gateway)
    assert status == 0, report


def test_pool_wait_is_bounded(gateway):
    """A call that finds every pooled connection busy fails as BackendUnavailable after
    ``timeout_ms`` instead of waiting without end (the IMAP edge answers it as RFC 5530
    UNAVAILABLE); the default ``timeout_ms`` is finite."""
    import threading

    from mailstore.errors import BackendUnavailable

    backend = HBaseBackend(host="127.0.0.1", port=gateway.port, pool_size=1, timeout_ms=300)
    held, release = threading.Event(), threading.Event()

    def hold():
        with backend._pool.connection():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(5)
        started = time.monotonic()
        with pytest.raises(BackendUnavailable, match="no HBase connection"):
            backend.tables()
        assert time.monotonic() - started < 3
    finally:
        release.set()
        holder.join(10)
    assert "JAMES_USERS" in backend.tables()     # the pool works again once freed
    backend.close()
    default = HBaseBackend(host="127.0.0.1", port=gateway.port, pool_size=1)
    try:
        assert default._wait == 10.0
    finally:
        default.close()


def test_move_refused_while_down_then_whole_after(tmp_path, gateway):
    """RFC 6851 3.1 / RFC 5530 3: a MOVE the store cannot carry out is answered
    ``NO [UNAVAILABLE]`` and leaves both mailboxes as they were; after recovery the same MOVE
    moves every message once, and fsck finds nothing."""
    with ServerProcess(str(tmp_path / "unused"), *hbase_args(gateway)) as server:
        client = Client(server.port)
        assert client.cmd("a", "LOGIN ann pw")[-1].startswith(b"a OK")
        assert client.cmd("b", "CREATE Dest")[-1].startswith(b"b OK")
        for n in range(3):
            assert append(client, f"c{n}", f"m{n}").startswith(f"c{n} OK".encode())
        assert client.cmd("d", "SELECT INBOX")[-1].startswith(b"d OK")
        gateway.kill()
        lines = client.cmd("e", "UID MOVE 1:* Dest")
        assert re.match(rb"e NO \[UNAVAILABLE\] ", lines[-1]), lines
        assert not any(b"EXPUNGE" in line for line in lines)
        gateway.start()
        poll(lambda: client.cmd("f", "NOOP")[-1].startswith(b"f OK"), what="NOOP")
        assert subjects(client, "g") == [b"m0", b"m1", b"m2"]
        lines = client.cmd("h", "UID MOVE 1:* Dest")
        assert lines[-1].startswith(b"h OK"), lines
        assert client.cmd("i", "SELECT Dest")[-1].startswith(b"i OK")
        assert subjects(client, "j") == [b"m0", b"m1", b"m2"]
        lines = client.cmd("k", "STATUS INBOX (MESSAGES)")
        assert b"(MESSAGES 0)" in lines[0], lines
        client.close()
    status, report = fsck(gateway)
    assert status == 0, report


def test_smtp_answers_451_while_down(tmp_path, gateway):
    """RFC 5321 4.2.5 / RFC 3463 3.4: SMTP refuses with a transient ``451 4.3.0`` while the
    store is down (the client keeps the message), and accepts the retry once it is back."""
    with ServerProcess(str(tmp_path / "unused"), "--smtp-port", "auto",
                       *hbase_args(gateway)) as server:
        data = MESSAGE % (b"smtp", b"smtp")
        gateway.kill()
        with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=15) as smtp:
            with pytest.raises(smtplib.SMTPException) as refused:
                smtp.sendmail("a@example.org", ["ann@localhost"], data)
        text = repr(refused.value)
        assert "451" in text and "4.3.0" in text, text
        gateway.start()

        def deliver():
            with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=15) as again:
                try:
                    return again.sendmail("a@example.org", ["ann@localhost"], data) == {}
                except smtplib.SMTPException:
                    return False
        poll(deliver, what="delivery")
        client = Client(server.port)
        assert client.cmd("a", "LOGIN ann pw")[-1].startswith(b"a OK")
        client.cmd("b", "SELECT INBOX")
        assert subjects(client, "c") == [b"smtp"]
        client.close()


def test_gateway_killed_during_large_append(tmp_path, gateway):
    """RFC 3501 6.3.11: an APPEND cut off by the store's death is either complete or absent.
    The gateway is killed at several moments of a ~2 MB APPEND (before the server reads the
    literal, while it writes chunks, after); whatever each answer, after recovery STATUS counts
    exactly the messages FETCH serves, each whole, every OK'd one among them, and fsck finds
    nothing but the safe leftovers of a call cut off after it was applied."""
    body = b"".join(b"line %06d of a large message\r\n" % n for n in range(60000))   # ~2 MB
    with ServerProcess(str(tmp_path / "unused"), *hbase_args(gateway)) as server:
        client = Client(server.port, timeout=30)
        assert client.cmd("a", "LOGIN ann pw")[-1].startswith(b"a OK")
        acknowledged = set()
        for n, delay in enumerate((0.0, 0.02, 0.04, 0.08, 0.15)):
            data = b"Subject: big%d\r\n\r\n" % n + body
            client.send(f"b{n} APPEND INBOX {{{len(data)}+}}\r\n".encode() + data + b"\r\n")
            time.sleep(delay)
            gateway.kill()
            answer = client.until_tagged(f"b{n}")[-1]
            assert re.match(rb"b%d (OK|NO \[UNAVAILABLE\]) " % n, answer), answer
            if answer.startswith(b"b%d OK" % n):
                acknowledged.add(b"big%d" % n)
            gateway.start()
            poll(lambda: client.cmd("c", "NOOP")[-1].startswith(b"c OK"), what="NOOP")
        # Work goes on: the next APPEND also replays any reference drop the outage refused.
        assert append(client, "h", "small").startswith(b"h OK")
        acknowledged.add(b"small")
        lines = client.cmd("d", "STATUS INBOX (MESSAGES)")
        count = int(re.search(rb"MESSAGES (\d+)", lines[0]).group(1))
        assert client.cmd("e", "SELECT INBOX")[-1].startswith(b"e OK")
        found = subjects(client, "f")
        assert len(found) == count and acknowledged <= set(found), (found, acknowledged)
        for seq in range(1, count):     # the big ones, in UID order, then "small"
            lines = client.cmd("g", f"FETCH {seq} BODY.PEEK[TEXT]")
            assert lines[-1].startswith(b"g OK") and lines[0].endswith(body + b")"), lines[-1]
        client.close()
    fsck_after_kills_mid_call(gateway)


def test_refused_connection_is_reported_unsent(gateway):
    """A call that could not even connect is flagged ``unsent``: the only failures after which
    a counter increment may be replayed without risking a double count."""
    from mailstore.errors import BackendUnavailable

    backend = HBaseBackend(host="127.0.0.1", port=gateway.port, pool_size=1, timeout_ms=2000)
    try:
        gateway.kill()
        with pytest.raises(BackendUnavailable) as refused:
            backend.tables()
        assert refused.value.unsent
    finally:
        backend.close()
        gateway.start()


def test_gateway_killed_during_lmtp_data(tmp_path, gateway):
    """RFC 2033 4.2 / RFC 3463 3.4: the gateway killed at several moments of a ~2 MB LMTP
    delivery to two recipients.  Each recipient's reply is 250 or a transient ``451 4.3.0``;
    every 250 is a whole message in that recipient's INBOX, nothing else appears beyond a
    message whose failure came after its commit (at most one per attempt), and fsck finds
    nothing but the safe leftovers of a call cut off after it was applied."""
    backend = HBaseBackend(host="127.0.0.1", port=gateway.port, pool_size=1)
    try:
        MailStore(backend).create_user("bob", "pw")
    finally:
        backend.close()
    body = b"".join(b"line %06d of a large delivery\r\n" % n for n in range(60000))
    delivered = {"ann": set(), "bob": set()}
    with ServerProcess(str(tmp_path / "unused"), "--lmtp-port", "auto",
                       *hbase_args(gateway)) as server:
        for n, delay in enumerate((0.0, 0.07, 0.085, 0.095, 0.105, 0.115, 0.2)):
            with socket.create_connection(("127.0.0.1", server.ports["lmtp"]), timeout=20) as s, \
                    s.makefile("rb") as reader:
                def reply() -> bytes:
                    line = reader.readline()
                    while line[3:4] == b"-":
                        line = reader.readline()
                    return line
                reply()
                for command in (b"LHLO t\r\n", b"MAIL FROM:<a@example.org>\r\n",
                                b"RCPT TO:<ann@localhost>\r\n", b"RCPT TO:<bob@localhost>\r\n",
                                b"DATA\r\n"):
                    s.sendall(command)
                    assert reply()[:1] in (b"2", b"3"), command
                s.sendall(b"Subject: lmtp%d\r\n\r\n" % n + body + b".\r\n")
                time.sleep(delay)
                gateway.kill()
                for user in ("ann", "bob"):
                    answer = reply()
                    assert answer.startswith((b"250 ", b"451 4.3.0 ")), answer
                    if answer.startswith(b"250"):
                        delivered[user].add(b"lmtp%d" % n)
            gateway.start()
        for user in ("ann", "bob"):
            client = Client(server.port, timeout=20)
            assert client.cmd("a", f"LOGIN {user} pw")[-1].startswith(b"a OK")
            # Work goes on: the APPEND also replays any reference drop the outage refused.
            assert append(client, "b", "later").startswith(b"b OK")
            assert client.cmd("c", "SELECT INBOX")[-1].startswith(b"c OK")
            found = subjects(client, "d")
            client.close()
            assert delivered[user] | {b"later"} <= set(found), (user, found, delivered)
            assert len(found) == len(set(found)), found     # no attempt stored twice
    fsck_after_kills_mid_call(gateway)


def test_refused_take_backs_are_replayed(gateway):
    """What a failed APPEND or delivery gives back while the store is unreachable -- its
    content reference, its place in the mailbox counters (RFC 3501 6.3.1's MESSAGES/UNSEEN as
    STATUS reports them) -- is replayed once the store answers, so nothing outlives the outage
    as a leaked content row or a counter too high."""
    from mailstore.content import REFS
    from mailstore.errors import BackendUnavailable

    backend = HBaseBackend(host="127.0.0.1", port=gateway.port, pool_size=1, timeout_ms=2000)
    store = MailStore(backend, create_tables=False)
    try:
        inbox = store.mailbox("ann", "INBOX")
        stored = store.ingest(MESSAGE % (b"x", b"x"))
        store.mailboxes.add_counts(inbox.id, messages=1, unseen=1, size=stored.size)
        gateway.kill()
        with pytest.raises(BackendUnavailable):
            store.content.decref(stored.content_id)
        store.messages._uncount(inbox.id, stored.size, seen=False)     # swallows the failure
        gateway.start()
        store.append("ann", "INBOX", MESSAGE % (b"y", b"y"))            # work goes on
        refs = store.content.table.row(stored.content_id, [REFS]).get(REFS)
        assert refs is None or int.from_bytes(refs, "big", signed=True) <= 0
        box = store.mailbox("ann", "INBOX")
        assert (box.messages, box.unseen) == (1, 1)
    finally:
        store.close()
    status, report = fsck(gateway)
    assert status == 0, report
