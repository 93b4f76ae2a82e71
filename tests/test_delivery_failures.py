"""Storage failures during delivery: the sender is told to retry and nothing is half-kept.

A :class:`FaultyBackend` wraps the embedded backend and raises BackendUnavailable (as a real
backend does when HBase is unreachable) on a chosen call, once.  The faults land at the points
that matter: writing the content, committing the first recipient's row, committing a later
recipient's row after an earlier one is already visible, and the final sync.
"""

from __future__ import annotations

import smtplib
import threading

import pytest

from mailstore.backends.base import Backend, Table
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.errors import BackendUnavailable
from mailstore.fsck import Fsck
from mailstore.store import MailStore
from tests.deliveryserver import InProcess, body_of, lmtp_send, stored
from tests.mailgen import message

USERS = ("alice", "bob", "carol")


class FaultyTable(Table):
    def __init__(self, inner: Table, backend: FaultyBackend):
        self.inner = inner
        self.name = inner.name
        self.backend = backend

    def _call(self, method: str, *args, **kwargs):
        self.backend.maybe_fail(self.name, method)
        return getattr(self.inner, method)(*args, **kwargs)

    def row(self, *a, **k):
        return self._call("row", *a, **k)

    def rows(self, *a, **k):
        return self._call("rows", *a, **k)

    def scan(self, *a, **k):
        return self._call("scan", *a, **k)

    def put(self, *a, **k):
        return self._call("put", *a, **k)

    def delete(self, *a, **k):
        return self._call("delete", *a, **k)

    def mutate_rows(self, *a, **k):
        return self._call("mutate_rows", *a, **k)

    def increment(self, *a, **k):
        return self._call("increment", *a, **k)

    def increment_many(self, *a, **k):
        return self._call("increment_many", *a, **k)

    def check_and_put(self, *a, **k):
        return self._call("check_and_put", *a, **k)


class FaultyBackend(Backend):
    """A backend that fails the ``nth`` call of ``method`` on ``table`` once it is armed."""

    name = "faulty"

    def __init__(self, inner: Backend):
        self.inner = inner
        self.lock = threading.Lock()
        self.fault: tuple[str, str] | None = None
        self.countdown = 0
        self.failed = 0

    def arm(self, table: str, method: str, nth: int = 1) -> None:
        with self.lock:
            self.fault, self.countdown = (table, method), nth

    def maybe_fail(self, table: str, method: str) -> None:
        with self.lock:
            if self.fault != (table, method):
                return
            self.countdown -= 1
            if self.countdown:
                return
            self.fault = None
            self.failed += 1
        raise BackendUnavailable(f"injected failure: {table}.{method}")

    def table(self, name: str) -> Table:
        return FaultyTable(self.inner.table(name), self)

    def create_table(self, name, families, **hints):
        return self.inner.create_table(name, families, **hints)

    def tables(self):
        return self.inner.tables()

    def delete_table(self, name):
        self.inner.delete_table(name)

    def sync(self) -> None:
        self.maybe_fail("*", "sync")
        self.inner.sync()

    def close(self) -> None:
        self.inner.close()


@pytest.fixture
def faulty(tmp_path):
    backend = FaultyBackend(EmbeddedBackend(str(tmp_path / "store")))
    store = MailStore(backend, abandon_after=0.2)
    for user in USERS:
        store.create_user(user, None)
    yield backend, store
    store.close()


def assert_nothing_kept(store: MailStore) -> None:
    for user in USERS:
        assert stored(store, user) == [], user
    report = Fsck(store, repair=True).run()
    leftovers = [p for p in report.problems if p.kind.startswith("content")]
    assert not leftovers, [p.as_dict() for p in leftovers]


FAULTS = [
    pytest.param(("JAMES_CONTENT", "put", 1), id="content-write"),
    pytest.param(("JAMES_MESSAGES", "check_and_put", 1), id="first-commit"),
    pytest.param(("JAMES_MESSAGES", "check_and_put", 3), id="third-commit"),
    pytest.param(("*", "sync", 1), id="sync"),
]


@pytest.mark.parametrize("fault", FAULTS)
def test_lmtp_storage_failure_mid_delivery_is_retried_not_half_kept(faulty, fault):
    """RFC 2033 4.2 and RFC 5321 4.2.5: a 4xx reply after DATA means the server keeps no
    responsibility; the sender retries.  Here 451 4.3.0 (RFC 3463: mail system status)
    goes to every recipient, none of them keeps a copy, and the retry delivers each once."""
    backend, store = faulty
    msg = message(1, size=2000)
    rcpts = [f"{u}@example.com" for u in USERS]
    with InProcess(store) as server, \
            smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=10) as lmtp:
        backend.arm(*fault)
        _, answers = lmtp_send(lmtp, "d@example.org", rcpts, msg)
        assert backend.failed == 1
        assert [(code, text[:5]) for code, text in answers] == [(451, b"4.3.0")] * 3
        assert_nothing_kept(store)
        _, answers = lmtp_send(lmtp, "d@example.org", rcpts, msg)
    assert [code for code, _ in answers] == [250] * 3
    for user in USERS:
        assert [body_of(m) for m in stored(store, user)] == [msg]


def test_smtp_storage_failure_gives_451_and_no_copy(faulty):
    """RFC 5321 4.2.5: the sender keeps the message after a 451 and retries."""
    backend, store = faulty
    with InProcess(store) as server, \
            smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as smtp:
        backend.arm("JAMES_MESSAGES", "check_and_put", 2)
        with pytest.raises(smtplib.SMTPDataError) as refused:
            smtp.sendmail("d@example.org", ["alice@example.com", "bob@example.com"], message(2))
        assert (refused.value.smtp_code, refused.value.smtp_error[:5]) == (451, b"4.3.0")
        assert_nothing_kept(store)
        assert smtp.sendmail("d@example.org", ["alice@example.com", "bob@example.com"],
                             message(2)) == {}
    assert len(stored(store, "alice")) == 1 and len(stored(store, "bob")) == 1


def test_storage_failure_at_rcpt_is_temporary(faulty):
    """RFC 5321 4.2.1: 4yz, the command may succeed later; not a 550 unknown user."""
    backend, store = faulty
    with InProcess(store) as server, \
            smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=10) as lmtp:
        backend.arm("JAMES_USERS", "row")
        lmtp.ehlo_or_helo_if_needed()
        lmtp.mail("d@example.org")
        code, text = lmtp.rcpt("alice@example.com")
        assert (code, text[:5]) == (451, b"4.3.0")
        assert lmtp.rcpt("alice@example.com")[0] == 250
