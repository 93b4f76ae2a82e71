"""``imapserver --workers 2``: a supervising parent and two worker processes on shared sockets.

Real subprocesses on ports the kernel picks.  Which worker serves a connection is read from
the kernel (/proc/net/tcp and each worker's descriptors), not from the server, so a test cannot
pass because the server says what the test wants.  The protocol requirements checked: every
connection gets its greeting (RFC 3501 7.1.1), a SIGTERM ends every session with BYE (RFC
3501 7.1.5) and the process exits 0, IDLE (RFC 2177) in one worker sees an APPEND made through
the other (RFC 3501 7.3.1 EXISTS), LMTP (RFC 2033) delivers through the workers.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import smtplib
import time
import urllib.request

import pytest

from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message
from tests.sieveclient import SieveClient


def worker_pids(server: ServerProcess, count: int = 2, timeout: float = 30.0) -> dict[int, int]:
    """{worker index: pid} of the workers ready now (the latest pid of each), once ``count``
    of them are."""
    deadline = time.monotonic() + timeout
    while True:
        out = server.wait_output(rb"worker_ready", timeout=0.2).decode(errors="replace")
        pids: dict[int, int] = {}
        for index, pid in re.findall(r"worker_ready worker=(\d+) pid=(\d+)", out):
            pids[int(index)] = int(pid)
        live = {i: p for i, p in pids.items() if os.path.exists(f"/proc/{p}")}
        if len(live) >= count:
            return live
        assert time.monotonic() < deadline, out
        time.sleep(0.05)


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def serving_pid(client_sock, server_port: int, pids) -> int:
    """The process holding the server side of ``client_sock``'s connection."""
    client_port = client_sock.getsockname()[1]
    wanted = None
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if (int(local.split(":")[1], 16) == server_port
                    and int(remote.split(":")[1], 16) == client_port):
                wanted = inode
    assert wanted is not None
    owners = [pid for pid in pids if wanted in _socket_inodes(pid)]
    assert len(owners) == 1, owners
    return owners[0]


@contextlib.contextmanager
def only(pid: int, pids):
    """Every worker but ``pid`` paused (SIGSTOP), so the kernel can hand a new connection on
    the shared socket to ``pid`` alone.  Which idle worker wins an accept() race is the
    scheduler's choice; pausing the others makes a test's connection land where it needs it
    without trusting that luck."""
    others = [p for p in pids if p != pid]
    for other in others:
        os.kill(other, signal.SIGSTOP)
    try:
        yield
    finally:
        for other in others:
            os.kill(other, signal.SIGCONT)


def clients_on_each(server: ServerProcess, pids) -> dict[int, Client]:
    """One logged-in client on each worker, each connection checked (from the kernel's
    tables) to be served by the worker it was steered to."""
    found: dict[int, Client] = {}
    for pid in pids:
        with only(pid, pids):
            client = Client(server.port)
            assert serving_pid(client.sock, server.port, pids) == pid
        found[pid] = client
    for client in found.values():
        assert client.cmd("a", "LOGIN ann pw")[-1].startswith(b"a OK")
    return found


@pytest.fixture
def data_dir(tmp_path):
    path = str(tmp_path / "store")
    make_users(path, ("ann", "pw"))
    return path


def test_connections_are_served_by_both_workers(data_dir):
    """20 connections, each greeted (RFC 3501 7.1.1) and able to log in, are served by the
    workers and never by the parent; with either worker paused the other accepts alone."""
    with ServerProcess(data_dir, "--workers", "2") as server:
        pids = worker_pids(server)
        assert server.proc.pid not in pids.values()
        clients = [Client(server.port) for _ in range(20)]
        for client in clients:
            assert serving_pid(client.sock, server.port,
                               [*pids.values(), server.proc.pid]) in pids.values()
            assert client.greeting.startswith(b"* OK")
            assert client.cmd("a", "LOGIN ann pw")[-1].startswith(b"a OK")
            client.close()
        for client in clients_on_each(server, list(pids.values())).values():
            client.close()


