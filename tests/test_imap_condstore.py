"""CONDSTORE and QRESYNC (RFC 7162) over the wire: transcripts of one server, and the resync
of a client across two ``imapserver`` processes sharing one store, on both backends (the
embedded store, and HBase through the Thrift gateway).  Dovecot's answers to the same
commands are compared in tests/test_differential_condstore.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore
from mailstore.testing.thrift_gateway import ThriftGateway
from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message


def mailadmin(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    script = shutil.which("mailadmin", path=os.path.dirname(sys.executable))
    return subprocess.run([script, *args], input=stdin, capture_output=True, text=True,
                          timeout=120)


@contextlib.contextmanager
def two_servers(tmp_path, backend: str):
    """Two imapserver processes over one store, with user ``cora``."""
    if backend == "embedded":
        data_dir = str(tmp_path / "store")
        make_users(data_dir, ("cora", "pw"))
        with ServerProcess(data_dir) as one, ServerProcess(data_dir) as two:
            yield one, two
        return
    with ThriftGateway(str(tmp_path / "hbase")) as gateway:
        hbase = ["--backend", "hbase", "--hbase-host", "127.0.0.1",
                 "--hbase-port", str(gateway.port)]
        assert mailadmin("init-schema", *hbase).returncode == 0
        added = mailadmin("user", "add", "cora", "--password-stdin", *hbase, stdin="pw\n")
        assert added.returncode == 0, added.stderr
        with ServerProcess(str(tmp_path / "unused1"), *hbase) as one, \
                ServerProcess(str(tmp_path / "unused2"), *hbase) as two:
            yield one, two


_OPEN: list[Client] = []


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    while _OPEN:
        _OPEN.pop().close()


def login(server) -> Client:
    client = Client(server.port)
    _OPEN.append(client)
    assert client.cmd("l", "LOGIN cora pw")[-1].startswith(b"l OK")
    return client


def append(client: Client, n: int, flags: str = "") -> int:
    data = message(n)
    client.send(b"a APPEND INBOX (%s) {%d+}\r\n" % (flags.encode(), len(data)) + data + b"\r\n")
    last = client.until_tagged("a")[-1]
    return int(re.search(rb"APPENDUID \d+ (\d+)", last).group(1))


def code(lines: list[bytes], name: bytes) -> int:
    for line in lines:
        m = re.search(rb"\[" + name + rb" (\d+)\]", line)
        if m:
            return int(m.group(1))
    raise AssertionError(f"no {name!r} in {lines!r}")


def fetched(lines: list[bytes]) -> dict[int, tuple[frozenset[bytes], int]]:
    """UID -> (flags, MODSEQ) of the FETCH responses among ``lines``."""
    out = {}
    for line in lines:
        if b" FETCH " in line:
            uid = int(re.search(rb"UID (\d+)", line).group(1))
            flags = frozenset(re.search(rb"FLAGS \(([^)]*)\)", line).group(1).split())
            out[uid] = (flags - {b"\\Recent"}, int(re.search(rb"MODSEQ \((\d+)\)", line).group(1)))
    return out


def vanished_earlier(lines: list[bytes]) -> set[int]:
    out: set[int] = set()
    for line in lines:
        if line.startswith(b"* VANISHED (EARLIER) "):
            for part in line.split()[-1].split(b","):
                low, _, high = part.partition(b":")
                out.update(range(int(low), int(high or low) + 1))
    return out


@pytest.mark.parametrize("backend", ["embedded", "hbase"])
def test_qresync_resync_across_two_processes(tmp_path, backend):
    """Issue 12's done-when: a client that last saw the mailbox through one process resyncs
    (RFC 7162 3.2.5.2: SELECT ... (QRESYNC (uidvalidity modseq known-uids))) and learns
    exactly the flag changes and expunges another process made -- through either process,
    and again after the first process restarted (the MODSEQs and what QRESYNC needs are in
    the store, RFC 7162 3.1.2.1 'persistent')."""
    with two_servers(tmp_path, backend) as (one, two):
        writer = login(two)
        uids = [append(writer, i, "\\Seen" if i % 3 == 0 else "") for i in range(12)]
        client = login(one)
        assert client.cmd("e", "ENABLE QRESYNC")[0] == b"* ENABLED QRESYNC"
        selected = client.cmd("s", "SELECT INBOX")
        uidvalidity, highest = code(selected, b"UIDVALIDITY"), code(selected, b"HIGHESTMODSEQ")
        before = fetched(client.cmd("f", "UID FETCH 1:* (FLAGS MODSEQ)"))
        assert set(before) == set(uids)
        assert max(m for _, m in before.values()) <= highest  # RFC 7162 3.1.2.1
        client.close()

        # The other process changes flags (system flags and a keyword) and expunges.
        writer.cmd("s", "SELECT INBOX")
        writer.cmd("t1", f"UID STORE {uids[1]},{uids[4]} +FLAGS (\\Flagged)")
        writer.cmd("t2", f"UID STORE {uids[2]} FLAGS ($Work \\Answered)")
        writer.cmd("t3", f"UID STORE {uids[3]} -FLAGS (\\Seen)")   # 3 % 3 == 0: was \Seen
        writer.cmd("t4", f"UID STORE {uids[5]},{uids[7]},{uids[9]} +FLAGS (\\Deleted)")
        writer.cmd("x", "EXPUNGE")
        writer.cmd("t5", f"UID STORE {uids[8]} +FLAGS (\\Seen)")   # 8 % 3 != 0: a change
        writer.cmd("t6", f"UID STORE {uids[0]},{uids[6]} +FLAGS (\\Seen)")  # no change
        after = fetched(writer.cmd("f", "UID FETCH 1:* (FLAGS MODSEQ)"))
        gone = {uids[5], uids[7], uids[9]}
        changed = {u: after[u][0] for u in (uids[1], uids[2], uids[3], uids[4], uids[8])}
        known = f"{uids[0]}:{uids[-1]}"

        def resync(server) -> tuple[list[bytes], int]:
            c = login(server)
            c.cmd("e", "ENABLE QRESYNC")
            lines = c.cmd("s", f"SELECT INBOX (QRESYNC ({uidvalidity} {highest} {known}))")
            assert lines[-1].startswith(b"s OK")
            new_highest = code(lines, b"HIGHESTMODSEQ")
            # From the new HIGHESTMODSEQ nothing is left to tell.
            again = c.cmd("s2", f"SELECT INBOX (QRESYNC ({uidvalidity} {new_highest} "
                                f"{known}))")
            assert not vanished_earlier(again) and not fetched(again)
            c.close()
            return lines, new_highest

        for server in (one, two):
            lines, new_highest = resync(server)
            assert vanished_earlier(lines) == gone
            got = fetched(lines)
            assert {u: f for u, (f, _m) in got.items()} == changed
            assert all(highest < m <= new_highest for _f, m in got.values())

        # A restart of the first process: the in-memory points are gone, the stored ones
        # (and the log) are not.
        one.stop()
        one.ports.clear()
        one.start()
        lines, _ = resync(one)
        assert vanished_earlier(lines) == gone
        assert {u: f for u, (f, _m) in fetched(lines).items()} == changed
        writer.close()


@pytest.fixture
def server(tmp_path):
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("cora", "pw"))
    with ServerProcess(data_dir) as proc:
        proc.data_dir = data_dir
        yield proc


def test_condstore_is_enabled_by_its_first_command(server):
    """RFC 7162 3.1: a CONDSTORE-enabling command (here FETCH MODSEQ) with a mailbox selected
    reports its HIGHESTMODSEQ; from then on every FETCH about flags carries MODSEQ --
    another session's change on NOOP, STORE's answer, and a FETCH that sets \\Seen
    (3.1.4.1)."""
    a, b = login(server), login(server)
    for i in range(3):
        append(a, i)
    a.cmd("s", "SELECT INBOX")
    b.cmd("s", "SELECT INBOX")
    first = a.cmd("f", "FETCH 1 (MODSEQ)")
    assert first[0].startswith(b"* OK [HIGHESTMODSEQ ")
    assert re.fullmatch(rb"\* 1 FETCH \(MODSEQ \(\d+\)\)", first[1])
    assert not a.cmd("f2", "FETCH 2 (MODSEQ)")[0].startswith(b"* OK")  # only the first time
    b.cmd("t", "STORE 2 +FLAGS (\\Flagged)")
    noop = a.cmd("n", "NOOP")
    assert re.fullmatch(rb"\* 2 FETCH \(UID 2 FLAGS \(\\Flagged \\Recent\) MODSEQ \(\d+\)\)",
                        noop[0])
    stored = a.cmd("t", "STORE 1 +FLAGS (\\Answered)")
    assert re.fullmatch(rb"\* 1 FETCH \(FLAGS \(\\Answered \\Recent\) MODSEQ \(\d+\)\)",
                        stored[0])
    body = a.cmd("b", "FETCH 3 (BODY[])")
    assert re.search(rb"FLAGS \(\\Seen \\Recent\).* MODSEQ \(\d+\)\)$", body[0], re.S)
    # The session that enabled nothing sees no MODSEQ.
    a.cmd("t2", "STORE 1 +FLAGS (\\Draft)")
    assert b"MODSEQ" not in b"".join(b.cmd("n", "NOOP"))


def test_store_unchangedsince(server):
    """RFC 7162 3.1.3: messages changed after UNCHANGEDSINCE are not stored and are named in
    [MODIFIED] (sequence numbers for STORE, UIDs for UID STORE); the others are, and .SILENT
    still reports their new MODSEQ; UNCHANGEDSINCE 0 fails every message."""
    a = login(server)
    for i in range(4):
        append(a, i)
    a.cmd("s", "SELECT INBOX")
    a.cmd("d", "UID STORE 1 +FLAGS.SILENT (\\Deleted)")
    a.cmd("x", "UID EXPUNGE 1")  # sequence numbers and UIDs now differ by one
    selected = a.cmd("s", "SELECT INBOX")
    highest = code(selected, b"HIGHESTMODSEQ")
    a.cmd("t", "STORE 2 +FLAGS (\\Flagged)")  # UID 3
    out = a.cmd("u", f"STORE 1:3 (UNCHANGEDSINCE {highest}) +FLAGS.SILENT (\\Seen)")
    assert out[-1] == b"u OK [MODIFIED 2] Conditional STORE failed"
    # The first CONDSTORE-enabling command with a mailbox selected (RFC 7162 3.1): as of
    # the session's last look (its own STORE since is no change it was not told of).
    assert out[0] == b"* OK [HIGHESTMODSEQ %d] Highest" % highest
    assert [re.sub(rb"\d+\)\)$", b"n))", ln) for ln in out[1:-1]] == [
        b"* 1 FETCH (MODSEQ (n))", b"* 3 FETCH (MODSEQ (n))"]
    out = a.cmd("v", f"UID STORE 2:4 (UNCHANGEDSINCE {highest}) +FLAGS (\\Draft)")
    assert out[-1] == b"v OK [MODIFIED 2:4] Conditional STORE failed"
    assert out[:-1] == []
    out = a.cmd("w", "UID STORE 2 (UNCHANGEDSINCE 0) +FLAGS (\\Draft)")
    assert out[-1] == b"w OK [MODIFIED 2] Conditional STORE failed"
    for bad in ("STORE 1 (UNCHANGEDSINCE -1) +FLAGS (\\Draft)",
                "STORE 1 (UNCHANGEDSINCE 9223372036854775808) +FLAGS (\\Draft)",
                "STORE 1 (CHANGEDSINCE 1) +FLAGS (\\Draft)"):
        assert a.cmd("b", bad)[-1].startswith(b"b BAD")


def test_search_modseq(server):
    """RFC 7162 3.1.5: SEARCH MODSEQ finds messages changed at or after a MODSEQ, per-flag
    entry names included (one MODSEQ per message here), and ends with (MODSEQ highest)."""
    a = login(server)
    for i in range(4):
        append(a, i)
    highest = code(a.cmd("s", "SELECT INBOX"), b"HIGHESTMODSEQ")
    a.cmd("t", "STORE 2,4 +FLAGS (\\Seen)")
    after = fetched(a.cmd("f", "UID FETCH 1:* (FLAGS MODSEQ)"))
    top = max(m for _f, m in after.values())
    assert a.cmd("q", f"SEARCH MODSEQ {highest + 1}")[0] == b"* SEARCH 2 4 (MODSEQ %d)" % top
    assert a.cmd("q", f'UID SEARCH MODSEQ "/flags/\\\\Seen" priv {highest + 1} SEEN')[0] == \
        b"* SEARCH 2 4 (MODSEQ %d)" % top
    assert a.cmd("q", f"SEARCH MODSEQ {top + 1}")[0] == b"* SEARCH"
    assert a.cmd("q", 'SEARCH MODSEQ "/flags/\\\\Seen" nothing 1')[-1].startswith(b"q BAD")


def test_vanished_replaces_expunge_once_qresync_is_enabled(server):
    """RFC 7162 3.2.10: after ENABLE QRESYNC, expunges are told as VANISHED -- to EXPUNGE,
    UID EXPUNGE, MOVE, NOOP and IDLE -- and the tagged OK then carries HIGHESTMODSEQ."""
    a, b = login(server), login(server)
    for i in range(6):
        append(a, i)
    a.cmd("e", "ENABLE QRESYNC")
    a.cmd("s", "SELECT INBOX")
    b.cmd("s", "SELECT INBOX")
    a.cmd("t", "STORE 1:2 +FLAGS.SILENT (\\Deleted)")
    out = a.cmd("x", "EXPUNGE")
    assert out[0] == b"* VANISHED 1:2" and out[-1].startswith(b"x OK [HIGHESTMODSEQ ")
    out = a.cmd("m", "UID MOVE 3 Trash")
    assert b"* VANISHED 3" in out and out[-1].startswith(b"m OK [HIGHESTMODSEQ ")
    b.cmd("t", "UID STORE 4 +FLAGS (\\Deleted)")
    b.cmd("x", "UID EXPUNGE 4")
    out = a.cmd("n", "NOOP")
    assert out[0] == b"* VANISHED 4" and out[-1].startswith(b"n OK [HIGHESTMODSEQ ")
    a.send(b"i IDLE\r\n")
    assert a.read_line() == b"+ idling"
    b.cmd("t", "UID STORE 5 +FLAGS (\\Deleted)")
    b.cmd("x", "UID EXPUNGE 5")
    a.sock.settimeout(5)
    assert a.read_line() == b"* VANISHED 5"
    a.send(b"DONE\r\n")
    assert a.until_tagged("i")[-1].startswith(b"i OK")
    # b never enabled QRESYNC: EXPUNGE as before.
    a.cmd("t", "UID STORE 6 +FLAGS (\\Deleted)")
    a.cmd("x", "EXPUNGE")
    assert b"* 1 EXPUNGE" in b.cmd("n", "NOOP")


def test_qresync_past_the_change_log(server):
    """RFC 7162 3.2.5.2: when the server cannot tell exactly which UIDs were expunged since
    the client's MODSEQ (here the change log was trimmed past it), VANISHED (EARLIER) names
    every UID of known-uids that is not in the mailbox -- a superset the client ignores for
    UIDs it never had -- and the flag changes are still exact (read from the rows)."""
    a = login(server)
    uids = [append(a, i) for i in range(6)]
    a.cmd("s", "SELECT INBOX")
    a.cmd("d", f"UID STORE {uids[0]} +FLAGS.SILENT (\\Deleted)")
    a.cmd("x", f"UID EXPUNGE {uids[0]}")  # before the client's MODSEQ
    a.cmd("e", "ENABLE QRESYNC")
    selected = a.cmd("s", "SELECT INBOX")
    uidvalidity, highest = code(selected, b"UIDVALIDITY"), code(selected, b"HIGHESTMODSEQ")
    a.cmd("t", "UID STORE 2 +FLAGS (\\Flagged)")
    a.cmd("t", "UID STORE 4 +FLAGS (\\Deleted)")
    a.cmd("x", "EXPUNGE")
    store = MailStore(EmbeddedBackend(server.data_dir, synchronous="NORMAL"),
                      create_tables=False)
    box = store.mailbox("cora", "INBOX")
    store.changes.trim(box.id, store.changes.marks(box.id)[1] + 1)
    store.close()
    b = login(server)
    b.cmd("e", "ENABLE QRESYNC")
    lines = b.cmd("s", f"SELECT INBOX (QRESYNC ({uidvalidity} {highest} 1:20))")
    # Every UID of 1:20 not in the mailbox, up to the highest UID used: the one expunged
    # after the client's MODSEQ, and the one expunged before it.
    assert vanished_earlier(lines) == {uids[0], uids[3]}
    assert set(fetched(lines)) == {uids[1]}
    lines = b.cmd("f", f"UID FETCH 1:* (FLAGS) (CHANGEDSINCE {highest} VANISHED)")
    assert vanished_earlier(lines) == {uids[0], uids[3]}
    assert set(fetched(lines)) == {uids[1]}
    # While the log reaches back, the answer is exact (the same, before the trim).


def test_select_parameters_and_closed(server):
    """RFC 7162 3.2.11: [CLOSED] when SELECT/EXAMINE replaces a selected mailbox (not on the
    first SELECT); 3.2.5: QRESYNC before ENABLE QRESYNC, or malformed, is BAD; a QRESYNC
    whose UIDVALIDITY is not the mailbox's is a plain SELECT."""
    a = login(server)
    append(a, 1)
    first = a.cmd("s", "SELECT INBOX")
    assert not any(b"[CLOSED]" in ln for ln in first)
    assert a.cmd("s", "EXAMINE Sent")[0] == b"* OK [CLOSED] Previous mailbox closed"
    assert a.cmd("q", "SELECT INBOX (QRESYNC (1 1))")[-1].startswith(b"q BAD")
    a.cmd("e", "ENABLE QRESYNC")
    for bad in ("(QRESYNC (1 0))", "(QRESYNC (0 1))", "(QRESYNC (1 1 2:*))",
                "(QRESYNC (1 1 1:3 (1:2 1)))", "(QRESYNC 1 1)", "(BOGUS)", "()"):
        assert a.cmd("q", f"SELECT INBOX {bad}")[-1].startswith(b"q BAD"), bad
    plain = a.cmd("p", "SELECT INBOX (QRESYNC (1 1 1:5))")
    assert plain[-1].startswith(b"p OK") and not any(b"VANISHED" in ln for ln in plain)
    assert a.cmd("c", "SELECT INBOX (CONDSTORE)")[-1].startswith(b"c OK")


