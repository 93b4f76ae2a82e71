"""Limits and robustness of the IMAP server, against a real ``imapserver`` process.

Line length, literal size (RFC 7889 APPENDLIMIT, RFC 7888 LITERAL+), message size, connections
per user and in total, the autologout timer (RFC 3501 5.4, RFC 2177), clients that vanish
mid-IDLE or mid-literal, partial FETCH of large bodies (RFC 3501 6.4.5), ``UID FETCH
<uidnext>:*`` and UID sets (RFC 3501 6.4.8, 9 sequence-set).  The limits come from a config file
written per test module with small values.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import threading
import time

import pytest

from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message

MAX_LINE = 2048
MAX_LITERAL = 300_000
MAX_MESSAGE = 250_000
PER_USER = 3


def write_config(path, **sections: dict) -> str:
    text = ""
    for section, keys in sections.items():
        text += f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items())
    path.write_text(text)
    return str(path)


def start_server(base, users=(("alice", "wonderland"), ("bob", "builder")), **imap):
    store = {"max_message_size": imap.pop("max_message_size", MAX_MESSAGE),
             "synchronous": "NORMAL"}
    conf = write_config(base / "imapserver.conf", store=store,
                        imap={"auth_failure_delay": 0.2, **imap})
    data_dir = str(base / "store")
    make_users(data_dir, *users)
    return ServerProcess(data_dir, config=conf)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("limits")
    with start_server(base, max_line_length=MAX_LINE, max_literal_size=MAX_LITERAL,
                      max_connections_per_user=PER_USER) as proc:
        yield proc


def login(c: Client, user: str = "alice", password: str = "wonderland") -> list[bytes]:
    lines = c.cmd("L", f"LOGIN {user} {password}")
    assert lines[-1].startswith(b"L OK"), lines
    return lines


@pytest.fixture
def client(server):
    c = Client(server.port)
    login(c)
    yield c
    c.close()


def fresh_mailbox(c: Client, name: str) -> None:
    c.cmd("fd", f"DELETE {name}")
    assert c.cmd("fc", f"CREATE {name}")[-1].startswith(b"fc OK [MAILBOXID (")  # RFC 8474


def append(c: Client, mailbox: str, data: bytes) -> int:
    c.send(b"ap APPEND %s {%d+}\r\n%s\r\n" % (mailbox.encode(), len(data), data))
    last = c.until_tagged("ap")[-1]
    m = re.match(rb"ap OK \[APPENDUID \d+ (\d+)\]", last)
    assert m, last
    return int(m.group(1))


def status(c: Client, mailbox: str, item: str = "MESSAGES") -> int:
    line = c.cmd("st", f"STATUS {mailbox} ({item})")[0]
    m = re.match(rb"\* STATUS \S+ \(%s (\d+)\)" % item.encode(), line)
    assert m, line
    return int(m.group(1))


def vm_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def vanish(c: Client) -> None:
    """Drop the connection abruptly (RST, no LOGOUT), as a client killed mid-command does."""
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()


def closed(c: Client, timeout: float = 5.0) -> bytes:
    """Everything the server sends until it closes the connection (fails if it does not)."""
    c.sock.settimeout(timeout)
    data = c.buffer
    while True:
        chunk = c.sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def still_open(c: Client, seconds: float) -> bool:
    """True if the server neither sent anything nor closed within ``seconds``."""
    c.sock.settimeout(seconds)
    try:
        c.sock.recv(1)
    except TimeoutError:
        return True
    return False


def open_files(pid: int) -> tuple[int, int]:
    """(sockets, deleted files) the process holds open: spooled literals are deleted files."""
    sockets = deleted = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:
            continue
        sockets += target.startswith("socket:")
        deleted += target.endswith("(deleted)")
    return sockets, deleted


# -- line length ---------------------------------------------------------------------------------

def test_too_long_line_gets_tagged_bad_and_the_session_goes_on(server, client):
    """RFC 3501 7.1.3: a line over ``max_line_length`` is answered BAD (tagged: the client is
    waiting for its tag) and skipped, whether it arrives in one packet or dribbles in without
    a line end for a while; the session goes on."""
    client.send(b"a1 NOOP " + b"x" * (MAX_LINE + 10) + b"\r\n")
    assert client.read_line() == b"a1 BAD line too long"
    client.send(b"a2 NOOP ")
    for _ in range(20):
        client.send(b"y" * 1000)
    client.send(b"\r\n")
    assert client.read_line() == b"a2 BAD line too long"
    assert client.cmd("a3", "noop") == [b"a3 OK NOOP completed"]


def test_huge_line_does_not_grow_memory(server, client):
    """Bounded memory: 32 MB on one line without a line end is read and dropped as it comes."""
    pid = server.proc.pid
    before = vm_kib(pid, "VmHWM")
    client.send(b"a1 NOOP ")
    chunk = b"z" * 65536
    for _ in range(512):
        client.send(chunk)
    client.send(b"\r\n")
    assert client.read_line() == b"a1 BAD line too long"
    assert vm_kib(pid, "VmHWM") - before < 8 * 1024
    assert client.cmd("a2", "NOOP") == [b"a2 OK NOOP completed"]


# -- literals and message size -------------------------------------------------------------------

def test_appendlimit_announces_the_smaller_limit(server, client):
    """RFC 7889 3: APPENDLIMIT is the largest message APPEND accepts -- here the store's message
    size limit, which is below the literal limit."""
    caps = client.cmd("c", "CAPABILITY")[0].split()
    assert f"APPENDLIMIT={MAX_MESSAGE}".encode() in caps


def test_too_large_literal_is_refused_before_it_is_read(server, client):
    """RFC 7889 4 / RFC 3501 7.5: a synchronizing literal over the limit gets NO [TOOBIG] and no
    continuation request, so the client never sends it; a LITERAL+ one (RFC 7888) is swallowed,
    not run as commands, and also answered NO [TOOBIG]."""
    fresh_mailbox(client, "Big")
    client.send(b"a1 APPEND Big {%d}\r\n" % (MAX_LITERAL + 1))
    assert client.read_line() == b"a1 NO [TOOBIG] Literal larger than %d octets" % MAX_LITERAL
    assert client.cmd("a2", "NOOP") == [b"a2 OK NOOP completed"]
    # The LITERAL+ octets look like commands; none of them may run.
    payload = (b"z1 DELETE Big\r\n" * (MAX_LITERAL // 15 + 1))[:MAX_LITERAL + 1]
    client.send(b"a3 APPEND Big {%d+}\r\n%s\r\n" % (len(payload), payload))
    assert client.until_tagged("a3") == [
        b"a3 NO [TOOBIG] Literal larger than %d octets" % MAX_LITERAL]
    assert client.cmd("a4", "NOOP") == [b"a4 OK NOOP completed"]
    assert status(client, "Big") == 0


def test_literal_plus_has_no_4096_octet_limit(server, client):
    """RFC 7888 5: only LITERAL- limits non-synchronizing literals to 4096 octets; we advertise
    LITERAL+ (never both, 5), so a {n+} literal of any size up to the literal limit is taken
    -- in APPEND, and in any other command -- without a continuation request."""
    caps = client.cmd("c", "CAPABILITY")[0].split()
    assert b"LITERAL+" in caps and b"LITERAL-" not in caps
    fresh_mailbox(client, "Plus")
    raw = message(1, size=50_000)
    assert len(raw) > 4096
    client.send(b"a1 APPEND Plus {%d+}\r\n%s\r\n" % (len(raw), raw))
    assert client.until_tagged("a1")[-1].startswith(b"a1 OK [APPENDUID")
    # Not "x" * 5000: the message is lines of x, and the text index's trigram phrase of a
    # 5000-x needle over 16,000 "xxx" positions took 6 s of the 10 s the client waits.
    client.send(b"a2 SELECT Plus\r\na3 SEARCH BODY {5000+}\r\n%s\r\n" % (b"y" * 5000))
    lines = client.until_tagged("a3")
    assert lines[-1].startswith(b"a3 OK") and b"* SEARCH" in lines
    assert not any(line.startswith(b"+") for line in lines)


def test_message_size_limit(server, client):
    """RFC 7889: a message within the literal limit but over the message size limit is read and
    refused with NO [TOOBIG], nothing stored; one at the limit is stored whole."""
    fresh_mailbox(client, "Sized")
    too_big = message(1, size=MAX_MESSAGE + 5000)
    assert MAX_MESSAGE < len(too_big) <= MAX_LITERAL
    client.send(b"a1 APPEND Sized {%d}\r\n" % len(too_big))
    assert client.read_line() == b"+ Ready for literal data"
    client.send(too_big + b"\r\n")
    last = client.until_tagged("a1")[-1]
    assert last.startswith(b"a1 NO [TOOBIG]"), last
    assert status(client, "Sized") == 0
    fits = message(2, size=MAX_MESSAGE)
    fits += b"x" * (MAX_MESSAGE - len(fits))
    assert len(fits) == MAX_MESSAGE
    uid = append(client, "Sized", fits)
    client.cmd("s", "EXAMINE Sized")
    lines = client.cmd("f", f"UID FETCH {uid} (RFC822.SIZE)")
    assert lines[0] == b"* 1 FETCH (UID %d RFC822.SIZE %d)" % (uid, MAX_MESSAGE)


def test_many_literals_in_one_command_do_not_grow_memory(server, client):
    """Bounded memory: a command of many literals, each under the limit (MULTIAPPEND, RFC 3502,
    lets a command carry any number), holds at most about a megabyte of them in memory; the
    rest is spooled to disk.  Then the messages are all stored."""
    fresh_mailbox(client, "Many")
    pid = server.proc.pid
    before = vm_kib(pid, "VmHWM")
    one = message(1, size=200_000)
    count = 100  # 20 MB in one command
    client.send(b"a1 APPEND Many")
    for _ in range(count):
        client.send(b" {%d+}\r\n" % len(one) + one)
    client.send(b"\r\n")
    # Storing and indexing the 20 MB took 8-12 s with the 2 cores busy, past the client's
    # usual 10 s; how long it takes is no part of this test.
    client.sock.settimeout(300)
    last = client.until_tagged("a1")[-1]
    assert re.fullmatch(rb"a1 OK \[APPENDUID \d+ 1:%d\] APPEND completed" % count, last)
    assert vm_kib(pid, "VmHWM") - before < 10 * 1024
    assert status(client, "Many") == count


def test_pipelining_behind_a_slow_command_is_bounded(tmp_path):
    """Bounded memory (RFC 3501 5.5 lets clients pipeline): 400,000 commands sent behind a
    failed LOGIN, which waits ``auth_failure_delay``, are not all parsed and queued at once --
    the server stops reading while the queue is full -- and the connection's end leaves the
    server serving."""
    with start_server(tmp_path, auth_failure_delay=3) as proc:
        pid = proc.proc.pid
        warm = Client(proc.port)
        login(warm)  # the password hash (scrypt) alone takes 16 MB: count it before
        warm.close()
        before = vm_kib(pid, "VmHWM")
        c = Client(proc.port)
        flood = b"x LOGIN alice wrong\r\n" + b"n NOOP\r\n" * 400_000

        def send():
            try:
                c.sock.sendall(flood)
            except OSError:
                pass  # closed below while the server was not reading
        sender = threading.Thread(target=send)
        sender.start()
        c.sock.settimeout(20)
        assert c.read_line() == b"x NO [AUTHENTICATIONFAILED] Authentication failed"
        assert vm_kib(pid, "VmHWM") - before < 10 * 1024
        vanish(c)
        sender.join(20)
        fresh = Client(proc.port)
        try:
            login(fresh)
            assert fresh.cmd("a", "NOOP") == [b"a OK NOOP completed"]
        finally:
            fresh.close()


# -- connections ---------------------------------------------------------------------------------

def test_connections_per_user(server):
    """A user holds at most ``max_connections_per_user`` sessions: the next LOGIN gets
    NO [LIMIT] (RFC 5530) while other users log in as usual; a session that ends -- by LOGOUT or
    by vanishing in the middle of IDLE -- frees its place."""
    sessions = [Client(server.port) for _ in range(PER_USER)]
    extra = Client(server.port)
    try:
        for c in sessions:
            login(c)
        assert extra.cmd("x", "LOGIN alice wonderland") == [
            b"x NO [LIMIT] Too many connections for this user"]
        bob = Client(server.port)
        login(bob, "bob", "builder")
        bob.close()
        sessions[0].cmd("lo", "LOGOUT")
        wait_for(lambda: extra.cmd("y", "LOGIN alice wonderland")[-1].startswith(b"y OK"),
                 what="a place freed by LOGOUT")
        c = sessions[1]
        c.cmd("s", "SELECT INBOX")
        c.send(b"i IDLE\r\n")
        assert c.read_line() == b"+ idling"
        vanish(c)
        newcomer = Client(server.port)
        try:
            wait_for(lambda: newcomer.cmd("z", "LOGIN alice wonderland")[-1]
                     .startswith(b"z OK"), what="a place freed by a vanished IDLE client")
        finally:
            newcomer.close()
    finally:
        for c in sessions + [extra]:
            c.close()


def test_total_connections(tmp_path):
    """Over ``max_connections`` a new connection is greeted with BYE alone (RFC 3501 7.1.5)
    and closed; once a connection ends there is room again."""
    with start_server(tmp_path, max_connections=3) as proc:
        held = [Client(proc.port) for _ in range(3)]
        try:
            for c in held:
                assert c.greeting.startswith(b"* OK [CAPABILITY IMAP4rev1")
            refused = Client(proc.port)
            assert refused.greeting == b"* BYE Too many connections, try again later"
            assert closed(refused) == b""  # no greeting after the BYE, then the close
            refused.close()
            held.pop().close()

            def greeted():
                c = Client(proc.port)
                if c.greeting.startswith(b"* OK"):
                    held.append(c)
                    return True
                c.close()
                return False
            wait_for(greeted, what="room for a new connection")
            login(held[-1])
        finally:
            for c in held:
                c.close()


# -- autologout ----------------------------------------------------------------------------------

def test_idle_timeout_logs_out_silent_sessions_but_not_idle_ones(tmp_path):
    """RFC 3501 5.4: the autologout timer ends a silent session with an untagged BYE and closes
    it (the config allows a tiny ``idle_timeout`` here; production keeps >= 30 minutes).  A
    session in IDLE (RFC 2177) gets the longer IDLE timeout, and any command resets the timer."""
    with start_server(tmp_path, idle_timeout=1) as proc:
        silent, idler, busy = (Client(proc.port) for _ in range(3))
        try:
            login(silent)
            login(idler)
            login(busy)
            idler.cmd("s", "SELECT INBOX")
            idler.send(b"i IDLE\r\n")
            assert idler.read_line() == b"+ idling"
            start = time.monotonic()
            for k in range(8):  # 2 seconds of NOOPs, each within the timeout
                assert busy.cmd(f"n{k}", "NOOP") == [f"n{k} OK NOOP completed".encode()]
                time.sleep(0.25)
            data = closed(silent)
            assert data == b"* BYE Autologout; idle for too long\r\n"
            assert time.monotonic() - start < 4
            assert still_open(idler, 0.5)
            idler.send(b"DONE\r\n")
            assert idler.read_line() == b"i OK IDLE completed"
            assert busy.cmd("n", "NOOP") == [b"n OK NOOP completed"]
        finally:
            for c in (silent, idler, busy):
                c.close()


# -- clients that vanish -------------------------------------------------------------------------

def test_client_vanishing_during_idle_leaves_the_server_healthy(server):
    """Clients close connections without LOGOUT, even during IDLE (RFC 2177): the server drops
    the session, keeps serving, and the mailbox's other watchers still get their pushes."""
    watcher = Client(server.port)
    writer = Client(server.port)
    try:
        login(watcher)
        login(writer)
        fresh_mailbox(writer, "Vanish")
        for k in range(2):
            c = Client(server.port)
            login(c)
            c.cmd("s", "SELECT Vanish")
            c.send(b"i IDLE\r\n")
            assert c.read_line() == b"+ idling"
            if k:
                vanish(c)
            else:
                c.close()
        watcher.cmd("s", "SELECT Vanish")
        watcher.send(b"w IDLE\r\n")
        assert watcher.read_line() == b"+ idling"
        append(writer, "Vanish", message(1))
        assert watcher.read_line() == b"* 1 EXISTS"
        watcher.send(b"DONE\r\n")
        # ``* 1 RECENT`` too, unless a vanished session's IDLE was told first (RFC 3501 2.3.2).
        rest = watcher.until_tagged("w")
        assert rest[-1] == b"w OK IDLE completed"
        assert rest[:-1] in ([], [b"* 1 RECENT"]), rest
        assert server.proc.poll() is None
    finally:
        watcher.close()
        writer.close()