def test_a_killed_worker_is_replaced_and_the_other_keeps_serving(data_dir):
    """SIGKILL one worker: the other's session carries on (RFC 3501 6.1.2 NOOP answers), new
    connections are served throughout, and a new worker takes the dead one's place."""
    with ServerProcess(data_dir, "--workers", "2") as server:
        pids = worker_pids(server)
        on = clients_on_each(server, list(pids.values()))
        victim, survivor = sorted(on)
        os.kill(victim, signal.SIGKILL)
        assert on[victim].closed_by_peer()
        on[victim].close()
        assert on[survivor].cmd("n", "NOOP")[-1] == b"n OK NOOP completed"
        for _ in range(5):  # while the dead one is being replaced
            client = Client(server.port)
            assert client.cmd("a", "LOGIN ann pw")[-1].startswith(b"a OK")
            client.close()
        deadline = time.monotonic() + 30
        while True:
            now = worker_pids(server)
            if victim not in now.values() and len(now) == 2:
                break
            assert time.monotonic() < deadline, "the dead worker was not replaced"
            time.sleep(0.05)
        assert survivor in now.values()
        replacement = (set(now.values()) - {survivor}).pop()
        found = clients_on_each(server, [survivor, replacement])
        for client in found.values():
            assert client.cmd("s", "SELECT INBOX")[-1].startswith(b"s OK")
            client.close()
        assert on[survivor].cmd("n", "NOOP")[-1] == b"n OK NOOP completed"
        on[survivor].close()
        assert re.search(rb"worker_exited worker=\d pid=%d status=-9" % victim,
                         server.wait_output(rb"worker_exited"))


def test_sigterm_says_bye_in_every_worker_and_the_parent_exits_0(data_dir):
    """SIGTERM to the parent: each worker's sessions get BYE (RFC 3501 7.1.5), then the
    connection closes, and the parent exits 0 once the workers have."""
    server = ServerProcess(data_dir, "--workers", "2").start()
    try:
        pids = worker_pids(server)
        on = clients_on_each(server, list(pids.values()))
        for client in on.values():
            client.cmd("s", "SELECT INBOX")
            client.send(b"i IDLE\r\n")
            assert client.read_line() == b"+ idling"
        server.proc.send_signal(signal.SIGTERM)
        for client in on.values():
            assert client.read_line() == b"* BYE Server shutting down"
            assert client.closed_by_peer()
            client.close()
        assert server.proc.wait(timeout=30) == 0
        for pid in pids.values():
            assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)
    finally:
        server.stop()