def test_missing_uids_past_the_log():
    """RFC 7162 3.2.5.2's superset, as ranges: the UIDs of known-uids (or of 1:top) up to the
    highest UID known that are not in the mailbox; never 0, even for an empty mailbox."""
    from array import array

    from imapserver.imap.qresync import missing, ranges_text
    from imapserver.imap.seqset import SeqSet, parse_seqset
    present = array("Q", [2, 5, 6])
    assert ranges_text(missing(parse_seqset("1:20"), present, 8)) == "1,3:4,7:8"
    assert ranges_text(missing(None, present, 8)) == "1,3:4,7:8"
    assert ranges_text(missing(parse_seqset("9:7,3,1:2"), present, 8)) == "1,3,7:8"
    assert missing(SeqSet(((1, 0),)), array("Q"), 0) == []


def test_list_status_highestmodseq(server):
    """RFC 7162 3.1.2.2 with RFC 5819: HIGHESTMODSEQ in LIST's STATUS return option too (a
    CONDSTORE-enabling command), the same value as STATUS."""
    a = login(server)
    append(a, 1)
    status = a.cmd("s", "STATUS INBOX (HIGHESTMODSEQ)")[0]
    listed = a.cmd("l", 'LIST "" INBOX RETURN (STATUS (HIGHESTMODSEQ))')
    assert listed[1] == status
    assert re.fullmatch(rb"\* STATUS INBOX \(HIGHESTMODSEQ [1-9]\d*\)", status)


