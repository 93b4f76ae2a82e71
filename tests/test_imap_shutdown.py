"""Graceful shutdown on SIGTERM: stop accepting, let a command in progress finish and be
answered, BYE to IDLE sessions (RFC 3501 7.1.5), exit 0, nothing half-written."""

from __future__ import annotations

import signal
import threading

from twisted.internet import defer

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


def test_indexer_stop_does_not_block_the_reactor(tmp_path, monkeypatch):
    """The background indexer's ``stop`` (imapserver/services.py) waits for the batch in
    progress in a thread of the pool, not in the reactor's: while it waits, the reactor goes
    on serving -- the BYE to each session (RFC 3501 7.1.5), the answers of commands in
    progress.  A batch is held by an Event: ``stop`` called in the reactor thread returns a
    Deferred at once, unfired; released, the batch ends, the Deferred fires and the thread
    is gone.  Before, ``stop`` joined the indexer thread in the reactor's thread (for one
    batch, or up to HBase's call timeout while HBase is down)."""
    from twisted.internet.selectreactor import SelectReactor

    from imapserver.services import start_indexer

    store = MailStore(EmbeddedBackend(str(tmp_path / "s")), text_index="background")
    store.create_user("hal", "pw")
    store.append("hal", "INBOX", message(1))
    held, release = threading.Event(), threading.Event()
    real = store.text.docs_of_view

    def holding(view):
        held.set()
        release.wait(30)
        return real(view)
    monkeypatch.setattr(store.text, "docs_of_view", holding)
    reactor = SelectReactor()    # private: the global one is the server processes'
    runner = threading.Thread(target=reactor.run, kwargs={"installSignalHandlers": False},
                              daemon=True)
    runner.start()
    stopped, fired = threading.Event(), threading.Event()
    returned = []
    try:
        before = set(threading.enumerate())
        [service] = start_indexer(store, reactor)
        [thread] = [t for t in threading.enumerate()
                    if t.name == "text-indexer" and t not in before]
        assert held.wait(10)    # a batch in progress

        def stop():
            returned.append(service.stop())
            stopped.set()
            returned[0].addCallback(lambda _: fired.set())
        reactor.callFromThread(stop)
        assert stopped.wait(5), "stop() blocked the reactor thread"
        assert isinstance(returned[0], defer.Deferred) and not fired.is_set()
        assert thread.is_alive()    # still in its batch
    finally:
        release.set()
    assert fired.wait(10)
    assert not thread.is_alive()
    reactor.callFromThread(reactor.stop)
    runner.join(10)
    assert not runner.is_alive()
    assert store.text.queue.count() == 0    # the batch held was finished, not cut
    store.close()