def _zombie(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_idle_in_one_worker_sees_an_append_made_through_the_other(data_dir):
    """RFC 2177 IDLE on worker A: the EXISTS (RFC 3501 7.3.1) of an APPEND made through
    worker B arrives within a second."""
    with ServerProcess(data_dir, "--workers", "2") as server:
        pids = worker_pids(server)
        idler, writer = clients_on_each(server, list(pids.values())).values()
        idler.cmd("s", "SELECT INBOX")
        idler.send(b"i IDLE\r\n")
        assert idler.read_line() == b"+ idling"
        body = message(1)
        writer.send(b"w APPEND INBOX {%d+}\r\n" % len(body) + body + b"\r\n")
        assert writer.until_tagged("w")[-1].startswith(b"w OK")
        appended = time.monotonic()
        idler.sock.settimeout(1.0)
        assert idler.read_line() == b"* 1 EXISTS"
        assert time.monotonic() - appended < 1.0
        idler.close()
        writer.close()


def test_lmtp_delivers_through_the_workers(data_dir):
    """RFC 2033: LMTP sessions on the shared socket are served by each worker in turn (the
    other paused), every recipient gets its 250, and the messages are in the INBOX."""
    with ServerProcess(data_dir, "--workers", "2", "--lmtp-port", "auto") as server:
        pids = list(worker_pids(server).values())
        port = server.ports["lmtp"]
        sent = 0
        for pid in pids * 2:
            with only(pid, pids):
                lmtp = smtplib.LMTP("127.0.0.1", port, timeout=10)
                assert serving_pid(lmtp.sock, port, pids) == pid
            with lmtp:
                assert lmtp.sendmail("x@example.org", ["ann@localhost"], message(sent)) == {}
            sent += 1
        client = Client(server.port)
        client.cmd("a", "LOGIN ann pw")
        assert f"* {sent} EXISTS".encode() in client.cmd("s", "SELECT INBOX")
        client.close()


def test_managesieve_is_served_by_every_worker(data_dir):
    """RFC 5804 on the shared ManageSieve socket (like LMTP's): a script uploaded and activated
    through one worker is listed, active, through the other (one store, decision 0023)."""
    with ServerProcess(data_dir, "--workers", "2", "--sieve-port", "auto") as server:
        pids = list(worker_pids(server).values())
        port = server.ports["managesieve"]
        clients = {}
        for pid in pids:
            with only(pid, pids):
                clients[pid] = SieveClient(port)
                assert serving_pid(clients[pid].sock, port, pids) == pid
        first, second = (clients[pid] for pid in pids)
        for c in (first, second):
            assert c.login("ann", "pw")[-1].startswith(b"OK")
        assert first.cmd('PUTSCRIPT "s" "keep;"')[-1].startswith(b"OK")
        assert first.cmd('SETACTIVE "s"')[-1].startswith(b"OK")
        assert second.cmd("LISTSCRIPTS") == [b'"s" ACTIVE', b'OK "Listscripts completed"']
        for c in (first, second):
            c.close()


def test_metrics_label_every_worker(data_dir):
    """One /metrics for the server: each worker's series with a worker label, so that the
    connections counted add up to those made, and the parent's worker gauge."""
    with ServerProcess(data_dir, "--workers", "2", "--metrics-port", "auto") as server:
        pids = worker_pids(server)
        on = clients_on_each(server, list(pids.values()))
        made = len(on)
        for client in on.values():
            client.close()
        url = f"http://127.0.0.1:{server.ports['metrics']}/metrics"
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        counts = {w: float(v) for w, v in re.findall(
            r'^hbaseimap_imap_connections_total\{worker="(\d)"\} (\S+)$', text, re.M)}
        assert set(counts) == {"1", "2"}, text
        assert sum(counts.values()) >= made
        assert all(v >= 1 for v in counts.values())
        assert re.search(r"^hbaseimap_workers 2\.0$", text, re.M), text
        assert re.search(r'^process_resident_memory_bytes\{worker="2"\}', text, re.M)


def test_workers_dying_at_start_up_make_the_parent_give_up(data_dir, tmp_path):
    """A worker that can never start (here: one that exits as soon as it runs) is retried
    with backoff, then the parent stops with one message and exit status 1 instead of
    restarting it forever."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os\nif 'IMAPSERVER_WORKER' in os.environ:\n    os._exit(3)\n")
    old = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = f"{hook}{os.pathsep}{old}"
    try:
        server = ServerProcess(data_dir, "--workers", "2").start()
    finally:
        os.environ["PYTHONPATH"] = old
    try:
        assert server.proc.wait(timeout=30) == 1
        out = server.wait_output(rb"giving up")
        assert out.count(b"imapserver: giving up: worker") == 1, out
        assert b"exited at start-up 5 times in a row (last status 3)" in out
    finally:
        server.stop()


def test_workers_stop_when_the_parent_is_killed(data_dir):
    """No worker serves on unsupervised: SIGKILL the parent and the workers stop."""
    with ServerProcess(data_dir, "--workers", "2") as server:
        pids = worker_pids(server)
        server.proc.kill()
        deadline = time.monotonic() + 20
        while any(os.path.exists(f"/proc/{p}") and not _zombie(p) for p in pids.values()):
            assert time.monotonic() < deadline, "workers outlived their parent"
            time.sleep(0.05)


def test_sighup_reopens_the_log_file_in_every_process(data_dir, tmp_path):
    """SIGHUP to the parent (logrotate's postrotate): the parent and each worker write to a
    new ``[log] file`` once the old one was moved aside, each worker's lines labelled."""
    log = tmp_path / "server.log"
    conf = tmp_path / "c.conf"
    conf.write_text(f"[log]\nfile = {log}\n")
    with ServerProcess(data_dir, "--workers", "2", config=str(conf)) as server:
        deadline = time.monotonic() + 30
        while b"workers_ready" not in (log.read_bytes() if log.exists() else b""):
            assert time.monotonic() < deadline, "workers never ready"
            time.sleep(0.05)
        log.rename(tmp_path / "server.log.1")
        pids = [int(pid) for pid in re.findall(r"worker_ready worker=\d+ pid=(\d+)",
                                                (tmp_path / "server.log.1").read_text())]
        assert len(pids) == 2
        server.proc.send_signal(signal.SIGHUP)
        # A session (RFC 3501 6.1.3: ending with LOGOUT) on each worker in turn, the other
        # paused (which worker wins the accept race is the scheduler's choice), until each
        # has logged one to the new file (the parent forwards the SIGHUP: a worker may end a
        # session before it has reopened).
        deadline = time.monotonic() + 30
        workers: set[str] = set()
        while workers != {"1", "2"}:
            assert time.monotonic() < deadline, log.read_text() if log.exists() else "no log"
            for pid in pids:
                with only(pid, pids):
                    client = Client(server.port)
                client.cmd("a", "LOGIN ann pw")
                client.cmd("z", "LOGOUT")
                client.close()
            time.sleep(0.05)
            if log.exists():
                workers |= set(re.findall(r" imap session .* worker=(\d)$", log.read_text(),
                                          re.M))
        assert server.proc.poll() is None
