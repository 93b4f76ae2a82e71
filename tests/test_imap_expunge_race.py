"""FETCH in one session racing EXPUNGE in another (RFC 2180 4.1, RFC 9051 7.1 EXPUNGEISSUED).

A session may FETCH a message another session has expunged before it has been told (EXPUNGE
responses are not sent during FETCH, RFC 3501 7.4.1).  Acceptable answers: the data (RFC 2180
4.1.1), or the other messages' data and ``NO [EXPUNGEISSUED]`` (4.1.2).  Never ``NO Internal
server error``, never a traceback in the log, never a literal whose octets are not the
message's.  Content stays readable for ``release_grace`` seconds after its last expunge
(docs/decisions/0011); the state a session meets when it reads a row just before that grace
ends is staged here by deleting the content row from another process, as the sweep would.

The stress test runs a few seconds in ``make test``; ``RACE_SECONDS`` runs it longer.
"""

from __future__ import annotations

import os
import re
import threading
import time

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message

STREAMED = 1024 * 1024 + 200 * 1024   # over fetch.STREAM_ABOVE: written as it is read
SMALL = 8 * 1024
RACE_SECONDS = float(os.environ.get("RACE_SECONDS", "2"))
FETCH_LINE = re.compile(rb"\* (\d+) FETCH \(UID (\d+) BODY\[\] \{(\d+)\}$")


def size_of(n: int) -> int:
    return STREAMED if n % 3 == 0 else SMALL


def body_of(n: int) -> bytes:
    return message(n, size=size_of(n))


def login(c: Client, mailbox: str | None = None) -> None:
    assert c.cmd("L", "LOGIN alice wonderland")[-1].startswith(b"L OK")
    if mailbox:
        assert c.cmd("S", f"SELECT {mailbox}")[-1].startswith(b"S OK")


def append(c: Client, mailbox: str, data: bytes) -> int:
    c.send(f"A APPEND {mailbox} {{{len(data)}+}}\r\n".encode() + data + b"\r\n")
    tagged = c.until_tagged("A")[-1]
    m = re.search(rb"\[APPENDUID \d+ (\d+)\]", tagged)
    assert m, tagged
    return int(m.group(1))


def read_exact(c: Client, size: int) -> bytes:
    while len(c.buffer) < size:
        chunk = c.sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside a literal")
        c.buffer += chunk
    data, c.buffer = c.buffer[:size], c.buffer[size:]
    return data


def fetch_bodies(c: Client, tag: str, what: str) -> tuple[list[tuple[int, int, bytes]], bytes]:
    """``FETCH what (UID BODY.PEEK[])``: ((seq, uid, literal), ...) and the tagged line.

    Every FETCH response must be exactly ``* s FETCH (UID u BODY[] {n}`` CRLF, n octets, ``)``:
    anything else (a space before the data, a short literal, a tagged line inside a literal)
    fails here.  ConnectionError if the server closes the connection."""
    c.send(f"{tag} FETCH {what} (UID BODY.PEEK[])\r\n")
    got = []
    while True:
        line = c.read_line()
        if line.startswith(tag.encode() + b" "):
            return got, line
        m = FETCH_LINE.match(line)
        if m is None:
            assert not line.startswith(b"* ") or b" FETCH " not in line, line
            continue  # EXISTS and the like
        literal = read_exact(c, int(m.group(3)))
        assert c.read_line() == b")", "octets after the literal's count"
        got.append((int(m.group(1)), int(m.group(2)), literal))


def check_body(literal: bytes) -> None:
    m = re.search(rb"Subject: message (\d+)\r\n", literal[:400])
    assert m, literal[:200]
    assert literal == body_of(int(m.group(1))), f"message {m.group(1)} served wrong"


def server_log_is_clean(server: ServerProcess) -> None:
    log = server.wait_output(rb"$^", timeout=0.2)  # what it has written so far
    assert b"Traceback" not in log, log.decode(errors="replace")[-4000:]
    assert b"failed" not in log, log.decode(errors="replace")[-4000:]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("race") / "store")
    make_users(path, ("alice", "wonderland"))
    return path


@pytest.fixture(scope="module")
def server(data_dir):
    with ServerProcess(data_dir) as proc:
        yield proc


def release_content_now(data_dir: str, mailbox: str, uids: list[int]) -> None:
    """Delete the content rows of ``uids`` from another process, as the sweep does once the
    grace period after an expunge is over: the state a session meets when it read the rows
    just before.  (The rows stay, so the session's FETCH finds them.)"""
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"), create_tables=False)
    try:
        box = store.mailbox("alice", mailbox)
        for view in store.fetch(box, uids):
            store.content.table.delete(view.record.content)
    finally:
        store.close()


def test_fetch_of_content_gone_under_the_session_serves_the_rest_and_says_expungeissued(
        server, data_dir):
    """RFC 2180 4.1.2 with RFC 9051 7.1: the messages still readable are served, the tagged
    response is ``NO [EXPUNGEISSUED]``; a streamed (over 1 MiB) literal is not begun for
    content already gone.  Before decision 0011 this was ``NO Internal server error`` (or a
    dropped connection for the streamed one) with a traceback in the log."""
    c = Client(server.port)
    try:
        login(c)
        c.cmd("D", "DELETE Gone")
        c.cmd("C", "CREATE Gone")
        uids = [append(c, "Gone", body_of(n)) for n in (1, 3, 4, 6)]  # small, big, small, big
        c.cmd("S", "SELECT Gone")
        release_content_now(data_dir, "Gone", [uids[1], uids[2]])
        got, tagged = fetch_bodies(c, "f", "1:4")
        assert [(seq, uid) for seq, uid, _ in got] == [(1, uids[0]), (4, uids[3])]
        for _seq, _uid, literal in got:
            check_body(literal)
        assert tagged.startswith(b"f NO [EXPUNGEISSUED] "), tagged
        # The session goes on: the next command is answered in step.
        assert c.cmd("n", "NOOP")[-1].startswith(b"n OK")
    finally:
        c.close()
    server_log_is_clean(server)


