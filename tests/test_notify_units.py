"""NOTIFY's parts below the wire: the store's change generations (both backends), the poller's
bounded reads, overflow, and the metadata plumbing waiting for METADATA (RFC 5465 5.6-5.8)."""

from __future__ import annotations

import pytest

from imapserver.imap import notify as poller
from imapserver.imap import notify_session
from imapserver.imap.notify_session import NotifyState
from imapserver.imap.notify_spec import (
    MAILBOX_METADATA_CHANGE,
    SERVER_METADATA_CHANGE,
    parse_notify_set,
    supported_events,
)
from imapserver.imap.wire import tokenize
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore


@pytest.fixture
def store(backend):
    s = MailStore(backend)
    s.create_user("cora", "pw")
    yield s


def test_generations_move_with_each_change(store):
    """Decision 0021: every CREATE, RENAME and DELETE moves the user's names generation,
    every (UN)SUBSCRIBE the subscriptions one, a metadata change the third -- what lets a
    NOTIFY session in any process learn of MailboxName and SubscriptionChange events
    (RFC 5465 5.4, 5.5) with one multi-get for all its users."""
    start = store.generations(["cora"])["cora"]
    store.create_mailbox("cora", "A")
    store.rename_mailbox("cora", "A", "B")
    store.delete_mailbox("cora", "B")
    names = store.generations(["cora"])["cora"]
    assert names[0] == start[0] + 3 and names[1:] == start[1:]
    store.subscribe("cora", "X")
    store.unsubscribe("cora", "X")
    subs = store.generations(["cora"])["cora"]
    assert subs[1] == start[1] + 2 and subs[0] == names[0]
    store.note_metadata_change("cora")
    assert store.generations(["cora"])["cora"][2] == start[2] + 1
    assert store.generations(["nobody"]) == {"nobody": (0, 0, 0)}


class _Conn:
    closed = closing = False


class _Watchers:
    def unnotify(self, session):
        pass


class _Server:
    watchers = _Watchers()


class _Session:
    def __init__(self, user="cora"):
        self.user = user
        self.selected = None
        self.enabled: set[str] = set()
        self.notify = None
        self.server = _Server()


def _spec(text: str, metadata: bool = False):
    args = tokenize([text.encode()])
    return parse_notify_set(args, supported_events(metadata))


def test_watching_too_many_mailboxes_overflows(tmp_path, monkeypatch):
    """RFC 5465 3.1 / 5.8: NOTIFY SET that would watch more than MAX_WATCHED mailboxes is
    refused (NO [NOTIFICATIONOVERFLOW], checked by ``overflowing``); one that grows past it
    later gets an untagged OK [NOTIFICATIONOVERFLOW] and stops, as after NOTIFY NONE."""
    store = MailStore(EmbeddedBackend(str(tmp_path / "e")))
    store.create_user("cora", "pw")
    monkeypatch.setattr(notify_session, "MAX_WATCHED", 8)
    session = _Session()
    state = NotifyState(session, _Conn(), _spec("(personal (MessageNew MessageExpunge))"))
    state.load(store)     # INBOX and the five default folders
    assert not state.overflowing
    session.notify = state
    for n in range(3):
        store.create_mailbox("cora", f"More{n}")
    lines = state._report(state._gather(store, [], True, True, False))
    assert lines[-1].startswith(b"OK [NOTIFICATIONOVERFLOW]")
    assert state.stopped and session.notify is None
    fresh = NotifyState(_Session(), _Conn(), _spec("(personal (MessageNew MessageExpunge))"))
    fresh.load(store)
    assert fresh.overflowing


def test_a_tick_reads_a_bounded_number_of_marks(monkeypatch):
    """The poller reads at most MARKS_PER_TICK marks per tick, whatever sessions watch, and
    every watched mailbox still gets its turn (issue 13: "a session watching many mailboxes
    must not poll each one on every tick")."""
    monkeypatch.setattr(poller, "MARKS_PER_TICK", 10)

    class State:
        def poll_ids(self):
            return [b"%03d" % i for i in range(25)]

    class Watcher:
        notify = State()

    watchers = poller.Watchers(server=None)
    watchers.notifying.add(Watcher())
    seen: set[bytes] = set()
    for _ in range(3):
        ids = watchers._ids_this_tick()
        assert len(ids) <= 10
        seen.update(ids)
    assert len(seen) == 25


def test_metadata_events_name_the_entries_changed(tmp_path):
    """RFC 5465 5.6, 5.7: MailboxMetadataChange and ServerMetadataChange are supported (the
    store says which entries changed: ``metadata_digest``); a SETMETADATA moves the user's
    metadata generation, and the change is reported as ``METADATA mailbox entry...`` (RFC
    5464 4.4.2's entry-list, no values), server entries under ``""``."""
    store = MailStore(EmbeddedBackend(str(tmp_path / "e")))
    assert notify_session.metadata_supported(store)
    assert MAILBOX_METADATA_CHANGE in supported_events(True)
    store.create_user("cora", "pw")
    store.create_mailbox("cora", "Work")
    spec = _spec("(personal (MailboxMetadataChange ServerMetadataChange))", metadata=True)
    assert spec.wants(MAILBOX_METADATA_CHANGE) and spec.wants(SERVER_METADATA_CHANGE)
    state = NotifyState(_Session(), _Conn(), spec)
    state.load(store)
    assert store.set_metadata("cora", "Work", [("/private/comment", b"1")])
    assert store.set_metadata("cora", None, [("/private/motd", b"2")])
    assert not store.set_metadata("cora", "Work", [("/private/comment", b"1")])  # no change
    assert state.compare({}, store.generations(["cora"])["cora"])
    assert state.meta_due
    lines = state._report(state._gather(store, [], False, False, True))
    assert lines == [b'METADATA "" /private/motd', b"METADATA Work /private/comment"]
