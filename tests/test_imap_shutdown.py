"""Graceful shutdown on SIGTERM: stop accepting, let a command in progress finish and be
answered, BYE to IDLE sessions (RFC 3501 7.1.5), exit 0, nothing half-written."""

from __future__ import annotations

import signal

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.fsck import Fsck
from mailstore.store import MailStore
from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message


def test_sigterm_finishes_appends_and_says_bye(tmp_path):
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("gus", "pw"))
    server = ServerProcess(data_dir).start()
    try:
        idler = Client(server.port)
        idler.cmd("a", "LOGIN gus pw")
        idler.cmd("b", "SELECT INBOX")
        idler.send(b"i IDLE\r\n")
        assert idler.read_line() == b"+ idling"
        writer = Client(server.port)
        writer.cmd("a", "LOGIN gus pw")
        big = message(1, size=8 * 1024 * 1024)
        writer.send(b"w APPEND INBOX {%d+}\r\n" % len(big) + big + b"\r\n")
        server.proc.send_signal(signal.SIGTERM)
        assert idler.read_line() == b"* BYE Server shutting down"
        assert idler.closed_by_peer()
        answers = []
        try:
            while True:
                answers.append(writer.read_line())
        except (ConnectionError, OSError):
            pass
        assert answers[-1] == b"* BYE Server shutting down"
        acknowledged = any(a.startswith(b"w OK [APPENDUID") for a in answers)
        idler.close()
        writer.close()
        assert server.proc.wait(timeout=60) == 0
    finally:
        server.stop()
    store = MailStore(EmbeddedBackend(data_dir))
    inbox = store.mailbox("gus", "INBOX")
    assert len(store.uids(inbox)) == (1 if acknowledged else 0)
    assert Fsck(store).run().ok
    store.close()