def test_streamed_literal_whose_content_goes_midway_cuts_the_connection(server, data_dir):
    """RFC 3501 4.3: a literal's octet count, once sent, must be followed by exactly that many
    octets of the message.  Content that goes while its literal is being written (a client
    slower than the grace period) leaves no honest way to finish it, so the connection is
    cut: the client sees the end inside the literal, never other bytes passed off as the
    message or a tagged line read as message data.  Logged, without a traceback."""
    size = 12 * 1024 * 1024  # more than the kernel's buffers can hold for a stalled reader
    big = message(99, size=size)
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"), create_tables=False)
    try:
        store.create_mailbox("alice", "Huge")
        _validity, uid = store.append("alice", "Huge", big)
    finally:
        store.close()
    c = Client(server.port, recv_buffer=64 * 1024)
    try:
        login(c, "Huge")
        c.send(f"f UID FETCH {uid} (BODY.PEEK[])\r\n")
        head = c.read_line()
        assert head.endswith(b"BODY[] {%d}" % len(big)), head
        assert read_exact(c, 256 * 1024) == big[:256 * 1024]
        release_content_now(data_dir, "Huge", [uid])
        received = 256 * 1024
        with pytest.raises(ConnectionError):
            while True:
                piece = read_exact(c, min(65536, len(big) - received))
                assert piece == big[received:received + len(piece)]
                received += len(piece)
                if received == len(big):
                    c.read_line()  # the rest of the response: must not be reached
        assert received < len(big)
    finally:
        c.close()
    log = server.wait_output(rb"connection_cut", timeout=5)
    assert b"connection_cut" in log and b"released" in log
    server_log_is_clean(server)
    other = Client(server.port)  # the server goes on serving
    try:
        login(other, "Huge")
    finally:
        other.close()


@pytest.mark.parametrize("grace", ["default", "0"])
def test_fetch_racing_expunge_in_another_session(tmp_path, grace):
    """RFC 2180 4.1: one session FETCHes every message's body (small ones and ones over 1 MiB,
    which are streamed) again and again, learning of expunges only at NOOP, while another
    appends and expunges.  With the default grace period every body is served whole (4.1.1);
    with none, ``NO [EXPUNGEISSUED]`` and a connection cut inside a streamed literal are the
    only other outcomes allowed (4.1.2).  Never another NO, a BAD, a malformed or wrong
    literal, or a traceback in the server's log."""
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("alice", "wonderland"))
    config = None
    if grace != "default":
        config = str(tmp_path / "imapserver.conf")
        with open(config, "w") as f:
            f.write(f"[store]\nrelease_grace = {grace}\n")
    with ServerProcess(data_dir, config=config) as server:
        writer = Client(server.port)
        login(writer)
        live = [append(writer, "INBOX", body_of(n)) for n in range(6)]
        writer.cmd("S", "SELECT INBOX")
        stop = threading.Event()
        errors: list[BaseException] = []
        outcome = {"served": 0, "expungeissued": 0, "cuts": 0, "fetches": 0, "expunges": 0}

        def expunger() -> None:
            n = 6
            try:
                while not stop.is_set():
                    live.append(append(writer, "INBOX", body_of(n)))
                    n += 1
                    victim = live.pop(0)
                    assert writer.cmd("s", f"UID STORE {victim} +FLAGS.SILENT (\\Deleted)"
                                      )[-1].startswith(b"s OK")
                    assert writer.cmd("e", f"UID EXPUNGE {victim}")[-1].startswith(b"e OK")
                    outcome["expunges"] += 1
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        thread = threading.Thread(target=expunger, daemon=True)
        thread.start()
        reader = Client(server.port, recv_buffer=128 * 1024)
        login(reader, "INBOX")
        # RACE_SECONDS of racing, and on (within a minute) until the race has had at least
        # three FETCHes and three expunges: a busy machine makes fewer in the same seconds.
        deadline = time.monotonic() + RACE_SECONDS
        cap = deadline + 60

        def racing() -> bool:
            enough = outcome["fetches"] >= 3 and outcome["expunges"] >= 3
            now = time.monotonic()
            return not errors and (now < deadline or not enough and now < cap)
        try:
            while racing():
                try:
                    got, tagged = fetch_bodies(reader, "f", "1:*")
                except ConnectionError:
                    assert grace == "0", "connection cut although content was in its grace"
                    outcome["cuts"] += 1
                    reader.close()
                    reader = Client(server.port, recv_buffer=128 * 1024)
                    login(reader, "INBOX")
                    continue
                outcome["fetches"] += 1
                for _seq, _uid, literal in got:
                    check_body(literal)
                outcome["served"] += len(got)
                if tagged.startswith(b"f NO [EXPUNGEISSUED] ") and grace == "0":
                    outcome["expungeissued"] += 1
                else:
                    assert tagged.startswith(b"f OK"), tagged
                if outcome["fetches"] % 2 == 0:
                    assert reader.cmd("n", "NOOP")[-1].startswith(b"n OK")
        finally:
            stop.set()
            thread.join(timeout=30)
            reader.close()
            writer.close()
        if errors:
            raise errors[0]
        assert outcome["fetches"] >= 3 and outcome["expunges"] >= 3, outcome
        server_log_is_clean(server)