def test_resyncs_during_concurrent_changes_miss_nothing(tmp_path):
    """RFC 7162 3.1.2.1 under load: while two connections to another process keep changing
    flags and expunging, a client resyncs again and again from the HIGHESTMODSEQ it was last
    given, applying VANISHED (EARLIER) and the FETCHes to its copy.  A HIGHESTMODSEQ that ran
    ahead of a change still in flight would lose that change for good; at the end, one more
    resync must leave the copy equal to the mailbox.  A few seconds."""
    import random
    import threading
    import time
    with two_servers(tmp_path, "embedded") as (one, two):
        setup = login(two)
        uids = [append(setup, i) for i in range(40)]
        setup.close()
        client = login(one)
        client.cmd("e", "ENABLE QRESYNC")
        lines = client.cmd("s", "SELECT INBOX")
        uidvalidity, highest = code(lines, b"UIDVALIDITY"), code(lines, b"HIGHESTMODSEQ")
        copy: dict[int, frozenset[bytes]] = {}
        for line in client.cmd("f", "UID FETCH 1:* (FLAGS MODSEQ)"):
            if b" FETCH " in line:
                uid = int(re.search(rb"UID (\d+)", line).group(1))
                copy[uid] = frozenset(re.search(rb"FLAGS \(([^)]*)\)", line).group(1).split())
        stop = threading.Event()
        errors = []

        def writer(seed: int) -> None:
            rng = random.Random(seed)
            try:
                c = login(two)
                c.cmd("s", "SELECT INBOX")
                while not stop.is_set():
                    uid = rng.choice(uids)
                    flag = rng.choice(["\\Seen", "\\Flagged", "$A", "$B"])
                    c.cmd("t", f"UID STORE {uid} {rng.choice('+-')}FLAGS.SILENT ({flag})")
                    if rng.random() < 0.05:
                        c.cmd("d", f"UID STORE {uid} +FLAGS.SILENT (\\Deleted)")
                        c.cmd("x", f"UID EXPUNGE {uid}")
            except Exception as exc:  # reported below
                errors.append(exc)

        def resync() -> None:
            nonlocal highest
            c = login(one)
            c.cmd("e", "ENABLE QRESYNC")
            lines = c.cmd("s", f"SELECT INBOX (QRESYNC ({uidvalidity} {highest} 1:100))")
            for uid in vanished_earlier(lines):
                copy.pop(uid, None)
            for line in lines:
                if b" FETCH " in line:
                    uid = int(re.search(rb"UID (\d+)", line).group(1))
                    copy[uid] = frozenset(
                        re.search(rb"FLAGS \(([^)]*)\)", line).group(1).split())
            highest = code(lines, b"HIGHESTMODSEQ")
            c.close()
            _OPEN.remove(c)

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 3.0
        rounds = 0
        while time.monotonic() < deadline:
            resync()
            rounds += 1
        stop.set()
        for t in threads:
            t.join()
        assert not errors
        resync()
        check = login(one)
        check.cmd("s", "SELECT INBOX")
        truth = {}
        for line in check.cmd("f", "UID FETCH 1:* (FLAGS)"):
            if b" FETCH " in line:
                uid = int(re.search(rb"UID (\d+)", line).group(1))
                truth[uid] = frozenset(re.search(rb"FLAGS \(([^)]*)\)", line).group(1).split())
        strip = lambda flags: flags - {b"\\Recent"}  # noqa: E731  (per session)
        assert {u: strip(f) for u, f in copy.items()} == {u: strip(f) for u, f in truth.items()}
        assert rounds > 3