def test_client_vanishing_mid_literal_leaves_the_server_healthy(server):
    """A client that dies inside a literal -- synchronizing, LITERAL+, or one large enough to
    be spooled to disk; closing its socket or resetting it -- leaves no message, no open
    temporary file, and a server that goes on serving."""
    c = Client(server.port)
    login(c)
    fresh_mailbox(c, "Half")
    c.close()
    pid = server.proc.pid
    sockets_before, _ = open_files(pid)
    big = message(1, size=MAX_MESSAGE - 1000)
    for announce, sync in ((b"{%d}", True), (b"{%d+}", False)):
        for size in (200, len(big)):
            c = Client(server.port)
            login(c)
            c.send(b"a APPEND Half " + announce % size + b"\r\n")
            if sync:
                assert c.read_line() == b"+ Ready for literal data"
            c.send(big[:size // 2])
            if sync:
                c.close()  # FIN: the server reads the half literal, then the end
            else:
                vanish(c)
    # MULTIAPPEND past the 1 MiB a command may hold in memory: the later literals are spooled
    # to temporary files, and the client goes in the middle of one of them.
    c = Client(server.port)
    login(c)
    c.send(b"a APPEND Half" + b"".join(b" {%d+}\r\n%s" % (len(big), big) for _ in range(5)))
    c.send(b" {%d+}\r\n%s" % (len(big), big[:1000]))
    wait_for(lambda: open_files(pid)[1] >= 2, what="the spooled literals")
    c.close()
    c = Client(server.port)
    try:
        login(c)
        assert status(c, "Half") == 0
        append(c, "Half", message(2))
        assert status(c, "Half") == 1
        c.cmd("lo", "LOGOUT")
    finally:
        c.close()
    def released():
        sockets, spooled = open_files(pid)
        return sockets <= sockets_before and spooled == 0
    wait_for(released, what="the server to close the vanished clients' sockets and spool files")


# -- large bodies, UIDs --------------------------------------------------------------------------

def test_partial_fetch_of_a_large_message_reassembles_exactly(server, client):
    """RFC 3501 6.4.5: ``BODY.PEEK[]<0.65536>``, ``<65536.65536>``, ... return the octets at those
    offsets (``BODY[]<origin>`` in the response), the last one short, one past the end empty;
    the pieces reassemble the message exactly, and PEEK leaves \\Seen unset."""
    fresh_mailbox(client, "Large")
    original = message(7, size=200 * 1024)
    uid = append(client, "Large", original)
    client.cmd("s", "select Large")
    pieces = []
    offset = 0
    while True:
        lines = client.cmd("f", f"Uid Fetch {uid} (BODY.PEEK[]<{offset}.65536>)")
        assert lines[-1] == b"f OK UID completed"
        head = b"* 1 FETCH (UID %d BODY[]<%d> {" % (uid, offset)
        assert lines[0].startswith(head), lines[0][:80]
        size = int(lines[0][len(head):].split(b"}", 1)[0])
        body = lines[0].split(b"}\r\n", 1)[1]
        assert body.endswith(b")")
        pieces.append(body[:-1])
        assert len(pieces[-1]) == size
        if size < 65536:
            break
        offset += 65536
    assert len(pieces) == 4
    assert b"".join(pieces) == original
    lines = client.cmd("g", f"UID FETCH {uid} (BODY.PEEK[]<{len(original) + 10}.65536>)")
    assert lines[0] == b"* 1 FETCH (UID %d BODY[]<%d> {0}\r\n)" % (uid, len(original) + 10)
    # \Recent: this session's SELECT was the first (RFC 3501 2.3.2).
    assert client.cmd("h", "FETCH 1 (FLAGS)")[0] == b"* 1 FETCH (FLAGS (\\Recent))"
    # Without PEEK the first piece sets \Seen (RFC 3501 6.4.5 BODY[]).
    lines = client.cmd("i", "FETCH 1 (BODY[]<0.10>)")
    assert lines[0] == (b"* 1 FETCH (BODY[]<0> {10}\r\n" + original[:10]
                        + b" FLAGS (\\Seen \\Recent))")


def test_uid_fetch_from_uidnext_returns_the_last_message(server, client):
    """RFC 3501 6.4.8: "a UID range of 559:* always includes the UID of the last message in the
    mailbox, even if 559 is higher than any assigned UID value" -- so ``UID FETCH <uidnext>:*``
    returns the last message; on an empty mailbox it returns nothing and completes OK."""
    fresh_mailbox(client, "Next")
    lines = client.cmd("s", "SELECT Next")
    assert b"* OK [UIDNEXT 1] Predicted next UID" in lines
    assert client.cmd("e", "UID FETCH 1:* (UID FLAGS)") == [b"e OK UID completed"]
    for k in range(3):
        append(client, "Next", message(k))
    client.cmd("n", "NOOP")
    uidnext = status(client, "Next", "UIDNEXT")
    assert uidnext == 4
    assert client.cmd("f", f"UID FETCH {uidnext}:* (UID FLAGS)") == [
        b"* 3 FETCH (UID 3 FLAGS (\\Recent))", b"f OK UID completed"]  # seen first at NOOP
    assert client.cmd("g", f"UID FETCH {uidnext + 100}:* (UID)") == [
        b"* 3 FETCH (UID 3)", b"g OK UID completed"]
    assert client.cmd("h", f"UID FETCH *:{uidnext} (UID)") == [
        b"* 3 FETCH (UID 3)", b"h OK UID completed"]
    # Only UIDs that exist: a range beyond them without * names nothing.
    assert client.cmd("i", f"UID FETCH {uidnext}:{uidnext + 5} (UID)") == [
        b"i OK UID completed"]


def test_uid_sets_with_gaps(server, client):
    """RFC 3501 9 (sequence-set) and 6.4.8: ``561,562,564:569,571`` names exactly the UIDs in
    it that exist, in ascending order, in UID FETCH, UID STORE, UID SEARCH and UID COPY; a
    reversed range ``569:564`` means the same as ``564:569``; commands in mixed case."""
    fresh_mailbox(client, "Gaps")
    count = 575
    data = [message(k) for k in range(count)]
    command = b"a APPEND Gaps" + b"".join(b" {%d+}\r\n%s" % (len(d), d) for d in data) + b"\r\n"
    client.send(command)
    assert client.until_tagged("a")[-1].startswith(b"a OK [APPENDUID")
    client.cmd("s", "sElEcT Gaps")
    # Leave holes: expunge 563, 570 and everything below 550.
    holes = "1:549,563,570"
    client.cmd("d", f"uid store {holes} +flags.silent (\\Deleted)")
    client.cmd("x", f"UID EXPUNGE {holes}")
    wanted = [561, 562, 564, 565, 566, 567, 568, 569, 571]
    uid_set = "561,562,564:569,571"
    lines = client.cmd("f", f"uid FETCH {uid_set} (UID)")
    assert [int(re.search(rb"UID (\d+)", ln).group(1)) for ln in lines[:-1]] == wanted
    assert lines[-1] == b"f OK UID completed"
    # Sequence numbers follow from the holes: UID 550 is message 1.
    assert lines[0] == b"* %d FETCH (UID 561)" % (561 - 550 + 1)
    lines = client.cmd("g", "UID FETCH 569:564,561:562,571 (UID)")
    assert [int(re.search(rb"UID (\d+)", ln).group(1)) for ln in lines[:-1]] == \
        [561, 562, 564, 565, 566, 567, 568, 569, 571]
    assert client.cmd("h", f"Uid Search Uid {uid_set}")[0] == \
        b"* SEARCH " + b" ".join(b"%d" % u for u in wanted)
    lines = client.cmd("i", f"UID STORE {uid_set},563,570 +FLAGS (\\Flagged)")
    assert len(lines) == len(wanted) + 1
    assert client.cmd("j", "UID SEARCH FLAGGED")[0] == \
        b"* SEARCH " + b" ".join(b"%d" % u for u in wanted)
    fresh_mailbox(client, "GapsCopy")
    last = client.cmd("k", f"UID COPY {uid_set} GapsCopy")[-1]
    assert re.fullmatch(rb"k OK \[COPYUID \d+ 561:562,564:569,571 1:9\] COPY completed", last)
    # The bodies are the ones appended under those UIDs.
    lines = client.cmd("l", "UID FETCH 571 (BODY.PEEK[HEADER.FIELDS (MESSAGE-ID)])")
    assert b"Message-ID: <m570@test>" in lines[0]


def test_a_client_that_does_not_read_cannot_grow_server_memory(tmp_path):
    """Responses are produced only as fast as the client reads them: 12 pipelined
    FETCH 1:* BODY.PEEK[] of 30 x 200 KB (72 MB of responses) left unread for a while."""
    with start_server(tmp_path) as proc:
        writer = Client(proc.port)
        login(writer)
        fresh_mailbox(writer, "Big")
        for i in range(30):
            append(writer, "Big", message(i, size=200_000))
        writer.close()
        pid = proc.proc.pid
        reader = Client(proc.port)
        login(reader)
        reader.cmd("s", "SELECT Big")
        before = vm_kib(pid, "VmRSS")
        reader.send(b"".join(b"f%d FETCH 1:* BODY.PEEK[]\r\n" % i for i in range(12)))
        peak = before
        for _ in range(40):  # two seconds of the client not reading
            time.sleep(0.05)
            peak = max(peak, vm_kib(pid, "VmRSS"))
        assert peak - before < 30 * 1024, f"RSS grew by {(peak - before) // 1024} MiB"
        # Reading resumes the stream: every response arrives, the last one last.
        reader.sock.settimeout(60)
        received = bytearray(reader.buffer)
        while not received.endswith(b"f11 OK FETCH completed\r\n"):
            chunk = reader.sock.recv(1 << 20)
            assert chunk, "connection closed early"
            received += chunk
        assert received.count(b" FETCH (BODY[] {") == 12 * 30
        reader.close()


def test_a_burst_of_logins_does_not_leave_memory_behind(tmp_path):
    """40 concurrent logins (16 MiB of scrypt each, in 20 pool threads) must not keep the
    memory: glibc's mmap threshold is pinned at start-up (imapserver/memory.py)."""
    users = [(f"u{i}", "pw") for i in range(40)]
    with start_server(tmp_path, users=users, max_connections_per_user=5) as proc:
        pid = proc.proc.pid
        before = vm_kib(pid, "VmRSS")
        clients: list[Client] = []
        lock = threading.Lock()

        def log_in(name: str) -> None:
            # 40 scrypt hashes on a loaded 2-core machine can take over the default 10 s;
            # this test is about memory, not latency.
            c = Client(proc.port, timeout=60.0)
            c.cmd("a", f"LOGIN {name} pw")
            with lock:
                clients.append(c)
        threads = [threading.Thread(target=log_in, args=(name,)) for name, _ in users]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        try:
            assert len(clients) == 40
            grown = vm_kib(pid, "VmRSS") - before
            assert grown < 64 * 1024, f"RSS grew by {grown // 1024} MiB after 40 logins"
        finally:
            for c in clients:
                c.close()