def test_changedsince_sees_the_sessions_own_changes(server):
    """RFC 7162 3.1.4.1: FETCH (CHANGEDSINCE m) returns every message whose MODSEQ is above m
    -- also one this session itself just changed, before any refresh, and in a mailbox big
    enough that the change log narrows the set first."""
    a = login(server)
    uids = [append(a, i) for i in range(60)]
    highest = code(a.cmd("s", "SELECT INBOX (CONDSTORE)"), b"HIGHESTMODSEQ")
    a.cmd("t", f"UID STORE {uids[7]},{uids[42]} +FLAGS.SILENT (\\Flagged)")
    b = login(server)
    b.cmd("s", "SELECT INBOX")
    b.cmd("t", f"UID STORE {uids[13]} +FLAGS (\\Seen)")
    got = a.cmd("f", f"UID FETCH 1:* (FLAGS) (CHANGEDSINCE {highest})")
    assert sorted(fetched(got)) == [uids[7], uids[13], uids[42]]
    assert a.cmd("f", f"FETCH 1:* (UID) (CHANGEDSINCE {highest})")[:-1] == [
        b"* 8 FETCH (UID 8 MODSEQ (%d))" % fetched(got)[uids[7]][1],
        b"* 14 FETCH (UID 14 MODSEQ (%d))" % fetched(got)[uids[13]][1],
        b"* 43 FETCH (UID 43 MODSEQ (%d))" % fetched(got)[uids[42]][1]]
